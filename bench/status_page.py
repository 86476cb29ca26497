#!/usr/bin/env python3
"""Benchmark the status page (/ui) with 10,000 tasks in PostgreSQL.

Starts a throwaway PostgreSQL (fsync and synchronous_commit on), a throwaway Redis and
``python -m coordinator`` with a token, registers a few workers through the API (heartbeating
in a thread; one drained, one that never heartbeats and so goes dead), and inserts N task rows
straight into PostgreSQL with one ``INSERT ... SELECT generate_series``: mixed task types and
statuses (about 5 % failed with an error, a few queued and running), created at random over
the last week, with the timeline rows a real run leaves. It logs in to the status page (``POST
/ui/login``: token and name, keeping the session cookie) and times, one request after the
other on one keep-alive connection, each page the status page serves most:

    /ui                            no filter
    /ui?status=failed              the failures
    /ui?task_type=chat&since=24h   one type, the last day
    /ui/task/<id>                  one task with its timeline

and prints p50, p95 and max per page against the goal (p95 ≤ 300 ms at 10,000 rows). Then it
prints ``EXPLAIN (ANALYZE, BUFFERS)`` of every query those pages run (coordinator_sql,
coordinator.queries, with the parameters the pages pass) and, for the task list, the generic
plan too: the Coordinator's connections prepare a statement after 5 runs (psycopg), and
PostgreSQL may then keep one plan for every filter. The figures in docs/benchmarks.md come from:

    .venv/bin/python bench/status_page.py
"""

from __future__ import annotations

import argparse
import http.client
import http.cookies
import json
import re
import sys
import threading
import time
import urllib.request
import uuid
from typing import Any
from urllib.parse import urlencode

import common
import psycopg
import redis
from coordinator_contract import RAG_QUEUE, WEB_QUEUE
from coordinator_sql import SQL

from coordinator import queries as q
from coordinator.config import DEFAULT
from coordinator.overview import LIST_LIMIT, TaskFilter

TOKEN = "bench-status-token"
GOAL_P95 = 0.300  # seconds, at 10,000 rows
#: (worker_id, kind, device); the last one stops heartbeating after registering.
WORKERS = (("gpu-1", "inference", "gpu"), ("cpu-1", "inference", "cpu"),
           ("web-1", "web", None), ("rag-1", "rag", None), ("old-cpu", "inference", "cpu"))
DRAINED = "cpu-1"
MODEL = "llama3.1:8b"

