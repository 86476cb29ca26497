"""migrate-web.yml on the three-node container lab, as a user runs it.

The lab is provisioned once with site.yml (web worker on lab-worker-slow); each test then
edits a copy of the lab inventory the way a user edits theirs and runs the playbook:

1. the new host's PostgreSQL login is refused: the play stops in preflight, the old worker is
   untouched and still serves;
2. the new worker does not come up: it is stopped again, the old one still serves;
3. the move itself, with a pg_hba.conf line missing by hand and tasks routed all along: the line
   is found, named and added, the test task is done by the new host in PostgreSQL, none of the
   routed tasks is lost or failed, exactly one worker_web.py runs, on the new host;
4. running it again changes nothing and still verifies; site.yml afterwards changes nothing;
5. every playbook above ran with -vvv, and none of the lab's secrets (which the nodes really use)
   appears anywhere in that output.

The tests share one lab and run in this order. They hold .lab/molecule.lock, like the
Molecule scenarios that use the same containers.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from lab import lab

REPO = Path(__file__).resolve().parents[2]
LOG_DIR = REPO / ".lab" / "logs" / "test-migrate"  # every playbook run's output, for failures
OLD, NEW = "lab-worker-slow", "lab-worker-fast"
DB_HOST = "lab-ai-core"
OLD_ADDRESS, NEW_ADDRESS = "10.89.20.42", "10.89.20.43"
URL = "http://10.89.20.40:8000"
PROMPT = "今日の東京の天気は？"


def env() -> dict[str, str]:
    result = dict(os.environ)
    result["CONTAINERS_CONF"] = str(REPO / "lab" / "containers.conf")
    result["PATH"] = f"{REPO / '.venv' / 'bin'}{os.pathsep}{result.get('PATH', '')}"
    result["ANSIBLE_NOCOLOR"] = "1"
    return result


# The -vvv output of every playbook this module runs, searched for secrets by the last test.
OUTPUTS: list[str] = []


def playbook(name: str, inventory: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ansible-playbook", "-vvv", "-i", str(inventory), name], cwd=REPO,
                          env=env(), capture_output=True, text=True, check=False, timeout=1800)
    OUTPUTS.append(done.stdout + done.stderr)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log = LOG_DIR / f"{len(OUTPUTS)}-{Path(name).stem}-{inventory.name}.log"
    log.write_text(OUTPUTS[-1])
    return done


def moved_inventory(name: str, new_host_vars: dict | None = None) -> Path:
    """A copy of the lab inventory with web_workers = NEW, two levels below the repository
    like inventory/lab (its relative paths to .lab/ then resolve the same way)."""
    target = REPO / ".lab" / f"inventory-{name}"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(REPO / "inventory" / "lab", target)
    hosts_file = target / "hosts.yml"
    hosts = yaml.safe_load(hosts_file.read_text())
    hosts["all"]["children"]["web_workers"]["hosts"] = {NEW: None}
    hosts_file.write_text(yaml.safe_dump(hosts, sort_keys=False))
    if new_host_vars:
        (target / "host_vars" / NEW / "test.yml").write_text(yaml.safe_dump(new_host_vars))
    return target


def podman_exec(host: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "exec", host, *argv], env=env(), capture_output=True,
                          text=True, check=False, timeout=60)


def unit_state(host: str, verb: str) -> str:
    return podman_exec(host, "systemctl", verb, "web-worker.service").stdout.strip()


def worker_processes(host: str) -> int:
    return int(podman_exec(host, "pgrep", "--count", "--full", "worker_web.py").stdout or 0)


class Client:
    def __init__(self) -> None:
        token = (lab.SECRETS_DIR / "coordinator_token").read_text().split()[0]
        self.headers = {"Authorization": f"Bearer {token}"}

    def route(self, prompt: str = PROMPT) -> str:
        answer = requests.post(f"{URL}/route", json={"prompt": prompt, "task_type": "web_search"},
                               headers=self.headers, timeout=10)
        answer.raise_for_status()
        return answer.json()["task_id"]

    def finished(self, task_id: str, deadline: float) -> dict:
        task: dict = {}
        while time.monotonic() < deadline:
            answer = requests.get(f"{URL}/task/{task_id}", params={"wait": 20},
                                  headers=self.headers, timeout=30)
            answer.raise_for_status()
            task = answer.json()
            if task["status"] in ("done", "failed"):
                break
        return task

    def search(self) -> dict:
        return self.finished(self.route(), time.monotonic() + 120)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Client]:
    problem = lab.podman_problem()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the migration tests: {problem}")
        pytest.skip(problem)
    with lab.exclusive():
        the_lab = lab.load_lab()
        lab.destroy(the_lab)
        lab.create(the_lab)
        try:
            for name in ("lab/prepare.yml", "site.yml"):
                done = playbook(name, REPO / "inventory" / "lab")
                assert done.returncode == 0, f"{name} failed:\n{done.stdout[-5000:]}"
            yield Client()
        finally:
            lab.destroy(the_lab)


def assert_old_side_serving(client: Client) -> None:
    assert unit_state(OLD, "is-active") == "active"
    assert unit_state(NEW, "is-active") != "active"
    task = client.search()
    assert (task["status"], task["worker_host"], task["fallback"]) == ("done", OLD_ADDRESS, False)


@pytest.mark.timeout(1800)
def test_refused_login_stops_in_preflight(cluster: Client) -> None:
    inventory = moved_inventory("refused", {"worker_db_password": "not-the-password"})
    done = playbook("migrate-web.yml", inventory)
    assert done.returncode != 0
    assert (f"preflight on {NEW} failed, nothing was changed on the running web worker: "
            "PostgreSQL check FAILED at") in done.stdout
    assert 'password authentication failed for user \\"coordinator\\"' in done.stdout \
        or 'password authentication failed for user "coordinator"' in done.stdout
    # It stopped before the switch-over play: nothing was stopped or started.
    assert "Switch over and prove it" not in done.stdout
    assert_old_side_serving(cluster)


@pytest.mark.timeout(1800)
def test_new_worker_that_does_not_come_up_is_stopped(cluster: Client) -> None:
    # Passes every preflight check (they do not talk to the Coordinator), then cannot register.
    inventory = moved_inventory("no-register", {"worker_coordinator_token": "not-the-token",
                                                "worker_register_retries": 5})
    done = playbook("migrate-web.yml", inventory)
    assert done.returncode != 0
    assert (f"the new web worker on {NEW} did not come up, so it was stopped and the old one "
            "was left serving") in done.stdout
    # The worker role's own verdict, with the worker's log lines, not some earlier failure.
    assert "is not registered alive with the Coordinator" in done.stdout
    assert unit_state(NEW, "is-enabled") != "enabled"
    assert_old_side_serving(cluster)


@pytest.mark.timeout(1800)
def test_move_with_tasks_routed_throughout(cluster: Client) -> None:
    # Drift: the new host's pg_hba.conf line removed by hand; preflight must find and add it.
    hba = podman_exec(DB_HOST, "sh", "-c", "ls /etc/postgresql/*/main/pg_hba.conf").stdout.strip()
    removed = podman_exec(DB_HOST, "sed", "-i", f"/{NEW_ADDRESS}\\/32/d", hba)
    assert removed.returncode == 0, removed.stderr
    assert podman_exec(DB_HOST, "pg_ctlcluster", "15", "main", "reload").returncode == 0

    routed: list[str] = []
    stop = threading.Event()

    def keep_routing() -> None:
        while not stop.is_set():
            routed.append(cluster.route(f"{PROMPT} #{len(routed)}"))
            stop.wait(2)

    router = threading.Thread(target=keep_routing)
    router.start()
    try:
        done = playbook("migrate-web.yml", moved_inventory("moved"))
    finally:
        stop.set()
        router.join()
    assert done.returncode == 0, done.stdout[-6000:]
    # The YAML callback folds long messages over several lines: search the unfolded text.
    unfolded = " ".join(done.stdout.split())
    found = re.search(r"found in preflight and fixed by the postgresql_access role: "
                      r"PostgreSQL check FAILED.{0,400}", unfolded)
    assert found, f"no pg_hba.conf finding reported; see {LOG_DIR}"
    assert "no pg_hba.conf entry for host" in found.group(0)
    assert NEW_ADDRESS in found.group(0)
    assert re.search(rf"in [0-9.]+ s, processed by {NEW_ADDRESS}", done.stdout)

    deadline = time.monotonic() + 300
    outcomes = [cluster.finished(task_id, deadline) for task_id in routed]
    statuses = [task.get("status") for task in outcomes]
    assert len(routed) >= 10
    not_done = [(t.get("task_id"), t.get("status"), t.get("error"))
                for t in outcomes if t.get("status") != "done"]
    assert statuses.count("done") == len(routed), f"routed {len(routed)}, not done: {not_done}"
    hosts = {task["worker_host"] for task in outcomes}
    assert NEW_ADDRESS in hosts

    assert unit_state(NEW, "is-active") == "active"
    assert unit_state(OLD, "is-active") != "active"
    assert unit_state(OLD, "is-enabled") != "enabled"
    assert (worker_processes(NEW), worker_processes(OLD)) == (1, 0)
    unit_file = "/etc/systemd/system/web-worker.service"
    assert podman_exec(OLD, "test", "-e", unit_file).returncode != 0


@pytest.mark.timeout(1800)
def test_rerun_and_site_change_nothing(cluster: Client) -> None:
    inventory = moved_inventory("moved")
    again = playbook("migrate-web.yml", inventory)
    assert again.returncode == 0, again.stdout[-6000:]
    assert re.search(rf"in [0-9.]+ s, processed by {NEW_ADDRESS}", again.stdout)
    assert {host: counts["changed"] for host, counts in lab.play_recap(again.stdout).items()} == {
        DB_HOST: 0, OLD: 0, NEW: 0}

    site = playbook("site.yml", inventory)
    assert site.returncode == 0, site.stdout[-6000:]
    assert {host: counts["changed"] for host, counts in lab.play_recap(site.stdout).items()} == {
        DB_HOST: 0, OLD: 0, NEW: 0}
    task = cluster.search()
    assert (task["status"], task["worker_host"]) == ("done", NEW_ADDRESS)


def test_no_secret_in_any_verbose_output(cluster: Client) -> None:
    # The fixture's lab/prepare.yml and site.yml plus every migration above, all at -vvv.
    assert len(OUTPUTS) >= 2
    env_file = podman_exec(NEW, "cat", "/etc/coordinator-worker/web-worker.env")
    assert env_file.returncode == 0, env_file.stderr
    for secret_file in sorted(lab.SECRETS_DIR.iterdir()):
        secret = secret_file.read_text().split()[0]
        assert len(secret) >= 16, f"{secret_file.name} is too short to be a meaningful canary"
        # Each secret is really in use on the nodes (the token and the passwords are all in a
        # worker's environment), so finding it zero times in the output means something.
        assert secret in env_file.stdout, f"{secret_file.name} is not in the worker's env file"
        leaks = [index for index, output in enumerate(OUTPUTS) if secret in output]
        assert not leaks, f"{secret_file.name} appears in the -vvv output of playbook runs {leaks}"
