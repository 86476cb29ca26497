"""Shared fixtures: throwaway PostgreSQL and Redis servers for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lab.throwaway import ThrowawayPostgres, ThrowawayRedis


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
