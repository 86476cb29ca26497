"""coordinator_sql's named statements: every parameter named, one value type a name, and each
statement parses and runs against the Coordinator's schema, as the Coordinator binds it
(psycopg 3, on the server) and as the workers and the modules send it (quoted on the client,
as psycopg2 does)."""

from __future__ import annotations

import re
import uuid

import psycopg
import pytest
from coordinator_sql import NAMED, SQL, parameters

from .coordkit import Backends

TASK, CLAIM, INSTANCE = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
#: One value for each parameter name: a name means the same thing in every statement.
SAMPLES: dict[str, object] = {
    "alive": ["w"], "answered_model": "m", "attempts": 1, "claim": CLAIM,
    "db_write_failures": 0, "device": "cpu", "drained": False, "error": "why",
    "fallback": False, "grace": 5.0, "group": "coordinator_workers", "host": "h", "id": TASK,
    "ids": [TASK], "in_flight": 0, "instance_id": INSTANCE, "interval": 300.0, "keep": 10,
    "kind": "web", "kinds": ["web"], "last_error": None,
    "lease": 60.0, "limit": 10, "max_attempts": [3], "message": "m",
    "notification_id": 1, "notifications_kept": 200, "problem": True, "retry_in": 10.0,
    "subject": "dead:w", "watched_queues": ["tasks:web"], "models": ["m"], "old_queue": "tasks:web",
    "os": "Linux 6", "pid": 1, "probe_type": "probe", "prompt": "p", "prompts": ["p"],
    "queue": "tasks:web", "queues": ["tasks:web"],
    "requested_workers": ["w"], "options": ['{"seed": 1}'], "result": "r", "seconds": 60.0,
    "status": "queued",
    "task_type": "web_search", "task_types": ["web_search"], "timeout": 60.0, "ttl": 30.0,
    "types": ["chat"], "version": "1", "worker": "default", "worker_id": "w",
    "worker_ids": ["w"], "workers": ["default"],
}


def test_every_parameter_is_named_and_has_a_sample() -> None:
    positional = [name for name, text in NAMED.items() if re.search(r"%s", text)]
    assert positional == []
    used = {parameter for text in NAMED.values() for parameter in parameters(text)}
    assert used == set(SAMPLES)


def test_parameters_are_listed_once_in_order() -> None:
    assert parameters(SQL.REQUEUE) == ["queue", "worker", "id", "status", "claim", "old_queue"]
    assert parameters(SQL.WRITE_CHECK) == []


@pytest.mark.parametrize("name", sorted(NAMED))
def test_each_statement_runs_on_the_schema(backends: Backends, name: str) -> None:
    statement = NAMED[name]
    params = {parameter: SAMPLES[parameter] for parameter in parameters(statement)}
    with psycopg.connect(backends.dsn) as conn:
        # The workers' claim is two statements (synchronous_commit, then the UPDATE), which
        # only a client-side binding sends in one round trip, as psycopg2 does.
        if ";" not in statement:
            conn.execute(statement, params)
            conn.rollback()
        with psycopg.ClientCursor(conn) as cur:
            cur.execute(statement, params)
        conn.rollback()

