"""The rows the Coordinator's statements answer, and the SQL of its own tables.

The statements on ``tasks`` and ``workers`` are ``coordinator_sql``'s (``SQL``), which the
workers and the modules read too; here are the row types their columns are read into
(psycopg's ``class_row``), so no caller reads a row by position, and the statements on the
Coordinator's own tables (``task_transitions``, ``audit``) and locks. The Reaper's snapshots
are read into its own row types (``reaper.TaskView``, ``reaper.InstanceView``), the types its
pure decisions take.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from coordinator_contract import PROBE_TYPE

#: The parameter of the statements that leave the worker probes out (users' tasks only).
USERS_ONLY = {"probe_type": PROBE_TYPE}

# -- the timeline and the audit of a task ------------------------------------------------------

TIMELINE = ("SELECT at, event, status, worker_id, queue, reason FROM task_transitions"
            " WHERE task_id = %(id)s ORDER BY id")
AUDIT_OF = ("SELECT at, actor, action, target, ok, result FROM audit"
            " WHERE target = %(target)s ORDER BY id")


# -- workers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoutedWorker:
    """A worker as routing keeps it in memory (registry.KnownWorker): a row of
    ``SQL.WORKER_ROWS``."""

    worker_id: str
    host: str
    kind: str
    device: str | None
    queues: list[str]
    models: list[str]
    seconds_to_live: float  # 0 once it said goodbye
    draining: bool  # an operator drained it: routing sends it nothing new
    healthy: bool  # its last probe did not fail: routing prefers it


@dataclass(frozen=True)
class Heartbeat(RoutedWorker):
    """A row of ``SQL.HEARTBEAT``."""

    duplicate: bool


@dataclass(frozen=True)
class Stopped:
    """A row of ``SQL.DEREGISTER``."""

    host: str
    kind: str


#: The words of ``coordinator_sql.WORKER_STATE``.
WORKER_STATES = ("alive", "draining", "drained", "dead", "stopped", "duplicate")


@dataclass(frozen=True)
class DrainChange:
    """A row of ``SQL.DRAIN`` and ``SQL.UNDRAIN``."""

    host: str
    kind: str


# -- the Reaper --------------------------------------------------------------------------------

#: ``pg_try_advisory_xact_lock`` key: a Reaper pass acts only where it holds it.
REAPER_LOCK_KEY = 0x7265617065  # "reape"
#: The lock of one pass (the Reaper's, and the Prober's with its own key).
REAPER_LOCK = "SELECT pg_try_advisory_xact_lock(%(key)s) AS held"


@dataclass(frozen=True)
class Lock:
    held: bool


@dataclass(frozen=True)
class LivenessRow:
    """A worker as a Reaper pass sees it (``SQL.LIVENESS``; turned into a
    reaper.WorkerView)."""

    worker_id: str
    host: str
    kind: str
    pid: int | None
    device: str | None
    queues: list[str]
    models: list[str] | None
    alive: bool
    silent_for: float  # seconds since the last heartbeat
    draining: bool
    healthy: bool


@dataclass(frozen=True)
class Dead:
    """A worker a pass found silent past the TTL and marked dead (``SQL.MARK_DEAD``)."""

    worker_id: str
    host: str
    pid: int | None
    kind: str
    silent_for: float


@dataclass(frozen=True)
class Now:
    now: datetime


NOW = "SELECT clock_timestamp() AS now"


@dataclass(frozen=True)
class Queued:
    """A row of ``SQL.QUEUED_IDS_PAST_GRACE``."""

    id: uuid.UUID
    queue: str


#: The timeline is kept COORDINATOR_TIMELINE_RETENTION_DAYS (the tasks for ever), at most
#: ``limit`` rows a pass.
EXPIRE_TIMELINE = ("DELETE FROM task_transitions WHERE id IN (SELECT id FROM task_transitions"
                   " WHERE at < clock_timestamp() - make_interval(secs => %(seconds)s)"
                   " LIMIT %(limit)s)")


# -- operator actions (audit.perform) ----------------------------------------------------------


@dataclass(frozen=True)
class AuditRecord:
    id: int


#: Records an action; answers an AuditRecord, or nothing when its idempotency key was used.
RECORD_ACTION = (
    "INSERT INTO audit (actor, action, target, idempotency_key)"
    " VALUES (%(actor)s, %(action)s, %(target)s, %(key)s)"
    " ON CONFLICT (idempotency_key) DO NOTHING RETURNING id"
)


@dataclass(frozen=True)
class EarlierAction:
    """The action an idempotency key was first used for, and how it ended."""

    action: str
    target: str
    ok: bool | None
    result: str | None


EARLIER_ACTION = ("SELECT action, target, ok, result FROM audit"
                  " WHERE idempotency_key = %(key)s")
FINISH_ACTION = "UPDATE audit SET ok = %(ok)s, result = %(result)s WHERE id = %(id)s"
#: The transaction-local settings the timeline triggers read (schema version 4).
SET_TRANSITION = ("SELECT set_config('coordinator.reason', %(reason)s, true),"
                  " set_config('coordinator.event', %(event)s, true)")


def iso(value: datetime | None) -> str | None:
    """A timestamp column as the API shows it."""
    return value.isoformat() if value is not None else None
