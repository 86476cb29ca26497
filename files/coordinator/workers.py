"""Workers: registration, heartbeats, goodbyes, GET /workers, and the in-memory registry
routing reads (refreshed on every Reaper tick, updated at once by what this instance hears).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

import psycopg
import psycopg_pool
import redis.asyncio as aioredis
from coordinator_contract import drain_hint
from coordinator_sql import SQL
from psycopg.rows import class_row, dict_row
from redis.exceptions import RedisError

from . import audit
from . import queries as q
from .config import Config
from .errors import first_line
from .metrics import Metrics
from .reaper import dispatch_waiting, load_by_queue, push, pushes_of
from .registry import KnownWorker, Registry
from .routing import inference_queue_of, registered_queues

if TYPE_CHECKING:
    from .reaper import Reaper

log = logging.getLogger("coordinator")


def known_worker(row: q.RoutedWorker, now: float) -> KnownWorker:
    queue = (inference_queue_of(row.worker_id, row.device, row.queues or ())
             if row.kind == "inference" else None)
    return KnownWorker(row.worker_id, row.host, row.kind, queue, tuple(row.models or ()),
                       now + (row.seconds_to_live or 0.0), row.draining, row.healthy)


class Workers:
    def __init__(self, cfg: Config, pool: psycopg_pool.AsyncConnectionPool,
                 redis: aioredis.Redis, registry: Registry, metrics: Metrics) -> None:
        self.cfg = cfg
        self.pool = pool
        self.redis = redis
        self.registry = registry
        self.metrics = metrics
        self.reaper: Reaper | None = None  # kicked when a worker comes back or goes

    async def refresh_registry(self) -> None:
        async with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=class_row(q.RoutedWorker))
            await cur.execute(SQL.WORKER_ROWS, {"ttl": self.cfg.heartbeat_ttl})
            now = time.monotonic()
            workers = [known_worker(r, now) for r in await cur.fetchall()]
            load = await load_by_queue(conn, [w.queue for w in workers if w.queue])
        self.registry.replace(workers, load)

    async def lookup(self, worker_id: str) -> KnownWorker | None:
        """One worker from PostgreSQL (it may have registered at another instance)."""
        async with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=class_row(q.RoutedWorker))
            await cur.execute(SQL.WORKER_ROW, {"ttl": self.cfg.heartbeat_ttl,
                                             "worker_id": worker_id})
            row = await cur.fetchone()
        if row is None:
            return None
        worker = known_worker(row, time.monotonic())
        self.registry.put(worker)
        return worker

    async def register(self, body: dict[str, Any]) -> dict[str, Any]:
        cfg = self.cfg
        worker_id, kind = body["worker_id"], body["kind"]
        queues = registered_queues(kind, worker_id, body.get("device"), body.get("queues") or ())
        queue = queues[0] if kind == "inference" else None
        params = {
            "worker_id": worker_id, "host": body["host"], "kind": kind,
            "device": body.get("device"), "queues": queues,
            "models": list(body.get("models") or []), "version": body.get("version"),
            "pid": body.get("pid"), "instance_id": body["instance_id"], "ttl": cfg.heartbeat_ttl,
            "os": body.get("os"),
        }
        async with self.pool.connection() as conn, conn.transaction():
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(SQL.REGISTER_WORKER, params)
            registered = await cur.fetchone()
            draining = registered["draining"]
            # The worker's row, the tasks', then the instance's: a Reaper pass takes them in
            # that order too, so waiting for the tasks it holds cannot deadlock.
            dispatched = (await dispatch_waiting(conn, cfg.heartbeat_ttl)
                          if kind == "inference" and not draining else [])
            await cur.execute(SQL.REGISTER_INSTANCE, params)
            duplicate = (await cur.fetchone())["duplicate"]
        self.registry.put(KnownWorker(worker_id, body["host"], kind, queue,
                                      tuple(params["models"]),
                                      time.monotonic() + cfg.heartbeat_ttl, draining,
                                      registered["healthy"]))
        log.info("registered %s worker '%s' on host '%s' (pid %s, version %s, queues %s)",
                 kind, worker_id, body["host"], body.get("pid"), body.get("version"),
                 ", ".join(queues) or "-")
        if draining:
            log.info("worker '%s' is drained: it takes no task until POST /workers/%s/undrain",
                     worker_id, worker_id)
        if duplicate:
            log.warning("worker '%s' registered from host '%s' pid %s while another live "
                        "process uses the same worker id", worker_id, body["host"],
                        body.get("pid"))
        if dispatched:
            pushes = pushes_of(dispatched)
            for queue_name, ids in pushes.items():
                self.registry.dispatched(queue_name, len(ids))
                log.info("dispatched %d waiting task(s) to %s", len(ids), queue_name)
            self.metrics.dispatched_waiting.inc(len(dispatched))
            try:
                await push(self.redis, pushes)
            except (RedisError, OSError) as exc:
                log.warning("could not push dispatched tasks (%s): the Reaper pushes them "
                            "again", first_line(exc))
        return {"heartbeat_interval": cfg.heartbeat_interval,
                "heartbeat_ttl": cfg.heartbeat_ttl, "duplicate": duplicate, "queues": queues,
                "dispatched": len(dispatched), "drain": draining}

    async def heartbeat(self, worker_id: str, body: dict[str, Any]) -> dict[str, Any] | None:
        params = {
            "worker_id": worker_id, "instance_id": body["instance_id"], "pid": body.get("pid"),
            "in_flight": body.get("in_flight"),
            "db_write_failures": body.get("db_write_failures"),
            "last_error": body.get("last_error"), "drained": body.get("drained"),
            "ttl": self.cfg.heartbeat_ttl,
        }
        async with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=class_row(q.Heartbeat))
            await cur.execute(SQL.HEARTBEAT, params)
            row = await cur.fetchone()
        if row is None:
            return None
        before = self.registry.get(worker_id)
        self.registry.put(known_worker(row, time.monotonic()))
        if before is not None and not before.alive() and self.reaper is not None:
            self.reaper.kick()  # back from the dead: dispatch what waits for it now
        return {"duplicate": row.duplicate, "drain": row.draining}

    async def deregister(self, worker_id: str, instance_id: str) -> dict[str, Any] | None:
        """The goodbye of a stopping worker process: its instance is gone, and the worker is
        stopped unless another process of it registered since. None for an unknown worker."""
        params = {"worker_id": worker_id, "instance_id": instance_id}
        async with self.pool.connection() as conn, conn.transaction():
            cur = conn.cursor(row_factory=class_row(q.Stopped))
            await cur.execute(SQL.DEREGISTER, params)
            stopped = await cur.fetchone()
            if stopped is None:
                exists = await conn.execute(SQL.WORKER_EXISTS, params)
                if await exists.fetchone() is None:
                    return None
        if stopped is not None:
            known = self.registry.get(worker_id)
            if known is not None:
                self.registry.put(dataclasses.replace(known, expires=time.monotonic()))
            log.info("%s worker '%s' on host '%s' stopped (deregistered)", stopped.kind,
                     worker_id, stopped.host)
            if self.reaper is not None:
                self.reaper.kick()  # its waiting tasks go to another worker now
        return {"stopped": stopped is not None}

    async def drain(self, worker_id: str, drain: bool, actor: str,
                    idempotency_key: str | None = None) -> dict[str, Any] | None:
        """Drain (or undrain) a worker, recorded in the audit table; None for an unknown
        worker. A second request changes nothing (guarded update; same key: same answer)."""
        action = "drain" if drain else "undrain"

        async def effect(conn: psycopg.AsyncConnection) -> audit.Effect:
            cur = conn.cursor(row_factory=class_row(q.DrainChange))
            await cur.execute(SQL.DRAIN if drain else SQL.UNDRAIN, {"worker_id": worker_id})
            changed = await cur.fetchone()
            state = conn.cursor(row_factory=dict_row)
            await state.execute(SQL.WORKER_STATE_OF, {"worker_id": worker_id,
                                                    "ttl": self.cfg.heartbeat_ttl})
            row = await state.fetchone()
            if row is None:
                raise audit.NotFound
            if changed is None:
                return audit.Effect(False, f"worker '{worker_id}' is {row['state']} already: "
                                           f"nothing to {action}")
            return audit.Effect(True, f"{action}ed {changed.kind} worker '{worker_id}' on "
                                      f"host '{changed.host}': it is {row['state']} now")

        outcome = await audit.perform(self.pool, actor, action, worker_id, idempotency_key,
                                      effect)
        if outcome is None:
            return None
        await self.hint_drain(worker_id, drain)
        if outcome.changed and not outcome.repeated:
            known = self.registry.get(worker_id)
            if known is not None:
                self.registry.put(dataclasses.replace(known, draining=drain))
            log.info("%s (by %s)", outcome.message, actor)
            if self.reaper is not None:
                self.reaper.kick()  # its waiting tasks go to another worker now, or back
        async with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(SQL.WORKER_STATE_OF, {"worker_id": worker_id,
                                                  "ttl": self.cfg.heartbeat_ttl})
            row = await cur.fetchone()
        return {"worker_id": worker_id, "state": row["state"] if row else "stopped",
                "changed": outcome.changed, "message": outcome.message,
                "repeated": outcome.repeated}

    async def hint_drain(self, worker_id: str, drain: bool) -> None:
        """Set (for a heartbeat TTL) or delete the worker's drain hint, which makes it ask
        now rather than at its next heartbeat. Best effort: the drain itself is recorded
        already, and without the hint the worker learns of it by that heartbeat."""
        try:
            if drain:
                await self.redis.set(drain_hint(worker_id), "1",
                                     ex=max(1, round(self.cfg.heartbeat_ttl)))
            else:
                await self.redis.delete(drain_hint(worker_id))
        except RedisError as error:
            log.warning("drain hint for worker '%s' not %s in Redis (%s): the worker learns "
                        "of it at its next heartbeat", worker_id, "set" if drain else "removed",
                        first_line(error))

    async def list(self) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(SQL.LIST_WORKERS, {"ttl": self.cfg.heartbeat_ttl})
            rows = await cur.fetchall()
        for row in rows:
            for column in ("registered_at", "last_heartbeat", "stopped_at",
                           "drain_requested_at", "probe_at"):
                row[column] = q.iso(row[column])
        return rows
