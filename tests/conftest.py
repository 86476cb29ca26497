"""Shared fixtures: throwaway PostgreSQL and Redis servers for the whole test session, and
the check that podman can run the lab's containers.

The repository's module_utils are importable as ``ansible.module_utils.<name>``, where Ansible
puts them for a module, so tests import the modules of library/ as they are.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from coordinator.schema import ensure_schema
from lab import lab
from lab.throwaway import ThrowawayPostgres, ThrowawayRedis

for _path in sorted((Path(__file__).resolve().parents[1] / "module_utils").glob("*.py")):
    sys.modules.setdefault(f"ansible.module_utils.{_path.stem}",
                           importlib.import_module(f"module_utils.{_path.stem}"))


@pytest.fixture(scope="session")
def pg() -> Iterator[ThrowawayPostgres]:
    with ThrowawayPostgres() as server:
        yield server


@pytest.fixture(scope="session")
def redis_server() -> Iterator[ThrowawayRedis]:
    with ThrowawayRedis() as server:
        yield server


def create_schema(dsn: str) -> None:
    """The Coordinator's own migrations, so the tests and the Coordinator share one schema."""

    async def apply() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await ensure_schema(conn)

    asyncio.run(apply())


@pytest.fixture(scope="session")
def podman_ready() -> None:
    """Skip a container test where podman cannot run the lab's containers; under CI (the CI
    variable set) that is a failure, so no lab test is skipped unseen."""
    problem = lab.podman_problem()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the lab tests: {problem}")
    pytest.skip(problem)
