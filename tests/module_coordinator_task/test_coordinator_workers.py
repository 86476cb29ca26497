"""coordinator_workers, run by ansible-playbook, against the real Coordinator's registry.

Workers here are only registrations (POST /workers/register, heartbeats, deregister) with
addresses and pids of their own; the module compares them with what a play says its service
managers run.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from lab.processes import CoordinatorProcess
from lab.throwaway import wait_until

from ..library_kit import load_module, module_doc
from .coordinator_task_harness import finish_probe, start_probe

SLOW, FAST = "10.0.7.42", "10.0.7.43"
HOSTS = {SLOW: "lab-worker-slow", FAST: "lab-worker-fast"}


class Registration:
    """A web worker as the registry sees it: registered, heartbeating until stopped."""

    def __init__(self, coordinator: CoordinatorProcess, host: str, pid: int) -> None:
        self.url = coordinator.url
        self.headers = {"Authorization": f"Bearer {coordinator.token}"}
        self.worker_id = f"web-worker-test-{uuid.uuid4().hex[:8]}"
        self.instance_id = str(uuid.uuid4())
        self.host, self.pid = host, pid
        self.beating = threading.Event()

    def post(self, path: str, body: dict) -> None:
        answer = requests.post(f"{self.url}{path}", json=body, headers=self.headers, timeout=5)
        assert answer.status_code == 200, answer.text

    def register(self) -> Registration:
        self.post("/workers/register", {
            "worker_id": self.worker_id, "host": self.host, "kind": "web",
            "queues": ["tasks:web"], "version": "2.1", "pid": self.pid,
            "instance_id": self.instance_id})
        return self

    def heartbeat_every(self, seconds: float) -> Registration:
        def beat() -> None:
            while not self.beating.wait(seconds):
                self.post(f"/workers/{self.worker_id}/heartbeat",
                          {"instance_id": self.instance_id, "pid": self.pid})
        threading.Thread(target=beat, daemon=True).start()
        return self

    def deregister(self) -> None:
        self.beating.set()
        self.post(f"/workers/{self.worker_id}/deregister", {"instance_id": self.instance_id})


@pytest.fixture
def registrations(coordinator: CoordinatorProcess) -> Iterator[list[Registration]]:
    # Another test of this session restarts PostgreSQL: start once the Coordinator is healthy.
    wait_until(lambda: requests.get(f"{coordinator.url}/health", timeout=5).status_code == 200,
               30, "GET /health 200")
    made: list[Registration] = []
    yield made
    for registration in made:
        with contextlib.suppress(AssertionError, requests.RequestException):
            registration.deregister()


def witness(tmp_path: Path, coordinator: CoordinatorProcess, **args: object):
    return finish_probe(start_probe(tmp_path, {
        "coordinator_url": coordinator.url, "coordinator_token": coordinator.token,
        "kind": "web", "hosts": HOSTS, **args}, module="coordinator_workers"))


def test_every_alive_worker_accounted_for(tmp_path, coordinator, registrations):
    registrations.append(Registration(coordinator, SLOW, 812).register())
    run = witness(tmp_path, coordinator, expected=[{"host": SLOW, "pid": 812}],
                  require="accounted")
    assert run.rc == 0, run.stdout
    assert run.result["changed"] is False
    assert run.result["msg"] == run.result["serving"]
    assert run.result["serving"].startswith(
        "the Coordinator's registry lists 1 alive web worker serving tasks:web: "
        f"{registrations[0].worker_id} on lab-worker-slow ({SLOW}), pid 812, v2.1, heartbeat ")
    assert [w["pid"] for w in run.result["workers"]] == [812]


def test_a_copy_nobody_manages_is_named_at_once_even_while_waiting(tmp_path, coordinator,
                                                                   registrations):
    registrations.append(Registration(coordinator, SLOW, 812).register())
    rogue = Registration(coordinator, FAST, 4242).register().heartbeat_every(0.5)
    registrations.append(rogue)
    started = time.monotonic()
    run = witness(tmp_path, coordinator, expected=[{"host": SLOW, "pid": 812}],
                  require="accounted", wait_for_heartbeats=True)
    # It heartbeats: no stale entry, so the module does not wait out the TTL.
    assert time.monotonic() - started < 10
    assert run.rc != 0
    assert run.result["msg"].startswith(f"{rogue.worker_id} on lab-worker-fast ({FAST}), "
                                        "pid 4242, v2.1, heartbeat ")
    assert run.result["msg"].endswith(
        "no service manager runs it there (a copy started by hand, outside systemd/launchd, "
        f"or one its service manager lost); stop it: `kill 4242` on lab-worker-fast ({FAST})")
    assert [w["pid"] for w in run.result["unaccounted"]] == [4242]


def test_an_entry_that_goes_while_waiting_passes(tmp_path, coordinator, registrations):
    leaving = Registration(coordinator, SLOW, 700).register()
    registrations.append(leaving)
    threading.Timer(2, leaving.deregister).start()
    run = witness(tmp_path, coordinator, expected=[], require="exactly",
                  wait_for_heartbeats=True)
    assert run.rc == 0, run.stdout
    assert run.result["serving"] == "the Coordinator's registry lists no alive web worker"


def test_exactly_names_the_worker_the_registry_lacks(tmp_path, coordinator, registrations):
    registrations.append(Registration(coordinator, FAST, 812).register())
    run = witness(tmp_path, coordinator,
                  expected=[{"host": FAST, "pid": 813, "version": "2.1"}], require="exactly")
    assert run.rc != 0
    assert run.result["msg"].endswith(
        f"the web worker pid 813 on lab-worker-fast ({FAST}) is not registered alive with "
        "version 2.1")
    assert run.result["missing"] == [{"host": FAST, "pid": 813, "version": "2.1",
                                      "worker_id": None}]


def test_wrong_token_and_no_coordinator_are_one_line(tmp_path, coordinator):
    run = witness(tmp_path, coordinator, coordinator_token="wrong")
    assert run.result["msg"] == (f"Coordinator at {coordinator.url} refused the token (401 on "
                                 "GET /workers): check coordinator_token")
    run = witness(tmp_path, coordinator, coordinator_url="http://127.0.0.1:9")
    assert run.result["msg"].startswith("Coordinator unreachable at http://127.0.0.1:9 (")
    assert run.result["msg"].endswith("): check coordinator_url")


def test_documentation_matches_the_code(tmp_path, coordinator, registrations):
    doc = module_doc("coordinator_workers")
    module = load_module("coordinator_workers")
    spec = module.argument_spec()
    options = doc["doc"]["options"]
    assert sorted(options) == sorted(spec)
    for name, coded in spec.items():
        assert options[name]["type"] == coded["type"], name
        assert options[name].get("default") == coded.get("default"), name
        assert options[name].get("choices") == coded.get("choices"), name
    for task in yaml.safe_load(doc["examples"]):
        if "coordinator_workers" in task:
            assert set(task["coordinator_workers"]) <= set(spec)
    registrations.append(Registration(coordinator, SLOW, 812).register())
    run = witness(tmp_path, coordinator)
    returned = set(run.result) - {"action", "changed", "failed", "invocation", "_ansible_no_log"}
    assert returned == set(doc["return"])
