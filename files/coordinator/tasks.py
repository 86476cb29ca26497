"""Tasks: POST /route and GET /task, the write and read paths of the task record.

A routed task is committed in PostgreSQL before its id is pushed to Redis (TaskWriter); GET
/task reads the row, and long-polls wait for the task's done/failed event (events).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import psycopg
import psycopg_pool
import redis.asyncio as aioredis
from coordinator_contract import DEFAULT_WORKER, PROBE_TYPE, has_model
from coordinator_sql import SQL
from psycopg.rows import dict_row
from redis.exceptions import RedisError

from . import audit
from . import queries as q
from . import statemachine as sm
from .api_models import Task
from .config import Config
from .errors import first_line
from .events import TaskEvents
from .metrics import Metrics
from .reaper import push
from .registry import KnownWorker, Registry
from .routing import ROUTES, RequestError, RouteRequest, describe_no_worker

if TYPE_CHECKING:
    from .workers import Workers

log = logging.getLogger("coordinator")

Row = sm.NewTask
Item = TypeVar("Item")
Answer = TypeVar("Answer")


def describe_not_taking(worker_id: str, known: KnownWorker | None) -> str:
    if known is not None and known.draining:
        return f"worker {worker_id!r} is drained: the task waits until it is undrained"
    return f"worker {worker_id!r} is not alive: the task waits for it"


def task_view(row: Mapping[str, Any]) -> Task:
    """The public shape of a task (``api_models.Task``) from its row's public columns."""
    waiting = row["status"] == sm.QUEUED and row["queue"] is None
    note = None
    if waiting:
        note = (f"worker '{row['requested_worker']}' is not alive: the task is dispatched to "
                "it when it registers again" if row["requested_worker"]
                else describe_no_worker(row["model"]))
    times = {column: q.iso(row[column]) for column in ("created_at", "started_at", "finished_at")}
    return Task.model_validate({**row, "task_id": row["id"], **times, "waiting": waiting,
                                "note": note})


class Coalescer(Generic[Item, Answer]):
    """Requests that arrive while earlier ones are in flight share the next round trip.

    At most ``lanes`` drains run at once; each takes what is pending (``_take``) and settles
    every future of that batch (``_run``). No request waits for a batch to fill: a drain
    starts as soon as a lane is free. What ``_run`` raises fails the futures it left unset.
    """

    MAX_ITEMS = 500

    def __init__(self, lanes: int) -> None:
        self.lanes = lanes
        self.active = 0
        self.pending: list[tuple[Item, asyncio.Future[Answer]]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def _enqueue(self, item: Item) -> Answer:
        fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.pending.append((item, fut))
        if self.active < self.lanes:
            self.active += 1
            task = asyncio.create_task(self._drain())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await fut

    def _take(self) -> list[tuple[Item, asyncio.Future[Answer]]]:
        batch, self.pending = self.pending[:self.MAX_ITEMS], self.pending[self.MAX_ITEMS:]
        return batch

    async def _run(self, batch: list[tuple[Item, asyncio.Future[Answer]]]) -> None:
        raise NotImplementedError

    async def _drain(self) -> None:
        try:
            while self.pending:
                batch = self._take()
                try:
                    await self._run(batch)
                except BaseException as exc:
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
        finally:
            self.active -= 1


class TaskWriter(Coalescer[Row, bool]):
    """Group commit for POST /route.

    Each request's row is committed in one short transaction before its id is pushed with
    one LPUSH; requests that arrive while earlier writes are in flight share the next
    transaction (one multi-row INSERT) and the next Redis round trip.
    """

    MAX_ITEMS = 512
    MAX_BYTES = 4 * 1024 * 1024

    def __init__(self, pool: psycopg_pool.AsyncConnectionPool, redis: aioredis.Redis,
                 writers: int = 4) -> None:
        super().__init__(writers)
        self.pool = pool
        self.redis = redis

    async def submit(self, row: Row) -> bool:
        """Commit ``row``, then push its id if it has a queue. True once pushed (or no
        queue); False when Redis failed (the Reaper pushes it later). Raises when the row
        could not be committed."""
        return await self._enqueue(row)

    def _take(self) -> list[tuple[Row, asyncio.Future[bool]]]:
        size = 0
        for n, (row, _) in enumerate(self.pending):
            size += len(row.prompt)
            if n >= self.MAX_ITEMS or (n and size > self.MAX_BYTES):
                batch, self.pending = self.pending[:n], self.pending[n:]
                return batch
        batch, self.pending = self.pending, []
        return batch

    async def _run(self, batch: list[tuple[Row, asyncio.Future[bool]]]) -> None:
        try:
            await self._commit([row for row, _ in batch])
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError) or len(batch) == 1:
                raise
            # A row the batch could not take: write them one by one so only it fails.
            await self._one_by_one(batch)
            return
        pushed = await self._push([row for row, _ in batch])
        for _, fut in batch:
            if not fut.done():
                fut.set_result(pushed)

    async def _commit(self, rows: list[Row]) -> None:
        sql, params = sm.insert_tasks(rows)
        # A pooled connection may have died with a PostgreSQL restart: retry once on a fresh
        # one. Same ids, so a commit whose answer was lost shows up as a unique violation.
        for attempt in (1, 2):
            try:
                async with self.pool.connection() as conn:
                    await conn.execute(sql, params)
                return
            except psycopg.errors.UniqueViolation:
                if attempt == 2:
                    return
                raise
            except psycopg.OperationalError:
                if attempt == 2:
                    raise

    async def _one_by_one(self, batch: list[tuple[Row, asyncio.Future[bool]]]) -> None:
        for row, fut in batch:
            try:
                await self._commit([row])
            except Exception as exc:
                fut.set_exception(exc)
                continue
            fut.set_result(await self._push([row]))

    async def _push(self, rows: list[Row]) -> bool:
        by_queue: dict[str, list[str]] = {}
        for row in rows:
            if row.queue is not None:
                by_queue.setdefault(row.queue, []).append(str(row.id))
        if not by_queue:
            return True
        try:
            if len(by_queue) == 1:
                ((queue, ids),) = by_queue.items()
                await self.redis.lpush(queue, *ids)
            else:
                await push(self.redis, by_queue)
            return True
        except (RedisError, OSError) as exc:
            log.warning("%d task(s) saved but Redis did not take their ids (%s): the Reaper "
                        "pushes them again", len(rows), first_line(exc))
            return False


