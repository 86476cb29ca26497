"""Draining workers, operator actions (retry, cancel) with their audit record, and the task
timeline, against real PostgreSQL and Redis with the coordinator in-process."""

from __future__ import annotations

import uuid

import httpx

from .coordkit import Backends, ServerThread, wait_for


def route(client: httpx.Client, **body: object) -> dict:
    resp = client.post("/route", json=body)
    assert resp.status_code == 201, resp.text
    return resp.json()


def states(client: httpx.Client) -> dict[str, str]:
    return {w["worker_id"]: w["state"] for w in client.get("/workers").json()["workers"]}


def timeline(backends: Backends, task_id: str) -> list[tuple]:
    return backends.sql("SELECT event, status, worker_id, queue, reason FROM task_transitions"
                        " WHERE task_id = %s ORDER BY id", (task_id,))


def test_a_drained_worker_gets_nothing_new_while_another_serves(
        server: ServerThread, client: httpx.Client, backends: Backends, make_worker) -> None:
    drained = make_worker(server, "w1", device="cpu").start()
    other = make_worker(server, "w2", device="cpu").start()
    answer = client.post("/workers/w1/drain")
    assert answer.status_code == 200, answer.text
    assert answer.json() | {"message": ""} == {
        "worker_id": "w1", "state": "draining", "changed": True, "message": "",
        "repeated": False}
    assert "drained inference worker 'w1' on host 'host-w1'" in answer.json()["message"]
    queues = {route(client, prompt=f"p{i}", task_type="generate")["queue"] for i in range(4)}
    assert queues == {other.queue}
    assert drained.redis.llen(drained.queue) == 0
    # The heartbeat tells the worker; once it reports holding nothing it is drained.
    assert drained.heartbeat().json() == {"duplicate": False, "drain": True}
    assert other.heartbeat().json() == {"duplicate": False, "drain": False}
    assert states(client)["w1"] == "draining"
    drained.stop()
    assert drained.heartbeat(in_flight=0, drained=True).status_code == 200
    assert states(client) == {"w1": "drained", "w2": "alive"}
    # The Reaper does not count a drained worker as dead.
    server.reap()
    assert backends.sql("SELECT dead FROM workers WHERE worker_id = 'w1'") == [(False,)]
    wait_for(lambda: 'coordinator_workers_drained{kind="inference"} 1.0'
             in client.get("/metrics").text, 10, what="the drained worker in /metrics")
    assert 'coordinator_workers_alive{kind="inference"} 2.0' in client.get("/metrics").text


def test_a_drained_worker_finishes_what_it_holds_and_its_waiting_tasks_move(
        server: ServerThread, client: httpx.Client, backends: Backends, make_worker) -> None:
    drained = make_worker(server, "w1", device="cpu").start()
    held = route(client, prompt="held", task_type="generate", worker="w1")["task_id"]
    waiting = route(client, prompt="waits", task_type="generate")["task_id"]
    assert backends.task(waiting)["queue"] == drained.queue
    assert drained.take() == held
    claim = drained.claim(held)
    assert claim is not None
    other = make_worker(server, "w2", device="cpu").start()
    assert client.post("/workers/w1/drain").status_code == 200
    # The Reaper moves the task still in its queue, and leaves the one it runs.
    wait_for(lambda: backends.task(waiting)["queue"] == other.queue, 10,
             what="the waiting task to move to w2")
    assert backends.task(held)["status"] == "running"
    assert drained.finish(held, claim)
    assert backends.task(held)["status"] == "done"
    moved = timeline(backends, waiting)
    assert moved[0][:2] == ("created", "queued") and moved[0][3] == drained.queue
    assert moved[-1][:4] == ("re-dispatched", "queued", None, other.queue)
    assert moved[-1][4] == f"worker 'w1' on host 'host-w1', pid {drained.pid} is drained"
    assert [event for event, *_ in timeline(backends, held)] == ["created", "claimed", "done"]


def test_drain_survives_a_coordinator_restart_and_undrain_resumes(
        start_server, backends: Backends, make_worker) -> None:
    first = start_server()
    with first.client() as client:
        make_worker(first, "w1", device="cpu").start()
        assert client.post("/workers/w1/drain").json()["changed"] is True
    first.stop()
    second = start_server()
    with second.client() as client:
        assert states(client)["w1"] == "draining"
        # A new process of the worker learns it at registration.
        restarted = make_worker(second, "w1", device="cpu")
        assert restarted.register()["drain"] is True
        answer = route(client, prompt="p", task_type="generate")
        assert answer["queue"] is None and "no inference worker is alive" in answer["note"]
        pinned = route(client, prompt="p", task_type="generate", worker="w1")
        assert pinned["note"] == "worker 'w1' is drained: the task waits until it is undrained"
        undrain = client.post("/workers/w1/undrain")
        assert undrain.status_code == 200 and undrain.json()["changed"] is True
        assert undrain.json()["state"] == "alive"
        # Both waiting tasks go to it now, and new ones too.
        wait_for(lambda: backends.task(pinned["task_id"])["queue"] == restarted.queue, 10,
                 what="the pinned task to be dispatched after the undrain")
        wait_for(lambda: backends.task(answer["task_id"])["queue"] == restarted.queue, 10)
        assert route(client, prompt="p", task_type="generate")["queue"] == restarted.queue
        assert [e for e, *_ in timeline(backends, answer["task_id"])] == [
            "created, waiting", "dispatched"]


