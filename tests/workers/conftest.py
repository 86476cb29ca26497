"""Fixtures for the worker tests: the real Coordinator, the SearXNG and Ollama stand-ins, and
worker processes started as a user starts them (`python files/worker_web.py` with env).

Everything listens on 127.0.0.1. The Coordinator runs with a 2 s heartbeat TTL so the Reaper
acts within seconds.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extras
import pytest
import redis
import requests

from lab import throwaway
from lab.processes import CoordinatorProcess, Process, Standin
from lab.standins.ollama import DEFAULT_MODEL
from lab.throwaway import Certificates, ThrowawayPostgres, ThrowawayRedis, free_port

REPO = Path(__file__).resolve().parents[2]
FILES = REPO / "files"
PYTHON = sys.executable
MODEL = DEFAULT_MODEL
HEARTBEAT_TTL = 2
DEFAULT_WAIT = 20.0
WAITING = "Waiting on queues ['tasks:web']"
TOKYO = "今日の東京の天気は？"


def wait_until(predicate: Callable[[], Any], timeout: float = DEFAULT_WAIT,
               what: str = "condition") -> Any:
    """lab.throwaway.wait_until with this suite's default timeout."""
    return throwaway.wait_until(predicate, timeout, what)


@pytest.fixture(scope="session")
def searxng(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standin]:
    # JSON enabled, as the cluster's SearXNG has it (SearXNG's default settings.yml has not).
    with Standin("lab.standins.searxng", tmp_path_factory.mktemp("s") / "searxng.log",
                 "--json-enabled") as up:
        yield up


@pytest.fixture(scope="session")
def ollama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standin]:
    with Standin("lab.standins.ollama", tmp_path_factory.mktemp("o") / "ollama.log") as up:
        yield up


class Coordinator(CoordinatorProcess):
    """The Coordinator with a short heartbeat TTL, and the two calls the worker tests make."""

    def __init__(self, pg: ThrowawayPostgres, rds: ThrowawayRedis, tmp: Path,
                 port: int | None = None, token: str | None = None,
                 open_files: int | None = None, tls: Certificates | None = None) -> None:
        port = port or free_port()
        super().__init__(pg.dsn, rds, tmp / f"coordinator-{port}.log", port=port, token=token,
                         open_files=open_files, tls=tls, heartbeat_ttl=HEARTBEAT_TTL)

    def route(self, prompt: str, task_type: str, **extra: str) -> str:
        response = requests.post(f"{self.url}/route", timeout=10, verify=self.ca_file or True,
                                 json={"prompt": prompt, "task_type": task_type, **extra})
        assert response.status_code == 201, response.text
        return response.json()["task_id"]

    def worker(self, worker_id: str) -> dict[str, Any] | None:
        response = requests.get(f"{self.url}/workers", timeout=5, verify=self.ca_file or True)
        assert response.status_code == 200, response.text
        body = response.json()
        workers = body["workers"] if isinstance(body, dict) else body
        return next((w for w in workers if w.get("worker_id", w.get("id")) == worker_id), None)


@pytest.fixture(scope="session")
def coordinator(pg: ThrowawayPostgres, redis_server: ThrowawayRedis,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Coordinator]:
    with Coordinator(pg, redis_server, tmp_path_factory.mktemp("coordinator")) as coord:
        yield coord


@pytest.fixture
def rds(redis_server: ThrowawayRedis) -> Iterator[redis.Redis]:
    client = redis.Redis(host="127.0.0.1", port=redis_server.port,
                         password=redis_server.password, decode_responses=True)
    # A web task a previous test left queued must not reach this test's worker.
    client.delete("tasks:web")
    yield client
    client.close()


