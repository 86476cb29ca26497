"""The PostgreSQL schema (docs/design.md), created or upgraded at start.

Migrations run in one transaction holding ``pg_advisory_xact_lock``: when two Coordinators
start at once, the second waits for the first, then finds every version applied. The lock is
taken before anything is created, because even ``CREATE TABLE IF NOT EXISTS`` races with
itself.
"""

from __future__ import annotations

import logging

import psycopg
from coordinator_contract import (
    PROBE_TYPE,
    WORKER_DB_GROUP,
    WORKER_GRANTS_DDL,
    WORKER_GRANTS_TABLE,
)
from psycopg import sql

log = logging.getLogger("coordinator.schema")

#: ``pg_advisory_xact_lock`` key of schema changes (any constant shared by every instance).
SCHEMA_LOCK_KEY = 0x636F6F7264  # "coord"

#: The channel the trigger notifies when a task reaches ``done`` or ``failed``.
TASK_EVENTS_CHANNEL = "task_events"

_V1 = """
CREATE TABLE IF NOT EXISTS tasks (
    id            uuid PRIMARY KEY,
    task_type     text NOT NULL,
    prompt        text NOT NULL,
    model         text,
    status        text NOT NULL DEFAULT 'queued'
                  CONSTRAINT tasks_status_check
                  CHECK (status IN ('queued', 'running', 'done', 'failed')),
    queue         text,
    worker        text NOT NULL DEFAULT 'default',
    worker_id     text,
    worker_host   text,
    claim         uuid,
    result        text,
    fallback      boolean NOT NULL DEFAULT false,
    error         text,
    attempts      integer NOT NULL DEFAULT 0,
    max_attempts  integer NOT NULL DEFAULT 3,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at    timestamptz,
    finished_at   timestamptz,
    dispatched_at timestamptz,
    requested_worker text
);
COMMENT ON COLUMN tasks.requested_worker IS
    'worker named in POST /route: the task goes to that worker only';

-- Only unfinished tasks are indexed by status: the Reaper, /queues and routing load read them.
CREATE INDEX IF NOT EXISTS tasks_active_idx ON tasks (status, queue)
    WHERE status IN ('queued', 'running');

CREATE TABLE IF NOT EXISTS workers (
    worker_id         text PRIMARY KEY,
    host              text NOT NULL,
    kind              text NOT NULL CHECK (kind IN ('web', 'inference', 'rag')),
    device            text,
    queues            text[] NOT NULL DEFAULT '{}',
    models            text[] NOT NULL DEFAULT '{}',
    version           text,
    pid               integer,
    instance_id       uuid,
    registered_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_heartbeat    timestamptz NOT NULL DEFAULT clock_timestamp(),
    in_flight         integer NOT NULL DEFAULT 0,
    db_write_failures integer NOT NULL DEFAULT 0,
    last_error        text,
    duplicate         boolean NOT NULL DEFAULT false,
    dead              boolean NOT NULL DEFAULT false
);

CREATE TABLE IF NOT EXISTS worker_instances (
    instance_id    uuid PRIMARY KEY,
    worker_id      text NOT NULL,
    host           text NOT NULL,
    pid            integer,
    started_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_heartbeat timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS worker_instances_worker_idx ON worker_instances (worker_id);

CREATE OR REPLACE FUNCTION coordinator_task_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('task_events', json_build_object(
        'id', NEW.id,
        'status', NEW.status,
        'task_type', NEW.task_type,
        'dispatch_seconds', extract(epoch FROM NEW.started_at - NEW.created_at),
        'total_seconds', extract(epoch FROM NEW.finished_at - NEW.created_at)
    )::text);
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS tasks_finished_notify ON tasks;
CREATE TRIGGER tasks_finished_notify
    AFTER UPDATE OF status ON tasks
    FOR EACH ROW
    WHEN (NEW.status IN ('done', 'failed') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION coordinator_task_event();
"""

_V2 = """
ALTER TABLE workers ADD COLUMN IF NOT EXISTS stopped_at timestamptz;
COMMENT ON COLUMN workers.stopped_at IS
    'when the worker said goodbye (POST /workers/{id}/deregister); null once it registers or '
    'heartbeats again';
"""

_V3 = """
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS answered_model text;
COMMENT ON COLUMN tasks.answered_model IS
    'the model whose answer is the result, as the worker asked Ollama for it; null for a '
    'failure, a fallback answer or a result no model wrote';
"""

