#!/usr/bin/env python3
"""Benchmark the Coordinator against Celery, RQ, procrastinate and Dramatiq: the same no-op
tasks, same machine, same run.

One throwaway PostgreSQL (fsync and synchronous_commit on) and one throwaway Redis serve all
six systems, measured in turn for K rounds (ours, celery-pg, celery-redis, rq, procrastinate,
dramatiq, ours, ...):

- ours: ``POST /route`` from C keep-alive clients, W no-op workers (bench/common.py: the real
  files/worker_base.py machinery); every task is a row in ``tasks`` with its timestamps.
- celery-pg: Celery with the Redis broker and its SQLAlchemy result backend on the same
  PostgreSQL (``db+postgresql://``), the closest Celery has to our durable record.
- celery-redis: Celery with Redis as broker and result backend.
- rq: RQ as it comes (``rq worker``, which forks a work horse per job).
- procrastinate: procrastinate's own worker (``App.run_worker``, concurrency 1, LISTEN/NOTIFY
  on) and an ``async`` no-op task, its schema applied with its own ``SchemaManager`` to a
  database of its own (``procrastinate``) on the same PostgreSQL: a durable job row, as ours.
- dramatiq: Dramatiq with its Redis broker and its ``Results`` middleware on the Redis
  backend (one result write per task, as celery-redis), run by its own ``dramatiq`` command
  with ``--processes W --threads 1`` (one task at a time per process, as every other
  system here; ``--dramatiq-threads`` to change it).

Each system runs W worker processes (Celery: one prefork worker with concurrency W), started
before its measurement and stopped after it. N tasks are submitted as fast as the producer
can (the peers from 8 threads calling ``apply_async`` / ``enqueue`` / ``defer`` / ``send``),
then the script waits for every result. Figures per system: tasks/s (first created → last
done) and p50/p99 of created → done, where "created" is when the system first records the
task (our row's ``created_at``; the client's clock just before ``apply_async``; RQ's
``enqueued_at``; procrastinate's ``deferred`` event; Dramatiq's ``message_timestamp``, in
milliseconds, taken by the client as it builds the message) and "done" is the result's own
timestamp (``finished_at``, ``date_done``, ``ended_at``, procrastinate's ``succeeded`` event;
Dramatiq records none, so its no-op returns ``time.time()`` as it ends, and that result,
stored by its Results backend, is the "done"). procrastinate's events are stamped with
``now()``, the start of the transaction that writes them. It prints our figure over theirs,
round by round, with the median and the spread (lowest to highest round). The figures in
docs/benchmarks.md come from:

    .venv/bin/python bench/compare.py --tasks 2000 --workers 4 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import common
import psycopg
import redis

SYSTEMS = ("ours", "celery-pg", "celery-redis", "rq", "procrastinate", "dramatiq")
PRODUCER_THREADS = 8
CELERY_DB, RQ_DB, DRAMATIQ_DB = 1, 2, 3  # Redis databases, apart from ours (0)
PROCRASTINATE_DATABASE = "procrastinate"  # on the same PostgreSQL server as ours


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", "-n", type=int, default=5000,
                   help="tasks per system per round (quick: 100 with --rounds 1)")
    p.add_argument("--workers", "-w", type=int, default=4, help="worker processes per system")
    p.add_argument("--rounds", "-k", type=int, default=3, help="rounds of all systems")
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help=f"comma-separated subset of {','.join(SYSTEMS)}")
    p.add_argument("--concurrency", "-c", type=int, default=32,
                   help="concurrent POST /route clients (ours)")
    p.add_argument("--warmup", type=int, default=200, help="tasks first, not counted")
    p.add_argument("--dramatiq-threads", type=int, default=1,
                   help="worker threads per Dramatiq process (its own default is 8)")
    return p.parse_args(argv)


# -- the other systems' no-op tasks (imported by their workers) ------------------------------

def rq_noop() -> str:
    return "ok"


def celery_app(broker: str, backend: str) -> Any:
    from celery import Celery

    app = Celery("compare", broker=broker, backend=backend)
    app.conf.update(task_serializer="json", result_serializer="json",
                    accept_content=["json"], worker_hijack_root_logger=False,
                    broker_connection_retry_on_startup=True)

    # One name per backend: Celery keeps task names process-wide, across apps.
    @app.task(name=noop_name(backend))
    def noop() -> str:
        return "ok"

    return app


def noop_name(backend: str) -> str:
    return f"compare.noop.{backend.split(':', 1)[0]}"


def procrastinate_app(dsn: str, pool_size: int | None = None) -> Any:
    """procrastinate's app and no-op task; ``pool_size`` connections (default: its own)."""
    import procrastinate

    # Its warning that the app lives in __main__ is about finding tasks by import path; each
    # process here registers the task itself, by name.
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    sizes = {} if pool_size is None else {"min_size": pool_size, "max_size": pool_size}
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn, **sizes))

    @app.task(name="compare.noop", queue="bench")
    async def noop() -> str:
        return "ok"

    return app