#: N tasks in one statement. Types in proportion (web_search most), ages uniform over a week
#: but queued and running ones within the last minutes; rows about as wide as real ones
#: (a 300-byte prompt, a 1 KB result, multi-line errors).
INSERT_TASKS = """
WITH g AS (
    SELECT n, random() AS r,
           (ARRAY['web_search', 'web_search', 'web_search', 'chat', 'chat', 'generate',
                  'summarize', 'rag'])[1 + floor(random() * 8)::int] AS task_type,
           random() AS age
      FROM generate_series(1, %(rows)s) AS n
), s AS (
    SELECT *, CASE WHEN r < 0.05 THEN 'failed' WHEN r < 0.052 THEN 'queued'
                   WHEN r < 0.053 THEN 'running' ELSE 'done' END AS status,
           CASE task_type WHEN 'web_search' THEN 'web-1' WHEN 'rag' THEN 'rag-1'
                ELSE (ARRAY['gpu-1', 'cpu-1'])[1 + n %% 2] END AS wid
      FROM g
), t AS (
    SELECT *, clock_timestamp() - make_interval(secs => CASE WHEN status IN ('queued', 'running')
              THEN age * 600 ELSE age * 7 * 86400 END) AS created
      FROM s
)
INSERT INTO tasks (id, task_type, prompt, model, status, queue, worker, worker_id, worker_host,
                   claim, result, fallback, error, attempts, max_attempts, created_at,
                   dispatched_at, started_at, finished_at, answered_model)
SELECT gen_random_uuid(), task_type, 'bench prompt ' || n || repeat(' lorem ipsum', 25),
       CASE WHEN task_type IN ('web_search', 'rag') THEN NULL ELSE %(model)s END, status,
       CASE task_type WHEN 'web_search' THEN %(web_queue)s WHEN 'rag' THEN %(rag_queue)s
            ELSE 'tasks:' || CASE wid WHEN 'gpu-1' THEN 'gpu' ELSE 'cpu' END || ':' || wid END,
       CASE WHEN status = 'queued' THEN 'default' WHEN task_type = 'web_search'
            THEN 'web-worker' ELSE wid END,
       CASE WHEN status = 'queued' THEN NULL ELSE wid END,
       CASE WHEN status = 'queued' THEN NULL ELSE 'host-' || wid END,
       CASE WHEN status = 'running' THEN gen_random_uuid() END,
       CASE WHEN status = 'done' THEN repeat('an answer of some length. ', 40) END,
       status = 'done' AND n %% 50 = 0,
       CASE WHEN status = 'failed' THEN (ARRAY[
           E'SearXNG at http://searx:8080 timed out after 10 s\\nTraceback (most recent call'
           || E' last):\\n  File "worker_web.py", line 212, in search\\nTimeoutError',
           'Ollama answered 500: model requires more system memory (9.1 GiB) than is '
           || 'available (7.6 GiB)',
           'cancelled by an operator (status page)',
           'the worker died 3 times while running it: attempts exhausted'])[1 + n %% 4] END,
       CASE WHEN status = 'queued' THEN 0 WHEN status = 'failed' THEN 1 + n %% 3 ELSE 1 END,
       3, created, created + interval '2 ms',
       CASE WHEN status <> 'queued' THEN created + interval '5 ms' END,
       CASE WHEN status IN ('done', 'failed')
            THEN created + make_interval(secs => 0.2 + (n %% 40)) END,
       CASE WHEN status = 'done' AND task_type NOT IN ('web_search', 'rag') THEN %(model)s END
  FROM t
"""
#: The timeline a real run leaves: the trigger's "created" row at the task's own time, then
#: claimed and done or failed.
INSERT_TIMELINE = """
UPDATE task_transitions x SET at = t.created_at FROM tasks t WHERE x.task_id = t.id;
INSERT INTO task_transitions (task_id, at, event, status, worker_id, queue)
SELECT id, started_at, 'claimed', 'running', worker_id, queue FROM tasks
 WHERE started_at IS NOT NULL ORDER BY created_at;
INSERT INTO task_transitions (task_id, at, event, status, worker_id, queue, reason)
SELECT id, finished_at, status, status, worker_id, queue, error FROM tasks
 WHERE finished_at IS NOT NULL ORDER BY created_at;
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=10000, help="task rows inserted")
    p.add_argument("--requests", "-n", type=int, default=200,
                   help="timed requests per page (quick: 50)")
    p.add_argument("--warmup", type=int, default=20, help="requests per page first, not timed")
    p.add_argument("--no-plans", action="store_true",
                   help="only the timings and the plan summary, not the full plans")
    return p.parse_args(argv)


# -- the Coordinator's API, as workers call it -------------------------------------------------


def api(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


def register_workers(url: str) -> dict[str, str]:
    """Register WORKERS; worker id -> instance id."""
    instances = {}
    for worker_id, kind, device in WORKERS:
        instances[worker_id] = str(uuid.uuid4())
        body: dict[str, Any] = {"worker_id": worker_id, "host": f"host-{worker_id}",
                                "kind": kind, "instance_id": instances[worker_id],
                                "version": "bench", "pid": 1000 + len(instances),
                                "os": "Debian GNU/Linux 12 (bookworm)"}
        if kind == "inference":
            body |= {"device": device, "models": [MODEL]}
        else:
            body["queues"] = [f"tasks:{kind}"]
        api(url, "/workers/register", body)
    api(url, f"/workers/{DRAINED}/drain", {})
    return instances


def heartbeat_until(url: str, instances: dict[str, str], stop: threading.Event) -> None:
    """Heartbeat every worker but the last of WORKERS every 3 s until ``stop``."""
    while True:
        for worker_id, instance in list(instances.items())[:-1]:
            try:
                api(url, f"/workers/{worker_id}/heartbeat", {
                    "instance_id": instance, "in_flight": 1 if worker_id == "gpu-1" else 0,
                    "db_write_failures": 0,
                    "last_error": ("Ollama answered 500: model requires more system memory"
                                   if worker_id == "gpu-1" else None),
                    "drained": worker_id == DRAINED or None})
            except OSError as exc:
                print(f"heartbeat of {worker_id} failed: {exc}", file=sys.stderr)
        if stop.wait(3):
            return


# -- data --------------------------------------------------------------------------------------


def fill(dsn: str, rows: int, redis_port: int, redis_password: str) -> dict[str, Any]:
    """Insert the tasks and their timeline; push the queued ones to their Redis lists."""
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("SELECT setseed(0.42)")
            conn.execute(INSERT_TASKS, {"rows": rows, "model": MODEL, "web_queue": WEB_QUEUE,
                                         "rag_queue": RAG_QUEUE})
            conn.execute(INSERT_TIMELINE)
        conn.execute("VACUUM ANALYZE tasks")
        conn.execute("VACUUM ANALYZE task_transitions")
        queued = conn.execute("SELECT id::text, queue FROM tasks WHERE status = 'queued'"
                              " ORDER BY created_at").fetchall()
        counts = dict(conn.execute("SELECT status, count(*) FROM tasks GROUP BY 1").fetchall())
        transitions = conn.execute("SELECT count(*) FROM task_transitions").fetchone()[0]
        size = conn.execute("SELECT pg_size_pretty(pg_total_relation_size('tasks'))"
                            ).fetchone()[0]
        # The page's task: a failed one from yesterday, with its three timeline rows.
        task_id = conn.execute(
            "SELECT id::text FROM tasks WHERE status = 'failed'"
            " AND created_at < clock_timestamp() - interval '1 day'"
            " ORDER BY created_at DESC LIMIT 1").fetchone()[0]
    with redis.Redis(host="127.0.0.1", port=redis_port, password=redis_password) as r:
        for tid, queue in queued:
            r.lpush(queue, tid)
    return {"counts": counts, "transitions": transitions, "size": size, "task_id": task_id,
            "seconds": time.perf_counter() - started}


# -- the status page, as a browser fetches it --------------------------------------------------


class Browser:
    """One keep-alive connection with the status page's session cookie."""

    def __init__(self, url: str) -> None:
        host, port = common.address(url)
        self.conn = http.client.HTTPConnection(host, port, timeout=30)
        self.cookie = ""

    def login(self) -> None:
        form = urlencode({"token": TOKEN, "name": "bench", "next": "/ui"})
        self.conn.request("POST", "/ui/login", body=form, headers={
            "Content-Type": "application/x-www-form-urlencoded"})
        resp = self.conn.getresponse()
        resp.read()
        if resp.status != 303:
            raise RuntimeError(f"POST /ui/login answered {resp.status}, not 303")
        jar = http.cookies.SimpleCookie(resp.getheader("Set-Cookie", ""))
        self.cookie = f"coordinator_session={jar['coordinator_session'].value}"

    def get(self, path: str) -> tuple[int, int]:
        """(status, body bytes) of GET ``path``."""
        self.conn.request("GET", path, headers={"Cookie": self.cookie})
        resp = self.conn.getresponse()
        body = resp.read()
        return resp.status, len(body)

    def time(self, path: str, warmup: int, requests: int) -> tuple[list[float], int]:
        """Sorted latencies (seconds) of ``requests`` GETs after ``warmup`` ones; the size."""
        size = 0
        for _ in range(warmup):
            self.get(path)
        latencies = []
        for _ in range(requests):
            t0 = time.perf_counter()
            status, size = self.get(path)
            latencies.append(time.perf_counter() - t0)
            if status != 200:
                raise RuntimeError(f"GET {path} answered {status}, not 200")
        return sorted(latencies), size


