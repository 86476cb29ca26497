"""Shared fixtures: throwaway PostgreSQL and Redis servers for the whole test session, and
the check that podman can run the lab's containers.

Under ``pytest -n 3`` (what ``./dev test`` runs) the tests form three groups, each run in
order by one process: the lab suites (``LAB_SUITES``) on the lab under .lab/lab.lock; the
fault cases and the backup's (``SECOND_LAB_SUITES``) on a second lab of the same hosts
(.lab/lab2.lock), then the Molecule scenarios (their own containers, networks and lock); and
all the others. The lab suites wait on their playbooks far more than they compute, so the
three share two cores.

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


def _alias_module_utils() -> None:
    """Each module_utils/<name>.py as ``ansible.module_utils.<name>``, the ones it imports
    first (a pass that fails on a missing one is retried once the others are in)."""
    pending = sorted((Path(__file__).resolve().parents[1] / "module_utils").glob("*.py"))
    for _ in range(len(pending)):
        missing = []
        for path in pending:
            try:
                module = importlib.import_module(f"module_utils.{path.stem}")
            except ModuleNotFoundError:
                sys.modules.pop(f"module_utils.{path.stem}", None)
                missing.append(path)
                continue
            sys.modules.setdefault(f"ansible.module_utils.{path.stem}", module)
        pending = missing
    if pending:
        importlib.import_module(f"module_utils.{pending[0].stem}")  # raises, naming it


_alias_module_utils()


# The test files that use the lab's containers, and the others that start containers of
# their own: together, every test that starts containers (the tests that need
# ``podman_ready``).
LAB_SUITES = ("tests/migrate/",)
# The lab suites that run on a second lab, in a process of their own (tests/migrate/conftest.py):
# the fault cases and the backup's, which with the Molecule scenarios after them take about as
# long as the other lab suites together (pytest --durations: 1,474 and 1,528 s at 5841be9,
# before the backup's 53 s moved here).
SECOND_LAB_SUITES = ("tests/migrate/test_faults.py", "tests/migrate/test_backup.py")
MOLECULE_SUITE = "tests/lab/test_molecule.py"
# Like the Molecule scenarios: containers of their own on networks of their own (the Mac
# node's under the Molecule lock, lab/lab.py's test on coordinator-labtest), so they run
# beside the lab suites, in the process of the other tests.
MAC_NODE_SUITE = "tests/lab/test_macos_node.py"
LAB_SCRIPT_SUITE = "tests/lab/test_lab_script.py"
CONTAINER_SUITES = (*LAB_SUITES, MOLECULE_SUITE, MAC_NODE_SUITE, LAB_SCRIPT_SUITE)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    misplaced = [item.nodeid for item in items
                 if "podman_ready" in getattr(item, "fixturenames", ())
                 and not item.nodeid.startswith(CONTAINER_SUITES)]
    if misplaced:
        raise pytest.UsageError(
            f"{misplaced[0]} starts containers (it needs podman_ready) but its file is not in "
            "CONTAINER_SUITES of tests/conftest.py: add it there, so it runs in a container "
            "group")
    # The Molecule scenarios after every other test of their group: by then the second lab
    # has built the image and the wheelhouse, and is taken down.
    items.sort(key=lambda item: item.nodeid.startswith(MOLECULE_SUITE))


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """pytest-xdist's scheduler, with three scopes, one for each process of ``-n 3``: the lab
    suites on the first lab; those on the second lab, then the Molecule scenarios; the rest.
    (``--dist loadgroup`` would do it with markers, but xdist 3.8 sets the group on a node
    id attribute pytest 9.2 no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    class LabsBesideTheRest(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith((*SECOND_LAB_SUITES, MOLECULE_SUITE)):
                return "second lab"
            return "lab" if nodeid.startswith(LAB_SUITES) else "others"

    return LabsBesideTheRest(config, log)


@pytest.fixture(scope="session")
def pg() -> Iterator[ThrowawayPostgres]:
    with ThrowawayPostgres() as server:
        yield server


# The Redis servers, one per kind of use: a Coordinator's Reaper pushes the queued tasks of its
# database into its Redis, so a Coordinator that outlives a test has a Redis no other database's
# Coordinator or worker uses.


@pytest.fixture(scope="session")
def redis_server() -> Iterator[ThrowawayRedis]:
    """The Redis of the session's database (the Coordinators and workers of tests/workers and
    tests/fuzz, which run for the session)."""
    with ThrowawayRedis() as server:
        yield server


@pytest.fixture(scope="session")
def coord_redis() -> Iterator[ThrowawayRedis]:
    """The Redis of the suites whose in-process Coordinators live for a test or a module and
    that empty it before each test (tests/coordinator, tests/browser)."""
    with ThrowawayRedis() as server:
        yield server


@pytest.fixture(scope="session")
def probe_redis() -> Iterator[ThrowawayRedis]:
    """The Redis of the coordinator_task tests' session Coordinator: the ids they leave in
    tasks:web reach no real worker of another suite."""
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
