"""Shared fixtures: throwaway PostgreSQL and Redis servers for the whole test session.

The repository's module_utils are importable as ``ansible.module_utils.<name>``, where Ansible
puts them for a module, so tests import the modules of library/ as they are.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.throwaway import ThrowawayPostgres, ThrowawayRedis

for _path in sorted((Path(__file__).resolve().parents[1] / "module_utils").glob("*.py")):
    sys.modules.setdefault(f"ansible.module_utils.{_path.stem}",
                           importlib.import_module(f"module_utils.{_path.stem}"))


@pytest.fixture(scope="session")
def pg() -> Iterator[ThrowawayPostgres]:
    server = ThrowawayPostgres().start()
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[ThrowawayRedis]:
    server = ThrowawayRedis().start()
    try:
        yield server
    finally:
        server.destroy()
