"""Fault tests reuse the worker tests' fixtures: the real Coordinator (heartbeat TTL 2 s), the
stand-ins and workers started as a user starts them."""

from tests.workers.conftest import (  # noqa: F401  (fixtures, found by name)
    busy_worker,
    coordinator,
    ollama,
    rds,
    reset_standins,
    searxng,
    start_worker,
    tasks,
    web_env,
)