_V4 = """
ALTER TABLE workers ADD COLUMN IF NOT EXISTS drain_requested_at timestamptz;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS drained boolean NOT NULL DEFAULT false;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS os text;
COMMENT ON COLUMN workers.drain_requested_at IS
    'when an operator drained the worker (POST /workers/{id}/drain): routing sends it nothing '
    'new until undrained; kept across restarts of the Coordinator and of the worker';
COMMENT ON COLUMN workers.drained IS
    'the worker''s own report (heartbeat): it takes no task and holds none';

-- The timeline of each task: one row per transition, written by the triggers below, so
-- every writer (Coordinator, Reaper, workers) records its transitions without a change to
-- its SQL. A writer may name a reason (the Reaper's) or an event (an operator's cancel) in
-- the transaction-local settings coordinator.reason and coordinator.event.
CREATE TABLE IF NOT EXISTS task_transitions (
    id        bigserial PRIMARY KEY,
    task_id   uuid NOT NULL,
    at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    event     text NOT NULL,
    status    text NOT NULL,
    worker_id text,
    queue     text,
    reason    text
);
CREATE INDEX IF NOT EXISTS task_transitions_task_idx ON task_transitions (task_id, id);
-- Rows arrive in time order: a BRIN index finds the ones past the retention for a few pages.
CREATE INDEX IF NOT EXISTS task_transitions_at_idx ON task_transitions USING brin (at);

CREATE OR REPLACE FUNCTION coordinator_tasks_created() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO task_transitions (task_id, event, status, worker_id, queue, reason)
    SELECT id, CASE WHEN queue IS NULL THEN 'created, waiting' ELSE 'created' END, status,
           NULL, queue, nullif(current_setting('coordinator.reason', true), '')
      FROM created;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS tasks_created_transition ON tasks;
CREATE TRIGGER tasks_created_transition
    AFTER INSERT ON tasks REFERENCING NEW TABLE AS created
    FOR EACH STATEMENT EXECUTE FUNCTION coordinator_tasks_created();

CREATE OR REPLACE FUNCTION coordinator_task_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    reason text := nullif(current_setting('coordinator.reason', true), '');
BEGIN
    INSERT INTO task_transitions (task_id, event, status, worker_id, queue, reason)
    VALUES (NEW.id, coalesce(nullif(current_setting('coordinator.event', true), ''), CASE
        WHEN NEW.status = 'running' AND OLD.status = 'queued' THEN 'claimed'
        WHEN NEW.status = 'running' THEN 'claimed again'
        WHEN NEW.status = 'queued' AND OLD.status IN ('done', 'failed') THEN 'retried'
        WHEN NEW.status = 'queued' AND OLD.status = 'queued' AND OLD.queue IS NULL
            THEN 'dispatched'
        WHEN NEW.status = 'queued' THEN 're-dispatched'
        ELSE NEW.status END),
        NEW.status, NEW.worker_id, NEW.queue,
        coalesce(reason, CASE WHEN NEW.status = 'failed' THEN NEW.error END));
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS tasks_transition ON tasks;
CREATE TRIGGER tasks_transition
    AFTER UPDATE ON tasks FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.queue IS DISTINCT FROM NEW.queue
          OR OLD.claim IS DISTINCT FROM NEW.claim)
    EXECUTE FUNCTION coordinator_task_transition();

-- The page's task list: newest first, and the counts of the last hour.
CREATE INDEX IF NOT EXISTS tasks_created_idx ON tasks (created_at DESC);

-- What operators did through the status page or the API, with the outcome.
CREATE TABLE IF NOT EXISTS audit (
    id              bigserial PRIMARY KEY,
    at              timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor           text NOT NULL,
    action          text NOT NULL,
    target          text NOT NULL,
    ok              boolean,
    result          text,
    idempotency_key text UNIQUE
);
CREATE INDEX IF NOT EXISTS audit_target_idx ON audit (target, id);
"""

# Workers log in as members of the group role WORKER_DB_GROUP (one login per worker host, made
# by the postgresql_access role). They may read `tasks`, claim a queued task and write the
# columns of a claim and its result; the guard below holds them to their own claims. Nothing
# else: no DELETE, no DDL, no other table.
_V5 = f"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{WORKER_DB_GROUP}') THEN
        RAISE EXCEPTION 'role {WORKER_DB_GROUP} does not exist: run site.yml (the '
            'postgresql_access role makes it), then start this Coordinator again';
    END IF;