def dramatiq_setup(url: str | None = None) -> Any:
    """Dramatiq's broker on ``url`` (by default $COMPARE_DRAMATIQ_URL) with the Results
    middleware, and the no-op actor: what ``dramatiq compare:dramatiq_setup`` loads in each
    worker process."""
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker
    from dramatiq.results import Results
    from dramatiq.results.backends import RedisBackend

    url = url or os.environ["COMPARE_DRAMATIQ_URL"]
    broker = RedisBroker(url=url)
    backend = RedisBackend(url=url)
    broker.add_middleware(Results(backend=backend))
    dramatiq.set_broker(broker)

    @dramatiq.actor(actor_name="compare_noop", queue_name="bench", store_results=True)
    def noop() -> float:
        return time.time()  # Dramatiq keeps no end time of its own: this is "done"

    return broker, backend, noop


def procrastinate_worker_main(dsn: str) -> None:
    procrastinate_app(dsn).run_worker(queues=["bench"], concurrency=1, wait=True)


def rq_worker_main(url: str) -> None:
    """``rq worker`` as it comes (a forked work horse per job), with this module imported
    first, as a deployment's worker has its code loaded: without it each work horse would
    import it again (about a second here)."""
    import importlib

    from rq import Queue, Worker

    importlib.import_module("compare")
    connection = redis.Redis.from_url(url)
    Worker([Queue("bench", connection=connection)], connection=connection).work()


def celery_worker_main(broker: str, backend: str, concurrency: int) -> None:
    celery_app(broker, backend).worker_main([
        "worker", "--pool=prefork", f"--concurrency={concurrency}", "--loglevel=WARNING",
        # Cluster chatter a lone benchmark worker does not need: this only helps Celery.
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ])


# -- measurements -----------------------------------------------------------------------------

def figures(created: list[float], done: list[float]) -> dict[str, float]:
    total = sorted(d - c for c, d in zip(created, done, strict=True))
    span = max(done) - min(created)
    return {"tasks": len(total), "throughput": len(total) / span,
            "p50": common.percentile(total, 0.5), "p99": common.percentile(total, 0.99)}


def utc_seconds(value: datetime | str) -> float:
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def produce(n: int, submit: Callable[[], Any]) -> tuple[list[Any], list[float]]:
    """Call ``submit`` n times from PRODUCER_THREADS threads; what each call returned (an id,
    a message) and the client's time just before it."""
    def share(count: int) -> list[tuple[Any, float]]:
        out = []
        for _ in range(count):
            t = time.time()
            out.append((submit(), t))
        return out

    shares = [n // PRODUCER_THREADS + (i < n % PRODUCER_THREADS)
              for i in range(PRODUCER_THREADS)]
    with ThreadPoolExecutor(PRODUCER_THREADS) as pool:
        results = [item for part in pool.map(share, shares) for item in part]
    return [r[0] for r in results], [r[1] for r in results]


