"""The task state machine as SQL: ``queued → running → done | failed``.

The statements are coordinator_sql's (``SQL``), every transition an UPDATE guarded by the
state it expects. These builders give the Coordinator's own transitions (insert, re-queue,
fail, re-push, retry) their parameters: they return ``(sql, params)`` and do no I/O, so they
can be tested on their own. The workers run theirs (claim, re-claim, result) from the same
``SQL``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple

from coordinator_sql import SQL

QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
STATUSES = (QUEUED, RUNNING, DONE, FAILED)
FINAL = frozenset((DONE, FAILED))

Query = tuple[str, dict[str, Any]]


class NewTask(NamedTuple):
    """A task POST /route makes (a row of ``SQL.INSERT_TASKS``)."""

    id: uuid.UUID
    task_type: str
    prompt: str
    model: str | None
    queue: str | None  # None: waits for an inference worker
    worker: str
    max_attempts: int
    requested_worker: str | None
    options: str | None = None  # the Ollama options, as JSON text


# SQL.INSERT_TASKS's array parameters, one for each field of NewTask, in its order.
_INSERT_ARRAYS = ("ids", "task_types", "prompts", "models", "queues", "workers", "max_attempts",
                  "requested_workers", "options")


def insert_tasks(rows: Sequence[NewTask]) -> Query:
    """New ``queued`` tasks, committed (one statement, its own transaction) before their ids
    are pushed; a row whose queue is None waits for an inference worker (``dispatched_at``
    stays null)."""
    if not rows:
        raise ValueError("insert_tasks needs at least one row")
    columns = (list(column) for column in zip(*rows, strict=True))
    return SQL.INSERT_TASKS, dict(zip(_INSERT_ARRAYS, columns, strict=True))


def requeue_task(
    task_id: uuid.UUID, expected_status: str, expected_claim: uuid.UUID | None,
    old_queue: str | None, queue: str | None, worker: str,
) -> Query:
    """Coordinator side: put a ``running`` or ``queued`` task (back) to ``queued`` on
    ``queue`` (None: wait for a worker). ``attempts`` is not touched: it counts claims."""
    return SQL.REQUEUE, {"id": task_id, "status": expected_status, "claim": expected_claim,
                         "old_queue": old_queue, "queue": queue, "worker": worker}


def fail_task(
    task_id: uuid.UUID, expected_status: str, expected_claim: uuid.UUID | None, error: str,
) -> Query:
    """Coordinator side: ``queued | running → failed`` with a reason a user can act on."""
    return SQL.FAIL, {"id": task_id, "status": expected_status, "claim": expected_claim,
                      "error": error}


def mark_repushed(ids: Sequence[uuid.UUID], queue: str) -> Query:
    """Coordinator side: note a new push of still-queued tasks to ``queue``."""
    return SQL.REPUSH, {"ids": list(ids), "queue": queue}


def retry_task(task_id: uuid.UUID, queue: str | None, worker: str, attempts: int) -> Query:
    """Operator side: ``failed → queued`` on ``queue`` (None: wait for a worker), with
    ``attempts`` more claims allowed than it had."""
    return SQL.RETRY, {"id": task_id, "queue": queue, "worker": worker, "attempts": attempts}