END
$$;

ALTER TABLE tasks ADD COLUMN IF NOT EXISTS claimed_by name;
COMMENT ON COLUMN tasks.claimed_by IS
    'the database login that claimed the task (a worker host''s own role), set by the '
    'tasks_worker_guard trigger: only that login may write the claim''s result';

CREATE OR REPLACE FUNCTION coordinator_worker_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pg_has_role(current_user, '{WORKER_DB_GROUP}', 'MEMBER')
       OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        RETURN NEW;
    END IF;
    IF OLD.status = 'queued' AND NEW.status = 'running' THEN
        NEW.claimed_by := current_user;
    ELSIF OLD.status <> 'running' OR OLD.claimed_by IS DISTINCT FROM current_user THEN
        RAISE EXCEPTION 'permission denied: task % is % and claimed by %; % may only claim '
            'a queued task or write its own claim', OLD.id, OLD.status,
            coalesce(OLD.claimed_by::text, 'nobody'), current_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;
DROP TRIGGER IF EXISTS tasks_worker_guard ON tasks;
CREATE TRIGGER tasks_worker_guard
    BEFORE UPDATE ON tasks FOR EACH ROW EXECUTE FUNCTION coordinator_worker_guard();

-- The timeline is written by the schema's owner whoever changes a task: a worker cannot
-- write task_transitions itself.
ALTER FUNCTION coordinator_tasks_created() SECURITY DEFINER SET search_path FROM CURRENT;
ALTER FUNCTION coordinator_task_transition() SECURITY DEFINER SET search_path FROM CURRENT;

REVOKE ALL ON tasks FROM PUBLIC;
GRANT SELECT ON tasks TO {WORKER_DB_GROUP};
GRANT UPDATE (status, claim, worker_id, worker_host, started_at, attempts, result, fallback,
              error, worker, answered_model, finished_at) ON tasks TO {WORKER_DB_GROUP};
"""

# The unfinished-task index keyed by the task id too. Keyed by (status, queue) alone, every
# claim's new row version went to one run of equal keys ('running', <queue>), ordered by
# heap position: all writers on the same rightmost leaf page. With the random id last, the
# claims spread over the index (bench/dispatch.py: the claim UPDATE 370-390 us -> 180-230 us,
# docs/benchmarks.md); the queries that read it use its first two columns as before.
_V6 = """
DROP INDEX IF EXISTS tasks_active_idx;
CREATE INDEX tasks_active_idx ON tasks (status, queue, id)
    WHERE status IN ('queued', 'running');
"""

# Each worker login is held to its host's grant (coordinator_contract WORKER_GRANTS_DDL, rows
# written by the postgresql_access role from the records each worker host publishes, as its
# Redis user is): it may take only tasks of its host's queues, naming only its host's workers
# and WORKER_HOST, or else the row would say another host did the work. A login without a row
# may write nothing. The login is session_user, the role that authenticated: a worker login
# can SET ROLE to the workers' group, which has no grant. Every claim records its login in
# claimed_by, a worker's or not (the Coordinator's own, which the workers share when there
# is no worker key), so that column never names an earlier claim's login.
_V7 = f"""
{WORKER_GRANTS_DDL};
COMMENT ON TABLE {WORKER_GRANTS_TABLE} IS
    'what each worker host''s login may write (the postgresql_access role writes the rows): '
    'tasks of its queues only, naming only its worker_ids and worker_hosts';
GRANT SELECT ON {WORKER_GRANTS_TABLE} TO {WORKER_DB_GROUP};

CREATE OR REPLACE FUNCTION coordinator_worker_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    me name := session_user;
    granted {WORKER_GRANTS_TABLE};
