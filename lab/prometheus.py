"""A real Prometheus (Debian's package) on the controller, scraping the lab Coordinator's
/metrics over TLS with its metrics token and evaluating the shipped alert rules, for the lab
tests that watch an alert fire and resolve.

The rules are the shipped file (files/prometheus/coordinator.rules.yml) with each `for:`
shortened to ``hold`` seconds: the expressions are the ones users load, and the durations
users get are held by the rules' promtool unit tests (tests/coordinator/)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import requests
import yaml

from lab import lab

RULES = lab.REPO / "files" / "prometheus" / "coordinator.rules.yml"
#: The scrape job the rules name (`up{job="coordinator"}`).
JOB = "coordinator"


@dataclass
class Prometheus:
    url: str
    interval: float  # scrape and evaluation interval, seconds
    hold: float  # every alert's `for:`, seconds

    def firing(self, alert: str) -> list[dict]:
        """The alerts of that name Prometheus holds firing now."""
        answer = requests.get(f"{self.url}/api/v1/alerts", timeout=5)
        answer.raise_for_status()
        return [a for a in answer.json()["data"]["alerts"]
                if a["labels"].get("alertname") == alert and a["state"] == "firing"]

    def wait(self, alert: str, firing: bool, within: float) -> float:
        """Seconds until the alert is firing (or no longer is); AssertionError past ``within``."""
        start = time.monotonic()
        while (bool(self.firing(alert)) != firing
               and time.monotonic() - start < within):
            time.sleep(0.2)
        elapsed = time.monotonic() - start
        assert bool(self.firing(alert)) == firing, (
            f"{alert} {'not firing' if firing else 'still firing'} after {elapsed:.1f} s")
        return elapsed

    def target_up(self) -> bool:
        answer = requests.get(f"{self.url}/api/v1/targets", timeout=5)
        answer.raise_for_status()
        return any(t["health"] == "up" for t in answer.json()["data"]["activeTargets"])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def scraping(coordinator_url: str, interval: float = 1.0, hold: float = 3.0,
             ready_within: float = 30.0) -> Iterator[Prometheus]:
    """A Prometheus scraping ``coordinator_url`` every ``interval`` seconds, each alert's
    `for:` set to ``hold`` seconds, until the block ends (its data is deleted then)."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus not found: ./dev installs it (Debian's prometheus package)"
    address = urlparse(coordinator_url)
    with tempfile.TemporaryDirectory(prefix="lab-prometheus-") as work:
        here = Path(work)
        token = here / "token"
        token.write_text((lab.SECRETS_DIR / "coordinator_metrics_token").read_text().split()[0])
        os.chmod(token, 0o600)
        rules = yaml.safe_load(RULES.read_text())
        for group in rules["groups"]:
            for rule in group["rules"]:
                if "for" in rule:
                    rule["for"] = f"{hold:g}s"
        (here / "rules.yml").write_text(yaml.safe_dump(rules))
        scrape: dict = {"job_name": JOB, "scheme": address.scheme,
                        "authorization": {"credentials_file": str(token)},
                        "static_configs": [{"targets": [address.netloc]}]}
        if address.scheme == "https":
            scrape["tls_config"] = {"ca_file": str(lab.verify_for(coordinator_url))}
        (here / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": f"{interval:g}s",
                       "evaluation_interval": f"{interval:g}s"},
            "rule_files": [str(here / "rules.yml")],
            "scrape_configs": [scrape]}))
        port = free_port()
        with (here / "prometheus.log").open("w") as log:
            proc = subprocess.Popen(
                [binary, f"--config.file={here / 'prometheus.yml'}",
                 f"--storage.tsdb.path={here / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT)
        server = Prometheus(f"http://127.0.0.1:{port}", interval, hold)
        try:
            deadline = time.monotonic() + ready_within
            while True:
                assert proc.poll() is None, (here / "prometheus.log").read_text()
                try:
                    if server.target_up():
                        break
                except requests.RequestException:
                    pass
                assert time.monotonic() < deadline, (
                    f"Prometheus did not scrape {coordinator_url} within {ready_within:g} s: "
                    + (here / "prometheus.log").read_text()[-2000:])
                time.sleep(0.3)
            yield server
        finally:
            proc.terminate()
            proc.wait(timeout=30)
