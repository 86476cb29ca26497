"""site.yml, migrate-web.yml and drain.yml under --limit, run by ansible-playbook on hosts
that are all this machine (local connection), with a Coordinator whose registry lists the web
worker the test puts in it: a run that leaves out hosts it needs stops in its first play,
before any change, saying so with the --limit to use; the witness of the registry tells a
web worker the inventory declares on a left-out host from one nobody declares.

The lab tests of the same runs on the converged lab: tests/migrate/test_migrate_web.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from .conftest import REPO, run

# A Coordinator whose registry lists the workers a test puts in it.
from .test_worker_darwin import coordinator  # noqa: F401

ADDRESSES = {"lab-ai-core": "10.89.20.40", "lab-worker-slow": "10.89.20.42",
             "lab-macbookair": "10.89.20.43", "lab-outsider": "10.89.20.99"}
EVERY = "lab-ai-core,lab-worker-slow,lab-macbookair"
WORKERS_GRANTED = ("the grants written on the database and Redis hosts are derived from the "
                   "workers of every worker host")


def web_worker(host: str, pid: int) -> dict:
    return {"worker_id": f"web-worker-{host}", "host": ADDRESSES[host], "pid": pid,
            "kind": "web", "alive": True, "version": "2.1", "queues": ["tasks:web"],
            "seconds_since_heartbeat": 1.0}


@pytest.fixture
def inventory(tmp_path: Path, coordinator) -> Path:  # noqa: F811
    """The lab's groups, lab-worker-slow added to inference_workers (a node being added), and
    lab-outsider in no group; every host is this machine."""
    url, _ = coordinator
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_become": False,
                 "ansible_python_interpreter": sys.executable,
                 "worker_coordinator_url": url, "worker_coordinator_token": "token-9f3c"},
        "hosts": {host: {"node_address": address} for host, address in ADDRESSES.items()},
        "children": {
            "coordinator": {"hosts": {"lab-ai-core": None}},
            "database": {"hosts": {"lab-ai-core": None}},
            "redis": {"hosts": {"lab-ai-core": None}},
            "inference_workers": {"hosts": dict.fromkeys(
                ["lab-ai-core", "lab-macbookair", "lab-worker-slow"])},
            "web_workers": {"hosts": {"lab-macbookair": None}}}}}, sort_keys=False))
    return path


def playbook(path: Path | str, inventory: Path, *args: str) -> tuple[int, str]:
    """(exit code, the output with the YAML callback's folding and quote doubling undone)."""
    result = run(["ansible-playbook", "-i", str(inventory), str(path), *args])
    return result.returncode, " ".join((result.stdout + result.stderr).split()).replace("''", "'")


LEFT_OUT_NOTE = " (declared in web_workers, left out of this run by --limit)"


@pytest.mark.parametrize(("limit", "left_out"), [
    ("lab-worker-slow",
     "lab-ai-core (the database and Redis host, where lab-worker-slow's pg_hba.conf line, "
     f"login, grant and Redis user are written); lab-macbookair ({WORKERS_GRANTED})"),
    ("lab-worker-slow,lab-ai-core", f"lab-macbookair ({WORKERS_GRANTED})"),
])
def test_site_limited_to_a_new_worker_host_names_the_hosts_it_needs_and_changes_nothing(
        inventory, coordinator, limit, left_out):  # noqa: F811
    _, workers = coordinator
    workers.append(web_worker("lab-macbookair", 4194))
    rc, out = playbook("site.yml", inventory, "--limit", limit)
    assert rc != 0
    assert (f"--limit leaves out hosts this run needs: {left_out}. "
            "Nothing was changed, and the Coordinator's registry lists 1 alive web worker "
            "serving tasks:web: web-worker-lab-macbookair on lab-macbookair (10.89.20.43), "
            f"pid 4194, v2.1, heartbeat 1.0 s ago{LEFT_OUT_NOTE}: run again with --limit "
            f"{EVERY}") in out, out[-3000:]
    # lab-outsider, in no group, is needed by none.
    assert "which is every host" not in out
    # The managed web worker of a left-out host is no copy to stop.
    assert "kill 4194" not in out
    assert "PLAY [The cluster CA" not in out


def test_migrate_web_needs_every_host(inventory, coordinator):  # noqa: F811
    _, workers = coordinator
    workers.append(web_worker("lab-macbookair", 4194))
    rc, out = playbook("migrate-web.yml", inventory, "--limit", "lab-macbookair")
    assert rc != 0
    # The web worker's host is in the run: its address alone, as reach.yml names it before
    # any host was asked.
    assert ("--limit leaves out hosts this run needs: lab-ai-core, lab-worker-slow, "
            "lab-outsider (migrate-web.yml looks on every host for a web worker to stop). "
            "Nothing was changed, and the Coordinator's registry lists 1 alive web worker "
            "serving tasks:web: web-worker-lab-macbookair on 10.89.20.43, pid 4194, v2.1, "
            f"heartbeat 1.0 s ago: run again with --limit {EVERY},lab-outsider, which is every "
            "host: the same as no --limit") in out, out[-3000:]
    assert "PLAY [Redis users" not in out


def test_drain_refuses_drain_hosts_the_limit_leaves_out(inventory, coordinator):  # noqa: F811
    rc, out = playbook("drain.yml", inventory, "--limit", "lab-worker-slow",
                       "-e", "drain_hosts=lab-macbookair")
    assert rc != 0
    assert ("--limit leaves out hosts this run needs: lab-macbookair (drain_hosts names it). "
            "No worker was drained: run again with --limit lab-worker-slow,lab-macbookair"
            ) in out, out[-3000:]
    assert "PLAY [Drain or undrain" not in out


def registry_play(tmp_path: Path) -> Path:
    """The witness as site.yml's first play runs it, after the worker role's status: here
    no host runs a worker."""
    path = tmp_path / "witness.yml"
    path.write_text(yaml.safe_dump([{
        "name": "Witness", "hosts": "all", "gather_facts": False, "any_errors_fatal": True,
        "tasks": [
            {"name": "No worker here", "ansible.builtin.set_fact": {"worker_status": []}},
            {"name": "Account for every alive web worker",
             "ansible.builtin.include_tasks": str(REPO / "playbooks" / "tasks"
                                                  / "web_registry.yml"),
             "vars": {"cluster_registry_required": True}},
            {"name": "Accounted", "ansible.builtin.debug": {
                "msg": "accounted: {{ cluster_web_registry.serving }}"}, "run_once": True}]}]))
    return path


def test_the_witness_tells_a_declared_web_worker_left_out_from_a_rogue(
        tmp_path, inventory, coordinator):  # noqa: F811
    _, workers = coordinator
    workers.append(web_worker("lab-macbookair", 4194))
    # lab-outsider is in no group: the limit needs no other host.
    rc, out = playbook(registry_play(tmp_path), inventory, "--limit", "lab-outsider")
    assert rc == 0, out[-3000:]
    assert (f"accounted: the Coordinator's registry lists 1 alive web worker serving "
            f"tasks:web: web-worker-lab-macbookair on lab-macbookair (10.89.20.43), pid 4194, "
            f"v2.1, heartbeat 1.0 s ago{LEFT_OUT_NOTE}") in out

    # One on a left-out host that web_workers does not name is a rogue still.
    workers.append(web_worker("lab-worker-slow", 777))
    rc, out = playbook(registry_play(tmp_path), inventory, "--limit", "lab-outsider")
    assert rc != 0
    assert ("the Coordinator's registry lists a web worker that serves tasks:web beside the "
            "managed ones: web-worker-lab-worker-slow on lab-worker-slow (10.89.20.42), pid "
            "777, v2.1, heartbeat 1.0 s ago: lab-worker-slow is left out of this run by "
            "--limit and the inventory declares no web worker there (if the inventory moved "
            "it away from there, run without --limit); stop it: `kill 777` on lab-worker-slow "
            "(10.89.20.42). Nothing was changed") in out, out[-3000:]
    assert "kill 4194" not in out
