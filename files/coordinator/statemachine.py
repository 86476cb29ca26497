"""The task state machine as SQL: ``queued → running → done | failed``.

Every transition is an UPDATE guarded by the state it expects (status, claim token, queue),
so a second copy of a task id, a late result from a worker whose claim was taken back, or two
Reapers acting at once find the guard false and change nothing. Builders return
``(sql, params)`` and do no I/O, so they can be tested on their own.

The worker-side transitions (claim, re-claim, result) are coordinator_contract's, which the
workers run; these are the Coordinator's own (insert, re-queue, fail, re-push).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple

QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
STATUSES = (QUEUED, RUNNING, DONE, FAILED)
FINAL = frozenset((DONE, FAILED))

Query = tuple[str, dict[str, Any]]

# POST /route: rows are committed (one statement, its own transaction) before their ids are
# pushed. One statement text for any number of rows, so it is prepared once.
INSERT = (
    "INSERT INTO tasks (id, task_type, prompt, model, queue, worker, max_attempts,"
    " requested_worker, dispatched_at)"
    " SELECT t.id, t.task_type, t.prompt, t.model, t.queue, t.worker, t.max_attempts,"
    " t.requested_worker, CASE WHEN t.queue IS NULL THEN NULL ELSE clock_timestamp() END"
    " FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],"
    " %s::int4[], %s::text[])"
    " AS t(id, task_type, prompt, model, queue, worker, max_attempts, requested_worker)"
)

class NewTask(NamedTuple):
    """A task POST /route makes, in the column order of INSERT."""

    id: uuid.UUID
    task_type: str
    prompt: str
    model: str | None
    queue: str | None  # None: waits for an inference worker
    worker: str
    max_attempts: int
    requested_worker: str | None


def insert_tasks(rows: Sequence[NewTask]) -> tuple[str, list[list[Any]]]:
    """New ``queued`` tasks; a row whose queue is None waits for an inference worker
    (``dispatched_at`` stays null)."""
    if not rows:
        raise ValueError("insert_tasks needs at least one row")
    return INSERT, [list(column) for column in zip(*rows, strict=True)]


REQUEUE = (
    "UPDATE tasks SET status = 'queued', queue = %(queue)s, worker = %(worker)s,"
    " claim = NULL, worker_id = NULL, worker_host = NULL, started_at = NULL,"
    " dispatched_at = CASE WHEN %(queue)s::text IS NULL THEN NULL"
    " ELSE clock_timestamp() END"
    " WHERE id = %(id)s AND status = %(status)s AND claim IS NOT DISTINCT FROM %(claim)s"
    " AND queue IS NOT DISTINCT FROM %(old_queue)s RETURNING id"
)


def requeue_task(
    task_id: uuid.UUID, expected_status: str, expected_claim: uuid.UUID | None,
    old_queue: str | None, queue: str | None, worker: str,
) -> Query:
    """Coordinator side: put a ``running`` or ``queued`` task (back) to ``queued`` on
    ``queue`` (None: wait for a worker). ``attempts`` is not touched: it counts claims."""
    return REQUEUE, {"id": task_id, "status": expected_status, "claim": expected_claim,
                     "old_queue": old_queue, "queue": queue, "worker": worker}


FAIL = (
    "UPDATE tasks SET status = 'failed', error = %(error)s, claim = NULL,"
    " finished_at = clock_timestamp()"
    " WHERE id = %(id)s AND status = %(status)s AND claim IS NOT DISTINCT FROM %(claim)s"
    " RETURNING id"
)


def fail_task(
    task_id: uuid.UUID, expected_status: str, expected_claim: uuid.UUID | None, error: str,
) -> Query:
    """Coordinator side: ``queued | running → failed`` with a reason a user can act on."""
    return FAIL, {"id": task_id, "status": expected_status, "claim": expected_claim,
                  "error": error}


REPUSH = (
    "UPDATE tasks SET dispatched_at = clock_timestamp()"
    " WHERE id = ANY(%(ids)s) AND status = 'queued' AND queue = %(queue)s RETURNING id"
)


def mark_repushed(ids: Sequence[uuid.UUID], queue: str) -> Query:
    """Coordinator side: note a new push of still-queued tasks to ``queue``."""
    return REPUSH, {"ids": list(ids), "queue": queue}


RETRY = (
    "UPDATE tasks SET status = 'queued', queue = %(queue)s, worker = %(worker)s,"
    " claim = NULL, worker_id = NULL, worker_host = NULL, result = NULL, error = NULL,"
    " fallback = false, answered_model = NULL, started_at = NULL, finished_at = NULL,"
    " max_attempts = attempts + %(attempts)s,"
    " dispatched_at = CASE WHEN %(queue)s::text IS NULL THEN NULL ELSE clock_timestamp() END"
    " WHERE id = %(id)s AND status = 'failed' RETURNING id"
)


def retry_task(task_id: uuid.UUID, queue: str | None, worker: str, attempts: int) -> Query:
    """Operator side: ``failed → queued`` on ``queue`` (None: wait for a worker), with
    ``attempts`` more claims allowed than it had."""
    return RETRY, {"id": task_id, "queue": queue, "worker": worker, "attempts": attempts}
