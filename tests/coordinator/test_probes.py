"""Worker probes against real PostgreSQL and Redis: a probe routed through a worker's own
queue and finished by it, a failed one and one never taken shown on the worker, probes kept
out of users' lists and counts, pruned, avoided by routing, and one instance probing at a
time. The workers are FakeWorkers (the contract by hand); tests/workers runs the real ones."""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from typing import Any

import httpx
import psycopg
import pytest
from coordinator_contract import PROBE_PROMPT, PROBE_TYPE
from coordinator_sql import NAMED, parameters

from coordinator.probes import PROBE_LOCK_KEY, PROBES_KEPT, ProbeReport
from coordinator.schema import ensure_schema
from coordinator.status_cli import format_workers
from lab.throwaway import ThrowawayPostgres

from .coordkit import Backends, ServerThread, wait_for

#: Probes on, one a worker per hour: a test runs the passes that matter itself.
HOURLY = {"COORDINATOR_PROBE_INTERVAL": "3600", "COORDINATOR_PROBE_TIMEOUT": "30"}
OLLAMA_DOWN = "Ollama at http://127.0.0.1:9 is not reachable"


def probe_pass(server: ServerThread) -> ProbeReport:
    return server.run(server.coordinator.prober.run_once())


def worker_row(client: httpx.Client, worker_id: str) -> dict[str, Any]:
    answer = client.get("/workers")
    assert answer.status_code == 200, answer.text
    return next(w for w in answer.json()["workers"] if w["worker_id"] == worker_id)


def probes_of(backends: Backends, worker_id: str) -> list[tuple]:
    return backends.sql("SELECT id::text, status, queue FROM tasks WHERE task_type = %s"
                        " AND requested_worker = %s ORDER BY created_at", (PROBE_TYPE, worker_id))


def page(server: ServerThread) -> str:
    with httpx.Client(base_url=server.url, timeout=30) as browser:
        answer = browser.get("/ui")
        assert answer.status_code == 200, answer.text
        return answer.text


def test_a_healthy_workers_probe_goes_through_its_queue_and_shows_done(
        start_server, backends: Backends, make_worker) -> None:
    server = start_server(**HOURLY)
    web = make_worker(server, "web-a", kind="web").start()
    probe_pass(server)
    probe_id = web.take()
    row = backends.task(probe_id)
    assert (row["task_type"], row["prompt"], row["queue"], row["requested_worker"],
            row["worker"], row["status"]) == (PROBE_TYPE, PROBE_PROMPT, "tasks:web", "web-a",
                                              "web-a", "queued")
    assert web.finish(probe_id, web.claim(probe_id), result="SearXNG answered; one token")
    probe_pass(server)
    with server.client() as client:
        shown = worker_row(client, "web-a")
    assert (shown["probe_ok"], shown["probe_error"]) == (True, None)
    assert shown["probe_at"] == row["created_at"].isoformat()
    assert 0 <= shown["probe_seconds"] < 10
    assert re.search(r"ok in \d+\.\d s", format_workers([shown]))
    assert re.search(r'<td class="wrap probe">ok in \d+\.\d s</td>', page(server))
    # The next probe waits for the interval.
    assert probe_pass(server).sent == {}
    assert len(probes_of(backends, "web-a")) == 1


def test_a_failed_probe_marks_the_worker_unhealthy_with_its_error(
        start_server, backends: Backends, make_worker,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="coordinator")
    server = start_server(**HOURLY)
    web = make_worker(server, "web-a", kind="web", host="host-w").start()
    probe_pass(server)
    probe_id = web.take()
    assert web.finish(probe_id, web.claim(probe_id), result=None, status="failed",
                      error=OLLAMA_DOWN)
    probe_pass(server)
    with server.client() as client:
        shown = worker_row(client, "web-a")
        metrics = client.get("/metrics").text
    assert (shown["probe_ok"], shown["probe_error"], shown["state"]) == (
        False, OLLAMA_DOWN, "alive")
    assert 'coordinator_workers_unhealthy{kind="web"} 1.0' in metrics
    assert f"failed: {OLLAMA_DOWN}" in format_workers([shown])
    assert f'<span class="error">failed: {OLLAMA_DOWN}</span>' in page(server)
    assert (f"web worker 'web-a' on host 'host-w' is unhealthy: its probe failed: "
            f"{OLLAMA_DOWN}") in caplog.text


