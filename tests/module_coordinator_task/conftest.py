"""Fixtures of the coordinator_task tests; the helpers they use are in coordinator_task_harness."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from coordinator_task_harness import (
    ProbeRun,
    RunningCoordinator,
    SqlWorker,
    create_schema,
    finish_probe,
    start_coordinator,
    start_probe,
)

from lab.throwaway import ThrowawayPostgres, ThrowawayRedis


@pytest.fixture(scope="session")
def tasks_db(pg: ThrowawayPostgres) -> ThrowawayPostgres:
    create_schema(pg.dsn)
    return pg


@pytest.fixture
def run_probe(tmp_path: Path) -> Callable[..., ProbeRun]:
    """Run the module to the end: ``run_probe(args, check=False, env=None)``."""

    def run(
        args: dict[str, object], check: bool = False, env: dict[str, str] | None = None
    ) -> ProbeRun:
        return finish_probe(start_probe(tmp_path, args, check=check, env=env))

    return run


@pytest.fixture
def sql_worker(tasks_db: ThrowawayPostgres) -> Iterator[SqlWorker]:
    worker = SqlWorker(tasks_db.dsn)
    try:
        yield worker
    finally:
        worker.close()


@pytest.fixture(scope="session")
def coordinator(
    tasks_db: ThrowawayPostgres,
    redis_server: ThrowawayRedis,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RunningCoordinator]:
    """The real Coordinator (``python -m coordinator``), with a token, on a free port."""
    running = start_coordinator(tasks_db, redis_server, tmp_path_factory.mktemp("coordinator"))
    try:
        yield running
    finally:
        running.stop()
