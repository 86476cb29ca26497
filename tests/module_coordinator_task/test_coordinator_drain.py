"""coordinator_drain, run by ansible-playbook, against the real Coordinator; and its pure
logic (module_utils/coordinator_drain.py)."""

from __future__ import annotations

import threading
import time

import pytest
import requests
from ansible.module_utils.coordinator_drain import (
    DrainError,
    describe_timeout,
    find_worker,
    settled,
)

from lab.throwaway import free_port

from ..library_kit import documented_as_coded
from .coordinator_task_harness import (
    Registration,
    finish_probe,
    start_coordinator,
    start_probe,
)
from .test_coordinator_workers import SLOW


def drain(tmp_path, coordinator, check: bool = False, **args: object):
    return finish_probe(start_probe(tmp_path, {
        "coordinator_url": coordinator.url, "coordinator_token": coordinator.token, **args},
        check=check, module="coordinator_drain"))


def beat(worker: Registration, **fields: object) -> dict:
    answer = requests.post(f"{worker.url}/workers/{worker.worker_id}/heartbeat",
                           json={"instance_id": worker.instance_id, "pid": worker.pid,
                                 **fields}, headers=worker.headers, timeout=5)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_drain_waits_until_the_worker_holds_nothing(tmp_path, coordinator, registrations):
    worker = Registration(coordinator, SLOW, 812).register()
    registrations.append(worker)
    beat(worker, in_flight=1)
    # It holds a task for longer than the timeout: the drain stays, the module says why.
    held = drain(tmp_path / "held", coordinator, worker_id=worker.worker_id, timeout=2)
    assert held.rc != 0 and held.result["timed_out"] is True
    assert held.result["msg"] == (
        f"{worker.worker_id} on {SLOW} (draining, 1 in flight) still holds a task after 2 s "
        "of draining: it stays drained and finishes it; wait longer (timeout) or undrain it "
        "(state=undrained)")
    assert beat(worker, in_flight=1)["drain"] is True
    # It finishes in a few seconds: the next drain waits for that, and changes nothing.
    threading.Timer(3, beat, (worker,), {"in_flight": 0, "drained": True}).start()
    done = drain(tmp_path / "done", coordinator, worker_id=worker.worker_id, timeout=20)
    assert done.rc == 0, done.stdout
    assert (done.result["changed"], done.result["state"]) == (False, "drained")
    assert done.result["msg"] == f"{worker.worker_id} on {SLOW} (drained, 0 in flight): " \
                                 "drained already"
    assert isinstance(done.result["waited"], float)


def test_a_coordinator_restart_while_draining_is_waited_out(tmp_path, tasks_db, probe_redis):
    port, token = free_port(), "drain-restart-token"
    first = start_coordinator(tasks_db, probe_redis, tmp_path, port=port, token=token)
    worker = Registration(first, SLOW, 814).register()
    try:
        beat(worker, in_flight=1)
        proc = start_probe(tmp_path, {"coordinator_url": first.url, "coordinator_token": token,
                                      "worker_id": worker.worker_id, "timeout": 60},
                           module="coordinator_drain")
        time.sleep(3)
        first.stop()
        time.sleep(2)
        assert proc.poll() is None, "the module gave up while the Coordinator was down"
        with start_coordinator(tasks_db, probe_redis, tmp_path, port=port, token=token):
            beat(worker, in_flight=0, drained=True)
            run = finish_probe(proc)
            worker.deregister()
    finally:
        first.stop()
    assert run.rc == 0, run.stdout
    assert (run.result["changed"], run.result["state"]) == (True, "drained")


def test_undrain_check_mode_and_idempotence(tmp_path, coordinator, registrations):
    worker = Registration(coordinator, SLOW, 813).register()
    registrations.append(worker)
    would = drain(tmp_path / "check", coordinator, check=True, worker_id=worker.worker_id)
    assert (would.rc, would.result["changed"]) == (0, True)
    assert would.result["msg"].endswith(": would be drained now")
    assert beat(worker)["drain"] is False  # check mode changed nothing
    first = drain(tmp_path / "first", coordinator, worker_id=worker.worker_id, wait=False)
    assert (first.result["changed"], first.result["state"]) == (True, "draining")
    back = drain(tmp_path / "back", coordinator, worker_id=worker.worker_id, state="undrained")
    assert (back.rc, back.result["changed"], back.result["state"]) == (0, True, "alive")
    again = drain(tmp_path / "again", coordinator, worker_id=worker.worker_id,
                  state="undrained")
    assert (again.rc, again.result["changed"]) == (0, False)
    assert beat(worker)["drain"] is False


def test_an_unknown_worker_fails_or_is_absent(tmp_path, coordinator):
    missing = drain(tmp_path / "missing", coordinator, worker_id="nobody")
    assert missing.rc != 0 and missing.result["timed_out"] is False
    assert missing.result["msg"] == (
        f"worker nobody is not registered with the Coordinator at {coordinator.url}: it "
        "cannot be drained; check worker_id (GET /workers lists the workers), or set "
        "allow_absent")
    absent = drain(tmp_path / "absent", coordinator, worker_id="nobody", allow_absent=True)
    assert (absent.rc, absent.result["state"], absent.result["changed"]) == (0, "absent", False)
    wrong = drain(tmp_path / "token", coordinator, worker_id="nobody",
                  coordinator_token="wrong")
    assert wrong.result["msg"] == (f"Coordinator at {coordinator.url} refused the token (401 "
                                   "on GET /workers): check coordinator_token")


def test_pure_logic() -> None:
    with pytest.raises(DrainError, match="did not answer"):
        find_worker([], "w")
    with pytest.raises(DrainError, match="upgrade it"):
        find_worker({"workers": [{"worker_id": "w"}]}, "w")
    assert find_worker({"workers": [{"worker_id": "v", "state": "alive"}]}, "w") is None
    drained = {"drain_requested_at": "2026-12-01T00:00:00+00:00", "state": "drained"}
    assert settled(drained, "drained") and not settled(drained, "undrained")
    assert not settled(drained | {"state": "draining"}, "drained")
    assert settled(drained | {"state": "stopped"}, "drained")
    assert describe_timeout({"worker_id": "w", "host": "h", "state": "draining",
                             "in_flight": 1}, 9.6).startswith(
        "w on h (draining, 1 in flight) still holds a task after 10 s of draining")


def test_documentation_matches_the_code(tmp_path, coordinator, registrations):
    doc = documented_as_coded("coordinator_drain")
    worker = Registration(coordinator, SLOW, 814).register()
    registrations.append(worker)
    run = drain(tmp_path, coordinator, worker_id=worker.worker_id, wait=False)
    returned = set(run.result) - {"action", "changed", "failed", "invocation", "diff",
                                  "_ansible_no_log"}
    assert returned == set(doc["return"])
