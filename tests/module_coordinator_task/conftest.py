"""Fixtures of the coordinator_task tests; the helpers they use are in coordinator_task_harness."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from lab.processes import CoordinatorProcess
from lab.throwaway import ThrowawayPostgres, ThrowawayRedis, wait_until

from .coordinator_task_harness import (
    ProbeRun,
    Registration,
    SqlWorker,
    TasksDb,
    finish_probe,
    start_coordinator,
    start_probe,
)


@pytest.fixture(scope="session")
def tasks_db(pg: ThrowawayPostgres) -> TasksDb:
    return TasksDb(pg, "coordinator_task_probe").create().with_schema()


@pytest.fixture
def run_probe(tmp_path: Path) -> Callable[..., ProbeRun]:
    """Run the module to the end: ``run_probe(args, check=False, env=None)``."""

    def run(
        args: dict[str, object], check: bool = False, env: dict[str, str] | None = None
    ) -> ProbeRun:
        return finish_probe(start_probe(tmp_path, args, check=check, env=env))

    return run


@pytest.fixture
def sql_worker(tasks_db: TasksDb) -> Iterator[SqlWorker]:
    worker = SqlWorker(tasks_db.dsn)
    try:
        yield worker
    finally:
        worker.close()


@pytest.fixture(scope="session")
def coordinator(
    tasks_db: TasksDb,
    probe_redis: ThrowawayRedis,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[CoordinatorProcess]:
    """The real Coordinator (``python -m coordinator``), with a token, on a free port."""
    with start_coordinator(tasks_db, probe_redis,
                           tmp_path_factory.mktemp("coordinator")) as running:
        yield running


@pytest.fixture
def registrations(coordinator: CoordinatorProcess) -> Iterator[list[Registration]]:
    # Another test of this session restarts PostgreSQL: start once the Coordinator is healthy.
    wait_until(lambda: requests.get(f"{coordinator.url}/health", timeout=5).status_code == 200,
               30, "GET /health 200")
    made: list[Registration] = []
    yield made
    for registration in made:
        with contextlib.suppress(AssertionError, requests.RequestException):
            registration.deregister()