BEGIN
    IF OLD.status = 'queued' AND NEW.status = 'running' THEN
        NEW.claimed_by := me;
    END IF;
    IF NOT pg_has_role(me, '{WORKER_DB_GROUP}', 'MEMBER')
       OR (SELECT rolsuper FROM pg_roles WHERE rolname = me) THEN
        RETURN NEW;
    END IF;
    IF NOT (OLD.status = 'queued' AND NEW.status = 'running')
       AND (OLD.status <> 'running' OR OLD.claimed_by IS DISTINCT FROM me) THEN
        RAISE EXCEPTION 'permission denied: task % is % and claimed by %; % may only claim '
            'a queued task or write its own claim', OLD.id, OLD.status,
            coalesce(OLD.claimed_by::text, 'nobody'), me
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT * INTO granted FROM {WORKER_GRANTS_TABLE} g WHERE g.login = me;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'permission denied: % has no grant, so it may take no task (task % '
            'on queue %): run site.yml, which grants each worker host its workers'' queues',
            me, OLD.id, coalesce(OLD.queue, 'none')
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF OLD.queue IS NULL OR NOT OLD.queue = ANY(granted.queues) THEN
        RAISE EXCEPTION 'permission denied: % may not take task % from queue %: host % serves '
            '%', me, OLD.id, coalesce(OLD.queue, 'none'), granted.host,
            coalesce(nullif(array_to_string(granted.queues, ', '), ''), 'no queue')
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.worker_id IS NULL OR NOT NEW.worker_id = ANY(granted.worker_ids) THEN
        RAISE EXCEPTION 'permission denied: % may not write task % (queue %) as worker %: '
            'host % runs %', me, OLD.id, OLD.queue, coalesce(NEW.worker_id, 'none'),
            granted.host, coalesce(nullif(array_to_string(granted.worker_ids, ', '), ''),
                                   'no worker')
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.worker_host IS NULL OR NOT NEW.worker_host = ANY(granted.worker_hosts) THEN
        RAISE EXCEPTION 'permission denied: % may not write task % (queue %) as host %: '
            'host %''s workers are %', me, OLD.id, OLD.queue,
            coalesce(NEW.worker_host, 'none'), granted.host,
            coalesce(nullif(array_to_string(granted.worker_hosts, ', '), ''), 'none')
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;
"""

# The task_events payload carries the fallback flag: the Coordinator counts fallback answers
# (coordinator_task_fallbacks_total) from the same events as finished tasks.
_V8 = f"""
CREATE OR REPLACE FUNCTION coordinator_task_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{TASK_EVENTS_CHANNEL}', json_build_object(
        'id', NEW.id,
        'status', NEW.status,
        'task_type', NEW.task_type,
        'fallback', NEW.fallback,
        'dispatch_seconds', extract(epoch FROM NEW.started_at - NEW.created_at),
        'total_seconds', extract(epoch FROM NEW.finished_at - NEW.created_at)
    )::text);
    RETURN NEW;
END
$$;
"""

# Worker probes (coordinator/probes.py): each worker's last probe verdict on its row, which
# routing, GET /workers and the metrics read; the probe rows themselves are tasks of type
# PROBE_TYPE, found per worker by this partial index (user tasks never enter it).
_V9 = f"""
ALTER TABLE workers ADD COLUMN IF NOT EXISTS probe_task uuid;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS probe_at timestamptz;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS probe_seconds float8;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS probe_ok boolean;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS probe_error text;
COMMENT ON COLUMN workers.probe_ok IS
    'the last finished probe: true done, false failed or not done in time (probe_error says '
    'why), null never probed; routing avoids a false one while a healthy worker serves';
CREATE INDEX IF NOT EXISTS tasks_probe_idx ON tasks (requested_worker, created_at DESC)
    WHERE task_type = '{PROBE_TYPE}';
"""

# Notifications (coordinator/notify.py): each row one message to the user's URL; a subject's
# last row says what was last sent about it. next_attempt_at is when it is due a send (null:
# delivered or given up).
_V10 = """
CREATE TABLE IF NOT EXISTS notifications (
    id bigserial PRIMARY KEY,
    subject text NOT NULL,
    problem boolean NOT NULL,
    message text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz DEFAULT clock_timestamp(),
    delivered_at timestamptz,
    error text
);
CREATE INDEX IF NOT EXISTS notifications_subject_idx ON notifications (subject, id DESC);
CREATE INDEX IF NOT EXISTS notifications_due_idx ON notifications (next_attempt_at)
    WHERE next_attempt_at IS NOT NULL;
"""

_V11 = """
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS options jsonb;
COMMENT ON COLUMN tasks.options IS
    'the Ollama options POST /route gave (routing.TASK_OPTIONS), which the worker passes to '
    'the model it asks; null for none';
