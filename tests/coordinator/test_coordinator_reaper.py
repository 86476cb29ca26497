"""The Reaper against real PostgreSQL and Redis: dead and stuck workers, the attempt limit,
web tasks past the deadline, ids lost from Redis, duplicate workers."""

from __future__ import annotations

import logging
import time

import httpx
import pytest

from .coordkit import Backends, wait_for

TTL = "2"  # heartbeats every 0.1 s in FakeWorker; a worker is dead 2 s after its last one


def route(client: httpx.Client, **body: object) -> str:
    resp = client.post("/route", json=body)
    assert resp.status_code == 201, resp.text
    return resp.json()["task_id"]


def test_dead_inference_worker_task_goes_to_another_worker(
        start_server, backends: Backends, make_worker, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="coordinator")
    server = start_server(COORDINATOR_HEARTBEAT_TTL=TTL)
    a = make_worker(server, "a", host="host-a").start()
    with server.client() as client:
        running = route(client, prompt="p", task_type="generate")
        queued = route(client, prompt="p", task_type="generate")
        b = make_worker(server, "b", host="host-b").start()
        assert a.take() == running
        claim = a.claim(running)
        assert claim and backends.task(running)["attempts"] == 1
        a.stop()  # a dies with one task running and one queued on its queue

        def moved() -> bool:
            return all(backends.task(t)["queue"] == "tasks:cpu:b" for t in (running, queued))

        wait_for(moved, 15, what="both tasks to move to worker b")
    row = backends.task(running)
    assert (row["status"], row["worker"], row["attempts"], row["claim"]) == ("queued", "b", 1,
                                                                             None)
    assert set(backends.redis().lrange("tasks:cpu:b", 0, -1)) == {running, queued}
    assert backends.task(queued)["attempts"] == 0
    # b does both; a's late result is dropped, its queue copy too
    for _ in range(2):
        task_id = b.take()
        assert b.finish(task_id, b.claim(task_id), result=f"by b {task_id}")
    assert not a.finish(running, claim, result="late")
    row = backends.task(running)
    assert (row["status"], row["result"], row["worker_id"], row["attempts"]) == (
        "done", f"by b {running}", "b", 2)
    assert a.take(timeout=0.1) == queued and a.claim(queued) is None
    logs = caplog.text
    assert f"re-dispatched task {running} from worker 'a' to worker 'b'" in logs
    assert "worker 'a' on host 'host-a'" in logs
    with server.client() as client:
        metrics = client.get("/metrics").text
    assert 'coordinator_redispatches_total{reason="worker_dead"} 2.0' in metrics


def test_attempt_limit_fails_the_task_naming_worker_and_host(
        start_server, backends: Backends, make_worker) -> None:
    server = start_server(COORDINATOR_HEARTBEAT_TTL=TTL, COORDINATOR_MAX_ATTEMPTS="2")
    a = make_worker(server, "a", host="host-a").start()
    b = make_worker(server, "b", host="host-b").start()
    with server.client() as client:
        task_id = route(client, prompt="p", task_type="chat", worker=None)
    first = a if backends.task(task_id)["worker"] == "a" else b
    second = b if first is a else a
    assert first.take() == task_id and first.claim(task_id)
    first.stop()
    wait_for(lambda: backends.task(task_id)["worker"] == second.worker_id, 10,
             what="the task to move to the other worker")
    assert second.take() == task_id and second.claim(task_id)
    assert backends.task(task_id)["attempts"] == 2
    second.stop()
    row = wait_for(lambda: (r := backends.task(task_id))["status"] == "failed" and r, 10,
                   what="the task to fail")
    assert "gave up after 2 attempt(s)" in row["error"]
    assert f"worker '{second.worker_id}' on host '{second.host}'" in row["error"]
    assert row["finished_at"] is not None


def test_stuck_task_on_alive_worker_is_redispatched(start_server, backends: Backends,
                                                    make_worker) -> None:
    server = start_server(COORDINATOR_HEARTBEAT_TTL=TTL, COORDINATOR_TASK_TIMEOUT="1")
    a = make_worker(server, "a").start()
    with server.client() as client:
        task_id = route(client, prompt="p", task_type="summarize")
    assert a.take() == task_id and a.claim(task_id)
    b = make_worker(server, "b").start()
    wait_for(lambda: backends.task(task_id)["worker"] == "b", 10, what="the stuck task to move")
    assert backends.task(task_id)["status"] == "queued"
    assert b.take() == task_id and b.claim(task_id)
    assert backends.task(task_id)["attempts"] == 2


def test_web_task_is_never_redispatched_and_fails_after_the_deadline(
        start_server, backends: Backends, make_worker) -> None:
    server = start_server(COORDINATOR_HEARTBEAT_TTL=TTL, COORDINATOR_WEB_TASK_DEADLINE="2")
    web1 = make_worker(server, "web1", kind="web", host="web-host-1").start()
    web2 = make_worker(server, "web2", kind="web", host="web-host-2").start()
    with server.client() as client:
        task_id = route(client, prompt="news", task_type="web_search")
    assert web1.take() == task_id and web1.claim(task_id)
    stopped = time.monotonic()
    web1.stop()
    wait_for(lambda: backends.sql("SELECT dead FROM workers WHERE worker_id = 'web1'")[0][0],
             10, what="web1 to be marked dead")
    # dead, but within the deadline: still running, not pushed anywhere again
    row = backends.task(task_id)
    assert row["status"] == "running" and row["worker_id"] == "web1"
    assert web2.take(timeout=0.3) is None
    row = wait_for(lambda: (r := backends.task(task_id))["status"] == "failed" and r, 10,
                   what="the web task to fail")
    assert time.monotonic() - stopped >= 3.5  # TTL 2 s + deadline 2 s (minus a heartbeat)
    assert "web worker 'web1' on host 'web-host-1'" in row["error"]
    assert "COORDINATOR_WEB_TASK_DEADLINE" in row["error"]
    assert row["attempts"] == 1
    assert web2.take(timeout=0.3) is None