def test_drain_of_an_unknown_worker_is_a_one_line_404(client: httpx.Client,
                                                       backends: Backends) -> None:
    for action in ("drain", "undrain"):
        answer = client.post(f"/workers/nobody/{action}")
        assert answer.status_code == 404
        assert answer.json() == {"error": "unknown worker 'nobody': GET /workers lists the "
                                          "workers"}
    assert backends.sql("SELECT actor, action, target, ok, result FROM audit ORDER BY id") == [
        ("api", "drain", "nobody", False, "no such target"),
        ("api", "undrain", "nobody", False, "no such target")]


def test_a_repeated_drain_has_one_effect_and_every_request_is_audited(
        server: ServerThread, client: httpx.Client, backends: Backends, make_worker) -> None:
    make_worker(server, "w1", device="cpu").start()
    key = {"Idempotency-Key": str(uuid.uuid4())}
    first = client.post("/workers/w1/drain", headers=key).json()
    again = client.post("/workers/w1/drain", headers=key).json()
    assert first["changed"] is True and first["repeated"] is False
    assert again["repeated"] is True and again["changed"] is True
    assert again["message"] == f"done once already: {first['message']}"
    # Without a key, the guarded update finds nothing to do and says so.
    plain = client.post("/workers/w1/drain").json()
    assert plain["changed"] is False
    assert plain["message"] == "worker 'w1' is draining already: nothing to drain"
    rows = backends.sql("SELECT actor, action, target, ok, result FROM audit ORDER BY id")
    assert rows == [("api", "drain", "w1", True, first["message"]),
                    ("api", "drain", "w1", False, plain["message"])]
    # The same key for another action is refused, saying why.
    reused = client.post("/workers/w1/undrain", headers=key)
    assert reused.status_code == 409
    assert reused.json()["error"] == (f"the idempotency key {key['Idempotency-Key']!r} was "
                                      "used for drain w1: send a new key for each action")


def test_retry_of_a_failed_web_task_is_a_new_attempt_to_done(
        server: ServerThread, client: httpx.Client, backends: Backends, make_worker) -> None:
    web = make_worker(server, "web1", kind="web").start()
    task_id = route(client, prompt="q", task_type="web_search")["task_id"]
    assert web.take() == task_id
    assert web.finish(task_id, web.claim(task_id), result=None, status="failed",
                      error="SearXNG answered 502")
    answer = client.post(f"/task/{task_id}/retry")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"task_id": task_id, "status": "queued", "changed": True,
                             "message": f"retried task {task_id}: queued on tasks:web",
                             "repeated": False}
    again = client.post(f"/task/{task_id}/retry").json()
    assert again["changed"] is False
    assert again["message"] == f"task {task_id} is queued, not failed: nothing to retry"
    assert web.take() == task_id
    assert web.finish(task_id, web.claim(task_id), result="found")
    row = backends.task(task_id)
    assert (row["status"], row["result"], row["error"], row["attempts"]) == (
        "done", "found", None, 2)
    events = timeline(backends, task_id)
    assert [e for e, *_ in events] == ["created", "claimed", "failed", "retried", "claimed",
                                       "done"]
    assert events[2][4] == "SearXNG answered 502"
    assert events[3][4] == "retried by api"


def test_cancel_of_a_queued_task_fails_it_and_the_worker_drops_it(
        server: ServerThread, client: httpx.Client, backends: Backends, make_worker) -> None:
    worker = make_worker(server, "w1", device="cpu").start()
    task_id = route(client, prompt="p", task_type="generate")["task_id"]
    answer = client.post(f"/task/{task_id}/cancel").json()
    assert (answer["changed"], answer["status"]) == (True, "failed")
    row = backends.task(task_id)
    assert row["error"] == "cancelled by api while queued"
    assert worker.take() == task_id and worker.claim(task_id) is None
    assert timeline(backends, task_id)[-1][:2] == ("cancelled", "failed")
    done = client.post(f"/task/{task_id}/cancel").json()
    assert done["changed"] is False
    assert done["message"] == f"task {task_id} is failed: only a queued task can be cancelled"
    missing = client.post(f"/task/{uuid.uuid4()}/cancel")
    assert missing.status_code == 404 and missing.json()["error"].startswith("no task ")
    assert client.post("/task/not-a-uuid/retry").status_code == 422


def test_the_timeline_is_kept_for_the_retention(start_server, backends: Backends,
                                                make_worker) -> None:
    server = start_server(COORDINATOR_TIMELINE_RETENTION_DAYS="1")
    with server.client() as client:
        task_id = route(client, prompt="q", task_type="web_search")["task_id"]
    old = str(uuid.uuid4())
    backends.sql("INSERT INTO task_transitions (task_id, at, event, status)"
                 " VALUES (%s, clock_timestamp() - interval '2 days', 'created', 'queued')",
                 (old,))
    server.reap()
    assert timeline(backends, old) == []
    assert [e for e, *_ in timeline(backends, task_id)] == ["created"]