class TaskReader(Coalescer[uuid.UUID, "dict[str, Any] | None"]):
    """Reads task rows for GET /task; concurrent reads share one query (``id = ANY``).

    When many long-polls wake at once (a burst of results), they cost a few queries, not one
    each."""

    def __init__(self, pool: psycopg_pool.AsyncConnectionPool, readers: int = 3) -> None:
        super().__init__(readers)
        self.pool = pool

    async def get(self, task_id: uuid.UUID) -> dict[str, Any] | None:
        return await self._enqueue(task_id)

    async def _run(self, batch: list[tuple[uuid.UUID,
                                           asyncio.Future[dict[str, Any] | None]]]) -> None:
        async with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(SQL.SELECT_TASKS, {"ids": list({i for i, _ in batch})})
            rows = {r["id"]: r for r in await cur.fetchall()}
        for task_id, fut in batch:
            if not fut.done():
                fut.set_result(rows.get(task_id))


class Tasks:
    """POST /route and GET /task."""

    def __init__(self, cfg: Config, registry: Registry, workers: Workers, writer: TaskWriter,
                 reader: TaskReader, events: TaskEvents, metrics: Metrics) -> None:
        self.cfg = cfg
        self.registry = registry
        self.workers = workers
        self.writer = writer
        self.reader = reader
        self.events = events
        self.metrics = metrics

    async def route(self, req: RouteRequest) -> dict[str, Any]:
        started = time.perf_counter()
        requested = None
        if req.worker is not None and ROUTES[req.task_type].kind == "inference":
            known = self.registry.get(req.worker)
            if known is None or not known.alive():
                # not seen here, or seen dead: it may have (re)registered at another instance
                known = await self.workers.lookup(req.worker)
            if known is None:
                raise RequestError(404, f"unknown worker {req.worker!r}: GET /workers lists "
                                        "the registered workers; or leave 'worker' out")
            if known.kind != "inference":
                raise RequestError(409, f"worker {req.worker!r} is a {known.kind} worker: "
                                        f"{req.task_type} needs an inference worker")
            if req.model is not None and not has_model(known.models, req.model):
                serves = ", ".join(known.models) or "only its default model"
                raise RequestError(409, f"worker {req.worker!r} does not serve model "
                                        f"{req.model!r} (it serves: {serves}): pick another "
                                        "model or worker")
            requested = known.worker_id
        queue, worker = self.placement(req.task_type, req.model, requested)
        task_id = uuid.uuid4()
        pushed = await self.writer.submit(Row(
            task_id, req.task_type, req.prompt, req.model, queue, worker,
            self.cfg.max_attempts, requested,
            None if req.options is None else json.dumps(req.options)))
        answer: dict[str, Any] = {"task_id": str(task_id), "queue": queue, "status": sm.QUEUED,
                                  "worker": worker}
        if queue is not None:
            if not pushed:
                answer["warning"] = ("Redis did not answer: the task is saved and the Reaper "
                                     "pushes it to its queue again")
        else:
            answer["note"] = (describe_not_taking(requested, self.registry.get(requested))
                              if requested else describe_no_worker(req.model))
        self.metrics.routed.labels(req.task_type).inc()
        self.metrics.route_seconds.observe(time.perf_counter() - started)
        return answer

    def placement(self, task_type: str, model: str | None, requested: str | None
                  ) -> tuple[str | None, str]:
        """(queue, worker) for a task to be dispatched now: its shared queue, the requested
        worker's queue while it takes tasks, or the least loaded worker serving the model;
        queue None when it must wait for one. A dispatch is counted in the registry's load."""
        spec = ROUTES[task_type]
        if spec.kind != "inference":
            return spec.queue, DEFAULT_WORKER
        if requested is not None:
            known = self.registry.get(requested)
            if known is None or not known.takes() or known.queue is None:
                return None, requested
            self.registry.dispatched(known.queue)
            return known.queue, requested
        chosen = self.registry.pick(model)
        return (chosen.queue, chosen.worker_id) if chosen else (None, DEFAULT_WORKER)

    async def retry(self, task_id: uuid.UUID, actor: str, key: str | None
                    ) -> dict[str, Any] | None:
        """A failed task queued again as a new attempt (web and RAG tasks too: a person asks
        for it); None for an unknown task."""

        async def effect(conn: psycopg.AsyncConnection) -> audit.Effect:
            row = await self._locked(conn, task_id)
            if row["task_type"] == PROBE_TYPE:
                return audit.Effect(False, f"task {task_id} is a worker probe: the "
                                           "Coordinator queues a new one every "
                                           "COORDINATOR_PROBE_INTERVAL, nothing to retry")
            if row["status"] != sm.FAILED:
                return audit.Effect(False, f"task {task_id} is {row['status']}, not failed: "
                                           "nothing to retry")
            queue, worker = self.placement(row["task_type"], row["model"],
                                           row["requested_worker"])
            await audit.set_transition(conn, f"retried by {actor}")
            await conn.execute(*sm.retry_task(task_id, queue, worker, self.cfg.max_attempts))
            where = f"queued on {queue}" if queue else "waiting for a worker"
            return audit.Effect(True, f"retried task {task_id}: {where}",
                                {queue: [str(task_id)]} if queue else {})

        return await self._act(task_id, "retry", actor, key, effect)

    async def cancel(self, task_id: uuid.UUID, actor: str, key: str | None
                     ) -> dict[str, Any] | None:
        """A queued task failed as cancelled (a worker that takes its id then drops it);
        None for an unknown task."""

        async def effect(conn: psycopg.AsyncConnection) -> audit.Effect:
            row = await self._locked(conn, task_id)
            if row["status"] != sm.QUEUED:
                return audit.Effect(False, f"task {task_id} is {row['status']}: only a queued "
                                           "task can be cancelled")
            error = f"cancelled by {actor} while queued"
            await audit.set_transition(conn, error, "cancelled")
            await conn.execute(*sm.fail_task(task_id, sm.QUEUED, row["claim"], error))
            return audit.Effect(True, f"cancelled task {task_id}")

        return await self._act(task_id, "cancel", actor, key, effect)

    @staticmethod
    async def _locked(conn: psycopg.AsyncConnection, task_id: uuid.UUID) -> dict[str, Any]:
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(SQL.TASK_FOR_ACTION, {"id": task_id})
        row = await cur.fetchone()
        if row is None:
            raise audit.NotFound
        return row

    async def _act(self, task_id: uuid.UUID, action: str, actor: str, key: str | None,
                   effect: Callable[[psycopg.AsyncConnection], Awaitable[audit.Effect]]
                   ) -> dict[str, Any] | None:
        outcome = await audit.perform(self.writer.pool, actor, action, str(task_id), key,
                                      effect)
        if outcome is None:
            return None
        if outcome.changed and not outcome.repeated:
            log.info("%s (by %s)", outcome.message, actor)
        if outcome.pushes:
            try:
                await push(self.writer.redis, outcome.pushes)
            except (RedisError, OSError) as exc:
                log.warning("could not push retried task %s (%s): the Reaper pushes it again",
                            task_id, first_line(exc))
        row = await self.reader.get(task_id)
        return {"task_id": str(task_id), "status": row["status"] if row else sm.FAILED,
                "changed": outcome.changed, "message": outcome.message,
                "repeated": outcome.repeated}

    async def get(self, task_id: uuid.UUID, wait: float) -> Task | None:
        """The task's public view; with ``wait`` > 0, long-poll until done or failed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        key = str(task_id)
        while True:
            fut = self.events.subscribe(key) if wait > 0 else None
            try:
                row = await self.reader.get(task_id)
                if row is None:
                    return None
                remaining = deadline - loop.time()
                if fut is None or row["status"] in sm.FINAL or remaining <= 0:
                    return task_view(row)
                await asyncio.wait((fut,), timeout=remaining)
            finally:
                if fut is not None:
                    self.events.unsubscribe(key, fut)