def test_web_worker_that_comes_back_keeps_its_task(start_server, backends: Backends,
                                                   make_worker) -> None:
    server = start_server(COORDINATOR_HEARTBEAT_TTL=TTL, COORDINATOR_WEB_TASK_DEADLINE="3")
    web1 = make_worker(server, "web1", kind="web").start()
    with server.client() as client:
        task_id = route(client, prompt="news", task_type="web_search")
    assert web1.take() == task_id
    claim = web1.claim(task_id)
    web1.stop()
    wait_for(lambda: backends.sql("SELECT dead FROM workers WHERE worker_id = 'web1'")[0][0],
             10, what="web1 to be marked dead")
    web1.start()  # restarted within the deadline
    time.sleep(4)
    assert backends.task(task_id)["status"] == "running"
    assert web1.finish(task_id, claim, result="late but fine", worker="web-worker")


def test_orphaned_queued_tasks_are_pushed_again_after_flushall(
        start_server, backends: Backends, make_worker) -> None:
    server = start_server(COORDINATOR_HEARTBEAT_TTL=TTL, COORDINATOR_REPUSH_GRACE="0.5")
    make_worker(server, "mac").start()
    with server.client() as client:
        web = route(client, prompt="p", task_type="web_search")
        rag = route(client, prompt="p", task_type="rag")
        gen = route(client, prompt="p", task_type="generate")
        wait_for(lambda: backends.task(gen)["queue"] == "tasks:cpu:mac", 5)
    r = backends.redis()
    r.flushall()
    wait_for(lambda: r.lrange("tasks:web", 0, -1) == [web]
             and r.lrange("tasks:rag", 0, -1) == [rag]
             and r.lrange("tasks:cpu:mac", 0, -1) == [gen], 10, what="the ids to come back")
    time.sleep(1.5)  # and only once
    assert (r.llen("tasks:web"), r.llen("tasks:rag"), r.llen("tasks:cpu:mac")) == (1, 1, 1)
    with server.client() as client:
        assert "coordinator_repushes_total 3.0" in client.get("/metrics").text


def test_ids_in_a_live_processing_list_are_not_pushed_again(
        start_server, backends: Backends, make_worker) -> None:
    server = start_server(COORDINATOR_HEARTBEAT_TTL=TTL, COORDINATOR_REPUSH_GRACE="0.2")
    web1 = make_worker(server, "web1", kind="web").start()
    with server.client() as client:
        task_id = route(client, prompt="p", task_type="web_search")
    assert web1.take() == task_id  # taken, not yet claimed
    time.sleep(1.5)
    assert backends.redis().llen("tasks:web") == 0


def test_duplicate_worker_is_flagged(start_server, backends: Backends, make_worker,
                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="coordinator")
    server = start_server(COORDINATOR_HEARTBEAT_TTL="2")
    first = make_worker(server, "mac", host="host-one", pid=111).start()
    # a restart (the old process has stopped) is not a duplicate
    first.stop()
    first.instance_id = "00000000-0000-4000-8000-000000000001"
    first.start()
    server.reap()
    with server.client() as client:
        assert client.get("/workers").json()["workers"][0]["duplicate"] is False
    # a second live process under the same id is
    second = make_worker(server, "mac", host="host-two", pid=222).start()

    def flagged() -> bool:
        with server.client() as client:
            return client.get("/workers").json()["workers"][0]["duplicate"]

    wait_for(flagged, 10, what="the duplicate flag")
    with server.client() as client:
        mac = client.get("/workers").json()["workers"][0]
        assert {(i["host"], i["pid"]) for i in mac["live_instances"]} == {("host-one", 111),
                                                                          ("host-two", 222)}
        metrics = client.get("/metrics").text
    assert "coordinator_workers_duplicate 1.0" in metrics
    assert "coordinator_duplicate_workers_detected_total 1.0" in metrics
    wait_for(lambda: any(a.get("duplicate") for a in second.heartbeat_answers), 5)
    line = next(r.getMessage() for r in caplog.records if "duplicate worker 'mac'" in
                r.getMessage())
    assert "host-one" in line and "111" in line and "host-two" in line and "222" in line
    # once one of them stops, the flag clears
    second.stop()
    wait_for(lambda: not flagged(), 10, what="the duplicate flag to clear")


def test_only_one_reaper_acts_at_a_time(start_server, backends: Backends) -> None:
    one = start_server(COORDINATOR_HEARTBEAT_TTL="60")
    two = start_server(COORDINATOR_HEARTBEAT_TTL="60")
    with backends.db() as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (0x7265617065,))
        assert one.reap().acted is False
        assert two.reap().acted is False
    assert one.reap().acted is True
