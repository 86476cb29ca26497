"""Stats: GET /queues, /health and /metrics, read from PostgreSQL and Redis."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import psycopg
import psycopg_pool
import redis.asyncio as aioredis
from coordinator_contract import SHARED_QUEUES
from coordinator_sql import SQL
from cryptography import x509

from . import INSTANCE, __version__
from . import queries as q
from . import statemachine as sm
from .config import Config
from .errors import first_line
from .metrics import Metrics

log = logging.getLogger("coordinator")


@dataclass
class _Cache:
    at: float = 0.0
    value: Any = None


class Stats:
    def __init__(self, cfg: Config, pool: psycopg_pool.AsyncConnectionPool,
                 redis: aioredis.Redis, metrics: Metrics) -> None:
        self.cfg = cfg
        self.pool = pool
        self.redis = redis
        self.metrics = metrics
        self._stats = _Cache()

    async def _active_counts(self, conn: psycopg.AsyncConnection
                             ) -> tuple[dict[str, int], dict[str, int], int]:
        cur = await conn.execute(SQL.ACTIVE_BY_QUEUE, q.USERS_ONLY)
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
        cur = await conn.execute(SQL.WORKER_QUEUES, {"ttl": self.cfg.heartbeat_ttl})
        names = {name for (name,) in await cur.fetchall()} | set(SHARED_QUEUES) | extra
        return sorted(names)

    async def queues(self) -> dict[str, Any]:
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

    # -- health and metrics ---------------------------------------------------------------
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
            "instance": INSTANCE,
        }
        errors = [e for e in (pg_error, redis_error) if e]
        if errors:
            body["error"] = "; ".join(errors)
        return not errors, body

    async def _cluster_snapshot(self) -> tuple[Any, ...]:
        """The gauges' figures from PostgreSQL, read at most every 2 s."""
        now = time.monotonic()
        if now - self._stats.at <= 2.0 and self._stats.value is not None:
            return self._stats.value
        async with asyncio.timeout(5):
            async with self.pool.connection(timeout=3) as conn:
                # Unfinished tasks only: they are indexed, so this stays cheap however many
                # finished tasks the table holds (those are counted from task_events in
                # coordinator_tasks_finished_total).
                cur = await conn.execute(SQL.ACTIVE_BY_TYPE, q.USERS_ONLY)
                counts = await cur.fetchall()
                cur = await conn.execute(SQL.OLDEST_QUEUED_BY_TYPE, q.USERS_ONLY)
                oldest = dict(await cur.fetchall())
                queued, running, waiting = await self._active_counts(conn)
                cur = await conn.execute(SQL.WORKERS_BY_KIND, {"ttl": self.cfg.heartbeat_ttl})
                kinds = await cur.fetchall()
                names = await self._queue_names(conn, set(queued) | set(running))
                cur = await conn.execute(SQL.LAST_BACKUP)
                (last_backup,) = await cur.fetchone()
        self._stats = _Cache(now, (counts, oldest, running, waiting, kinds, names, last_backup))
        return self._stats.value

    def _certificates(self) -> dict[tuple[str, str], float]:
        """The expiry of the certificate it serves and of the CA one it trusts, when TLS is
        on; read at every scrape, so a renewed file shows at once."""
        found: dict[tuple[str, str], float] = {}
        for name, path in (("serving", self.cfg.tls_cert), ("ca", self.cfg.redis_ca_file)):
            if not path:
                continue
            try:
                found[name, path] = certificate_expiry(path)
            except (OSError, ValueError) as exc:
                log.warning("metrics: cannot read the %s certificate %s: %s", name, path,
                            first_line(exc))
        return found

    async def render_metrics(self) -> bytes:
        m = self.metrics
        names: list[str] = []
        running: dict[str, int] = {}
        try:
            counts, oldest, running, waiting, kinds, names, last_backup = \
                await self._cluster_snapshot()
            m.set_task_counts(counts, waiting, oldest)
            m.set_workers(kinds)
            m.last_backup.set(last_backup or 0)
            m.backend_up.labels("postgresql").set(1)
        except Exception as exc:
            m.backend_up.labels("postgresql").set(0)
            log.warning("metrics: PostgreSQL did not answer: %s", first_line(exc))
        m.set_certificates(self._certificates())
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


def certificate_expiry(path: str) -> float:
    """When the first certificate of a PEM file (a served chain's leaf) expires, Unix time."""
    with open(path, "rb") as pem:
        return x509.load_pem_x509_certificate(pem.read()).not_valid_after_utc.timestamp()