# -- plans -------------------------------------------------------------------------------------


def queries(task_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, SQL, parameters) of every query the four pages run."""
    ttl = {"ttl": DEFAULT.heartbeat_ttl}
    return [
        ("ACTIVE_BY_QUEUE (GET /queues)", SQL.ACTIVE_BY_QUEUE, q.USERS_ONLY),
        ("WORKER_QUEUES (GET /queues)", SQL.WORKER_QUEUES, ttl),
        ("TASK_COUNTS", SQL.TASK_COUNTS, q.USERS_ONLY),
        ("OLDEST_WAITING", SQL.OLDEST_WAITING, q.USERS_ONLY),
        ("LIST_WORKERS", SQL.LIST_WORKERS, ttl),
        *list_tasks_queries(),
        ("TASK_IN_FULL (task page)", SQL.TASK_IN_FULL, {"id": task_id}),
        ("TIMELINE (task page)", q.TIMELINE, {"id": task_id}),
        ("AUDIT_OF (task page)", q.AUDIT_OF, {"target": task_id}),
    ]


def list_tasks_queries() -> list[tuple[str, str, dict[str, Any]]]:
    return [(f"LIST_TASKS {label}", SQL.LIST_TASKS, where.params(LIST_LIMIT))
            for label, where in (("no filter", TaskFilter()),
                                 ("status=failed", TaskFilter(status="failed")),
                                 ("task_type=chat since=24h",
                                  TaskFilter(task_type="chat", since="24h")),
                                 # fewer than a page match: the scan cannot stop early
                                 ("status=failed since=1h",
                                  TaskFilter(status="failed", since="1h")))]


SCAN = re.compile(r"(Seq Scan on \w+|Index (?:Only )?Scan (?:Backward )?using \w+ on \w+"
                  r"|Bitmap Index Scan on \w+)")


def summary(plan: list[str]) -> tuple[str, str, str]:
    """(execution time, the scans, the top node's buffers) of a plan's lines."""
    scans = []
    for line in plan:
        for found in SCAN.findall(line):
            if found not in scans:
                scans.append(found)
    run = next((line.split(":", 1)[1].strip() for line in plan
                if line.startswith("Execution Time")), "?")
    buffers = next((line.strip().removeprefix("Buffers: ") for line in plan
                    if line.strip().startswith("Buffers:")), "-")
    return run, "; ".join(scans) or "(no table scan)", buffers


def explain(conn: psycopg.Connection, sql: str, params: dict[str, Any]) -> list[str]:
    cur = psycopg.ClientCursor(conn)
    cur.execute(sql, params)  # once first, so the plan's own run finds the pages cached
    cur.fetchall()
    cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
    return [row[0] for row in cur.fetchall()]


def explain_generic(conn: psycopg.Connection, sql: str, params: dict[str, Any]) -> list[str]:
    """The plan of ``sql`` as a prepared statement whose plan ignores the values."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    prepared = re.sub(r"%\((\w+)\)s", number, sql)
    conn.execute(f"PREPARE bench_generic AS {prepared}".replace("%%", "%"))
    conn.execute("SET plan_cache_mode = force_generic_plan")
    try:
        cur = psycopg.ClientCursor(conn)
        args = ", ".join(["%s"] * len(names))
        cur.execute(f"EXPLAIN (ANALYZE, BUFFERS) EXECUTE bench_generic({args})",
                    [params[n] for n in names])
        return [row[0] for row in cur.fetchall()]
    finally:
        conn.execute("RESET plan_cache_mode")
        conn.execute("DEALLOCATE bench_generic")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    common.stop_on_sigterm()
    print(f"before: {common.uptime()}")
    stop = threading.Event()
    with common.Lab() as lab:
        lab.start_backends()
        assert lab.pg is not None and lab.redis is not None
        port = common.free_port()
        lab.spawn("coordinator", [sys.executable, "-m", "coordinator"], dict(
            lab.base_env, COORDINATOR_PORT=str(port), COORDINATOR_LOG_LEVEL="WARNING",
            COORDINATOR_TOKEN=TOKEN), cwd=common.FILES)
        lab.url = url = f"http://127.0.0.1:{port}"
        common.route_bench.wait_healthy(url)
        instances = register_workers(url)
        beating = threading.Thread(target=heartbeat_until, args=(url, instances, stop),
                                   daemon=True)
        beating.start()
        data = fill(lab.pg.dsn, args.rows, lab.redis.port, lab.redis.password)
        counts = ", ".join(f"{n} {s}" for s, n in sorted(data["counts"].items()))
        print(f"tasks: {args.rows} rows ({counts}), {data['transitions']} timeline rows, "
              f"table with indexes {data['size']}; inserted in {data['seconds']:.1f} s")
        print(f"workers: {len(WORKERS)} ({DRAINED} drained, {WORKERS[-1][0]} stops "
              "heartbeating)")
        pages = [("/ui", "/ui"), ("/ui?status=failed", "/ui?status=failed"),
                 ("/ui?task_type=chat&since=24h", "/ui?task_type=chat&since=24h"),
                 ("/ui/task/<id>", f"/ui/task/{data['task_id']}")]
        browser = Browser(url)
        browser.login()
        load_before = common.load_average()
        print(f"\n{args.requests} sequential GETs per page after {args.warmup} warm-up ones, "
              f"one keep-alive connection (goal: p95 ≤ {GOAL_P95 * 1000:.0f} ms)")
        print(f"  {'page':32} {'p50':>9} {'p95':>9} {'max':>9} {'body':>9}")
        met = True
        for label, path in pages:
            latencies, size = browser.time(path, args.warmup, args.requests)
            p95 = common.percentile(latencies, 0.95)
            met = met and p95 <= GOAL_P95
            print(f"  {label:32} {common.percentile(latencies, 0.5) * 1000:6.1f} ms "
                  f"{p95 * 1000:6.1f} ms {latencies[-1] * 1000:6.1f} ms "
                  f"{size / 1024:6.1f} kB")
        print(f"  goal {'met' if met else 'MISSED'}; load average {load_before} before, "
              f"{common.load_average()} after")
        browser.conn.close()
        stop.set()
        beating.join(10)
        with psycopg.connect(lab.pg.dsn, autocommit=True, prepare_threshold=None) as conn:
            plans = [(name, explain(conn, sql, params))
                     for name, sql, params in queries(data["task_id"])]
            plans += [(f"{name} (generic plan)", explain_generic(conn, sql, params))
                      for name, sql, params in list_tasks_queries()]
    if not args.no_plans:
        for name, plan in plans:
            print(f"\n-- {name}")
            print("\n".join(f"   {line}" for line in plan))
    print("\nplans (EXPLAIN ANALYZE; execution time, scans, buffers of the top node):")
    for name, plan in plans:
        run, scans, buffers = summary(plan)
        print(f"  {name:52} {run:>10}  {scans}  [{buffers}]")
    print(f"after: {common.uptime()}")
    return 0


if __name__ == "__main__":
    common.exit_with(main)
