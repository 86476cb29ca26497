"""Test helpers for the Coordinator: an in-process server, and the worker side in plain
SQL and Redis (the real worker programs live elsewhere; these follow docs/design.md)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import coordinator_contract as contract
import httpx
import psycopg
import redis
import uvicorn
from coordinator_sql import SQL

from coordinator.app import create_app
from coordinator.config import Config, load_config
from lab.throwaway import DB_NAME, ThrowawayPostgres, ThrowawayRedis, wait_until

from ..conftest import create_schema

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "files"


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05,
             what: str = "condition") -> Any:
    """lab.throwaway.wait_until with this suite's defaults (10 s, polled every 50 ms)."""
    return wait_until(predicate, timeout, what, interval)


class ServerThread:
    """The coordinator app under uvicorn in a background thread, on a free port."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.app = create_app(cfg)
        self.coordinator = self.app.coordinator
        scheme = "https" if cfg.tls_cert else "http"
        self.url = f"{scheme}://127.0.0.1:{cfg.port}"
        self.server = uvicorn.Server(uvicorn.Config(
            self.app, host="127.0.0.1", port=cfg.port, loop="uvloop", http="httptools",
            log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=5,
            proxy_headers=False, ssl_certfile=cfg.tls_cert, ssl_keyfile=cfg.tls_key,
        ))
        self.thread = threading.Thread(target=self.server.run, daemon=True,
                                       name=f"coordinator-{cfg.port}")

    def start(self) -> ServerThread:
        self.thread.start()
        wait_for(lambda: self.server.started or not self.thread.is_alive(), 30,
                 what="the coordinator to start")
        if not self.server.started:
            raise RuntimeError("the coordinator did not start (see the log)")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(20)

    def run(self, coro: Any, timeout: float = 30) -> Any:
        """Run a coroutine on the server's event loop (e.g. one Reaper pass)."""
        return asyncio.run_coroutine_threadsafe(coro, self.coordinator.loop).result(timeout)

    def reap(self) -> Any:
        return self.run(self.coordinator.reaper.run_once())

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


class Backends:
    """The PostgreSQL database and Redis server the coordinator tests use."""

    def __init__(self, dsn: str, admin_dsn: str, redis_port: int, redis_password: str) -> None:
        self.dsn = dsn
        self.admin_dsn = admin_dsn
        self.redis_port = redis_port
        self.redis_password = redis_password

    @classmethod
    def create(cls, pg: ThrowawayPostgres, rds: ThrowawayRedis, db: str,
               schema: bool = True) -> Backends:
        """Database ``db`` of ``pg``, made anew (with the Coordinator's schema unless
        ``schema`` is false: a Coordinator started on it makes its own), and ``rds``."""
        dsn = pg.database(db)
        if schema:
            create_schema(dsn)
        admin = pg.admin_dsn.replace(f"dbname={DB_NAME} ", f"dbname={db} ")
        return cls(dsn, admin, rds.port, rds.password)

    def env(self, **overrides: str) -> dict[str, str]:
        # No worker probes unless a test asks for them: a probe in a FakeWorker's queue
        # would be the id its test takes.
        env = {
            "PG_DSN": self.dsn, "REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(self.redis_port),
            "REDIS_PASSWORD": self.redis_password, "COORDINATOR_PG_POOL_SIZE": "4",
            "COORDINATOR_PROBE_INTERVAL": "0",
        }
        env.update(overrides)
        return env

    def config(self, port: int, **overrides: str) -> Config:
        return load_config(self.env(COORDINATOR_PORT=str(port), **overrides))

    def redis(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.redis_port,
                           password=self.redis_password, decode_responses=True)

    @contextlib.contextmanager
    def db(self) -> Iterator[psycopg.Connection]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            yield conn

    def sql(self, query: str, params: Any = None) -> list[tuple]:
        with self.db() as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def task(self, task_id: str) -> dict[str, Any]:
        with self.db() as conn:
            cur = conn.cursor(row_factory=psycopg.rows.dict_row)
            cur.execute("SELECT * FROM tasks WHERE id = %s", (task_id,))
            row = cur.fetchone()
            assert row is not None, f"no task {task_id}"
            return row


