"""The Coordinator's I/O glue: connections, the task API's operations, workers, health.

``Coordinator`` owns the PostgreSQL pool, the Redis client, the task-event listener, the
worker registry and the Reaper. The HTTP layer (``app``) only parses requests and renders
what these methods return.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
import psycopg_pool
import redis.asyncio as aioredis
from coordinator_contract import DEFAULT_WORKER, SHARED_QUEUES
from psycopg.rows import dict_row
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import AuthenticationError, RedisError

from . import __version__
from . import statemachine as sm
from .config import Config
from .events import TaskEvents
from .metrics import Metrics
from .reaper import Reaper, dispatch_waiting, load_by_queue, push, pushes_of
from .registry import KnownWorker, Registry
from .routing import ROUTES, RequestError, RouteRequest, describe_no_worker, inference_queue_of
from .schema import WORKER_ALIVE, ensure_schema

log = logging.getLogger("coordinator")

PUBLIC_COLUMNS = (
    "id, task_type, status, result, fallback, worker, worker_id, worker_host, error,"
    " attempts, max_attempts, model, queue, requested_worker, created_at, started_at,"
    " finished_at"
)


class StartupError(Exception):
    """A backend refused us at start; the message is one line saying what to check."""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def backend_error(exc: BaseException, cfg: Config) -> str | None:
    """A one-line message when ``exc`` means a backend is down, else None."""
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError,
                        psycopg_pool.PoolTimeout, psycopg_pool.PoolClosed)):
        return (f"PostgreSQL at {cfg.pg_address} is not answering ({first_line(exc)}): "
                "retry when GET /health says ok")
    if isinstance(exc, RedisError | ConnectionError):
        return (f"Redis at {cfg.redis_address} is not answering ({first_line(exc)}): "
                "retry when GET /health says ok")
    return None


def pg_login_message(exc: BaseException, cfg: Config) -> str:
    """Explain a failed PostgreSQL connection at start."""
    text = first_line(exc)
    lowered = str(exc).lower()
    who = f"user '{cfg.pg_user}' to database '{cfg.pg_dbname}'"
    if "password authentication failed" in lowered or "no password supplied" in lowered:
        return (f"PostgreSQL at {cfg.pg_address} refused the login of {who}: {text}. Check "
                "the user and password in PG_DSN")
    if "pg_hba.conf" in lowered:
        return (f"PostgreSQL at {cfg.pg_address} refused the login of {who}: {text}. Check "
                "the server's pg_hba.conf allows this host, user and database")
    if "does not exist" in lowered:
        return (f"PostgreSQL at {cfg.pg_address} refused the login of {who}: {text}. Check "
                "the user and dbname in PG_DSN, or create them")
    if "permission denied" in lowered:
        return (f"PostgreSQL at {cfg.pg_address}: {who} may not create the schema: {text}. "
                "Make the user the owner of the database")
    return (f"cannot connect to PostgreSQL at {cfg.pg_address}: {text}. Check PG_DSN's host "
            "and port and that the server is running")


def redis_message(exc: BaseException, cfg: Config) -> str:
    if isinstance(exc, AuthenticationError) or "auth" in str(exc).lower():
        return (f"Redis at {cfg.redis_address} refused the password: {first_line(exc)}. "
                "Check REDIS_PASSWORD")
    return (f"cannot connect to Redis at {cfg.redis_address}: {first_line(exc)}. Check "
            "REDIS_HOST and REDIS_PORT and that the server is running")


def make_redis(cfg: Config) -> aioredis.Redis:
    return aioredis.Redis(
        host=cfg.redis_host, port=cfg.redis_port, password=cfg.redis_password,
        socket_timeout=5, socket_connect_timeout=3,
        retry=Retry(ExponentialWithJitterBackoff(cap=0.2, base=0.01), 2),
        decode_responses=False, client_name="coordinator",
    )


async def preflight(cfg: Config) -> None:
    """Check both backends and create or upgrade the schema; raise ``StartupError``."""
    try:
        conn = await psycopg.AsyncConnection.connect(cfg.pg_dsn, autocommit=True,
                                                     connect_timeout=10)
    except psycopg.Error as exc:
        raise StartupError(pg_login_message(exc, cfg)) from None
    try:
        await ensure_schema(conn)
    except psycopg.Error as exc:
        raise StartupError(pg_login_message(exc, cfg)) from None
    finally:
        await conn.close()
    client = make_redis(cfg)
    try:
        await client.ping()
    except (RedisError, OSError) as exc:
        raise StartupError(redis_message(exc, cfg)) from None
    finally:
        await client.aclose()


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


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
        "created_at": _iso(row["created_at"]),
        "started_at": _iso(row["started_at"]),
        "finished_at": _iso(row["finished_at"]),
    }
    if waiting:
        if row["requested_worker"]:
            out["note"] = (f"worker '{row['requested_worker']}' is not alive: the task is "
                           "dispatched to it when it registers again")
        else:
            out["note"] = describe_no_worker(row["model"])
    return out


Row = sm.NewTask


class TaskWriter:
    """Group commit for POST /route.

    Each request's row is committed in one short transaction before its id is pushed with
    one LPUSH; requests that arrive while earlier writes are in flight share the next
    transaction (one multi-row INSERT) and the next Redis round trip. No request waits for a
    batch to fill: a write starts as soon as a writer is free.
    """

    MAX_ROWS = 512
    MAX_BYTES = 4 * 1024 * 1024

    def __init__(self, pool: psycopg_pool.AsyncConnectionPool, redis: aioredis.Redis,
                 writers: int = 4) -> None:
        self.pool = pool
        self.redis = redis
        self.writers = writers
        self.active = 0
        self.pending: list[tuple[Row, asyncio.Future[bool]]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, row: Row) -> bool:
        """Commit ``row``, then push its id if it has a queue. True once pushed (or no
        queue); False when Redis failed (the Reaper pushes it later). Raises when the row
        could not be committed."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.pending.append((row, fut))
        if self.active < self.writers:
            self.active += 1
            task = asyncio.create_task(self._drain())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await fut

    def _take(self) -> list[tuple[Row, asyncio.Future[bool]]]:
        size = 0
        for n, (row, _) in enumerate(self.pending):
            size += len(row[2])
            if n >= self.MAX_ROWS or (n and size > self.MAX_BYTES):
                batch, self.pending = self.pending[:n], self.pending[n:]
                return batch
        batch, self.pending = self.pending, []
        return batch

    async def _drain(self) -> None:
        try:
            while self.pending:
                batch = self._take()
                try:
                    await self._commit([row for row, _ in batch])
                except psycopg.Error as exc:
                    if isinstance(exc, psycopg.OperationalError) or len(batch) == 1:
                        for _, fut in batch:
                            if not fut.done():
                                fut.set_exception(exc)
                        continue
                    # A row the batch could not take: write them one by one so only it fails.
                    await self._one_by_one(batch)
                    continue
                except BaseException as exc:
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                pushed = await self._push([row for row, _ in batch])
                for _, fut in batch:
                    if not fut.done():
                        fut.set_result(pushed)
        finally:
            self.active -= 1

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
            if row[4] is not None:
                by_queue.setdefault(row[4], []).append(str(row[0]))
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


