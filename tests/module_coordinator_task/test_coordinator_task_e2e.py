"""End to end: the real web worker (files/worker_web.py) answers the probe's task.

The worker runs as a user starts it (``python worker_web.py`` with its environment) against
the probe tests' Coordinator, PostgreSQL and Redis, with the SearXNG and Ollama stand-ins of
lab/standins. The worker is stopped when this module ends, so the other probe tests keep
playing the worker with SQL alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from lab.processes import CoordinatorProcess, Process, Standin
from lab.standins.ollama import DEFAULT_MODEL
from lab.throwaway import ThrowawayRedis, ship_worker_programs

from .coordinator_task_harness import (
    PYTHON,
    TasksDb,
    pg_args,
    unique_prompt,
)

MODEL = DEFAULT_MODEL
# Not the id the SQL worker of the other tests uses: once this worker is stopped and dead,
# the Reaper may fail web tasks still running under its id.
WORKER_ID = "web-worker-e2e"
WORKER_HOST = "macbookair"


@pytest.fixture(scope="module")
def ollama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standin]:
    with Standin("lab.standins.ollama", tmp_path_factory.mktemp("o") / "ollama.log") as up:
        yield up


@pytest.fixture(scope="module")
def web_worker(
    coordinator: CoordinatorProcess,
    tasks_db: TasksDb,
    probe_redis: ThrowawayRedis,
    ollama: Standin,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Process]:
    """worker_web.py in a folder with what the worker role ships beside it, with the post's
    env."""
    workdir = tmp_path_factory.mktemp("web-worker")
    searxng = Standin("lab.standins.searxng", workdir / "searxng.log",
                      "--json-enabled").start()
    ship_worker_programs(workdir)
    env = {
        "PATH": os.environ["PATH"],
        "REDIS_HOST": "127.0.0.1",
        "REDIS_PORT": str(probe_redis.port),
        "REDIS_PASSWORD": probe_redis.password,
        "PG_DSN": tasks_db.dsn,
        "SEARXNG_URL": searxng.url,
        "OLLAMA_HOST": ollama.url,
        "OLLAMA_MODEL": MODEL,
        "COORDINATOR_URL": coordinator.url,
        "COORDINATOR_TOKEN": coordinator.token,
        "WORKER_ID": WORKER_ID,
        "WORKER_HOST": WORKER_HOST,
    }
    worker = Process([PYTHON, "worker_web.py"], env, workdir / "worker_web.log", workdir)
    try:
        worker.wait_for("Waiting on queues", timeout=60)
        yield worker
    finally:
        worker.stop(grace=30)
        searxng.stop()


def probe_args(coordinator: CoordinatorProcess, db: TasksDb, **changes: object) -> dict:
    return {
        "coordinator_url": coordinator.url,
        "coordinator_token": coordinator.token,
        "prompt": unique_prompt("e2e"),
        "worker_host": WORKER_HOST,
        "poll_interval": 0.2,
        "timeout": 30,
        **pg_args(db),
        **changes,
    }


def test_real_web_worker_answers(web_worker, coordinator, tasks_db, ollama, run_probe):
    ollama.config(fail=None, fail_generate_only=False)
    run = run_probe(probe_args(coordinator, tasks_db))
    assert run.rc == 0, run.stdout + run.stderr + web_worker.output()
    assert run.result["changed"] is False
    assert run.result["worker"] == "web-worker"
    assert run.result["worker_id"] == WORKER_ID
    assert run.result["worker_host"] == WORKER_HOST
    assert run.result["fallback"] is False
    assert run.result["answer"]
    assert f"Task {run.result['task_id']} claimed" in web_worker.output()


def test_real_web_worker_fallback_is_refused(web_worker, coordinator, tasks_db, ollama,
                                             run_probe):
    ollama.config(fail="error", fail_generate_only=True)
    try:
        run = run_probe(probe_args(coordinator, tasks_db))
    finally:
        ollama.config(fail=None, fail_generate_only=False)
    assert run.failed, run.stdout
    assert run.msg == (
        f"task {run.result['task_id']} done with fallback on {WORKER_HOST}: Summary failed "
        f"(Ollama at {ollama.url} answered HTTP 500 llama runner process has terminated: exit "
        "status 2); here are the search results instead."
    )
    assert run.result["answer"]