class FakeWorker:
    """The worker side of the contract, by hand: register, heartbeat, BLMOVE, guarded claim,
    guarded result (docs/design.md)."""

    def __init__(self, backends: Backends, url: str, worker_id: str, kind: str = "inference",
                 device: str = "cpu", models: tuple[str, ...] = (), host: str | None = None,
                 token: str | None = None, pid: int | None = None) -> None:
        self.backends = backends
        self.http = httpx.Client(base_url=url, timeout=30, headers=(
            {"Authorization": f"Bearer {token}"} if token else {}))
        self.worker_id = worker_id
        self.kind = kind
        self.device = device
        self.models = list(models)
        self.host = host or f"host-{worker_id}"
        self.pid = pid if pid is not None else os.getpid()
        self.instance_id = str(uuid.uuid4())
        self.redis = backends.redis()
        self._conn: psycopg.Connection | None = None
        self._beating: threading.Event | None = None
        self._thread: threading.Thread | None = None
        self.heartbeat_answers: list[dict] = []

    @property
    def queue(self) -> str:
        if self.kind == "web":
            return "tasks:web"
        if self.kind == "rag":
            return "tasks:rag"
        return f"tasks:{self.device}:{self.worker_id}"

    @property
    def processing(self) -> str:
        return f"processing:{self.worker_id}"

    def register(self) -> dict:
        body = {"worker_id": self.worker_id, "host": self.host, "kind": self.kind,
                "version": "test", "pid": self.pid, "instance_id": self.instance_id}
        # As worker_base and worker_infer send it: an inference worker's queue follows from
        # its device.
        if self.kind == "inference":
            body |= {"device": self.device, "models": self.models}
        else:
            body["queues"] = [self.queue]
        resp = self.http.post("/workers/register", json=body)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def heartbeat(self, in_flight: int = 0, drained: bool | None = None) -> httpx.Response:
        body = {"instance_id": self.instance_id, "pid": self.pid, "in_flight": in_flight,
                "db_write_failures": 0, "last_error": None}
        if drained is not None:
            body["drained"] = drained
        return self.http.post(f"/workers/{self.worker_id}/heartbeat", json=body)

    def start(self, interval: float = 0.1) -> FakeWorker:
        """Register and heartbeat every ``interval`` seconds in a thread until ``stop``."""
        self.register()
        stop = self._beating = threading.Event()

        def beat() -> None:
            while not stop.wait(interval):
                try:
                    resp = self.heartbeat()
                    if resp.status_code == 200:
                        self.heartbeat_answers.append(resp.json())
                except httpx.HTTPError:
                    pass

        self._thread = threading.Thread(target=beat, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop heartbeating: the process "dies" as far as the Coordinator can tell."""
        if self._beating is not None:
            self._beating.set()
            self._thread.join(5)
            self._beating = None

    def take(self, timeout: float = 5) -> str | None:
        return self.redis.blmove(self.queue, self.processing, timeout, "RIGHT", "LEFT")

    @property
    def conn(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.backends.dsn, autocommit=True)
        return self._conn

    def claim(self, task_id: str) -> str | None:
        claim = uuid.uuid4()
        cur = self.conn.execute(SQL.CLAIM, {
            "id": task_id, "claim": claim, "worker_id": self.worker_id, "host": self.host,
            "queues": [self.queue]})
        return str(claim) if cur.fetchone() else None

    def finish(self, task_id: str, claim: str | None, result: str = "an answer",
               status: str = "done", error: str | None = None, fallback: bool = False,
               worker: str | None = None) -> bool:
        default = contract.WEB_RESULT_WORKER if self.kind == "web" else self.worker_id
        cur = self.conn.execute(SQL.RESULT, {
            "id": task_id, "claim": claim, "status": status, "result": result,
            "fallback": fallback, "error": error, "worker": worker or default,
            "answered_model": None})
        done = cur.rowcount == 1
        if done:
            self.redis.lrem(self.processing, 1, task_id)
        return done

    def close(self) -> None:
        self.stop()
        if self._conn is not None:
            self._conn.close()
        self.http.close()
        self.redis.close()


def coordinator_process(env: dict[str, str], files: Path = FILES, **kwargs: Any) -> Any:
    """``python -m coordinator`` from ``files`` (this repository's files/, or another
    version's), as a deployment starts it."""
    import subprocess

    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("PG_", "REDIS_", "COORDINATOR_"))}
    full.update(env)
    return subprocess.Popen([sys.executable, "-m", "coordinator"], cwd=files, env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kwargs)
