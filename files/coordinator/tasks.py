"""Tasks: POST /route and GET /task, the write and read paths of the task record.

A routed task is committed in PostgreSQL before its id is pushed to Redis (TaskWriter); GET
/task reads the row, and long-polls wait for the task's done/failed event (events).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import psycopg
import psycopg_pool
import redis.asyncio as aioredis
from coordinator_contract import DEFAULT_WORKER
from psycopg.rows import dict_row
from redis.exceptions import RedisError

from . import queries as q
from . import statemachine as sm
from .config import Config
from .errors import first_line
from .events import TaskEvents
from .metrics import Metrics
from .reaper import push
from .registry import Registry
from .routing import ROUTES, RequestError, RouteRequest, describe_no_worker

if TYPE_CHECKING:
    from .workers import Workers

log = logging.getLogger("coordinator")

Row = sm.NewTask
Item = TypeVar("Item")
Answer = TypeVar("Answer")


def task_json(row: dict[str, Any]) -> dict[str, Any]:
    """The public view of a task row."""
    waiting = row["status"] == sm.QUEUED and row["queue"] is None
    out = {
        "task_id": str(row["id"]),
        "task_type": row["task_type"],
        "status": row["status"],
        "result": row["result"],
        "fallback": row["fallback"],
        "worker": row["worker"],
        "worker_id": row["worker_id"],
        "worker_host": row["worker_host"],
        "error": row["error"],
        "attempts": row["attempts"],
        "max_attempts": row["max_attempts"],
        "model": row["model"],
        "queue": row["queue"],
        "waiting": waiting,
        "created_at": q.iso(row["created_at"]),
        "started_at": q.iso(row["started_at"]),
        "finished_at": q.iso(row["finished_at"]),
    }
    if waiting:
        if row["requested_worker"]:
            out["note"] = (f"worker '{row['requested_worker']}' is not alive: the task is "
                           "dispatched to it when it registers again")
        else:
            out["note"] = describe_no_worker(row["model"])
    return out


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
        sql, columns = sm.insert_tasks(rows)
        # A pooled connection may have died with a PostgreSQL restart: retry once on a fresh
        # one. Same ids, so a commit whose answer was lost shows up as a unique violation.
        for attempt in (1, 2):
            try:
                async with self.pool.connection() as conn:
                    await conn.execute(sql, columns)
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
            await cur.execute(q.SELECT_TASKS, (list({i for i, _ in batch}),))
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
        spec = ROUTES[req.task_type]
        requested = None
        if spec.kind != "inference":
            queue, worker = spec.queue, DEFAULT_WORKER
        elif req.worker is not None:
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
            if req.model is not None and req.model not in known.models:
                serves = ", ".join(known.models) or "only its default model"
                raise RequestError(409, f"worker {req.worker!r} does not serve model "
                                        f"{req.model!r} (it serves: {serves}): pick another "
                                        "model or worker")
            requested = worker = known.worker_id
            queue = known.queue if known.alive() else None
            if queue is not None:
                self.registry.dispatched(queue)
        else:
            chosen = self.registry.pick(req.model)
            queue, worker = (chosen.queue, chosen.worker_id) if chosen else (None,
                                                                            DEFAULT_WORKER)
        task_id = uuid.uuid4()
        pushed = await self.writer.submit(Row(
            task_id, req.task_type, req.prompt, req.model, queue, worker,
            self.cfg.max_attempts, requested))
        answer: dict[str, Any] = {"task_id": str(task_id), "queue": queue, "status": sm.QUEUED,
                                  "worker": worker}
        if queue is not None:
            if not pushed:
                answer["warning"] = ("Redis did not answer: the task is saved and the Reaper "
                                     "pushes it to its queue again")
        else:
            answer["note"] = (f"worker {requested!r} is not alive: the task waits for it"
                              if requested else describe_no_worker(req.model))
        self.metrics.routed.labels(req.task_type).inc()
        self.metrics.route_seconds.observe(time.perf_counter() - started)
        return answer

    async def get(self, task_id: uuid.UUID, wait: float) -> dict[str, Any] | None:
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
                    return task_json(row)
                await asyncio.wait((fut,), timeout=remaining)
            finally:
                if fut is not None:
                    self.events.unsubscribe(key, fut)