"""

_V12 = """
CREATE TABLE IF NOT EXISTS backups (
    finished_at timestamptz NOT NULL DEFAULT now(),
    file        text NOT NULL,
    bytes       bigint NOT NULL
);
COMMENT ON TABLE backups IS
    'each whole dump of this database the postgresql_access role''s coordinator-backup '
    'made, recorded by it; coordinator_backup_last_success_timestamp_seconds is the newest';
"""

#: (version, description, SQL). Append new versions; never edit an applied one.
MIGRATIONS: list[tuple[int, str, str]] = [
    (1, "tasks, workers, worker_instances, task_events trigger", _V1),
    (2, "workers.stopped_at: a worker that said goodbye is not alive", _V2),
    (3, "tasks.answered_model: the model that wrote the result", _V3),
    (4, "drain, task_transitions (the timeline), audit", _V4),
    (5, "worker privileges: coordinator_workers, tasks.claimed_by and its guard", _V5),
    (6, "tasks_active_idx keyed by (status, queue, id): claims spread over the index", _V6),
    (7, "worker_grants: a worker login takes only its host's queues, as its host's workers",
     _V7),
    (8, "task_events carries fallback: fallback answers are counted", _V8),
    (9, "worker probes: workers.probe_*, tasks_probe_idx", _V9),
    (10, "notifications: what was sent to the user's URL, and whether it was delivered", _V10),
    (11, "tasks.options: Ollama options a task carries to its model", _V11),
    (12, "backups: the dumps the role's scheduled backup made, for the metrics", _V12),
]

#: What the Coordinator's own login may do, granted at every start by the schema's owner
#: (the database's owner): when the login is not the owner (the postgresql_access role makes
#: it so), it reads and writes rows and cannot change the schema. A no-op when it is.
COORDINATOR_GRANTS = """
GRANT SELECT, INSERT, UPDATE, DELETE
   ON tasks, workers, worker_instances, task_transitions, audit, notifications TO SESSION_USER;
GRANT SELECT ON coordinator_schema, backups TO SESSION_USER;
GRANT USAGE ON SEQUENCE task_transitions_id_seq, audit_id_seq, notifications_id_seq
   TO SESSION_USER;
"""

LATEST_VERSION = MIGRATIONS[-1][0]


def pending(applied: set[int]) -> list[tuple[int, str, str]]:
    """The migrations not yet in ``applied``, in order."""
    return [m for m in MIGRATIONS if m[0] not in applied]


async def _act_as_owner(conn: psycopg.AsyncConnection) -> None:
    """Make the rest of the transaction run as the database's owner, which owns the schema,
    when the login is another role (a member of it, as the postgresql_access role makes the
    Coordinator's login)."""
    cur = await conn.execute(
        "SELECT pg_get_userbyid(datdba), current_user FROM pg_database"
        " WHERE datname = current_database()")
    owner, login = await cur.fetchone()
    if owner == login:
        return
    try:
        await conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(owner)))
    except psycopg.errors.InsufficientPrivilege:
        raise RuntimeError(
            f"the login {login} cannot act as the database's owner {owner}, which owns the "
            f"schema (GRANT {owner} TO {login}): run site.yml, which grants it") from None


async def ensure_schema(conn: psycopg.AsyncConnection) -> list[int]:
    """Create or upgrade the schema as the database's owner, grant the Coordinator's login
    its privileges; return the versions applied now (empty if up to date).

    ``conn`` must not be inside a transaction. Safe when several processes call it at once.
    """
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_KEY,))
        await _act_as_owner(conn)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS coordinator_schema ("
            " version integer PRIMARY KEY,"
            " description text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
        cur = await conn.execute("SELECT version FROM coordinator_schema")
        applied = {version for (version,) in await cur.fetchall()}
        newer = sorted(v for v in applied if v > LATEST_VERSION)
        if newer:
            log.warning(
                "database schema has version %s, newer than this coordinator knows (%s): "
                "continuing, but upgrade this coordinator", newer[-1], LATEST_VERSION,
            )
        done = []
        for version, description, statements in pending(applied):
            await conn.execute(statements)
            await conn.execute(
                "INSERT INTO coordinator_schema (version, description) VALUES (%s, %s)",
                (version, description),
            )
            log.info("applied schema version %s: %s", version, description)
            done.append(version)
        await conn.execute(COORDINATOR_GRANTS)
        return done
