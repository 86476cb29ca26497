"""The seed's incident, made on the lab and timed: a worker host's pg_hba.conf line is lost
and its PostgreSQL sessions end (as at a PostgreSQL restart), so its worker still heartbeats
but can claim no task. The Coordinator's probes show it unhealthy with the reason, and the
lab's ntfy receiver gets the notification; with the line back, both say it recovered. Timed
with the program's default probe interval and with a short one; the figures go to
.lab/logs/test-migrate/figures.json ("probes") and bench/probe_incident.py prints them.

On demand (LAB_PROBE_INCIDENT=1, which bench/probe_incident.py sets): with the default
interval a case takes up to twice that interval and the probe timeout (15 min), as the
notification waits for a second failed probe."""

from __future__ import annotations

import json
import os
import time

import coordinator_contract as contract
import pytest

from lab import drive
from lab.throwaway import wait_until

from .conftest import LOG_DIR
from .test_secrets import env_value

pytestmark = pytest.mark.skipif(
    not os.environ.get("LAB_PROBE_INCIDENT"),
    reason="figures on demand: bench/probe_incident.py (LAB_PROBE_INCIDENT=1)")

DB_HOST, HOST = "lab-ai-core", "lab-macbookair"
# The coordinator role's probe settings per case; {} keeps the program's defaults.
CASES = {"default": {},
         "short": {"coordinator_probe_interval": "10", "coordinator_probe_timeout": "10"}}
# The program's defaults (files/coordinator/config.py), the bound of the default case.
DEFAULT_INTERVAL, DEFAULT_TIMEOUT = 300.0, 120.0
FIGURES = LOG_DIR / "probe-figures.json"
def psql(core: drive.Node, sql: str) -> str:
    return core.sh("psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", "coordinator",
                   "-c", sql, user="postgres", check=True).stdout.strip()


def cpu_seconds(cluster) -> float:
    """User and system CPU seconds the Coordinator and every worker process have used."""
    total = 0.0
    for name, node in cluster.nodes.items():
        pids = node.processes(r"worker_(web|infer)\.py") + (
            node.processes(r"-m coordinator$") if name == DB_HOST else [])
        for pid in pids:
            fields = node.sh("cat", f"/proc/{pid}/stat").stdout.rsplit(")", 1)[-1].split()
            if fields:  # gone meanwhile
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("case", CASES)
def test_a_host_that_lost_its_pg_hba_line_is_shown_unhealthy_and_notified(cluster,
                                                                          case: str) -> None:
    core, node = cluster.nodes[DB_HOST], cluster.nodes[HOST]
    settings = CASES[case]
    inventory = cluster.inventory(cluster.web_host())
    converged = cluster.playbooks.run("site.yml", inventory, "-e", json.dumps(settings))
    assert converged.returncode == 0, converged.output[-6000:]
    worker_id = env_value(node.worker_env("inference-worker"), "WORKER_ID")
    # Healthy first: a probe done since the converge restarted the Coordinator.
    wait_until(lambda: cluster.coordinator.workers()[worker_id].get("probe_ok"), 120,
               f"{worker_id}'s first probe done")
    url = drive.notify_url(core)
    # What the probes cost: CPU of the Coordinator and the workers over a quiet window, and
    # the probe tasks it made (the default interval makes few or none in it).
    window, before = 90.0, cpu_seconds(cluster)
    time.sleep(window)
    cpu = cpu_seconds(cluster) - before
    probes = int(psql(core, "SELECT count(*) FROM tasks"
                      f" WHERE task_type = '{contract.PROBE_TYPE}'"
                      f" AND created_at > now() - make_interval(secs => {window})"))

    hba = core.sh("sh", "-c", "ls /etc/postgresql/*/main/pg_hba.conf", check=True).stdout.strip()
    login = contract.worker_db_role(HOST)
    core.sh("sed", "-i", f"/{node.address}\\/32/d", hba, check=True)
    core.sh("pg_ctlcluster", "15", "main", "reload", check=True)
    lost = time.time()
    ended = psql(core, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                       f" WHERE usename = '{login}'")
    interval = float(settings.get("coordinator_probe_interval", DEFAULT_INTERVAL))
    timeout = float(settings.get("coordinator_probe_timeout", DEFAULT_TIMEOUT))
    # The bound: the next probe is due within one interval, and fails within its timeout.
    bound = interval + timeout + 30
    shown = wait_until(lambda: (lambda w: w if w.get("probe_ok") is False else None)(
        cluster.coordinator.workers()[worker_id]), bound, f"{worker_id} shown unhealthy")
    unhealthy = time.time() - lost
    # A notification says a worker failed its last two probes: one more interval.
    problem = wait_until(lambda: drive.notifications(url, lost, worker_id), bound,
                         f"a notification about {worker_id}")
    notified = time.time() - lost

    # The repairing run puts the line back early: the worker may be probed healthy, and the
    # recovery sent, before the run ends.
    repairing = time.time()
    repaired = cluster.playbooks.run("site.yml", inventory, "-e", json.dumps(settings))
    assert repaired.returncode == 0, repaired.output[-6000:]
    wait_until(lambda: cluster.coordinator.workers()[worker_id].get("probe_ok"), bound,
               f"{worker_id} healthy again")
    healthy_again = time.time() - repairing
    recovery = wait_until(lambda: drive.notifications(url, repairing, worker_id,
                                                      "Cluster recovered"), bound,
                          f"the recovery notification about {worker_id}")

    figures = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    figures[case] = {"interval": interval, "timeout": timeout, "sessions_ended": int(ended),
                     "window": window, "cpu_in_window": round(cpu, 2), "probes_in_window": probes,
                     "alive_workers": len([w for w in cluster.coordinator.workers().values()
                                           if w["alive"]]),
                     "unhealthy_after": round(unhealthy, 1), "notified_after": round(notified, 1),
                     "healthy_again_after_repair_began": round(healthy_again, 1),
                     "reason": shown["probe_error"], "problem": problem[0]["message"],
                     "recovery": recovery[0]["message"]}
    FIGURES.write_text(json.dumps(figures, indent=1))
    if case != "default":
        restored = cluster.playbooks.run("site.yml", inventory)
        assert restored.returncode == 0, restored.output[-6000:]
