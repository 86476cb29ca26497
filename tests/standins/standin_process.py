"""A stand-in started as a real subprocess on a free loopback port, as clients meet it."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import requests

from lab.throwaway import free_port

REPO = Path(__file__).resolve().parents[2]
STANDINS = REPO / "lab" / "standins"


class Standin:
    """One stand-in process; ``restart()`` keeps its arguments (and so its state file)."""

    def __init__(self, command: Sequence[str], env: dict[str, str], cwd: Path, log: Path) -> None:
        self.command = list(command)
        self.env = env
        self.cwd = cwd
        self.log = log
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Standin:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [*self.command, "--bind", "127.0.0.1", "--port", str(self.port)],
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"stand-in exited at start:\n{self.log.read_text()}")
            try:
                requests.get(f"{self.url}/_standin/config", timeout=1).raise_for_status()
                return self
            except requests.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError(f"stand-in did not answer within 15 s:\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def restart(self) -> Standin:
        self.stop()
        return self.start()

    def config(self) -> dict:
        response = requests.get(f"{self.url}/_standin/config", timeout=5)
        response.raise_for_status()
        return response.json()

    def configure(self, **settings: object) -> dict:
        response = requests.post(f"{self.url}/_standin/config", json=settings, timeout=5)
        assert response.status_code == 200, response.text
        return response.json()


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test's environment without STANDIN_* (a developer's shell must not leak in)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("STANDIN_")}
    env.update(extra or {})
    return env