def test_a_worker_that_takes_no_probe_is_unhealthy_within_one_interval(
        start_server, make_worker) -> None:
    # Its heartbeats go on (the Coordinator hears it), but nothing takes from its queue: the
    # three-day failure of a worker whose PostgreSQL login was refused.
    interval = 5.0
    server = start_server(COORDINATOR_PROBE_INTERVAL=f"{interval:g}",
                          COORDINATOR_PROBE_TIMEOUT="1")
    make_worker(server, "a").start()
    registered = time.monotonic()
    with server.client() as client:
        shown = wait_for(lambda: (w := worker_row(client, "a"))["probe_ok"] is False and w,
                         interval, what="worker a marked unhealthy")
    assert time.monotonic() - registered < interval
    assert re.fullmatch(
        r"took no probe for \d+ s \(COORDINATOR_PROBE_TIMEOUT 1 s\): nothing took it from "
        r"tasks:cpu:a, or the tasks queued before it ran that long; see the worker's log and "
        r"its PostgreSQL login \(pg_hba\.conf\)", shown["probe_error"]), shown["probe_error"]


def test_probes_are_left_out_of_users_lists_and_counts(
        start_server, backends: Backends, make_worker) -> None:
    server = start_server(**HOURLY)
    web = make_worker(server, "web-a", kind="web").start()
    make_worker(server, "a").start()
    with server.client() as client:
        user_task = client.post("/route", json={"prompt": "p", "task_type": "web_search"}
                                ).json()["task_id"]
        sent = probe_pass(server).sent
        assert sorted(sent) == ["tasks:cpu:a", "tasks:web"]
        listed = [t["task_id"] for t in client.get("/tasks").json()["tasks"]]
        assert listed == [user_task]
        queues = {q["queue"]: q for q in client.get("/queues").json()["queues"]}
        assert (queues["tasks:web"]["queued"], queues["tasks:web"]["depth"]) == (1, 2)
        assert (queues["tasks:cpu:a"]["queued"], queues["tasks:cpu:a"]["depth"]) == (0, 1)
        metrics = client.get("/metrics").text
        assert 'coordinator_tasks{status="queued",task_type="web_search"} 1.0' in metrics
        for task_id in (web.take(), web.take()):  # the user's task first: FIFO
            assert web.finish(task_id, web.claim(task_id))
        wait_for(lambda: 'coordinator_tasks_finished_total{status="done",task_type='
                         '"web_search"} 1.0' in client.get("/metrics").text, 10,
                 what="the user's task counted")
        metrics = client.get("/metrics").text
        assert f'task_type="{PROBE_TYPE}"' not in metrics
        assert [t["task_id"] for t in client.get("/tasks?status=done").json()["tasks"]] == [
            user_task]
        probe_id = sent["tasks:web"][0]
        probe = client.get(f"/task/{probe_id}").json()
        assert (probe["task_type"], probe["status"]) == (PROBE_TYPE, "done")
        retried = client.post(f"/task/{probe_id}/retry").json()
        assert (retried["changed"], retried["message"]) == (False, (
            f"task {probe_id} is a worker probe: the Coordinator queues a new one every "
            "COORDINATOR_PROBE_INTERVAL, nothing to retry"))


def test_finished_probes_are_pruned_to_the_last_few_of_each_worker(
        start_server, backends: Backends) -> None:
    server = start_server(**HOURLY)
    ids = [str(uuid.uuid4()) for _ in range(PROBES_KEPT + 5)]
    user = str(uuid.uuid4())
    for n, task_id in enumerate(ids):
        backends.sql(
            "INSERT INTO tasks (id, task_type, prompt, status, queue, requested_worker,"
            " created_at, finished_at) VALUES (%s, %s, 'p', 'done', 'tasks:cpu:a', 'a',"
            " now() - make_interval(mins => %s), now() - make_interval(mins => %s))",
            (task_id, PROBE_TYPE, 100 - n, 100 - n))
    backends.sql("INSERT INTO tasks (id, task_type, prompt, status, created_at) VALUES"
                 " (%s, 'web_search', 'p', 'done', now() - interval '1 day')", (user,))
    assert probe_pass(server).pruned == 5
    kept = [row[0] for row in probes_of(backends, "a")]
    assert kept == ids[5:]  # the newest
    assert backends.sql("SELECT count(*) FROM task_transitions WHERE task_id = ANY(%s::uuid[])",
                        (ids[:5],)) == [(0,)]
    assert backends.task(user)["status"] == "done"


