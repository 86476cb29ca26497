"""One Coordinator with COORDINATOR_TOKEN set, started as a user starts it, for the fuzz and
hostile-input tests; its process id lets them watch its memory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lab.throwaway import ThrowawayPostgres, ThrowawayRedis
from tests.workers.conftest import Coordinator

TOKEN = "fuzz-token-0123456789"
# The soft open-file limit systemd starts services with; the Coordinator raises its own.
SERVICE_OPEN_FILES = 1024


@pytest.fixture(scope="session")
def guarded(pg: ThrowawayPostgres, redis_server: ThrowawayRedis,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Coordinator]:
    with Coordinator(pg, redis_server, tmp_path_factory.mktemp("fuzz"), token=TOKEN,
                     open_files=SERVICE_OPEN_FILES) as coord:
        yield coord


@pytest.fixture
def client(guarded: Coordinator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=guarded.url, timeout=30,
                      headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        yield http


def rss_mb(pid: int) -> float:
    """Resident memory of a process, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def assert_useful_error(response: httpx.Response) -> str:
    """A 4xx must carry {"error": "<one readable line>"}; returns the message."""
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:500])
    body = response.json()
    assert isinstance(body, dict), body
    message = body.get("error")
    assert isinstance(message, str) and len(message) >= 10, body
    assert "Traceback" not in message and "\n" not in message, message
    return message
