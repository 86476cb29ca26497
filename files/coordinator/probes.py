"""Worker probes: a small task routed to each worker through its real path, so that a worker
that heartbeats but cannot do its work (its PostgreSQL login refused, its Ollama gone, its
consumer stuck) is found within one COORDINATOR_PROBE_INTERVAL.

A pass runs every few seconds in each Coordinator and acts only where it holds
``pg_try_advisory_xact_lock`` (one instance at a time, as the Reaper). In one transaction it
withdraws the queued probes of workers that no longer take tasks (after the commit, their ids
leave their queues too), fails the probes not done within COORDINATOR_PROBE_TIMEOUT ("took
no probe for N s"), records each worker's verdict from its latest finished probe
(``workers.probe_*``: routing, GET /workers and the metrics read it), prunes old probe rows,
and queues a probe for each alive, undrained worker due one; after the commit it pushes their
ids. A probe is a task of type PROBE_TYPE on the
worker's own queue (``tasks:web`` for the web worker), pushed like any task: it waits behind
the tasks queued before it, and the worker claims it and writes its result in PostgreSQL
from its host (worker_base.Worker.probe).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from coordinator_contract import PROBE_PROMPT, PROBE_TYPE, PROBED_KINDS
from coordinator_sql import SQL, parameters
from psycopg.rows import class_row

from . import queries as q
from . import statemachine as sm
from .background import Background
from .errors import first_line
from .reaper import push

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool
    import redis.asyncio as aioredis

    from .config import Config

log = logging.getLogger("coordinator.probes")

#: ``pg_try_advisory_xact_lock`` key: a pass acts only where it holds it.
PROBE_LOCK_KEY = 0x70726F6265  # "probe"
#: Finished probe rows kept per worker (SQL.PRUNE_PROBES says why a count, not an age).
PROBES_KEPT = 10


@dataclass(frozen=True)
class Overdue:
    """A probe not done within the timeout (a row of ``SQL.OVERDUE_PROBES``)."""

    id: uuid.UUID
    status: str
    claim: uuid.UUID | None
    queue: str | None
    worker_id: str  # the worker probed
    claimed_by_worker: str | None  # the worker that claimed it (running)
    age: float  # seconds since it was queued


@dataclass(frozen=True)
class Verdict:
    """A worker whose recorded probe verdict changed (a row of ``SQL.RECORD_PROBES``)."""

    worker_id: str
    host: str
    kind: str
    probe_ok: bool
    probe_error: str | None
    probe_seconds: float | None
    was_ok: bool | None


@dataclass
class ProbeReport:
    acted: bool = False
    withdrawn: dict[str, list[str]] = field(default_factory=dict)  # queue -> probe ids
    failed: list[tuple[Overdue, str]] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    pruned: int = 0
    sent: dict[str, list[str]] = field(default_factory=dict)


def overdue_error(probe: Overdue, timeout: float) -> str:
    """Why an overdue probe failed, in the words the worker's row then shows."""
    limit = f"COORDINATOR_PROBE_TIMEOUT {timeout:g} s"
    if probe.status == sm.QUEUED:
        return (f"took no probe for {probe.age:.0f} s ({limit}): nothing took it from "
                f"{probe.queue}, or the tasks queued before it ran that long; see the "
                "worker's log and its PostgreSQL login (pg_hba.conf)")
    claimer = probe.claimed_by_worker or "a worker"
    return (f"{claimer} claimed the probe and did not finish it within {probe.age:.0f} s "
            f"({limit}); see that worker's log")