def test_routing_avoids_an_unhealthy_inference_worker_while_a_healthy_one_serves(
        start_server, backends: Backends, make_worker) -> None:
    server = start_server(**HOURLY)
    a = make_worker(server, "a", models=("m", "only-a")).start()
    b = make_worker(server, "b", models=("m",)).start()
    probe_pass(server)
    for worker, status in ((a, "failed"), (b, "done")):
        probe_id = worker.take()
        assert worker.finish(probe_id, worker.claim(probe_id), status=status,
                             error=OLLAMA_DOWN if status == "failed" else None)
    probe_pass(server)
    with server.client() as client:
        assert worker_row(client, "a")["probe_ok"] is False
        # Its heartbeats carry the verdict to the registry routing reads.
        wait_for(lambda: not server.coordinator.registry.get("a").healthy, 5,
                 what="the registry to hear that a is unhealthy")
        queues = [client.post("/route", json={"prompt": "p", "task_type": "generate",
                                              "model": "m"}).json()["queue"]
                  for _ in range(4)]
        assert queues == ["tasks:cpu:b"] * 4
        # A model only the unhealthy worker serves still goes to it.
        only = client.post("/route", json={"prompt": "p", "task_type": "generate",
                                           "model": "only-a"}).json()
        assert only["queue"] == "tasks:cpu:a"


def test_a_drained_workers_queued_probe_is_withdrawn_without_a_verdict(
        start_server, backends: Backends, make_worker) -> None:
    server = start_server(**HOURLY)
    make_worker(server, "a").start()
    probe_pass(server)
    [(probe_id, status, _)] = probes_of(backends, "a")
    assert status == "queued"
    with server.client() as client:
        assert client.post("/workers/a/drain").json()["changed"] is True
        queue = "tasks:cpu:a"
        assert probe_id in backends.redis().lrange(queue, 0, -1)
        assert probe_pass(server).withdrawn == {queue: [probe_id]}
        assert worker_row(client, "a")["probe_ok"] is None
    assert probes_of(backends, "a") == []
    # Out of the queue too: undrained, the worker never takes a probe that has no row.
    assert probe_id not in backends.redis().lrange(queue, 0, -1)
    assert backends.sql("SELECT count(*) FROM task_transitions WHERE task_id = %s",
                        (probe_id,)) == [(0,)]


def test_only_one_instance_probes_at_a_time(start_server, backends: Backends,
                                            make_worker) -> None:
    one = start_server(**HOURLY)
    two = start_server(**HOURLY)
    with backends.db() as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (PROBE_LOCK_KEY,))
        assert probe_pass(one).acted is False
        assert probe_pass(two).acted is False
    make_worker(one, "a").start()
    make_worker(two, "b").start()
    for _ in range(5):
        probe_pass(one)
        probe_pass(two)
    assert [len(probes_of(backends, w)) for w in ("a", "b")] == [1, 1]


def test_probes_are_off_with_an_interval_of_zero(start_server, backends: Backends,
                                                 make_worker) -> None:
    server = start_server(COORDINATOR_PROBE_INTERVAL="0")
    make_worker(server, "a").start()
    assert server.coordinator.prober is None
    server.reap()
    assert probes_of(backends, "a") == []


def test_the_probe_statements_read_an_index_among_many_user_tasks(pg: ThrowawayPostgres) -> None:
    """A pass runs every few seconds: planned with the probe type's value (sent unprepared),
    none of its statements reads every task."""
    dsn = pg.database("coordinator_probe_index")

    async def create() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await ensure_schema(conn)

    asyncio.run(create())
    params = {"probe_type": PROBE_TYPE, "ttl": 15.0, "timeout": 120.0, "keep": PROBES_KEPT,
              "prompt": PROBE_PROMPT, "kinds": ["web"], "interval": 300.0}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tasks (id, task_type, prompt, status, queue, requested_worker)"
            " SELECT gen_random_uuid(), CASE WHEN n %% 1000 = 0 THEN %(probe_type)s"
            "  ELSE 'web_search' END, 'p', CASE WHEN n %% 100 = 0 THEN 'queued' ELSE 'done'"
            "  END, 'tasks:web', CASE WHEN n %% 1000 = 0 THEN 'web-' || n %% 3 END"
            " FROM generate_series(1, 20000) AS n", params)
        conn.execute("INSERT INTO workers (worker_id, host, kind, queues)"
                     " VALUES ('web-1', 'h', 'web', '{tasks:web}')")
        conn.execute("ANALYZE tasks")
        plans = {name: "\n".join(row[0] for row in conn.execute(
                     "EXPLAIN " + NAMED[name],
                     {p: params[p] for p in parameters(NAMED[name])}))
                 for name in ("WITHDRAW_PROBES", "OVERDUE_PROBES", "RECORD_PROBES",
                              "PRUNE_PROBES", "SEND_PROBES")}
    assert {name: "Seq Scan on tasks" in plan for name, plan in plans.items()} == dict.fromkeys(
        plans, False), plans
