# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every statement on the ``tasks`` and ``workers`` tables, by name (docs/design.md).

The Coordinator, the workers and the Ansible modules all run their SQL on these tables from
here, so the task state machine and the workers' registry have one text: a guard, a column
list or a liveness rule changed here changes for every part. Callers use the names
(``SQL.CLAIM``); each statement's parameters are named (``%(name)s``), and a name means the
same value, of the same type, in every statement that takes it (``parameters`` lists them).
The statements on the Coordinator's ``notifications`` are here too. The schema itself
(tables, triggers, the workers' guard) is the Coordinator's (``coordinator/schema.py``),
where its versions are; the Coordinator's own tables (``audit``,
``task_transitions``) are read in ``coordinator/queries.py``. Pure Python, no dependencies.

It ships as ``coordinator_contract.py`` does: the worker role and the coordinator role copy it
beside the programs (``from coordinator_sql import SQL``), and the modules of library/ import
it as ``ansible.module_utils.coordinator_sql`` (module_utils/ has a link to this file).
"""

from __future__ import annotations

import re

# -- fragments (no statement of their own) -----------------------------------------------------

#: Whether a ``workers`` row is alive: it heartbeated within the TTL (``ttl``, seconds) and did
#: not say goodbye since. The one definition every statement uses.
WORKER_ALIVE = ("(stopped_at IS NULL AND last_heartbeat > clock_timestamp()"
                " - make_interval(secs => %(ttl)s))")
#: A task's public columns: what GET /task, GET /tasks and the status page show of it
#: (coordinator/tasks.task_view, api_models.Task).
PUBLIC_COLUMNS = (
    "id, task_type, status, result, fallback, worker, worker_id, worker_host, error,"
    " attempts, max_attempts, model, options, answered_model, queue, requested_worker, created_at,"
    " started_at, finished_at"
)
#: What a worker is now, for people: one word (GET /workers ``state``, the status page).
#: A drained worker is alive; it is ``drained`` once it reported that it holds nothing.
WORKER_STATE = (
    "CASE WHEN w.duplicate THEN 'duplicate' WHEN w.stopped_at IS NOT NULL THEN 'stopped'"
    f" WHEN NOT {WORKER_ALIVE} THEN 'dead'"
    " WHEN w.drain_requested_at IS NOT NULL AND w.drained AND w.in_flight = 0 THEN 'drained'"
    " WHEN w.drain_requested_at IS NOT NULL THEN 'draining' ELSE 'alive' END"
)
#: The columns of ``tasks`` the coordinator_task probe reads, in the order of its TaskRow's
#: fields (module_utils/coordinator_probe.py). The last two: the login that claimed the task,
#: which the database records (schema version 5), and whether it is a worker host's own (a
#: member of the workers' group role ``group``): the Coordinator's own login, which the
#: workers share without a worker key, is not.
PROBE_COLUMNS = (
    "id::text", "task_type", "status", "queue", "worker", "worker_id", "worker_host",
    "result", "fallback", "error", "created_at", "started_at", "finished_at",
    "answered_model", "claimed_by::text",
    "EXISTS (SELECT FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member"
    " JOIN pg_roles g ON g.oid = m.roleid"
    " WHERE r.rolname = claimed_by AND g.rolname = %(group)s)",
)
# The columns of the Coordinator's Reaper's view of a task (coordinator/reaper.TaskView).
_REAPER_TASK_COLUMNS = (
    "id, task_type, status, queue, worker, worker_id, worker_host, claim, model, attempts,"
    " max_attempts, requested_worker,"
    " extract(epoch FROM clock_timestamp() - started_at)::float8 AS running_for"
)
# Whether another live instance of the worker id started since this one (a duplicate).
_DUPLICATE = (
    " EXISTS (SELECT 1 FROM worker_instances o WHERE o.worker_id = %(worker_id)s"
    " AND o.instance_id <> %(instance_id)s"
    " AND o.last_heartbeat > clock_timestamp() - make_interval(secs => %(ttl)s)"
    " AND (o.started_at >= i.started_at OR o.last_heartbeat > i.started_at))"
)
# Whether routing may prefer the worker: its last probe did not fail (never probed counts).
_HEALTHY = "probe_ok IS NOT false AS healthy"
_LAST_HOUR = "created_at > clock_timestamp() - interval '1 hour'"
# Users' tasks only: the Coordinator's worker probes (task type ``probe_type``,
# coordinator_contract.PROBE_TYPE) are left out of every list and count of tasks.
_USERS = "task_type <> %(probe_type)s"
_PAST_GRACE = ("(dispatched_at IS NULL"
               " OR dispatched_at < clock_timestamp() - make_interval(secs => %(grace)s))")
# The claim is committed without waiting for its WAL flush (the created row and the result
# are flushed): bench/dispatch.py found every commit's fsync in series with the next. If
# PostgreSQL crashes before a later flush, the task is `queued` again and runs again
# (at-least-once, as after any lost claim); the result guard still allows one result.
_ASYNC_COMMIT = "SET LOCAL synchronous_commit TO off;\n"
# A bigint advisory key shows in pg_locks as classid (high half) and objid (low half).
_WORKER_LOCK_KEY = "hashtext('worker:' || %(worker_id)s)"


class SQL:
    """The named statements. Task states: ``queued → running → done | failed``; every
    transition is an UPDATE guarded by the state it expects (status, claim token, queue), so a
    second copy of a task id, a late result from a worker whose claim was taken back, or two
    Reapers acting at once find the guard false and change nothing."""

    # -- tasks: the Coordinator's transitions (coordinator/statemachine.py) ---------------------

    #: POST /route: new ``queued`` tasks, one array a column (any number of rows, one
    #: statement text, so it is prepared once); a null queue waits for an inference worker.
    INSERT_TASKS = (
        "INSERT INTO tasks (id, task_type, prompt, model, queue, worker, max_attempts,"
        " requested_worker, options, dispatched_at)"
        " SELECT t.id, t.task_type, t.prompt, t.model, t.queue, t.worker, t.max_attempts,"
        " t.requested_worker, t.options::jsonb,"
        " CASE WHEN t.queue IS NULL THEN NULL ELSE clock_timestamp() END"
        " FROM unnest(%(ids)s::uuid[], %(task_types)s::text[], %(prompts)s::text[],"
        " %(models)s::text[], %(queues)s::text[], %(workers)s::text[],"
        " %(max_attempts)s::int4[], %(requested_workers)s::text[], %(options)s::text[])"
        " AS t(id, task_type, prompt, model, queue, worker, max_attempts, requested_worker,"
        " options)"
    )
    #: A ``running`` or ``queued`` task (back) to ``queued`` on ``queue`` (null: wait for a
    #: worker); ``attempts`` counts claims and is not touched.
    REQUEUE = (
        "UPDATE tasks SET status = 'queued', queue = %(queue)s, worker = %(worker)s,"
        " claim = NULL, worker_id = NULL, worker_host = NULL, started_at = NULL,"
        " dispatched_at = CASE WHEN %(queue)s::text IS NULL THEN NULL"
        " ELSE clock_timestamp() END"
        " WHERE id = %(id)s AND status = %(status)s AND claim IS NOT DISTINCT FROM %(claim)s"
        " AND queue IS NOT DISTINCT FROM %(old_queue)s RETURNING id"
    )
    #: ``queued | running → failed`` with a reason a user can act on.
    FAIL = (
        "UPDATE tasks SET status = 'failed', error = %(error)s, claim = NULL,"
        " finished_at = clock_timestamp()"
        " WHERE id = %(id)s AND status = %(status)s AND claim IS NOT DISTINCT FROM %(claim)s"
        " RETURNING id"
    )
    #: A new push of still-queued tasks to ``queue``.
    REPUSH = (
        "UPDATE tasks SET dispatched_at = clock_timestamp()"
        " WHERE id = ANY(%(ids)s) AND status = 'queued' AND queue = %(queue)s RETURNING id"
    )
    #: An operator's ``failed → queued``, with ``attempts`` more claims allowed than it had.
    RETRY = (
        "UPDATE tasks SET status = 'queued', queue = %(queue)s, worker = %(worker)s,"
        " claim = NULL, worker_id = NULL, worker_host = NULL, result = NULL, error = NULL,"
        " fallback = false, answered_model = NULL, started_at = NULL, finished_at = NULL,"
        " max_attempts = attempts + %(attempts)s,"
        " dispatched_at = CASE WHEN %(queue)s::text IS NULL THEN NULL"
        " ELSE clock_timestamp() END"
        " WHERE id = %(id)s AND status = 'failed' RETURNING id"
    )

    # -- tasks: the workers' transitions (worker_base.TaskStore) ----------------------------

    #: Only a queued task on one of the worker's queues.
    CLAIM = (
        "UPDATE tasks SET status = 'running', claim = %(claim)s, worker_id = %(worker_id)s,"
        " worker_host = %(host)s, started_at = clock_timestamp(), attempts = attempts + 1"
        " WHERE id = %(id)s AND status = 'queued' AND queue = ANY(%(queues)s)"
        " RETURNING task_type, prompt, model, options"
    )
    #: A task its own earlier process left running when it died mid-task; safe because only
    #: the holder of the worker's advisory lock (one process) runs it.
    RECLAIM = (
        "UPDATE tasks SET claim = %(claim)s, worker_host = %(host)s,"
        " started_at = clock_timestamp(), attempts = attempts + 1"
        " WHERE id = %(id)s AND status = 'running' AND worker_id = %(worker_id)s"
        " AND queue = ANY(%(queues)s)"
        " RETURNING task_type, prompt, model, options"
    )
    #: CLAIM and RECLAIM as the workers send them: committed without waiting for the flush.
    CLAIM_ASYNC_COMMIT = _ASYNC_COMMIT + CLAIM
    RECLAIM_ASYNC_COMMIT = _ASYNC_COMMIT + RECLAIM
    #: Only the holder of the claim.
    RESULT = (
        "UPDATE tasks SET status = %(status)s, result = %(result)s, fallback = %(fallback)s,"
        " error = %(error)s, worker = %(worker)s, answered_model = %(answered_model)s,"
        " finished_at = clock_timestamp()"
        " WHERE id = %(id)s AND status = 'running' AND claim = %(claim)s"
    )
    #: The tasks ``running`` under this worker id, to be finished by its new process.
    ADOPT = (
        "SELECT id::text FROM tasks"
        " WHERE status = 'running' AND worker_id = %(worker_id)s AND queue = ANY(%(queues)s)"
    )
    #: Why a claim found nothing to take.
    TASK_STATE = "SELECT status, worker_id FROM tasks WHERE id = %(id)s"
    #: The start-up check that the login may write ``tasks`` (changes no row).
    WRITE_CHECK = "UPDATE tasks SET status = status WHERE false"
    #: One process per WORKER_ID: its session advisory lock, and who holds it.
    WORKER_LOCK = f"SELECT pg_try_advisory_lock({_WORKER_LOCK_KEY})"
    WORKER_LOCK_HOLDER = (
        "SELECT a.application_name, a.client_addr::text"
        " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        f" AND l.classid::bigint = ({_WORKER_LOCK_KEY}::bigint >> 32) & 4294967295"
        f" AND l.objid::bigint = {_WORKER_LOCK_KEY}::bigint & 4294967295"
    )

    # -- tasks: what the coordinator_task module reads (module_utils/coordinator_probe.py) ---

    #: Run before routing: a missing table means the probe looks at the wrong database.
    PROBE_TABLE = "SELECT 1 FROM tasks LIMIT 0"
    PROBE_TASK = f"SELECT {', '.join(PROBE_COLUMNS)} FROM tasks WHERE id = %(id)s::uuid"

    # -- worker probes (coordinator/probes.py): tasks of type ``probe_type`` -----------------

    #: A probe for each alive, undrained worker of ``kinds`` (on its first queue: the shared
    #: one, or an inference worker's own) that has none open and none sent within
    #: ``interval`` seconds or since it registered; answers (id, queue) to push. The probed
    #: worker is its ``requested_worker`` and ``worker``, whatever its kind.
    SEND_PROBES = (
        "INSERT INTO tasks (id, task_type, prompt, queue, worker, max_attempts,"
        " requested_worker, dispatched_at)"
        " SELECT gen_random_uuid(), %(probe_type)s, %(prompt)s, w.queues[1],"
        " w.worker_id, 1, w.worker_id, clock_timestamp() FROM workers w"
        f" WHERE w.kind = ANY(%(kinds)s) AND {WORKER_ALIVE} AND w.drain_requested_at IS NULL"
        " AND cardinality(w.queues) > 0 AND NOT EXISTS (SELECT FROM tasks t"
        "  WHERE t.task_type = %(probe_type)s AND t.requested_worker = w.worker_id"
        "  AND (t.status IN ('queued', 'running') OR t.created_at > greatest(w.registered_at,"
        "   clock_timestamp() - make_interval(secs => %(interval)s))))"
        " RETURNING id::text, queue"
    )
    #: Probes older than ``timeout`` seconds: running ones (whoever claimed them), and
    #: queued ones of workers that still take tasks (the others' are withdrawn:
    #: WITHDRAW_PROBES).
    OVERDUE_PROBES = (
        "SELECT t.id, t.status, t.claim, t.queue, t.requested_worker AS worker_id,"
        " t.worker_id AS claimed_by_worker,"
        " extract(epoch FROM clock_timestamp() - t.created_at)::float8 AS age"
        " FROM tasks t LEFT JOIN workers w ON w.worker_id = t.requested_worker"
        " WHERE t.task_type = %(probe_type)s AND t.status IN ('queued', 'running')"
        " AND t.created_at < clock_timestamp() - make_interval(secs => %(timeout)s)"
        f" AND (t.status = 'running' OR ({WORKER_ALIVE} AND w.drain_requested_at IS NULL))"
        " ORDER BY t.created_at FOR UPDATE OF t SKIP LOCKED"
    )
    #: Queued probes of workers that no longer take tasks (stopped, dead, drained, gone):
    #: no verdict on them, the rows and their timeline deleted. Answers the ids and their
    #: queues, which the Prober then removes the ids from (a worker that took one already
    #: finds no row and drops it).
    WITHDRAW_PROBES = (
        "WITH gone AS (DELETE FROM tasks t WHERE t.task_type = %(probe_type)s"
        " AND t.status = 'queued' AND NOT EXISTS (SELECT FROM workers w"
        f"  WHERE w.worker_id = t.requested_worker AND {WORKER_ALIVE}"
        "  AND w.drain_requested_at IS NULL) RETURNING t.id, t.queue),"
        " timeline AS (DELETE FROM task_transitions WHERE task_id IN (SELECT id FROM gone))"
        " SELECT id::text, queue FROM gone"
    )
    #: Each worker's verdict from its latest finished probe, where that is newer than the
    #: one recorded; answers the workers whose verdict changed.
    RECORD_PROBES = (
        "WITH latest AS (SELECT DISTINCT ON (requested_worker) id, requested_worker,"
        " created_at, status, error,"
        " extract(epoch FROM finished_at - created_at)::float8 AS seconds FROM tasks"
        " WHERE task_type = %(probe_type)s AND status IN ('done', 'failed')"
        " ORDER BY requested_worker, created_at DESC),"
        " before AS (SELECT worker_id, probe_ok FROM workers)"
        " UPDATE workers w SET probe_task = l.id, probe_at = l.created_at,"
        " probe_seconds = l.seconds, probe_ok = (l.status = 'done'), probe_error = l.error"
        " FROM latest l, before b WHERE l.requested_worker = w.worker_id"
        " AND b.worker_id = w.worker_id AND w.probe_task IS DISTINCT FROM l.id"
        " RETURNING w.worker_id, w.host, w.kind, w.probe_ok, w.probe_error,"
        " w.probe_seconds, b.probe_ok AS was_ok"
    )
    #: Finished probes past the last ``keep`` of each worker, and their timeline: a count,
    #: not an age, so the rows kept do not grow with a shorter COORDINATOR_PROBE_INTERVAL,
    #: and a worker's last probes stay readable however long ago they ran.
    PRUNE_PROBES = (
        "WITH old AS (DELETE FROM tasks WHERE id IN (SELECT id FROM (SELECT id, status,"
        " row_number() OVER (PARTITION BY requested_worker ORDER BY created_at DESC) AS n"
        " FROM tasks WHERE task_type = %(probe_type)s) r"
        " WHERE n > %(keep)s AND status IN ('done', 'failed')) RETURNING id),"
        " timeline AS (DELETE FROM task_transitions WHERE task_id IN (SELECT id FROM old))"
        " SELECT count(*)::int FROM old"
    )

    # -- notifications (coordinator/notify.py): what is wrong now, and what was sent ---------

    #: The problems present now, one row each (notify.Condition): dead workers (the Reaper's
    #: mark), workers whose last two finished probes failed (a dead one's too: it has not
    #: recovered until a probe is done), and watched queues that a worker registered for
    #: once and no alive worker consumes now.
    NOTIFY_CONDITIONS = (
        "SELECT 'dead' AS what, worker_id AS target, host, kind,"
        " to_char(last_heartbeat AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS \"UTC\"') AS detail"
        " FROM workers WHERE dead AND stopped_at IS NULL"
        " UNION ALL SELECT 'unhealthy', w.worker_id, w.host, w.kind, w.probe_error FROM workers w"
        " WHERE w.stopped_at IS NULL AND (SELECT count(*) FILTER (WHERE l.status = 'failed')"
        "  FROM (SELECT status FROM tasks t WHERE t.task_type = %(probe_type)s"
        "  AND t.requested_worker = w.worker_id AND t.status IN ('done', 'failed')"
        "  ORDER BY t.created_at DESC LIMIT 2) l) = 2"
        " UNION ALL SELECT 'no_consumer', q, NULL, NULL, NULL"
        " FROM unnest(%(watched_queues)s::text[]) q"
        " WHERE EXISTS (SELECT FROM workers w WHERE q = ANY(w.queues))"
        f" AND NOT EXISTS (SELECT FROM workers w WHERE q = ANY(w.queues) AND {WORKER_ALIVE})"
    )
    #: Each subject's last notification (notify.Last): what was last sent about it.
    LAST_NOTIFICATIONS = (
        "SELECT DISTINCT ON (subject) subject, problem, message,"
        " extract(epoch FROM clock_timestamp() - created_at)::float8 AS age"
        " FROM notifications ORDER BY subject, id DESC"
    )
    INSERT_NOTIFICATION = ("INSERT INTO notifications (subject, problem, message)"
                           " VALUES (%(subject)s, %(problem)s, %(message)s)")
    #: The rows due a send, each leased for ``lease`` seconds to the instance that sends it.
    CLAIM_NOTIFICATIONS = (
        "UPDATE notifications SET attempts = attempts + 1,"
        " next_attempt_at = clock_timestamp() + make_interval(secs => %(lease)s)"
        " WHERE next_attempt_at <= clock_timestamp()"
        " RETURNING id AS notification_id, subject, problem, message, created_at, attempts"
    )
    NOTIFICATION_DELIVERED = (
        "UPDATE notifications SET delivered_at = clock_timestamp(), next_attempt_at = NULL,"
        " error = NULL WHERE id = %(notification_id)s"
    )
    #: A failed send: its error, and its next send in ``retry_in`` seconds (null: given up).
    NOTIFICATION_FAILED = (
        "UPDATE notifications SET error = %(error)s, next_attempt_at = clock_timestamp()"
        " + make_interval(secs => %(retry_in)s::float8) WHERE id = %(notification_id)s"
    )
    #: Rows past the newest ``notifications_kept``, but each subject's last.
    PRUNE_NOTIFICATIONS = (
        "DELETE FROM notifications WHERE id < (SELECT min(id) FROM (SELECT id FROM notifications"
        " ORDER BY id DESC LIMIT %(notifications_kept)s) k) AND id NOT IN"
        " (SELECT DISTINCT ON (subject) id FROM notifications ORDER BY subject, id DESC)"
    )
    #: The status page's last notifications, newest first.
    RECENT_NOTIFICATIONS = (
        "SELECT subject, problem, message, created_at, delivered_at, attempts, error,"
        " next_attempt_at IS NOT NULL AS pending FROM notifications"
        " ORDER BY id DESC LIMIT %(limit)s"
    )

    # -- tasks: what the Coordinator reads --------------------------------------------------

    #: Tasks by id; concurrent reads share one (TaskReader).
    SELECT_TASKS = f"SELECT {PUBLIC_COLUMNS} FROM tasks WHERE id = ANY(%(ids)s)"
    #: The status page, GET /tasks. The list reads tasks_created_idx newest first.
    LIST_TASKS = (
        f"SELECT {PUBLIC_COLUMNS} FROM tasks"
        " WHERE (%(status)s::text IS NULL OR status = %(status)s)"
        " AND (%(task_type)s::text IS NULL OR task_type = %(task_type)s)"
        " AND (%(worker)s::text IS NULL OR worker_id = %(worker)s OR worker = %(worker)s)"
        # now(), not clock_timestamp(): a constant the index scan can start from.
        " AND created_at > coalesce(now() - make_interval(secs => %(seconds)s::float8),"
        f" '-infinity') AND {_USERS}"
        " ORDER BY created_at DESC LIMIT %(limit)s"
    )
    #: Tasks by type and status, and of them the fallback answers (done, not the model's).
    TASK_COUNTS = (
        f"SELECT task_type, status, count(*) FILTER (WHERE {_LAST_HOUR})::int AS last_hour,"
        " count(*)::int AS all_time,"
        f" count(*) FILTER (WHERE fallback AND {_LAST_HOUR})::int AS fallbacks_last_hour,"
        " count(*) FILTER (WHERE fallback)::int AS fallbacks_all_time"
        f" FROM tasks WHERE {_USERS} GROUP BY 1, 2 ORDER BY 1, 2"
    )
    #: Seconds the oldest queued task of each queue has waited (indexed: tasks_active_idx).
    OLDEST_WAITING = (
        "SELECT queue, extract(epoch FROM clock_timestamp() - min(created_at))::float8"
        " FROM tasks WHERE status = 'queued' AND queue IS NOT NULL"
        f" AND {_USERS} GROUP BY queue"
    )
    #: Seconds the oldest queued task of each type has waited since it was created, queue
    #: null (waiting for any worker) included (indexed: tasks_active_idx).
    OLDEST_QUEUED_BY_TYPE = (
        "SELECT task_type, extract(epoch FROM clock_timestamp() - min(created_at))::float8"
        f" FROM tasks WHERE status = 'queued' AND {_USERS} GROUP BY task_type"
    )
    TASK_IN_FULL = f"SELECT {PUBLIC_COLUMNS}, prompt FROM tasks WHERE id = %(id)s"
    #: A task an operator acts on, locked for the action's transaction.
    TASK_FOR_ACTION = ("SELECT id, task_type, status, claim, queue, model, requested_worker"
                       " FROM tasks WHERE id = %(id)s FOR UPDATE")
    #: Unfinished tasks by queue and status (indexed: tasks_active_idx).
    ACTIVE_BY_QUEUE = ("SELECT queue, status, count(*) FROM tasks"
                       f" WHERE status IN ('queued', 'running') AND {_USERS}"
                       " GROUP BY queue, status")
    #: When the newest backup recorded in ``backups`` finished (Unix time); null for none.
    LAST_BACKUP = "SELECT extract(epoch FROM max(finished_at))::float8 FROM backups"
    ACTIVE_BY_TYPE = ("SELECT task_type, status, count(*) FROM tasks"
                      f" WHERE status IN ('queued', 'running') AND {_USERS} GROUP BY 1, 2")
    #: Per queue of ``queues``: its unfinished tasks, (queue, count) pairs.
    LOAD_BY_QUEUE = ("SELECT queue, count(*) FROM tasks WHERE status IN ('queued', 'running')"
                     f" AND queue = ANY(%(queues)s) AND {_USERS} GROUP BY queue")
    #: Inference tasks waiting for any alive worker (queue null), oldest first, for a worker
    #: that registers. It waits for rows a Reaper pass holds (the pass reviews waiting tasks
    #: too) rather than skipping them, which would leave them to the next pass; the register
    #: takes its locks in the pass's order (workers, tasks, instances: workers.register).
    WAITING_INFERENCE = (
        f"SELECT {_REAPER_TASK_COLUMNS} FROM tasks WHERE status = 'queued' AND queue IS NULL"
        " AND task_type = ANY(%(types)s) ORDER BY created_at LIMIT %(limit)s FOR UPDATE"
    )
    #: Inference tasks to look at again: running on a dead worker or past the task timeout,
    #: or queued where no alive worker takes them (or not on the worker they asked for).
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
    #: Queued tasks not pushed for longer than the grace (``dispatched_at``): (queue, count)
    #: pairs first, then the ids of the queues whose Redis list looked short.
    QUEUED_PAST_GRACE = (
        "SELECT queue, count(*) FROM tasks WHERE status = 'queued' AND queue IS NOT NULL"
        f" AND {_PAST_GRACE} GROUP BY queue"
    )
    QUEUED_IDS_PAST_GRACE = (
        "SELECT id, queue FROM tasks WHERE status = 'queued' AND queue = ANY(%(queues)s)"
        f" AND {_PAST_GRACE} ORDER BY created_at LIMIT %(limit)s"
    )

    # -- workers (the registry: the Coordinator's, from registrations and heartbeats) -------

    #: Every worker (or one: WORKER_ROW), with the seconds it has left to live.
    WORKER_ROWS = (
        "SELECT worker_id, host, kind, device, queues, models,"
        " CASE WHEN stopped_at IS NULL THEN"
        " extract(epoch FROM last_heartbeat + make_interval(secs => %(ttl)s)"
        " - clock_timestamp())::float8 ELSE 0 END AS seconds_to_live,"
        f" drain_requested_at IS NOT NULL AS draining, {_HEALTHY} FROM workers"
    )
    WORKER_ROW = WORKER_ROWS + " WHERE worker_id = %(worker_id)s"
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
        f" RETURNING drain_requested_at IS NOT NULL AS draining, {_HEALTHY}"
    )
    #: Answers ``duplicate``.
    REGISTER_INSTANCE = (
        "WITH i AS (INSERT INTO worker_instances (instance_id, worker_id, host, pid)"
        " VALUES (%(instance_id)s, %(worker_id)s, %(host)s, %(pid)s)"
        " ON CONFLICT (instance_id) DO UPDATE SET worker_id = EXCLUDED.worker_id,"
        " host = EXCLUDED.host, pid = EXCLUDED.pid, last_heartbeat = clock_timestamp()"
        " RETURNING started_at) SELECT" + _DUPLICATE + " AS duplicate FROM i"
    )
    #: Answers the worker as routing keeps it and ``duplicate``, or nothing for an unknown
    #: worker.
    HEARTBEAT = (
        "WITH w AS (UPDATE workers SET last_heartbeat = clock_timestamp(), dead = false,"
        " stopped_at = NULL,"
        " in_flight = COALESCE(%(in_flight)s, in_flight),"
        " db_write_failures = COALESCE(%(db_write_failures)s, db_write_failures),"
        " drained = COALESCE(%(drained)s, drained),"
        " last_error = %(last_error)s WHERE worker_id = %(worker_id)s"
        " RETURNING worker_id, host, kind, device, queues, models,"
        f" drain_requested_at IS NOT NULL AS draining, {_HEALTHY}),"
        " i AS (INSERT INTO worker_instances (instance_id, worker_id, host, pid)"
        " SELECT %(instance_id)s, worker_id, host, %(pid)s FROM w"
        " ON CONFLICT (instance_id) DO UPDATE SET last_heartbeat = clock_timestamp(),"
        " worker_id = EXCLUDED.worker_id,"
        " pid = COALESCE(EXCLUDED.pid, worker_instances.pid) RETURNING started_at)"
        " SELECT w.worker_id, w.host, w.kind, w.device, w.queues, w.models,"
        " %(ttl)s::float8 AS seconds_to_live, w.draining, w.healthy,"
        + _DUPLICATE + " AS duplicate"
        " FROM w, i"
    )
    #: The goodbye of one process; answers (host, kind) when it was the worker's current one.
    DEREGISTER = (
        "WITH gone AS (DELETE FROM worker_instances WHERE instance_id = %(instance_id)s"
        " AND worker_id = %(worker_id)s)"
        " UPDATE workers SET stopped_at = clock_timestamp(), in_flight = 0"
        " WHERE worker_id = %(worker_id)s AND instance_id = %(instance_id)s"
        " RETURNING host, kind"
    )
    WORKER_EXISTS = "SELECT 1 FROM workers WHERE worker_id = %(worker_id)s"
    #: Guarded: a second drain (or undrain) changes nothing and answers no row.
    DRAIN = (
        "UPDATE workers SET drain_requested_at = clock_timestamp(), drained = false"
        " WHERE worker_id = %(worker_id)s AND drain_requested_at IS NULL RETURNING host, kind"
    )
    UNDRAIN = (
        "UPDATE workers SET drain_requested_at = NULL, drained = false"
        " WHERE worker_id = %(worker_id)s AND drain_requested_at IS NOT NULL"
        " RETURNING host, kind"
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
        " w.probe_at, w.probe_seconds, w.probe_ok, w.probe_error,"
        " (SELECT coalesce(json_agg(json_build_object('instance_id', i.instance_id,"
        "   'host', i.host, 'pid', i.pid, 'started_at', i.started_at,"
        "   'last_heartbeat', i.last_heartbeat) ORDER BY i.started_at), '[]')"
        "  FROM worker_instances i WHERE i.worker_id = w.worker_id AND"
        "  i.last_heartbeat > clock_timestamp() - make_interval(secs => %(ttl)s))"
        " AS live_instances"
        " FROM workers w ORDER BY w.worker_id"
    )
    #: The queues of alive workers. With the queues holding unfinished tasks, these are the
    #: ones /queues and the queue metrics list: a worker gone for good drops out of both.
    WORKER_QUEUES = f"SELECT DISTINCT unnest(queues) FROM workers WHERE {WORKER_ALIVE}"
    #: Per kind: alive workers, alive drained ones, duplicated ones, dead ones (in the
    #: state GET /workers shows as ``dead``: no goodbye, heartbeat older than the TTL), and
    #: alive ones whose last probe failed.
    WORKERS_BY_KIND = (
        f"SELECT kind, count(*) FILTER (WHERE {WORKER_ALIVE}),"
        f" count(*) FILTER (WHERE {WORKER_ALIVE} AND drain_requested_at IS NOT NULL),"
        " count(*) FILTER (WHERE duplicate),"
        f" count(*) FILTER (WHERE {WORKER_STATE} = 'dead'),"
        f" count(*) FILTER (WHERE {WORKER_ALIVE} AND probe_ok = false)"
        " FROM workers w GROUP BY kind"
    )
    #: Every worker as a Reaper pass sees it.
    LIVENESS = (
        "SELECT worker_id, host, kind, pid, device, queues, models,"
        f" {WORKER_ALIVE} AS alive,"
        " extract(epoch FROM clock_timestamp() - last_heartbeat)::float8 AS silent_for,"
        f" drain_requested_at IS NOT NULL AS draining, {_HEALTHY} FROM workers"
    )
    #: A worker that said goodbye stopped; it did not die.
    MARK_DEAD = (
        "UPDATE workers SET dead = true WHERE NOT dead AND stopped_at IS NULL"
        " AND last_heartbeat < clock_timestamp() - make_interval(secs => %(ttl)s)"
        " RETURNING worker_id, host, pid, kind,"
        " extract(epoch FROM clock_timestamp() - last_heartbeat)::float8 AS silent_for"
    )
    #: Flags exactly the worker ids in ``ids`` as duplicated; a row already right is not
    #: written.
    FLAG_DUPLICATES = (
        "UPDATE workers SET duplicate = (worker_id = ANY(%(worker_ids)s))"
        " WHERE duplicate IS DISTINCT FROM (worker_id = ANY(%(worker_ids)s))"
    )
    #: The instances heard from within the TTL (reaper.InstanceView rows).
    LIVE_INSTANCES = (
        "SELECT worker_id, instance_id, host, pid, started_at, last_heartbeat"
        " FROM worker_instances"
        " WHERE last_heartbeat > clock_timestamp() - make_interval(secs => %(ttl)s)"
    )
    #: Instances silent for longer than ``seconds`` are forgotten.
    FORGET_INSTANCES = ("DELETE FROM worker_instances WHERE last_heartbeat < clock_timestamp()"
                        " - make_interval(secs => %(seconds)s)")


#: Every statement by name.
NAMED: dict[str, str] = {name: text for name, text in vars(SQL).items() if name.isupper()}
_PARAMETER = re.compile(r"%\((\w+)\)s")


def parameters(statement: str) -> list[str]:
    """The names of a statement's parameters, each once, in order of appearance."""
    return list(dict.fromkeys(_PARAMETER.findall(statement)))