class Prober(Background):
    task_name = "prober"

    def __init__(self, cfg: Config, pool: psycopg_pool.AsyncConnectionPool,
                 redis: aioredis.Redis) -> None:
        self.cfg = cfg
        self.pool = pool
        self.redis = redis
        # Often enough that an overdue probe is failed soon after its timeout, and a new
        # worker is probed within seconds of registering.
        self.tick = min(cfg.heartbeat_interval, cfg.probe_interval, cfg.probe_timeout)

    async def _run(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception as exc:
                log.warning("probe pass failed: %s: %s", type(exc).__name__, first_line(exc))
            await asyncio.sleep(self.tick)

    async def run_once(self) -> ProbeReport:
        report = ProbeReport()
        async with self.pool.connection() as conn, conn.transaction():
            cur = conn.cursor(row_factory=class_row(q.Lock))
            await cur.execute(q.REAPER_LOCK, {"key": PROBE_LOCK_KEY})
            lock = await cur.fetchone()
            if lock is None or not lock.held:
                return report
            report.acted = True
            await self._pass(conn, report)
        self._log(report)
        # After the commit, each on its own: a failure of one leaves the other to do.
        for change, ids, unless in (
                (withdraw, report.withdrawn, "could not remove %d withdrawn probe(s) from "
                 "Redis (%s): a worker that takes one finds no row and drops it"),
                (push, report.sent, "could not push %d probe(s) to Redis (%s): the Reaper "
                 "pushes them again after COORDINATOR_REPUSH_GRACE")):
            try:
                await change(self.redis, ids)
            except Exception as exc:
                log.warning(unless, sum(map(len, ids.values())), first_line(exc))
        return report

    async def _pass(self, conn: psycopg.AsyncConnection, report: ProbeReport) -> None:
        """The pass's statements, in the caller's transaction. Each is sent unprepared, so
        that it is planned with the probe type's value and can read the partial index
        tasks_probe_idx (a prepared statement's generic plan could not, and would read every
        task)."""
        cfg = self.cfg
        params = {"probe_type": PROBE_TYPE, "ttl": cfg.heartbeat_ttl,
                  "timeout": cfg.probe_timeout, "keep": PROBES_KEPT, "prompt": PROBE_PROMPT,
                  "kinds": list(PROBED_KINDS), "interval": cfg.probe_interval}

        async def run(statement: str, row: type | None = None) -> list:
            cur = conn.cursor(row_factory=class_row(row)) if row else conn.cursor()
            await cur.execute(statement, {name: params[name] for name in parameters(statement)},
                              prepare=False)
            return await cur.fetchall()

        for task_id, queue in await run(SQL.WITHDRAW_PROBES):
            report.withdrawn.setdefault(queue, []).append(task_id)
        for probe in await run(SQL.OVERDUE_PROBES, Overdue):
            error = overdue_error(probe, cfg.probe_timeout)
            done = await conn.execute(*sm.fail_task(probe.id, probe.status, probe.claim, error))
            if await done.fetchone() is not None:
                report.failed.append((probe, error))
        report.verdicts = await run(SQL.RECORD_PROBES, Verdict)
        [(report.pruned,)] = await run(SQL.PRUNE_PROBES)
        for task_id, queue in await run(SQL.SEND_PROBES):
            report.sent.setdefault(queue, []).append(task_id)

    @staticmethod
    def _log(report: ProbeReport) -> None:
        for verdict in report.verdicts:
            describe(verdict)
        if report.withdrawn:
            log.info("withdrew %d queued probe(s) of workers that no longer take tasks",
                     sum(map(len, report.withdrawn.values())))
        for queue, ids in report.sent.items():
            log.debug("probe(s) %s queued on %s", ", ".join(ids), queue)


async def withdraw(redis: aioredis.Redis, withdrawn: Mapping[str, list[str]]) -> None:
    """LREM each withdrawn probe's id from its queue, so that no worker takes it later."""
    if not withdrawn:
        return
    async with redis.pipeline(transaction=False) as pipe:
        for queue, ids in withdrawn.items():
            for task_id in ids:
                pipe.lrem(queue, 0, task_id)
        await pipe.execute()


def describe(verdict: Verdict) -> None:
    """Log a worker's new probe verdict: a failure as a warning, a recovery once."""
    who = f"{verdict.kind} worker '{verdict.worker_id}' on host '{verdict.host}'"
    if not verdict.probe_ok:
        log.warning("%s is unhealthy: its probe failed: %s", who, verdict.probe_error)
    elif verdict.was_ok is False:
        log.info("%s is healthy again: its probe was done in %.1f s", who,
                 verdict.probe_seconds or 0.0)

