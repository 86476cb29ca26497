"""Fixtures of the Coordinator tests: a database of their own on the session's throwaway
PostgreSQL, the Redis server they share with tests/browser (``coord_redis``, emptied for each
test), and in-process coordinators."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from lab.throwaway import ThrowawayPostgres, ThrowawayRedis, free_port

from .coordkit import Backends, FakeWorker, ServerThread

DB = "coordinator_tests"


@pytest.fixture(scope="session")
def backends_session(pg: ThrowawayPostgres, coord_redis: ThrowawayRedis) -> Backends:
    return Backends.create(pg, coord_redis, DB)


@pytest.fixture
def backends(backends_session: Backends, coord_redis: ThrowawayRedis) -> Backends:
    """The shared backends, emptied for this test."""
    if coord_redis.proc is None:  # a test stopped it
        coord_redis.start()
    backends_session.sql("TRUNCATE tasks, workers, worker_instances, task_transitions, audit,"
                         " notifications")
    with backends_session.redis() as r:
        r.flushall()
    return backends_session


@pytest.fixture
def start_server(backends: Backends) -> Iterator[Callable[..., ServerThread]]:
    """start_server(COORDINATOR_X="...") → a running in-process coordinator."""
    servers: list[ServerThread] = []

    def start(_backends: Backends | None = None, **env: str) -> ServerThread:
        cfg = (_backends or backends).config(free_port(), **env)
        server = ServerThread(cfg).start()
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        server.stop()


@pytest.fixture
def server(start_server: Callable[..., ServerThread]) -> ServerThread:
    return start_server()


@pytest.fixture
def client(server: ServerThread) -> Iterator:
    with server.client() as c:
        yield c


@pytest.fixture
def make_worker(backends: Backends) -> Iterator[Callable[..., FakeWorker]]:
    workers: list[FakeWorker] = []

    def make(server: ServerThread, worker_id: str, **kwargs: object) -> FakeWorker:
        worker = FakeWorker(backends, server.url, worker_id, **kwargs)
        workers.append(worker)
        return worker

    yield make
    for worker in workers:
        worker.close()