class Tasks:
    """Reads the tasks table as a user's psql would (of ``pg``'s database, or ``dsn``'s)."""

    def __init__(self, pg: ThrowawayPostgres, dsn: str | None = None) -> None:
        self.dsn = dsn or pg.dsn
        self.conn = self._connect()

    def _connect(self) -> psycopg2.extensions.connection:
        conn = psycopg2.connect(self.dsn)
        conn.autocommit = True
        return conn

    def get(self, task_id: str) -> dict[str, Any]:
        try:
            row = self._fetch(task_id)
        except psycopg2.OperationalError:  # PostgreSQL was restarted by the test
            self.conn.close()
            self.conn = self._connect()
            row = self._fetch(task_id)
        assert row is not None, f"task {task_id} is not in the tasks table"
        return dict(row)

    def _fetch(self, task_id: str) -> dict[str, Any] | None:
        with self.conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            cur.execute("SELECT * FROM tasks WHERE id = %s", (task_id,))
            return cur.fetchone()

    def wait_status(self, task_id: str, *statuses: str,
                    timeout: float = DEFAULT_WAIT) -> dict[str, Any]:
        return wait_until(
            lambda: (row if (row := self.get(task_id))["status"] in statuses else None),
            timeout, f"task {task_id} to become {'/'.join(statuses)}",
        )


@pytest.fixture
def tasks(pg: ThrowawayPostgres, coordinator: Coordinator) -> Iterator[Tasks]:
    reader = Tasks(pg)
    yield reader
    reader.conn.close()


@pytest.fixture(autouse=True)
def reset_standins(request: pytest.FixtureRequest) -> None:
    """Every test starts from well-behaved stand-ins (only those it uses)."""
    if "searxng" in request.fixturenames:
        request.getfixturevalue("searxng").config(latency=0, fail=None, json_enabled=True,
                                                  results=5, unresponsive={}, limiter=False)
    if "ollama" in request.fixturenames:
        request.getfixturevalue("ollama").config(latency=0, fail=None, models=[MODEL],
                                                 fail_generate_only=False)


WorkerFactory = Callable[..., Process]


@pytest.fixture
def web_env(pg: ThrowawayPostgres, redis_server: ThrowawayRedis, coordinator: Coordinator,
            searxng: Standin, ollama: Standin) -> dict[str, str]:
    """The environment of a web worker, as the post's table has it, with a fresh WORKER_ID."""
    return {
        "PATH": os.environ["PATH"],
        "REDIS_HOST": "127.0.0.1",
        "REDIS_PORT": str(redis_server.port),
        "REDIS_PASSWORD": redis_server.password,
        "PG_DSN": pg.dsn,
        "SEARXNG_URL": searxng.url,
        "OLLAMA_HOST": ollama.url,
        "OLLAMA_MODEL": MODEL,
        "COORDINATOR_URL": coordinator.url,
        "WORKER_ID": f"web-{uuid.uuid4().hex[:8]}",
        "WORKER_HOST": "worker-host-a",
        "SHUTDOWN_TIMEOUT": "30",
    }


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[WorkerFactory]:
    """Start a worker as a user does (`python worker_web.py` with env) from a folder holding
    only the files a role ships; every process still alive is killed afterwards."""
    started: list[Process] = []

    def start(env: dict[str, str], script: str = "worker_web.py") -> Process:
        node = tmp_path / "node"
        throwaway.ship_worker_programs(node)
        log = tmp_path / f"{script}-{env.get('WORKER_ID', 'none')}-{len(started)}.log"
        process = Process([PYTHON, script], env, log, node)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop(grace=0)


@pytest.fixture
def busy_worker(start_worker: WorkerFactory, coordinator: Coordinator, tasks: Tasks,
                ollama: Standin) -> Callable[..., tuple[Process, str]]:
    """``busy_worker(env, latency)``: a web worker in the middle of a task (its id returned
    with the worker) while Ollama takes ``latency`` seconds to answer."""

    def start(env: dict[str, str], latency: float, prompt: str = TOKYO) -> tuple[Process, str]:
        worker = start_worker(env)
        worker.wait_for(WAITING)
        ollama.config(latency=latency)
        task_id = coordinator.route(prompt, "web_search")
        tasks.wait_status(task_id, "running")
        return worker, task_id

    return start