def wait_until(what: str, count: Callable[[], int], n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (got := count()) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: only {got} of {n} tasks finished in {timeout:.0f}s")
        time.sleep(0.05)


class Runner:
    def __init__(self, lab: common.Lab, args: argparse.Namespace) -> None:
        assert lab.pg is not None and lab.redis is not None
        self.lab, self.args = lab, args
        self.dsn = lab.pg.dsn
        pw, port = lab.redis.password, lab.redis.port
        self.celery_broker = f"redis://:{pw}@127.0.0.1:{port}/{CELERY_DB}"
        self.rq_url = f"redis://:{pw}@127.0.0.1:{port}/{RQ_DB}"
        self.dramatiq_url = f"redis://:{pw}@127.0.0.1:{port}/{DRAMATIQ_DB}"
        self.procrastinate_dsn = ""  # its database is made at its first round
        self.celery_backends = {
            "celery-pg": (f"db+postgresql+psycopg2://coordinator:{lab.pg.password}"
                          f"@127.0.0.1:{lab.pg.port}/coordinator"),
            "celery-redis": self.celery_broker,
        }
        self.rounds = 0
        self.celery_apps: dict[str, Any] = {}
        self.dramatiq_parts: tuple[Any, Any, Any] | None = None

    def timeout(self, n: int) -> float:
        return max(120.0, n / 20)

    def run(self, system: str, n: int) -> dict[str, float]:
        self.rounds += 1
        return getattr(self, system.replace("-", "_"))(n)

    def ours(self, n: int) -> dict[str, float]:
        procs = self.lab.start_noop_workers(self.rounds * 100, self.args.workers)
        try:
            for count, what in ((self.args.warmup, "warmup"), (n, "ours")):
                tag = common.new_tag(what)
                common.closed_loop(self.lab.url, tag, count, self.args.concurrency)
                common.wait_finished(self.dsn, tag, count, self.timeout(count))
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                rows = conn.execute(
                    "SELECT extract(epoch FROM created_at)::float8,"
                    " extract(epoch FROM finished_at)::float8 FROM tasks"
                    " WHERE prompt = %s AND status = 'done'", (tag,)).fetchall()
            if len(rows) != n:
                raise RuntimeError(f"ours: {len(rows)} of {n} tasks done")
            return figures([r[0] for r in rows], [r[1] for r in rows])
        finally:
            for proc in procs:
                self.lab.stop(proc)

    def _celery(self, system: str, n: int) -> dict[str, float]:
        backend = self.celery_backends[system]
        if system not in self.celery_apps:
            self.celery_apps[system] = celery_app(self.celery_broker, backend)
        app = self.celery_apps[system]
        noop = app.tasks[noop_name(backend)]
        proc = self.lab.spawn(
            f"{system}-{self.rounds}",
            [sys.executable, __file__, "celery-worker", self.celery_broker, backend,
             str(self.args.workers)], os.environ.copy(), cwd=common.BENCH)
        try:
            # The warm-up also waits for the worker to be up (and the backend's table made).
            for count in (self.args.warmup, n):
                ids, created = produce(count, lambda: noop.apply_async().id)
                if system == "celery-pg":
                    done = self._celery_pg_done(ids)
                else:
                    done = self._celery_redis_done(ids)
            return figures(created, done)
        finally:
            self.lab.stop(proc)

    def _celery_pg_done(self, ids: list[str]) -> list[float]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            def count() -> int:
                return conn.execute("SELECT count(*) FROM celery_taskmeta WHERE task_id = ANY(%s)"
                                    " AND status = 'SUCCESS'", (ids,)).fetchone()[0]
            wait_until("celery-pg", count, len(ids), self.timeout(len(ids)))
            rows = dict(conn.execute("SELECT task_id, date_done FROM celery_taskmeta"
                                     " WHERE task_id = ANY(%s)", (ids,)).fetchall())
        return [utc_seconds(rows[i]) for i in ids]

    def _celery_redis_done(self, ids: list[str]) -> list[float]:
        client = redis.Redis.from_url(self.celery_broker)
        keys = [f"celery-task-meta-{i}" for i in ids]
        try:
            wait_until("celery-redis", lambda: client.exists(*keys), len(ids),
                       self.timeout(len(ids)))
            metas = [json.loads(raw) for raw in client.mget(keys)]
        finally:
            client.close()
        return [utc_seconds(m["date_done"]) for m in metas]

    def celery_pg(self, n: int) -> dict[str, float]:
        return self._celery("celery-pg", n)

    def celery_redis(self, n: int) -> dict[str, float]:
        return self._celery("celery-redis", n)

    def rq(self, n: int) -> dict[str, float]:
        from rq import Queue
        from rq.job import Job
        from rq.registry import FinishedJobRegistry

        client = redis.Redis.from_url(self.rq_url)
        queue = Queue("bench", connection=client)
        env = dict(os.environ, PYTHONPATH=str(common.BENCH))
        procs = [self.lab.spawn(f"rq-{self.rounds}-{i}",
                                [sys.executable, __file__, "rq-worker", self.rq_url], env,
                                cwd=common.BENCH)
                 for i in range(self.args.workers)]
        try:
            registry = FinishedJobRegistry(queue=queue)
            for count in (self.args.warmup, n):
                before = registry.count
                ids, _ = produce(count, lambda: queue.enqueue("compare.rq_noop").id)
                wait_until("rq", lambda b=before: registry.count - b, count,
                           self.timeout(count))
            jobs = Job.fetch_many(ids, connection=client)
            return figures([utc_seconds(j.enqueued_at) for j in jobs],
                           [utc_seconds(j.ended_at) for j in jobs])
        finally:
            for proc in procs:
                self.lab.stop(proc)
            client.close()

    def procrastinate(self, n: int) -> dict[str, float]:
        if not self.procrastinate_dsn:
            assert self.lab.pg is not None
            self.procrastinate_dsn = self.lab.pg.database(PROCRASTINATE_DATABASE)
            with procrastinate_app(self.procrastinate_dsn, 1).open() as app:
                app.schema_manager.apply_schema()
        procs = [self.lab.spawn(f"procrastinate-{self.rounds}-{i}",
                                [sys.executable, __file__, "procrastinate-worker",
                                 self.procrastinate_dsn], os.environ.copy(), cwd=common.BENCH)
                 for i in range(self.args.workers)]
        app = procrastinate_app(self.procrastinate_dsn, PRODUCER_THREADS).open()
        noop = app.tasks["compare.noop"]
        try:
            with psycopg.connect(self.procrastinate_dsn, autocommit=True) as conn:
                # The warm-up also waits for the workers to be up.
                for count in (self.args.warmup, n):
                    ids, _ = produce(count, noop.defer)
                    wait_until("procrastinate", lambda i=ids: conn.execute(
                        "SELECT count(*) FROM procrastinate_jobs WHERE id = ANY(%s)"
                        " AND status = 'succeeded'", (i,)).fetchone()[0], count,
                        self.timeout(count))
                rows = conn.execute(
                    "SELECT job_id, type::text, extract(epoch FROM at)::float8"
                    " FROM procrastinate_events WHERE job_id = ANY(%s)"
                    " AND type IN ('deferred', 'succeeded')", (ids,)).fetchall()
            at = {(job, kind): t for job, kind, t in rows}
            return figures([at[i, "deferred"] for i in ids], [at[i, "succeeded"] for i in ids])
        finally:
            app.close()
            for proc in procs:
                self.lab.stop(proc)

    def dramatiq(self, n: int) -> dict[str, float]:
        if self.dramatiq_parts is None:
            self.dramatiq_parts = dramatiq_setup(self.dramatiq_url)
        _broker, backend, noop = self.dramatiq_parts
        env = dict(os.environ, PYTHONPATH=str(common.BENCH), COMPARE_DRAMATIQ_URL=self.dramatiq_url)
        proc = self.lab.spawn(
            f"dramatiq-{self.rounds}",
            [sys.executable, "-m", "dramatiq", "compare:dramatiq_setup", "--queues", "bench",
             "--processes", str(self.args.workers), "--threads", str(self.args.dramatiq_threads)],
            env, cwd=common.BENCH)
        client = redis.Redis.from_url(self.dramatiq_url)
        try:
            # The warm-up also waits for the workers to be up.
            for count in (self.args.warmup, n):
                messages, _ = produce(count, noop.send)
                keys = [backend.build_message_key(m) for m in messages]
                wait_until("dramatiq", lambda k=keys: client.exists(*k), count,
                           self.timeout(count))
            done = [backend.unwrap_result(backend.encoder.decode(raw))
                    for raw in self._dramatiq_results(client, keys)]
            return figures([m.message_timestamp / 1000 for m in messages], done)
        finally:
            self.lab.stop(proc)
            client.close()

    @staticmethod
    def _dramatiq_results(client: redis.Redis, keys: list[str]) -> list[bytes]:
        with client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.lindex(key, 0)
            return pipe.execute()


def ratio(rounds: list[float]) -> str:
    """The median of the round-by-round ratios, their spread and each round's."""
    spread = f" (spread ×{min(rounds):.2f}–{max(rounds):.2f})" if len(rounds) > 1 else ""
    return (f"×{statistics.median(rounds):.2f}{spread} "
            f"[rounds {', '.join(f'{x:.2f}' for x in rounds)}]")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    systems = args.systems.split(",")
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        print(f"unknown system(s) {sorted(unknown)}: choose from {', '.join(SYSTEMS)}",
              file=sys.stderr)
        return 2
    common.stop_on_sigterm()
    print(f"before: {common.uptime()}")
    results: dict[str, list[dict[str, float]]] = {s: [] for s in systems}
    with common.Lab() as lab:
        lab.start_backends()
        lab.start_coordinator()
        runner = Runner(lab, args)
        for round_no in range(1, args.rounds + 1):
            for system in systems:
                load = common.load_average()
                f = runner.run(system, args.tasks)
                results[system].append(f)
                print(f"round {round_no} {system:13} {f['throughput']:7.0f} tasks/s   "
                      f"created→done p50 {common.ms(f['p50'])}  p99 {common.ms(f['p99'])}"
                      f"   load {load}", flush=True)
    if "ours" in systems:
        print(f"\nours over theirs ({args.tasks} no-op tasks, {args.workers} worker "
              "processes; throughput: higher is better for us; latency: lower is better):")
        for other in systems:
            if other == "ours":
                continue
            pairs = list(zip(results["ours"], results[other], strict=True))
            tp, p50, p99 = ([o[key] / t[key] for o, t in pairs]
                            for key in ("throughput", "p50", "p99"))
            print(f"  vs {other:13} throughput  {ratio(tp)}\n"
                  f"  {'':16} latency p50 {ratio(p50)}\n  {'':16} latency p99 {ratio(p99)}")
    print(f"after: {common.uptime()}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["rq-worker"]:
        rq_worker_main(sys.argv[2])
        sys.exit(0)
    if sys.argv[1:2] == ["celery-worker"]:
        celery_worker_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        sys.exit(0)
    if sys.argv[1:2] == ["procrastinate-worker"]:
        procrastinate_worker_main(sys.argv[2])
        sys.exit(0)
    common.exit_with(main)
