"""The Reaper: dead workers, stuck and orphaned tasks, duplicates.

It runs every ``heartbeat_ttl / 3`` seconds in each Coordinator; a pass acts only where it
holds ``pg_try_advisory_xact_lock`` (one instance at a time, cluster-wide). Decisions are
pure functions over plain snapshots (``plan_inference``, ``plan_shared``,
``find_duplicates``, ``find_orphans``); ``Reaper.run_once`` reads the snapshots, applies the
decisions with guarded UPDATEs (``statemachine``) in one transaction, commits, and only then
pushes ids to Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import psycopg
from coordinator_contract import DEFAULT_WORKER, INFERENCE_TYPES, SHARED_TYPES, processing_list
from coordinator_sql import SQL
from psycopg.rows import class_row

from . import queries as q
from . import statemachine as sm
from .audit import set_transition
from .background import Background
from .routing import Candidate, choose_worker, inference_queue_of

if TYPE_CHECKING:
    import psycopg_pool
    import redis.asyncio as aioredis

    from .config import Config
    from .metrics import Metrics

log = logging.getLogger("coordinator.reaper")

BATCH = 5000


# -- snapshots -----------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerView:
    worker_id: str
    host: str
    kind: str
    alive: bool
    silent_for: float  # seconds since the last heartbeat
    pid: int | None = None
    queue: str | None = None  # per-worker queue (inference)
    models: tuple[str, ...] = ()
    draining: bool = False  # drained by an operator: alive, finishing, given nothing new
    healthy: bool = True  # its last probe did not fail

    @property
    def takes(self) -> bool:
        return self.alive and not self.draining

    def describe(self) -> str:
        pid = f", pid {self.pid}" if self.pid is not None else ""
        return f"worker '{self.worker_id}' on host '{self.host}'{pid}"


@dataclass(frozen=True)
class TaskView:
    id: uuid.UUID
    task_type: str
    status: str
    queue: str | None = None
    worker: str = DEFAULT_WORKER
    worker_id: str | None = None
    worker_host: str | None = None
    claim: uuid.UUID | None = None
    model: str | None = None
    attempts: int = 0
    max_attempts: int = 3
    requested_worker: str | None = None
    running_for: float | None = None  # seconds since started_at (running tasks)


@dataclass(frozen=True)
class InstanceView:
    worker_id: str
    instance_id: uuid.UUID
    host: str
    pid: int | None
    started_at: datetime
    last_heartbeat: datetime


# -- decisions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Requeue:
    """Put the task (back) to queued on ``queue`` of ``worker`` (None: wait for one)."""

    task: TaskView
    queue: str | None
    worker: str
    reason: str  # "" for a first dispatch of a waiting task
    kind: str  # worker_dead | stuck | drained | queue_gone | dispatch

    @property
    def old_worker(self) -> str | None:
        if self.task.status == sm.RUNNING:
            return self.task.worker_id
        return self.task.worker if self.task.queue is not None else None


@dataclass(frozen=True)
class Fail:
    task: TaskView
    error: str
    kind: str  # attempts | worker_dead


Action = Requeue | Fail


def _claimer(task: TaskView, workers: Mapping[str, WorkerView]) -> str:
    worker = workers.get(task.worker_id or "")
    if worker is not None:
        return worker.describe()
    return f"worker '{task.worker_id}' on host '{task.worker_host}' (not registered)"


def _candidates(workers: Mapping[str, WorkerView]) -> list[Candidate]:
    return [Candidate(w.worker_id, w.queue, w.models, w.takes, w.healthy)
            for w in workers.values() if w.kind == "inference" and w.queue]


def plan_inference(
    tasks: Iterable[TaskView],
    workers: Mapping[str, WorkerView],
    load: dict[str, int],
    ttl: float,
    task_timeout: float,
) -> list[Action]:
    """Decide about unfinished inference tasks. ``load`` (by queue) is counted up by each
    dispatch so a burst spreads over workers. Tasks needing nothing get no action."""
    candidates = _candidates(workers)
    alive_queues = {c.queue for c in candidates if c.alive}
    actions: list[Action] = []

    def target(task: TaskView, exclude: Iterable[str] = ()) -> Candidate | None:
        if task.requested_worker is not None:
            pinned = workers.get(task.requested_worker)
            if pinned is None or not pinned.takes or not pinned.queue:
                return None
            return Candidate(pinned.worker_id, pinned.queue, pinned.models, True)
        return choose_worker(candidates, task.model, load, exclude)

    def requeue(task: TaskView, reason: str, kind: str, exclude: Iterable[str] = ()) -> None:
        chosen = target(task, exclude)
        if chosen is not None:
            load[chosen.queue] = load.get(chosen.queue, 0) + 1
            actions.append(Requeue(task, chosen.queue, chosen.worker_id, reason, kind))
        else:
            actions.append(Requeue(task, None, task.requested_worker or DEFAULT_WORKER,
                                   reason, kind))

    for task in tasks:
        if task.task_type not in INFERENCE_TYPES:
            continue
        if task.status == sm.RUNNING:
            claimer = workers.get(task.worker_id or "")
            if claimer is None or not claimer.alive:
                silent = (f"{claimer.silent_for:.0f} s ago, heartbeat TTL {ttl:g} s"
                          if claimer is not None else "never registered")
                reason = f"{_claimer(task, workers)} stopped heartbeating ({silent})"
                kind = "worker_dead"
            elif task.running_for is not None and task.running_for > task_timeout:
                reason = (f"{claimer.describe()} ran it for {task.running_for:.0f} s, longer "
                          f"than COORDINATOR_TASK_TIMEOUT ({task_timeout:g} s)")
                kind = "stuck"
            else:
                continue
            if task.attempts >= task.max_attempts:
                actions.append(Fail(task, (
                    f"gave up after {task.attempts} attempt(s) (limit {task.max_attempts}, "
                    f"COORDINATOR_MAX_ATTEMPTS): the last one ended because {reason}; check "
                    "that worker's log and route the task again"), "attempts"))
            else:
                requeue(task, reason, kind, exclude=[task.worker_id or ""])
        elif task.status == sm.QUEUED:
            if task.queue is None:
                chosen = target(task)
                if chosen is not None:
                    load[chosen.queue] = load.get(chosen.queue, 0) + 1
                    actions.append(Requeue(task, chosen.queue, chosen.worker_id, "",
                                           "dispatch"))
                continue
            pinned_ok = (task.requested_worker is None
                         or task.worker == task.requested_worker)
            if task.queue in alive_queues and pinned_ok:
                continue
            old = workers.get(task.worker)
            if old is not None and not old.alive:
                reason = (f"{old.describe()} stopped heartbeating ({old.silent_for:.0f} s "
                          f"ago, heartbeat TTL {ttl:g} s)")
                kind = "worker_dead"
            elif old is not None and old.draining:
                reason = f"{old.describe()} is drained"
                kind = "drained"
            else:
                reason = f"no alive worker takes from queue {task.queue}"
                kind = "queue_gone"
            requeue(task, reason, kind, exclude=[task.worker])
    return actions


def plan_shared(
    tasks: Iterable[TaskView],
    workers: Mapping[str, WorkerView],
    ttl: float,
    deadline: float,
) -> list[Fail]:
    """Web-search and RAG tasks are never re-dispatched: one left ``running`` by a worker
    that stays dead longer than ``deadline`` (after its TTL ran out) fails, naming it."""
    failures = []
    for task in tasks:
        if task.task_type not in SHARED_TYPES or task.status != sm.RUNNING:
            continue
        worker = workers.get(task.worker_id or "")
        if worker is not None and worker.alive:
            continue
        if worker is not None:
            dead_for = worker.silent_for - ttl
        else:
            dead_for = (task.running_for or 0.0) - ttl
        if dead_for <= deadline:
            continue
        kind = "web" if task.task_type == "web_search" else "RAG"
        failures.append(Fail(task, (
            f"{kind} {_claimer(task, workers)} died while running this task (no heartbeat "
            f"for {dead_for + ttl:.0f} s) and did not come back within "
            f"COORDINATOR_WEB_TASK_DEADLINE ({deadline:g} s); {task.task_type} tasks are "
            "never re-run on another worker: check that worker and route the task again"),
            "worker_dead"))
    return failures


def find_duplicates(
    instances: Iterable[InstanceView], now: datetime, ttl: float,
) -> dict[str, list[InstanceView]]:
    """Worker ids served by two live processes.

    Two instances of one id are a duplicate when both have a fresh heartbeat and the older
    one heartbeated after the newer one started; a restart (the old process stopped before
    the new one registered) is not a duplicate even while the old heartbeat is still fresh.
    """
    by_worker: dict[str, list[InstanceView]] = defaultdict(list)
    for inst in instances:
        if (now - inst.last_heartbeat).total_seconds() < ttl:
            by_worker[inst.worker_id].append(inst)
    found: dict[str, list[InstanceView]] = {}
    for worker_id, group in by_worker.items():
        group.sort(key=lambda i: i.started_at)
        involved: dict[uuid.UUID, InstanceView] = {}
        for i, older in enumerate(group):
            for newer in group[i + 1:]:
                if older.instance_id != newer.instance_id and \
                        older.last_heartbeat > newer.started_at:
                    involved[older.instance_id] = older
                    involved[newer.instance_id] = newer
        if involved:
            found[worker_id] = sorted(involved.values(), key=lambda i: i.started_at)
    return found


def describe_duplicate(worker_id: str, instances: Iterable[InstanceView]) -> str:
    who = " and ".join(f"host '{i.host}' pid {i.pid}" for i in instances)
    return (f"duplicate worker '{worker_id}': two live processes use this worker id ({who}); "
            "stop one of them or give it another worker id")


def find_orphans(
    candidates: Iterable[tuple[uuid.UUID, str]], present: set[str],
) -> dict[str, list[uuid.UUID]]:
    """Queued tasks whose id is in no Redis list, grouped by their queue."""
    orphans: dict[str, list[uuid.UUID]] = defaultdict(list)
    for task_id, queue in candidates:
        if str(task_id) not in present:
            orphans[queue].append(task_id)
    return dict(orphans)


# -- I/O -----------------------------------------------------------------------------------


@dataclass
class PassReport:
    acted: bool = False
    dead_workers: list[str] = field(default_factory=list)
    requeued: list[Requeue] = field(default_factory=list)
    failed: list[Fail] = field(default_factory=list)
    repushed: dict[str, list[uuid.UUID]] = field(default_factory=dict)
    duplicates: dict[str, list[InstanceView]] = field(default_factory=dict)
    pushes: dict[str, list[str]] = field(default_factory=dict)


async def fetch_tasks(conn: psycopg.AsyncConnection, sql: str,
                      params: Mapping[str, object]) -> list[TaskView]:
    cur = conn.cursor(row_factory=class_row(TaskView))
    await cur.execute(sql, params)
    return await cur.fetchall()


async def load_workers(conn: psycopg.AsyncConnection, ttl: float) -> dict[str, WorkerView]:
    cur = conn.cursor(row_factory=class_row(q.LivenessRow))
    await cur.execute(SQL.LIVENESS, {"ttl": ttl})
    workers = {}
    for row in await cur.fetchall():
        queue = (inference_queue_of(row.worker_id, row.device, row.queues)
                 if row.kind == "inference" else None)
        workers[row.worker_id] = WorkerView(
            worker_id=row.worker_id, host=row.host, kind=row.kind, alive=row.alive,
            silent_for=row.silent_for, pid=row.pid, queue=queue,
            models=tuple(row.models or ()), draining=row.draining, healthy=row.healthy)
    return workers


async def load_by_queue(conn: psycopg.AsyncConnection, queues: list[str]) -> dict[str, int]:
    if not queues:
        return {}
    cur = await conn.execute(SQL.LOAD_BY_QUEUE, {"queues": queues, **q.USERS_ONLY})
    return dict(await cur.fetchall())


async def apply_actions(conn: psycopg.AsyncConnection, actions: Iterable[Action]
                        ) -> tuple[list[Requeue], list[Fail]]:
    """Run each decision as a guarded UPDATE; return the ones that took effect. The timeline
    records each with its reason (a failure's is its error)."""
    requeued, failed = [], []
    reason: str | None = None
    for action in actions:
        t = action.task
        if isinstance(action, Requeue):
            sql, params = sm.requeue_task(t.id, t.status, t.claim, t.queue, action.queue,
                                          action.worker)
            wanted = action.reason or None
        else:
            sql, params = sm.fail_task(t.id, t.status, t.claim, action.error)
            wanted = None
        if wanted != reason:
            await set_transition(conn, wanted)
            reason = wanted
        cur = await conn.execute(sql, params)
        if await cur.fetchone() is not None:
            (requeued if isinstance(action, Requeue) else failed).append(action)
    return requeued, failed


async def dispatch_waiting(conn: psycopg.AsyncConnection, ttl: float, limit: int = BATCH
                           ) -> list[Requeue]:
    """Give waiting inference tasks (queued, queue null) to alive workers. Runs in the
    caller's transaction; safe next to the Reaper (rows locked, updates guarded)."""
    workers = await load_workers(conn, ttl)
    if not any(w.takes and w.kind == "inference" for w in workers.values()):
        return []
    tasks = await fetch_tasks(conn, SQL.WAITING_INFERENCE,
                              {"types": list(INFERENCE_TYPES), "limit": limit})
    if not tasks:
        return []
    queues = [w.queue for w in workers.values() if w.takes and w.queue]
    load = await load_by_queue(conn, queues)
    actions = plan_inference(tasks, workers, load, ttl, float("inf"))
    requeued, _ = await apply_actions(conn, actions)
    return requeued


def pushes_of(requeued: Iterable[Requeue]) -> dict[str, list[str]]:
    pushes: dict[str, list[str]] = defaultdict(list)
    for action in requeued:
        if action.queue is not None:
            pushes[action.queue].append(str(action.task.id))
    return dict(pushes)


async def push(redis: aioredis.Redis, pushes: Mapping[str, list[str]]) -> None:
    """LPUSH ids in order (the first is taken first: consumers BLMOVE from the right)."""
    if not pushes:
        return
    async with redis.pipeline(transaction=False) as pipe:
        for queue, ids in pushes.items():
            for start in range(0, len(ids), 1000):
                pipe.lpush(queue, *ids[start:start + 1000])
        await pipe.execute()


class Reaper(Background):
    task_name = "reaper"

    def __init__(self, cfg: Config, pool: psycopg_pool.AsyncConnectionPool,
                 redis: aioredis.Redis, metrics: Metrics,
                 on_tick: Callable[[], Awaitable[None]] | None = None) -> None:
        self.cfg = cfg
        self.pool = pool
        self.redis = redis
        self.metrics = metrics
        self.on_tick = on_tick  # coroutine run every tick (registry refresh)
        self._kick = asyncio.Event()
        self._flagged: set[str] = set()
        self._passes = 0
        # read every queue in full about once a minute
        self.full_scan_every = max(1, round(60 / cfg.heartbeat_interval))
        self.last_report: PassReport | None = None

    def kick(self) -> None:
        """Run a pass now instead of at the next tick."""
        self._kick.set()

    async def _run(self) -> None:
        interval = self.cfg.heartbeat_interval
        while True:
            try:
                report = await self.run_once()
                self.last_report = report
                self.metrics.reaper_passes.labels(str(report.acted).lower()).inc()
            except Exception as exc:
                self.metrics.reaper_errors.inc()
                log.warning("reaper pass failed: %s: %s", type(exc).__name__,
                            str(exc).strip().splitlines()[0] if str(exc).strip() else "")
            if self.on_tick is not None:
                try:
                    await self.on_tick()
                except Exception as exc:
                    log.warning("worker registry refresh failed: %s: %s", type(exc).__name__,
                                str(exc).strip().splitlines()[0] if str(exc).strip() else "")
            self._kick.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), interval)

    async def run_once(self) -> PassReport:
        cfg = self.cfg
        report = PassReport()
        async with self.pool.connection() as conn, conn.transaction():
            cur = conn.cursor(row_factory=class_row(q.Lock))
            await cur.execute(q.REAPER_LOCK, {"key": q.REAPER_LOCK_KEY})
            lock = await cur.fetchone()
            if lock is None or not lock.held:
                return report
            report.acted = True
            await self._workers(conn, report)
            workers = await load_workers(conn, cfg.heartbeat_ttl)
            await self._duplicates(conn, report)
            handled = await self._inference(conn, workers, report)
            await self._shared(conn, workers, report)
            await self._orphans(conn, workers, handled, report)
            await conn.execute(SQL.FORGET_INSTANCES,
                               {"seconds": max(86400.0, 100 * cfg.heartbeat_ttl)})
            await conn.execute(q.EXPIRE_TIMELINE, {
                "seconds": cfg.timeline_retention_days * 86400, "limit": 4 * BATCH})
        report.pushes = pushes_of(report.requeued)
        for queue, ids in report.repushed.items():
            report.pushes.setdefault(queue, []).extend(str(i) for i in ids)
        self._log(report)
        try:
            await push(self.redis, report.pushes)
        except Exception as exc:
            log.warning("could not push %d task id(s) to Redis (%s): they are pushed again "
                        "after COORDINATOR_REPUSH_GRACE", sum(map(len, report.pushes.values())),
                        exc)
        return report

    async def _workers(self, conn: psycopg.AsyncConnection, report: PassReport) -> None:
        cur = conn.cursor(row_factory=class_row(q.Dead))
        await cur.execute(SQL.MARK_DEAD, {"ttl": self.cfg.heartbeat_ttl})
        for dead in await cur.fetchall():
            report.dead_workers.append(dead.worker_id)
            log.warning("%s worker '%s' on host '%s' (pid %s) is dead: no heartbeat for %.1f s "
                        "(TTL %g s)", dead.kind, dead.worker_id, dead.host, dead.pid,
                        dead.silent_for, self.cfg.heartbeat_ttl)

    async def _duplicates(self, conn: psycopg.AsyncConnection, report: PassReport) -> None:
        cur = conn.cursor(row_factory=class_row(InstanceView))
        await cur.execute(SQL.LIVE_INSTANCES, {"ttl": self.cfg.heartbeat_ttl})
        instances = await cur.fetchall()
        clock = conn.cursor(row_factory=class_row(q.Now))
        await clock.execute(q.NOW)
        now = await clock.fetchone()
        assert now is not None  # SELECT clock_timestamp() answers one row
        report.duplicates = find_duplicates(instances, now.now, self.cfg.heartbeat_ttl)
        flagged = sorted(report.duplicates)
        await conn.execute(SQL.FLAG_DUPLICATES, {"worker_ids": flagged})
        for worker_id in flagged:
            if worker_id not in self._flagged:
                self.metrics.duplicates_detected.inc()
            log.warning("%s", describe_duplicate(worker_id, report.duplicates[worker_id]))
        for worker_id in self._flagged - set(flagged):
            log.info("worker '%s' is no longer duplicated", worker_id)
        self._flagged = set(flagged)

    async def _inference(self, conn: psycopg.AsyncConnection,
                         workers: dict[str, WorkerView], report: PassReport) -> set[uuid.UUID]:
        cfg = self.cfg
        alive_ids = [w.worker_id for w in workers.values() if w.alive]
        alive_queues = [w.queue for w in workers.values()
                        if w.takes and w.kind == "inference" and w.queue]
        tasks = await fetch_tasks(conn, SQL.INFERENCE_TO_REVIEW, {
            "types": list(INFERENCE_TYPES), "alive": alive_ids, "queues": alive_queues,
            "timeout": cfg.task_timeout, "limit": BATCH})
        if not tasks:
            return set()
        load = await load_by_queue(conn, alive_queues)
        actions = plan_inference(tasks, workers, load, cfg.heartbeat_ttl, cfg.task_timeout)
        requeued, failed = await apply_actions(conn, actions)
        report.requeued.extend(requeued)
        report.failed.extend(failed)
        return {a.task.id for a in requeued} | {a.task.id for a in failed}

    async def _shared(self, conn: psycopg.AsyncConnection, workers: dict[str, WorkerView],
                      report: PassReport) -> None:
        alive_ids = [w.worker_id for w in workers.values() if w.alive]
        tasks = await fetch_tasks(conn, SQL.SHARED_ON_DEAD, {
            "types": list(SHARED_TYPES), "alive": alive_ids, "limit": BATCH})
        failures = plan_shared(tasks, workers, self.cfg.heartbeat_ttl,
                               self.cfg.web_task_deadline)
        if failures:
            _, failed = await apply_actions(conn, failures)
            report.failed.extend(failed)

    async def _orphans(self, conn: psycopg.AsyncConnection, workers: dict[str, WorkerView],
                       handled: set[uuid.UUID], report: PassReport) -> None:
        """Push again queued tasks whose id is in no Redis list (Redis wiped, push lost).

        Reading a long queue is costly, so a cheap count comes first: a queue is read in
        full only when Redis holds fewer ids than PostgreSQL has tasks queued on it for longer
        than the grace, and otherwise every ``full_scan_every`` passes (a lost id can hide
        behind newer ones in a busy queue)."""
        self._passes += 1
        cur = await conn.execute(SQL.QUEUED_PAST_GRACE, {"grace": self.cfg.repush_grace})
        old = dict(await cur.fetchall())
        if not old:
            return
        queues = sorted(old)
        processing = sorted(processing_list(w.worker_id) for w in workers.values() if w.alive)
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                for key in queues:
                    pipe.llen(key)
                for key in processing:
                    pipe.llen(key)
                lengths = await pipe.execute()
        except Exception as exc:
            log.warning("cannot look for task ids lost from Redis (%s); next pass retries", exc)
            return
        in_processing = sum(lengths[len(queues):])
        full = self._passes % self.full_scan_every == 0
        suspicious = [queue for queue, n in zip(queues, lengths, strict=False)
                      if full or old[queue] > n + in_processing]
        if not suspicious:
            return
        queued = conn.cursor(row_factory=class_row(q.Queued))
        await queued.execute(SQL.QUEUED_IDS_PAST_GRACE, {
            "queues": suspicious, "grace": self.cfg.repush_grace, "limit": 4 * BATCH})
        candidates = [(row.id, row.queue) for row in await queued.fetchall()
                      if row.id not in handled]
        if not candidates:
            return
        try:
            # One MULTI: an atomic snapshot of the queues and the processing lists.
            async with self.redis.pipeline(transaction=True) as pipe:
                for key in [*suspicious, *processing]:
                    pipe.lrange(key, 0, -1)
                lists = await pipe.execute()
        except Exception as exc:
            log.warning("cannot look for task ids lost from Redis (%s); next pass retries", exc)
            return
        present = {i.decode() if isinstance(i, bytes) else i for ids in lists for i in ids}
        orphans = find_orphans(candidates, present)
        for queue, ids in orphans.items():
            sql, params = sm.mark_repushed(ids, queue)
            cur = await conn.execute(sql, params)
            marked = [task_id for (task_id,) in await cur.fetchall()]
            if marked:
                report.repushed[queue] = marked

    def _log(self, report: PassReport) -> None:
        for action in report.requeued:
            if action.kind == "dispatch":
                self.metrics.dispatched_waiting.inc()
                log.info("dispatched waiting task %s to worker '%s' (queue %s)",
                         action.task.id, action.worker, action.queue)
                continue
            self.metrics.redispatches.labels(action.kind).inc()
            new = (f"worker '{action.worker}' (queue {action.queue})" if action.queue
                   else "no worker yet (waiting for an alive one)")
            log.warning("re-dispatched task %s from worker '%s' to %s: %s",
                        action.task.id, action.old_worker, new, action.reason)
        for action in report.failed:
            self.metrics.reaper_failed.labels(action.kind).inc()
            log.warning("failed task %s: %s", action.task.id, action.error)
        for queue, ids in report.repushed.items():
            self.metrics.repushes.inc(len(ids))
            shown = ", ".join(str(i) for i in ids[:5]) + (" ..." if len(ids) > 5 else "")
            log.warning("pushed %d queued task(s) missing from Redis again to %s: %s",
                        len(ids), queue, shown)
