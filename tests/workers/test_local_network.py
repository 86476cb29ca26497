"""macOS's Local Network privacy (macOS 15): a LaunchAgent whose interpreter has no grant gets
EHOSTUNREACH for LAN addresses, and the worker's start-up checks say so, naming the
interpreter to allow, instead of blaming Redis' bind or the firewall.

In-process: the socket layer answers every non-loopback connect() with EHOSTUNREACH, as the
denied agent's connect() does (nothing leaves this host), and platform.system() says Darwin.
PostgreSQL's client (libpq, C) does not use Python's sockets: its error is the one libpq
writes, 'connection to server at "<host>", port <port> failed: <strerror>'
(src/interfaces/libpq/fe-connect.c).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest
import worker_base as base
import worker_web

from .conftest import FILES, REPO

LAN = "192.0.2.10"  # TEST-NET-1: never reached, the connect is refused before any packet
UNREACHABLE = os.strerror(errno.EHOSTUNREACH)


def hint(interpreter: str) -> str:
    return (f"fix: macOS's Local Network privacy may deny this program the LAN (EHOSTUNREACH, "
            f"while the same check run over SSH connects): allow {interpreter} in System "
            "Settings > Privacy & Security > Local Network, then restart the worker; a "
            "virtualenv built on another Python needs that one allowed")


def test_the_hint_is_for_ehostunreach_on_macos_only():
    redis_text = f"Error {errno.EHOSTUNREACH} connecting to {LAN}:6379. {UNREACHABLE}."
    assert base.local_network_hint(redis_text, "Darwin", "/opt/py/bin/python3.12") == (
        hint("/opt/py/bin/python3.12").removeprefix("fix: "))
    # Linux has no such privacy: a route is missing, say nothing of it.
    assert base.local_network_hint(redis_text, "Linux", "/usr/bin/python3") is None
    refused = f"Error {errno.ECONNREFUSED} connecting to {LAN}:6379. Connection refused."
    assert base.local_network_hint(refused, "Darwin", "/opt/py/bin/python3.12") is None


def test_the_interpreter_named_is_the_venvs_base_binary(tmp_path):
    """A virtualenv's python is a link to its base interpreter, which holds the grant."""
    venv = tmp_path / "venv"
    base_python = Path(getattr(sys, "_base_executable", sys.executable))
    subprocess.run([str(base_python), "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import worker_base; print(worker_base.base_interpreter())"],
        env={**os.environ, "PYTHONPATH": f"{FILES}{os.pathsep}{site}"},
        capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.strip() == os.path.realpath(base_python)
    assert done.stdout.strip() != str(venv / "bin" / "python")


@pytest.fixture
def denied(monkeypatch) -> Iterator[None]:
    """This process as a denied LaunchAgent on macOS."""
    real_connect = socket.socket.connect

    def connect(sock: socket.socket, address: object) -> None:
        host = address[0] if isinstance(address, tuple) else None
        if host is not None and not ipaddress.ip_address(host).is_loopback:
            raise OSError(errno.EHOSTUNREACH, UNREACHABLE)
        real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(base.platform, "system", lambda: "Darwin")
    yield


@pytest.fixture
def worker() -> worker_web.WebWorker:
    return worker_web.WebWorker(worker_web.WebConfig.from_env({
        "REDIS_HOST": LAN, "REDIS_PASSWORD": "p",
        "PG_DSN": f"host={LAN} dbname=coordinator user=worker_mac password=p",
        "SEARXNG_URL": f"http://{LAN}:8080", "OLLAMA_HOST": "127.0.0.1:11434",
        "OLLAMA_MODEL": "m", "COORDINATOR_URL": f"http://{LAN}:8000", "WORKER_ID": "web-mac",
        "WORKER_HOST": "192.0.2.43", "COORDINATOR_TIMEOUT": "2"}))


def test_redis_denied_names_local_network_not_bind(denied, worker):
    with pytest.raises(base.CheckFailed) as failed:
        worker.checks.check_redis()
    assert str(failed.value) == (
        f"Redis check FAILED at {LAN}:6379: Error {errno.EHOSTUNREACH} connecting to "
        f"{LAN}:6379. {UNREACHABLE}.; {hint(base.base_interpreter())}")


def test_postgresql_denied_names_local_network(denied, worker, monkeypatch):
    def connect(options: str | None = None) -> None:
        raise psycopg2.OperationalError(
            f'connection to server at "{LAN}", port 5432 failed: {UNREACHABLE}\n'
            "\tIs the server running on that host and accepting TCP/IP connections?\n")

    monkeypatch.setattr(worker.store, "connect", connect)
    with pytest.raises(base.CheckFailed) as failed:
        worker.checks.check_postgres()
    assert str(failed.value) == (
        f"PostgreSQL check FAILED at host={LAN} dbname=coordinator user=worker_mac "
        f'password=***: login refused: connection to server at "{LAN}", port 5432 failed: '
        f"{UNREACHABLE} Is the server running on that host and accepting TCP/IP "
        f"connections?; {hint(base.base_interpreter())}")


def test_the_coordinator_denied_names_local_network(denied, worker):
    with pytest.raises(base.CheckFailed) as failed:
        worker.coordinator.register()
    message = str(failed.value)
    assert message.startswith(f"Coordinator check FAILED: not reachable at http://{LAN}:8000 (")
    assert message.endswith(f"); {hint(base.base_interpreter())}")
