"""The Coordinator's lifecycle: its connections and its parts.

``Coordinator`` owns the PostgreSQL pool, the Redis client, the task-event listener, the
Reaper, the Prober (worker probes) and the Notifier (notifications), and the three parts the
HTTP layer (``app``) calls: ``tasks`` (POST /route, GET /task), ``workers`` (registration,
heartbeats, GET /workers) and ``stats`` (GET /queues, /health, /metrics).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

import psycopg
import psycopg_pool
import redis.asyncio as aioredis
from coordinator_contract import PROBE_TYPE, redis_tls_options
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import RedisError

from . import __version__
from .config import Config
from .errors import StartupError, first_line, pg_login_message, redis_message
from .events import TaskEvents
from .metrics import Metrics
from .notify import Notifier
from .probes import Prober
from .reaper import Reaper
from .registry import Registry
from .schema import ensure_schema
from .stats import Stats
from .tasks import TaskReader, Tasks, TaskWriter
from .workers import Workers

log = logging.getLogger("coordinator")


def make_redis(cfg: Config) -> aioredis.Redis:
    return aioredis.Redis(
        host=cfg.redis_host, port=cfg.redis_port, username=cfg.redis_username,
        password=cfg.redis_password, socket_timeout=5, socket_connect_timeout=3,
        retry=Retry(ExponentialWithJitterBackoff(cap=0.2, base=0.01), 2),
        decode_responses=False, client_name="coordinator",
        **redis_tls_options(cfg.redis_ca_file),
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
        self.prober: Prober | None = None
        self.notifier: Notifier | None = None
        self.tasks: Tasks | None = None
        self.workers: Workers | None = None
        self.stats: Stats | None = None
        self.loop: asyncio.AbstractEventLoop | None = None  # the one it runs in

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
        self.events = TaskEvents(cfg.pg_dsn, self.app_name + " listen", self._on_event)
        self.events.start()
        self.workers = Workers(cfg, self.pool, self.redis, self.registry, self.metrics)
        self.tasks = Tasks(cfg, self.registry, self.workers, TaskWriter(self.pool, self.redis),
                           TaskReader(self.pool), self.events, self.metrics)
        self.stats = Stats(cfg, self.pool, self.redis, self.metrics)
        try:
            await self.workers.refresh_registry()
        except Exception as exc:
            log.warning("could not read the workers at start: %s", first_line(exc))
        self.reaper = Reaper(cfg, self.pool, self.redis, self.metrics,
                             on_tick=self.workers.refresh_registry)
        self.workers.reaper = self.reaper
        self.reaper.start()
        if cfg.probe_interval > 0:
            self.prober = Prober(cfg, self.pool, self.redis)
            self.prober.start()
        if cfg.notify_url is not None:
            self.notifier = Notifier(cfg, self.pool)
            self.notifier.start()
        log.info("coordinator %s ready: PostgreSQL %s, Redis %s, heartbeat TTL %g s, auth %s",
                 __version__, cfg.pg_address, cfg.redis_address, cfg.heartbeat_ttl,
                 "on" if cfg.token else "off")

    async def stop(self) -> None:
        for part in (self.notifier, self.prober, self.reaper):
            if part is not None:
                await part.stop()
        if self.events is not None:
            await self.events.stop()
        if self.redis is not None:
            await self.redis.aclose()
        if self.pool is not None:
            await self.pool.close()

    def _on_event(self, event: dict) -> None:
        if event.get("task_type") == PROBE_TYPE:
            return  # a worker probe is no user's task: GET /workers shows its outcome
        self.metrics.observe_event(
            str(event.get("task_type")), str(event.get("status")), event.get("fallback") is True,
            event.get("dispatch_seconds"), event.get("total_seconds"))