class TaskReader:
    """Reads task rows for GET /task; concurrent reads share one query (``id = ANY``).

    When many long-polls wake at once (a burst of results), they cost a few queries, not one
    each."""

    SELECT = f"SELECT {PUBLIC_COLUMNS} FROM tasks WHERE id = ANY(%s)"
    MAX_IDS = 500

    def __init__(self, pool: psycopg_pool.AsyncConnectionPool, readers: int = 3) -> None:
        self.pool = pool
        self.readers = readers
        self.active = 0
        self.pending: list[tuple[uuid.UUID, asyncio.Future[dict[str, Any] | None]]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def get(self, task_id: uuid.UUID) -> dict[str, Any] | None:
        fut: asyncio.Future[dict[str, Any] | None] = \
            asyncio.get_running_loop().create_future()
        self.pending.append((task_id, fut))
        if self.active < self.readers:
            self.active += 1
            task = asyncio.create_task(self._drain())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await fut

    async def _drain(self) -> None:
        try:
            while self.pending:
                batch = self.pending[:self.MAX_IDS]
                del self.pending[:self.MAX_IDS]
                try:
                    async with self.pool.connection() as conn:
                        cur = conn.cursor(row_factory=dict_row)
                        await cur.execute(self.SELECT, (list({i for i, _ in batch}),))
                        rows = {r["id"]: r for r in await cur.fetchall()}
                except Exception as exc:
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                for task_id, fut in batch:
                    if not fut.done():
                        fut.set_result(rows.get(task_id))
        finally:
            self.active -= 1


@dataclass
class _Cache:
    at: float = 0.0
    value: Any = None


class Coordinator:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.metrics = Metrics()
        self.registry = Registry()
        self.hostname = socket.gethostname()
        self.app_name = f"coordinator {self.hostname} pid={os.getpid()}"
        self.pool: psycopg_pool.AsyncConnectionPool | None = None
        self.redis: aioredis.Redis | None = None
        self.events: TaskEvents | None = None
        self.reaper: Reaper | None = None
        self.writer: TaskWriter | None = None
        self.reader: TaskReader | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stats = _Cache()

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self.cfg
        self.loop = asyncio.get_running_loop()
        self.pool = psycopg_pool.AsyncConnectionPool(
            cfg.pg_dsn, min_size=cfg.pg_pool_size, max_size=cfg.pg_pool_size, open=False,
            timeout=5, name="coordinator", reconnect_timeout=3600,
            # A PostgreSQL restart leaves every pooled connection dead; checked when taken,
            # a dead one is replaced instead of failing the request with a 503.
            check=psycopg_pool.AsyncConnectionPool.check_connection,
            kwargs={"autocommit": True, "application_name": self.app_name,
                    "connect_timeout": 10},
        )
        await self.pool.open(wait=True, timeout=30)
        async with self.pool.connection() as conn:
            await ensure_schema(conn)
        self.redis = make_redis(cfg)
        self.writer = TaskWriter(self.pool, self.redis)
        self.reader = TaskReader(self.pool)
        self.events = TaskEvents(cfg.pg_dsn, self.app_name + " listen", self._on_event)
        self.events.start()
        try:
            await self.refresh_registry()
        except Exception as exc:
            log.warning("could not read the workers at start: %s", first_line(exc))
        self.reaper = Reaper(cfg, self.pool, self.redis, self.metrics,
                             on_tick=self.refresh_registry)
        self.reaper.start()
        log.info("coordinator %s ready: PostgreSQL %s, Redis %s, heartbeat TTL %g s, auth %s",
                 __version__, cfg.pg_address, cfg.redis_address, cfg.heartbeat_ttl,
                 "on" if cfg.token else "off")

    async def stop(self) -> None:
        if self.reaper is not None:
            await self.reaper.stop()
        if self.events is not None:
            await self.events.stop()
        if self.redis is not None:
            await self.redis.aclose()
        if self.pool is not None:
            await self.pool.close()

    def _on_event(self, event: dict) -> None:
        self.metrics.observe_event(
            str(event.get("task_type")), str(event.get("status")),
            event.get("dispatch_seconds"), event.get("total_seconds"))

    # -- workers as routing sees them ---------------------------------------------------------
    def _known(self, row: tuple, now: float) -> KnownWorker:
        worker_id, host, kind, device, queues, models, remaining = row
        queue = inference_queue_of(worker_id, device, queues or ()) \
            if kind == "inference" else None
        return KnownWorker(worker_id, host, kind, queue, tuple(models or ()),
                           now + (remaining or 0.0))

    # Seconds the worker has left to live: none once it said goodbye.
    _WORKER_ROWS = (
        "SELECT worker_id, host, kind, device, queues, models,"
        " CASE WHEN stopped_at IS NULL THEN"
        " extract(epoch FROM last_heartbeat + make_interval(secs => %(ttl)s)"
        " - clock_timestamp())::float8 ELSE 0 END FROM workers"
    )

    async def refresh_registry(self) -> None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(self._WORKER_ROWS, {"ttl": self.cfg.heartbeat_ttl})
            now = time.monotonic()
            workers = [self._known(r, now) for r in await cur.fetchall()]
            load = await load_by_queue(conn, [w.queue for w in workers if w.queue])
        self.registry.replace(workers, load)

    async def _lookup_worker(self, worker_id: str) -> KnownWorker | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(self._WORKER_ROWS + " WHERE worker_id = %(worker_id)s",
                                     {"ttl": self.cfg.heartbeat_ttl, "worker_id": worker_id})
            row = await cur.fetchone()
        if row is None:
            return None
        worker = self._known(row, time.monotonic())
        self.registry.put(worker)
        return worker

    # -- tasks ---------------------------------------------------------------------------------
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
                known = await self._lookup_worker(req.worker)
            if known is None:
                raise RequestError(404, f"unknown worker {req.worker!r}: GET /workers lists "
                                        "the registered workers; or leave 'worker' out")
            if known.kind != "inference":
                raise RequestError(422, f"worker {req.worker!r} is a {known.kind} worker: "
                                        f"{req.task_type} needs an inference worker")
            if req.model is not None and req.model not in known.models:
                serves = ", ".join(known.models) or "only its default model"
                raise RequestError(422, f"worker {req.worker!r} does not serve model "
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
        pushed = await self.writer.submit(
            (task_id, req.task_type, req.prompt, req.model, queue, worker,
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

    async def get_task(self, task_id: uuid.UUID, wait: float) -> dict[str, Any] | None:
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

    # -- workers -------------------------------------------------------------------------------
    _DUPLICATE = (
        " EXISTS (SELECT 1 FROM worker_instances o WHERE o.worker_id = %(worker_id)s"
        " AND o.instance_id <> %(instance_id)s"
        " AND o.last_heartbeat > clock_timestamp() - make_interval(secs => %(ttl)s)"
        " AND (o.started_at >= i.started_at OR o.last_heartbeat > i.started_at))"
    )

    async def register(self, body: dict[str, Any]) -> dict[str, Any]:
        cfg = self.cfg
        worker_id, kind = body["worker_id"], body["kind"]
        queues = list(body.get("queues") or [])
        queue = None
        if kind == "inference":
            queue = inference_queue_of(worker_id, body.get("device"), queues)
            if queue is None:
                raise RequestError(422, "an inference worker must send 'device' (its queue is "
                                        "tasks:<device>:<worker_id>) or its queue in 'queues'")
            if queue not in queues:
                queues.append(queue)
        params = {
            "worker_id": worker_id, "host": body["host"], "kind": kind,
            "device": body.get("device"), "queues": queues,
            "models": list(body.get("models") or []), "version": body.get("version"),
            "pid": body.get("pid"), "instance_id": body["instance_id"], "ttl": cfg.heartbeat_ttl,
        }
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO workers (worker_id, host, kind, device, queues, models, version,"
                " pid, instance_id) VALUES (%(worker_id)s, %(host)s, %(kind)s, %(device)s,"
                " %(queues)s, %(models)s, %(version)s, %(pid)s, %(instance_id)s)"
                " ON CONFLICT (worker_id) DO UPDATE SET host = EXCLUDED.host,"
                " kind = EXCLUDED.kind, device = EXCLUDED.device, queues = EXCLUDED.queues,"
                " models = EXCLUDED.models, version = EXCLUDED.version, pid = EXCLUDED.pid,"
                " instance_id = EXCLUDED.instance_id, registered_at = clock_timestamp(),"
                " last_heartbeat = clock_timestamp(), dead = false, stopped_at = NULL", params)
            cur = await conn.execute(
                "WITH i AS (INSERT INTO worker_instances (instance_id, worker_id, host, pid)"
                " VALUES (%(instance_id)s, %(worker_id)s, %(host)s, %(pid)s)"
                " ON CONFLICT (instance_id) DO UPDATE SET worker_id = EXCLUDED.worker_id,"
                " host = EXCLUDED.host, pid = EXCLUDED.pid, last_heartbeat = clock_timestamp()"
                " RETURNING started_at) SELECT" + self._DUPLICATE + " FROM i", params)
            duplicate = (await cur.fetchone())[0]
            dispatched = (await dispatch_waiting(conn, cfg.heartbeat_ttl)
                          if kind == "inference" else [])
        self.registry.put(KnownWorker(worker_id, body["host"], kind, queue,
                                      tuple(params["models"]),
                                      time.monotonic() + cfg.heartbeat_ttl))
        log.info("registered %s worker '%s' on host '%s' (pid %s, version %s, queues %s)",
                 kind, worker_id, body["host"], body.get("pid"), body.get("version"),
                 ", ".join(queues) or "-")
        if duplicate:
            log.warning("worker '%s' registered from host '%s' pid %s while another live "
                        "process uses the same worker id", worker_id, body["host"],
                        body.get("pid"))
        if dispatched:
            pushes = pushes_of(dispatched)
            for q, ids in pushes.items():
                self.registry.dispatched(q, len(ids))
                log.info("dispatched %d waiting task(s) to %s", len(ids), q)
            self.metrics.dispatched_waiting.inc(len(dispatched))
            try:
                await push(self.redis, pushes)
            except (RedisError, OSError) as exc:
                log.warning("could not push dispatched tasks (%s): the Reaper pushes them "
                            "again", first_line(exc))
        return {"heartbeat_interval": cfg.heartbeat_interval,
                "heartbeat_ttl": cfg.heartbeat_ttl, "duplicate": duplicate, "queues": queues,
                "dispatched": len(dispatched)}

    async def heartbeat(self, worker_id: str, body: dict[str, Any]) -> dict[str, Any] | None:
        params = {
            "worker_id": worker_id, "instance_id": body["instance_id"], "pid": body.get("pid"),
            "in_flight": body.get("in_flight"),
            "db_write_failures": body.get("db_write_failures"),
            "last_error": body.get("last_error"), "ttl": self.cfg.heartbeat_ttl,
        }
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "WITH w AS (UPDATE workers SET last_heartbeat = clock_timestamp(), dead = false,"
                " stopped_at = NULL,"
                " in_flight = COALESCE(%(in_flight)s, in_flight),"
                " db_write_failures = COALESCE(%(db_write_failures)s, db_write_failures),"
                " last_error = %(last_error)s WHERE worker_id = %(worker_id)s"
                " RETURNING worker_id, host, kind, device, queues, models),"
                " i AS (INSERT INTO worker_instances (instance_id, worker_id, host, pid)"
                " SELECT %(instance_id)s, worker_id, host, %(pid)s FROM w"
                " ON CONFLICT (instance_id) DO UPDATE SET last_heartbeat = clock_timestamp(),"
                " worker_id = EXCLUDED.worker_id,"
                " pid = COALESCE(EXCLUDED.pid, worker_instances.pid) RETURNING started_at)"
                " SELECT w.worker_id, w.host, w.kind, w.device, w.queues, w.models,"
                " %(ttl)s::float8," + self._DUPLICATE + " FROM w, i", params)
            row = await cur.fetchone()
        if row is None:
            return None
        before = self.registry.get(worker_id)
        self.registry.put(self._known(row[:7], time.monotonic()))
        if before is not None and not before.alive() and self.reaper is not None:
            self.reaper.kick()  # back from the dead: dispatch what waits for it now
        return {"duplicate": row[7]}

    async def deregister(self, worker_id: str, instance_id: str) -> dict[str, Any] | None:
        """The goodbye of a stopping worker process: its instance is gone, and the worker is
        stopped unless another process of it registered since. None for an unknown worker."""
        params = {"worker_id": worker_id, "instance_id": instance_id}
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "WITH gone AS (DELETE FROM worker_instances WHERE instance_id = %(instance_id)s"
                " AND worker_id = %(worker_id)s)"
                " UPDATE workers SET stopped_at = clock_timestamp(), in_flight = 0"
                " WHERE worker_id = %(worker_id)s AND instance_id = %(instance_id)s"
                " RETURNING host, kind", params)
            stopped = await cur.fetchone()
            if stopped is None:
                cur = await conn.execute(
                    "SELECT 1 FROM workers WHERE worker_id = %(worker_id)s", params)
                if await cur.fetchone() is None:
                    return None
        if stopped is not None:
            known = self.registry.get(worker_id)
            if known is not None:
                self.registry.put(dataclasses.replace(known, expires=time.monotonic()))
            log.info("%s worker '%s' on host '%s' stopped (deregistered)", stopped[1],
                     worker_id, stopped[0])
            if self.reaper is not None:
                self.reaper.kick()  # its waiting tasks go to another worker now
        return {"stopped": stopped is not None}

    async def list_workers(self) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                "SELECT w.worker_id, w.host, w.kind, w.device, w.queues, w.models, w.version,"
                " w.pid, w.instance_id::text, w.registered_at, w.last_heartbeat,"
                f" {WORKER_ALIVE} AS alive, w.stopped_at,"
                " round(extract(epoch FROM clock_timestamp() - w.last_heartbeat)::numeric, 1)"
                "::float8 AS seconds_since_heartbeat,"
                " w.in_flight, w.db_write_failures, w.last_error, w.duplicate,"
                " (SELECT coalesce(json_agg(json_build_object('instance_id', i.instance_id,"
                "   'host', i.host, 'pid', i.pid, 'started_at', i.started_at,"
                "   'last_heartbeat', i.last_heartbeat) ORDER BY i.started_at), '[]')"
                "  FROM worker_instances i WHERE i.worker_id = w.worker_id AND"
                "  i.last_heartbeat > clock_timestamp() - make_interval(secs => %(ttl)s))"
                " AS live_instances"
                " FROM workers w ORDER BY w.worker_id", {"ttl": self.cfg.heartbeat_ttl})
            rows = await cur.fetchall()
        for row in rows:
            for column in ("registered_at", "last_heartbeat", "stopped_at"):
                row[column] = _iso(row[column])
        return rows

    async def _active_counts(self, conn: psycopg.AsyncConnection
                             ) -> tuple[dict[str, int], dict[str, int], int]:
        cur = await conn.execute(
            "SELECT queue, status, count(*) FROM tasks WHERE status IN ('queued', 'running')"
            " GROUP BY queue, status")
        queued: dict[str, int] = {}
        running: dict[str, int] = {}
        waiting = 0
        for queue, status, count in await cur.fetchall():
            if queue is None:
                waiting += count if status == sm.QUEUED else 0
                continue
            (queued if status == sm.QUEUED else running)[queue] = count
        return queued, running, waiting

    async def _queue_names(self, conn: psycopg.AsyncConnection, extra: set[str]) -> list[str]:
        cur = await conn.execute("SELECT DISTINCT unnest(queues) FROM workers")
        names = {r[0] for r in await cur.fetchall()} | set(SHARED_QUEUES) | extra
        return sorted(names)

    async def list_queues(self) -> dict[str, Any]:
        async with self.pool.connection() as conn:
            queued, running, waiting = await self._active_counts(conn)
            names = await self._queue_names(conn, set(queued) | set(running))
        async with self.redis.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.llen(name)
            depths = await pipe.execute()
        return {
            "queues": [{"queue": name, "depth": depth, "in_flight": running.get(name, 0),
                        "queued": queued.get(name, 0)} for name, depth in zip(names, depths,
                                                                             strict=True)],
            "waiting": waiting,
        }

    # -- health and metrics --------------------------------------------------------------------
    async def check_postgres(self) -> str | None:
        try:
            async with asyncio.timeout(3):
                async with self.pool.connection(timeout=3) as conn:
                    await conn.execute("SELECT 1")
            return None
        except Exception as exc:
            return f"PostgreSQL at {self.cfg.pg_address} did not answer: {first_line(exc)}"

    async def check_redis(self) -> str | None:
        try:
            async with asyncio.timeout(3):
                await self.redis.ping()
            return None
        except Exception as exc:
            return f"Redis at {self.cfg.redis_address} did not answer: {first_line(exc)}"

    async def health(self) -> tuple[bool, dict[str, Any]]:
        pg_error, redis_error = await asyncio.gather(self.check_postgres(), self.check_redis())
        self.metrics.backend_up.labels("postgresql").set(0 if pg_error else 1)
        self.metrics.backend_up.labels("redis").set(0 if redis_error else 1)
        body: dict[str, Any] = {
            "postgresql": "ok" if pg_error is None else "failed",
            "redis": "ok" if redis_error is None else "failed",
            "version": __version__,
        }
        errors = [e for e in (pg_error, redis_error) if e]
        if errors:
            body["error"] = "; ".join(errors)
        return not errors, body

    async def render_metrics(self) -> bytes:
        m = self.metrics
        now = time.monotonic()
        names: list[str] = []
        running: dict[str, int] = {}
        try:
            if now - self._stats.at > 2.0 or self._stats.value is None:
                async with asyncio.timeout(5):
                    async with self.pool.connection(timeout=3) as conn:
                        # Unfinished tasks only: they are indexed, so this stays cheap however
                        # many finished tasks the table holds (those are counted from
                        # task_events in coordinator_tasks_finished_total).
                        cur = await conn.execute(
                            "SELECT task_type, status, count(*) FROM tasks"
                            " WHERE status IN ('queued', 'running') GROUP BY 1, 2")
                        counts = await cur.fetchall()
                        queued, running, waiting = await self._active_counts(conn)
                        cur = await conn.execute(
                            f"SELECT kind, count(*) FILTER (WHERE {WORKER_ALIVE}),"
                            " count(*) FILTER (WHERE duplicate) FROM workers GROUP BY kind",
                            {"ttl": self.cfg.heartbeat_ttl})
                        kinds = await cur.fetchall()
                        names = await self._queue_names(conn, set(queued) | set(running))
                self._stats = _Cache(now, (counts, running, waiting, kinds, names))
            counts, running, waiting, kinds, names = self._stats.value
            m.set_task_counts(counts, waiting)
            m.set_workers({k: alive for k, alive, _ in kinds}, sum(d for _, _, d in kinds))
            m.backend_up.labels("postgresql").set(1)
        except Exception as exc:
            m.backend_up.labels("postgresql").set(0)
            log.warning("metrics: PostgreSQL did not answer: %s", first_line(exc))
        if names:
            try:
                async with asyncio.timeout(3):
                    async with self.redis.pipeline(transaction=False) as pipe:
                        for name in names:
                            pipe.llen(name)
                        depths = await pipe.execute()
                m.set_queues(dict(zip(names, depths, strict=True)), running)
                m.backend_up.labels("redis").set(1)
            except Exception as exc:
                m.backend_up.labels("redis").set(0)
                log.warning("metrics: Redis did not answer: %s", first_line(exc))
        return m.render()
