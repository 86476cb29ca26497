"""The SQL of the Coordinator's requests, by name, and the rows they answer.

Every statement the tasks, workers, stats and audit parts run is here, with a row type where its
columns are read (psycopg's ``class_row``), so no caller reads a row by position. The
guarded transitions of the task state machine are in ``statemachine`` (the Coordinator's)
and ``coordinator_contract`` (the workers'). The Reaper's snapshots are read into its own
row types (``reaper.TaskView``, ``reaper.InstanceView``), the types its pure decisions take.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from .schema import WORKER_ALIVE

# -- tasks -------------------------------------------------------------------------------------

#: A task's public columns: what GET /task, GET /tasks and the status page show of it
#: (tasks.task_view, api_models.Task).
PUBLIC_COLUMNS = (
    "id, task_type, status, result, fallback, worker, worker_id, worker_host, error,"
    " attempts, max_attempts, model, answered_model, queue, requested_worker, created_at,"
    " started_at, finished_at"
)
#: Tasks by id; concurrent reads share one (TaskReader).
SELECT_TASKS = f"SELECT {PUBLIC_COLUMNS} FROM tasks WHERE id = ANY(%s)"
# The status page, GET /tasks (overview). The list reads tasks_created_idx newest first.
LIST_TASKS = (
    f"SELECT {PUBLIC_COLUMNS} FROM tasks"
    " WHERE (%(status)s::text IS NULL OR status = %(status)s)"
    " AND (%(task_type)s::text IS NULL OR task_type = %(task_type)s)"
    " AND (%(worker)s::text IS NULL OR worker_id = %(worker)s OR worker = %(worker)s)"
    # now(), not clock_timestamp(): a constant the index scan can start from.
    " AND created_at > coalesce(now() - make_interval(secs => %(seconds)s::float8),"
    " '-infinity')"
    " ORDER BY created_at DESC LIMIT %(limit)s"
)
_LAST_HOUR = "created_at > clock_timestamp() - interval '1 hour'"
#: Tasks by type and status, and of them the fallback answers (done, not the model's).
TASK_COUNTS = (
    f"SELECT task_type, status, count(*) FILTER (WHERE {_LAST_HOUR})::int AS last_hour,"
    " count(*)::int AS all_time,"
    f" count(*) FILTER (WHERE fallback AND {_LAST_HOUR})::int AS fallbacks_last_hour,"
    " count(*) FILTER (WHERE fallback)::int AS fallbacks_all_time"
    " FROM tasks GROUP BY 1, 2 ORDER BY 1, 2"
)
#: Seconds the oldest queued task of each queue has waited (indexed: tasks_active_idx).
OLDEST_WAITING = (
    "SELECT queue, extract(epoch FROM clock_timestamp() - min(created_at))::float8"
    " FROM tasks WHERE status = 'queued' AND queue IS NOT NULL GROUP BY queue"
)
TASK_IN_FULL = (f"SELECT {PUBLIC_COLUMNS}, prompt FROM tasks"
                " WHERE id = %(id)s")
TIMELINE = ("SELECT at, event, status, worker_id, queue, reason FROM task_transitions"
            " WHERE task_id = %(id)s ORDER BY id")
AUDIT_OF = ("SELECT at, actor, action, target, ok, result FROM audit"
            " WHERE target = %(target)s ORDER BY id")

#: A task an operator acts on, locked for the action's transaction.
TASK_FOR_ACTION = ("SELECT id, task_type, status, claim, queue, model, requested_worker"
                   " FROM tasks WHERE id = %(id)s FOR UPDATE")
#: Unfinished tasks by queue and status (indexed: tasks_active_idx).
ACTIVE_BY_QUEUE = ("SELECT queue, status, count(*) FROM tasks"
                   " WHERE status IN ('queued', 'running') GROUP BY queue, status")
ACTIVE_BY_TYPE = ("SELECT task_type, status, count(*) FROM tasks"
                  " WHERE status IN ('queued', 'running') GROUP BY 1, 2")


# -- workers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoutedWorker:
    """A worker as routing keeps it in memory (registry.KnownWorker)."""

    worker_id: str
    host: str
    kind: str
    device: str | None
    queues: list[str]
    models: list[str]
    seconds_to_live: float  # 0 once it said goodbye
    draining: bool  # an operator drained it: routing sends it nothing new


#: Every worker (or one: WORKER_ROW), with the seconds it has left to live.
WORKER_ROWS = (
    "SELECT worker_id, host, kind, device, queues, models,"
    " CASE WHEN stopped_at IS NULL THEN"
    " extract(epoch FROM last_heartbeat + make_interval(secs => %(ttl)s)"
    " - clock_timestamp())::float8 ELSE 0 END AS seconds_to_live,"
    " drain_requested_at IS NOT NULL AS draining FROM workers"
)
WORKER_ROW = WORKER_ROWS + " WHERE worker_id = %(worker_id)s"

# Whether another live instance of the worker id started since this one (a duplicate).
_DUPLICATE = (
    " EXISTS (SELECT 1 FROM worker_instances o WHERE o.worker_id = %(worker_id)s"
    " AND o.instance_id <> %(instance_id)s"
    " AND o.last_heartbeat > clock_timestamp() - make_interval(secs => %(ttl)s)"
    " AND (o.started_at >= i.started_at OR o.last_heartbeat > i.started_at))"
)
#: A new process of a drained worker stays drained (drain_requested_at is kept); answers
#: ``draining``.
REGISTER_WORKER = (
    "INSERT INTO workers (worker_id, host, kind, device, queues, models, version,"
    " pid, instance_id, os) VALUES (%(worker_id)s, %(host)s, %(kind)s, %(device)s,"
    " %(queues)s, %(models)s, %(version)s, %(pid)s, %(instance_id)s, %(os)s)"
    " ON CONFLICT (worker_id) DO UPDATE SET host = EXCLUDED.host,"
    " kind = EXCLUDED.kind, device = EXCLUDED.device, queues = EXCLUDED.queues,"
    " models = EXCLUDED.models, version = EXCLUDED.version, pid = EXCLUDED.pid,"
    " instance_id = EXCLUDED.instance_id, os = EXCLUDED.os,"
    " registered_at = clock_timestamp(), last_heartbeat = clock_timestamp(), dead = false,"
    " stopped_at = NULL, drained = false"
    " RETURNING drain_requested_at IS NOT NULL AS draining"
)
#: Answers ``duplicate``.
REGISTER_INSTANCE = (
    "WITH i AS (INSERT INTO worker_instances (instance_id, worker_id, host, pid)"
    " VALUES (%(instance_id)s, %(worker_id)s, %(host)s, %(pid)s)"
    " ON CONFLICT (instance_id) DO UPDATE SET worker_id = EXCLUDED.worker_id,"
    " host = EXCLUDED.host, pid = EXCLUDED.pid, last_heartbeat = clock_timestamp()"
    " RETURNING started_at) SELECT" + _DUPLICATE + " AS duplicate FROM i"
)


@dataclass(frozen=True)
class Heartbeat(RoutedWorker):
    duplicate: bool


#: Answers a Heartbeat, or nothing for an unknown worker.
HEARTBEAT = (
    "WITH w AS (UPDATE workers SET last_heartbeat = clock_timestamp(), dead = false,"
    " stopped_at = NULL,"
    " in_flight = COALESCE(%(in_flight)s, in_flight),"
    " db_write_failures = COALESCE(%(db_write_failures)s, db_write_failures),"
    " drained = COALESCE(%(drained)s, drained),"
    " last_error = %(last_error)s WHERE worker_id = %(worker_id)s"
    " RETURNING worker_id, host, kind, device, queues, models,"
    " drain_requested_at IS NOT NULL AS draining),"
    " i AS (INSERT INTO worker_instances (instance_id, worker_id, host, pid)"
    " SELECT %(instance_id)s, worker_id, host, %(pid)s FROM w"
    " ON CONFLICT (instance_id) DO UPDATE SET last_heartbeat = clock_timestamp(),"
    " worker_id = EXCLUDED.worker_id,"
    " pid = COALESCE(EXCLUDED.pid, worker_instances.pid) RETURNING started_at)"
    " SELECT w.worker_id, w.host, w.kind, w.device, w.queues, w.models,"
    " %(ttl)s::float8 AS seconds_to_live, w.draining," + _DUPLICATE + " AS duplicate"
    " FROM w, i"
)


@dataclass(frozen=True)
class Stopped:
    host: str
    kind: str


#: The goodbye of one process; answers a Stopped when it was the worker's current one.
DEREGISTER = (
    "WITH gone AS (DELETE FROM worker_instances WHERE instance_id = %(instance_id)s"
    " AND worker_id = %(worker_id)s)"
    " UPDATE workers SET stopped_at = clock_timestamp(), in_flight = 0"
    " WHERE worker_id = %(worker_id)s AND instance_id = %(instance_id)s"
    " RETURNING host, kind"
)
WORKER_EXISTS = "SELECT 1 FROM workers WHERE worker_id = %(worker_id)s"

#: What a worker is now, for people: one word (GET /workers ``state``, the status page).
#: A drained worker is alive; it is ``drained`` once it reported that it holds nothing.
WORKER_STATE = (
    "CASE WHEN w.duplicate THEN 'duplicate' WHEN w.stopped_at IS NOT NULL THEN 'stopped'"
    f" WHEN NOT {WORKER_ALIVE} THEN 'dead'"
    " WHEN w.drain_requested_at IS NOT NULL AND w.drained AND w.in_flight = 0 THEN 'drained'"
    " WHEN w.drain_requested_at IS NOT NULL THEN 'draining' ELSE 'alive' END"
)
WORKER_STATES = ("alive", "draining", "drained", "dead", "stopped", "duplicate")


@dataclass(frozen=True)
class DrainChange:
    host: str
    kind: str


#: Guarded: a second drain (or undrain) changes nothing and answers no row.
DRAIN = (
    "UPDATE workers SET drain_requested_at = clock_timestamp(), drained = false"
    " WHERE worker_id = %(worker_id)s AND drain_requested_at IS NULL RETURNING host, kind"
)
UNDRAIN = (
    "UPDATE workers SET drain_requested_at = NULL, drained = false"
    " WHERE worker_id = %(worker_id)s AND drain_requested_at IS NOT NULL RETURNING host, kind"
)
WORKER_STATE_OF = (f"SELECT {WORKER_STATE} AS state FROM workers w"
                   " WHERE w.worker_id = %(worker_id)s")

#: GET /workers: every worker with its live instances (dict rows: the answer's fields).
LIST_WORKERS = (
    "SELECT w.worker_id, w.host, w.kind, w.device, w.queues, w.models, w.version,"
    " w.pid, w.instance_id::text, w.registered_at, w.last_heartbeat,"
    f" {WORKER_ALIVE} AS alive, w.stopped_at,"
    " round(extract(epoch FROM clock_timestamp() - w.last_heartbeat)::numeric, 1)"
    "::float8 AS seconds_since_heartbeat,"
    " w.in_flight, w.db_write_failures, w.last_error, w.duplicate, w.os,"
    " w.drain_requested_at, " + WORKER_STATE + " AS state,"
    " (SELECT coalesce(json_agg(json_build_object('instance_id', i.instance_id,"
    "   'host', i.host, 'pid', i.pid, 'started_at', i.started_at,"
    "   'last_heartbeat', i.last_heartbeat) ORDER BY i.started_at), '[]')"
    "  FROM worker_instances i WHERE i.worker_id = w.worker_id AND"
    "  i.last_heartbeat > clock_timestamp() - make_interval(secs => %(ttl)s))"
    " AS live_instances"
    " FROM workers w ORDER BY w.worker_id"
)
#: The queues of alive workers. With the queues holding unfinished tasks, these are the ones
#: /queues and the queue metrics list: a worker gone for good drops out of both.
WORKER_QUEUES = f"SELECT DISTINCT unnest(queues) FROM workers WHERE {WORKER_ALIVE}"
#: Per kind: alive workers, alive drained ones, duplicated ones.
WORKERS_BY_KIND = (f"SELECT kind, count(*) FILTER (WHERE {WORKER_ALIVE}),"
                   f" count(*) FILTER (WHERE {WORKER_ALIVE} AND drain_requested_at IS NOT NULL),"
                   " count(*) FILTER (WHERE duplicate) FROM workers GROUP BY kind")


# -- the Reaper --------------------------------------------------------------------------------

#: ``pg_try_advisory_xact_lock`` key: a Reaper pass acts only where it holds it.
REAPER_LOCK_KEY = 0x7265617065  # "reape"
REAPER_LOCK = "SELECT pg_try_advisory_xact_lock(%(key)s) AS held"


@dataclass(frozen=True)
class Lock:
    held: bool


@dataclass(frozen=True)
class LivenessRow:
    """A worker as a Reaper pass sees it (turned into a reaper.WorkerView)."""

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


LIVENESS = (
    "SELECT worker_id, host, kind, pid, device, queues, models,"
    f" {WORKER_ALIVE} AS alive,"
    " extract(epoch FROM clock_timestamp() - last_heartbeat)::float8 AS silent_for,"
    " drain_requested_at IS NOT NULL AS draining FROM workers"
)


@dataclass(frozen=True)
class Dead:
    """A worker a pass found silent past the TTL and marked dead."""

    worker_id: str
    host: str
    pid: int | None
    kind: str
    silent_for: float


#: A worker that said goodbye stopped; it did not die.
MARK_DEAD = (
    "UPDATE workers SET dead = true WHERE NOT dead AND stopped_at IS NULL"
    " AND last_heartbeat < clock_timestamp() - make_interval(secs => %(ttl)s)"
    " RETURNING worker_id, host, pid, kind,"
    " extract(epoch FROM clock_timestamp() - last_heartbeat)::float8 AS silent_for"
)
#: Per queue of ``queues``: its unfinished tasks, (queue, count) pairs.
LOAD_BY_QUEUE = ("SELECT queue, count(*) FROM tasks WHERE status IN ('queued', 'running')"
                 " AND queue = ANY(%(queues)s) GROUP BY queue")
#: The columns of reaper.TaskView.
_REAPER_TASK_COLUMNS = (
    "id, task_type, status, queue, worker, worker_id, worker_host, claim, model, attempts,"
    " max_attempts, requested_worker,"
    " extract(epoch FROM clock_timestamp() - started_at)::float8 AS running_for"
)
#: Inference tasks waiting for any alive worker (queue null), oldest first.
WAITING_INFERENCE = (
    f"SELECT {_REAPER_TASK_COLUMNS} FROM tasks WHERE status = 'queued' AND queue IS NULL"
    " AND task_type = ANY(%(types)s) ORDER BY created_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED"
)
#: Inference tasks to look at again: running on a dead worker or past the task timeout, or
#: queued where no alive worker takes them (or not on the worker they asked for).
INFERENCE_TO_REVIEW = (
    f"SELECT {_REAPER_TASK_COLUMNS} FROM tasks"
    " WHERE status IN ('queued', 'running') AND task_type = ANY(%(types)s) AND ("
    "  (status = 'running' AND (worker_id IS NULL OR worker_id <> ALL(%(alive)s)"
    "   OR started_at < clock_timestamp() - make_interval(secs => %(timeout)s)))"
    "  OR (status = 'queued' AND (queue IS NULL OR queue <> ALL(%(queues)s)"
    "   OR (requested_worker IS NOT NULL AND worker <> requested_worker))))"
    " ORDER BY created_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED"
)
#: Shared-queue tasks (web, RAG) running on a worker that is not alive.
SHARED_ON_DEAD = (
    f"SELECT {_REAPER_TASK_COLUMNS} FROM tasks"
    " WHERE status = 'running' AND task_type = ANY(%(types)s)"
    " AND (worker_id IS NULL OR worker_id <> ALL(%(alive)s))"
    " ORDER BY created_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED"
)
#: The instances heard from within the TTL (reaper.InstanceView rows), and the time now.
LIVE_INSTANCES = (
    "SELECT worker_id, instance_id, host, pid, started_at, last_heartbeat"
    " FROM worker_instances"
    " WHERE last_heartbeat > clock_timestamp() - make_interval(secs => %(ttl)s)"
)


@dataclass(frozen=True)
class Now:
    now: datetime


NOW = "SELECT clock_timestamp() AS now"
#: Flags exactly the worker ids in ``ids`` as duplicated; a row already right is not written.
FLAG_DUPLICATES = (
    "UPDATE workers SET duplicate = (worker_id = ANY(%(ids)s))"
    " WHERE duplicate IS DISTINCT FROM (worker_id = ANY(%(ids)s))"
)
# Queued tasks not pushed for longer than the grace (``dispatched_at``): (queue, count) pairs
# first, then the ids of the queues whose Redis list looked short.
QUEUED_PAST_GRACE = (
    "SELECT queue, count(*) FROM tasks WHERE status = 'queued' AND queue IS NOT NULL"
    " AND (dispatched_at IS NULL"
    "      OR dispatched_at < clock_timestamp() - make_interval(secs => %(grace)s))"
    " GROUP BY queue"
)


@dataclass(frozen=True)
class Queued:
    id: uuid.UUID
    queue: str


QUEUED_IDS_PAST_GRACE = (
    "SELECT id, queue FROM tasks WHERE status = 'queued' AND queue = ANY(%(queues)s)"
    " AND (dispatched_at IS NULL"
    "      OR dispatched_at < clock_timestamp() - make_interval(secs => %(grace)s))"
    " ORDER BY created_at LIMIT %(limit)s"
)
#: Instances silent for longer than ``seconds`` are forgotten.
FORGET_INSTANCES = ("DELETE FROM worker_instances WHERE last_heartbeat < clock_timestamp()"
                    " - make_interval(secs => %(seconds)s)")
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
