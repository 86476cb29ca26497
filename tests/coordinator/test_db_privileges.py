"""Least privilege in PostgreSQL, against a real server, laid out as the postgresql_access role
lays it out: the database owned by an owner role, the Coordinator's login a NOINHERIT member
of it, each worker host a login of its own in coordinator_contract.WORKER_DB_GROUP. A worker
login claims and answers its own tasks and is refused everything else with PostgreSQL's
own error; the Coordinator's login reads and writes rows and cannot change the schema."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import coordinator_contract as contract
import psycopg
import psycopg2
import pytest

from coordinator import statemachine as sm
from coordinator.schema import MIGRATIONS, ensure_schema
from lab.throwaway import ThrowawayPostgres

DATABASE = "privileges"
OWNER, COORDINATOR, STRANGER = "privileges_owner", "privileges_coordinator", "privileges_other"
HOST_A, HOST_B = "lab-worker-fast", "lab-worker-slow"
KEY = "test-worker-db-key"


def login_dsn(pg: ThrowawayPostgres, user: str, password: str) -> str:
    return (f"host=127.0.0.1 port={pg.port} dbname={DATABASE} user={user} "
            f"password={password}")


def migrate(dsn: str) -> list[int]:
    async def apply() -> list[int]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            return await ensure_schema(conn)

    return asyncio.run(apply())


@pytest.fixture(scope="module")
def cluster(pg: ThrowawayPostgres) -> Iterator[dict[str, str]]:
    """DSNs of the Coordinator's login and of two worker hosts' logins, schema created."""
    worker_logins = {host: contract.worker_db_role(host) for host in (HOST_A, HOST_B)}
    roles = [OWNER, COORDINATOR, STRANGER, *worker_logins.values()]

    def drop() -> None:
        pg.psql(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)", db="postgres")
        for role in roles:
            pg.psql(f"DROP ROLE IF EXISTS {role}", db="postgres")

    drop()
    pg.psql(f"CREATE ROLE {OWNER} NOLOGIN", db="postgres")
    pg.psql(f"CREATE ROLE {COORDINATOR} LOGIN NOINHERIT PASSWORD 'c' IN ROLE {OWNER}",
            db="postgres")
    pg.psql(f"CREATE ROLE {STRANGER} LOGIN PASSWORD 's'", db="postgres")
    for host, login in worker_logins.items():
        password = contract.worker_db_password(KEY, host)
        pg.psql(f"CREATE ROLE {login} LOGIN PASSWORD '{password}' "
                f"IN ROLE {contract.WORKER_DB_GROUP}", db="postgres")
    pg.psql(f"CREATE DATABASE {DATABASE} OWNER {OWNER}", db="postgres")
    dsns = {"coordinator": login_dsn(pg, COORDINATOR, "c"),
            "stranger": login_dsn(pg, STRANGER, "s")}
    for host, login in worker_logins.items():
        dsns[host] = login_dsn(pg, login, contract.worker_db_password(KEY, host))
    assert migrate(dsns["coordinator"]) == [version for version, _, _ in MIGRATIONS]
    yield dsns
    drop()


def coordinator_sql(cluster: dict[str, str], statement: str, params=None) -> list[tuple]:
    with psycopg.connect(cluster["coordinator"], autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def new_task(cluster: dict[str, str]) -> uuid.UUID:
    task_id = uuid.uuid4()
    statement, columns = sm.insert_tasks([sm.NewTask(
        task_id, "web_search", "a prompt", None, contract.WEB_QUEUE, contract.DEFAULT_WORKER,
        3, None)])
    coordinator_sql(cluster, statement, columns)
    return task_id


def worker(cluster: dict[str, str], host: str):
    conn = psycopg2.connect(cluster[host])
    conn.autocommit = True
    return conn


def claim(cluster: dict[str, str], host: str, task_id: uuid.UUID) -> uuid.UUID:
    token = uuid.uuid4()
    with worker(cluster, host) as conn, conn.cursor() as cur:
        cur.execute(contract.CLAIM_SQL, {"id": str(task_id), "claim": str(token),
                                          "worker_id": f"web-worker-{host}", "host": host,
                                          "queues": [contract.WEB_QUEUE]})
        assert cur.rowcount == 1
    return token


def result_params(task_id: uuid.UUID, token: uuid.UUID) -> dict:
    return {"id": str(task_id), "claim": str(token), "status": "done", "result": "an answer",
            "fallback": False, "error": None, "worker": contract.WEB_RESULT_WORKER,
            "answered_model": None}


def refused(cluster: dict[str, str], host: str, statement: str, params=None) -> str:
    """PostgreSQL's error for ``statement`` run by ``host``'s worker login."""
    with worker(cluster, host) as conn, conn.cursor() as cur, \
            pytest.raises(psycopg2.Error) as caught:
        cur.execute(statement, params)
    return str(caught.value).splitlines()[0]


def test_the_schema_belongs_to_the_owner_role_not_to_the_coordinators_login(cluster):
    owners = coordinator_sql(cluster, "SELECT DISTINCT pg_get_userbyid(relowner) FROM pg_class"
                                      " WHERE relnamespace = 'public'::regnamespace")
    assert owners == [(OWNER,)]
    assert migrate(cluster["coordinator"]) == []  # up to date: nothing applied again


def test_a_worker_claims_and_answers_its_own_task_and_the_timeline_records_it(cluster):
    task_id = new_task(cluster)
    token = claim(cluster, HOST_A, task_id)
    with worker(cluster, HOST_A) as conn, conn.cursor() as cur:
        cur.execute(contract.RESULT_SQL, result_params(task_id, token))
        assert cur.rowcount == 1
    rows = coordinator_sql(cluster, "SELECT status, claimed_by FROM tasks WHERE id = %s",
                           (task_id,))
    assert rows == [("done", contract.worker_db_role(HOST_A))]
    events = coordinator_sql(cluster, "SELECT event FROM task_transitions WHERE task_id = %s"
                                      " ORDER BY id", (task_id,))
    assert [e for (e,) in events] == ["created", "claimed", "done"]


def test_a_worker_cannot_write_another_hosts_claim(cluster):
    task_id = new_task(cluster)
    token = claim(cluster, HOST_A, task_id)
    message = refused(cluster, HOST_B, contract.RESULT_SQL, result_params(task_id, token))
    assert message == (
        f"permission denied: task {task_id} is running and claimed by "
        f"{contract.worker_db_role(HOST_A)}; {contract.worker_db_role(HOST_B)} may only claim "
        "a queued task or write its own claim")
    assert coordinator_sql(cluster, "SELECT status FROM tasks WHERE id = %s",
                           (task_id,)) == [("running",)]


def test_a_worker_cannot_rewrite_a_finished_task_even_its_own(cluster):
    task_id = new_task(cluster)
    token = claim(cluster, HOST_A, task_id)
    with worker(cluster, HOST_A) as conn, conn.cursor() as cur:
        cur.execute(contract.RESULT_SQL, result_params(task_id, token))
    message = refused(cluster, HOST_A, "UPDATE tasks SET result = 'forged' WHERE id = %s",
                      (str(task_id),))
    assert message.startswith(f"permission denied: task {task_id} is done and claimed by")


def test_a_worker_cannot_finish_a_queued_task_without_claiming_it(cluster):
    task_id = new_task(cluster)
    message = refused(cluster, HOST_A, "UPDATE tasks SET status = 'done' WHERE id = %s",
                      (str(task_id),))
    assert message.startswith(f"permission denied: task {task_id} is queued and claimed by "
                              "nobody")


@pytest.mark.parametrize(("statement", "error"), [
    ("DELETE FROM tasks", "permission denied for table tasks"),
    ("DROP TABLE tasks", "must be owner of table tasks"),
    ("TRUNCATE tasks", "permission denied for table tasks"),
    ("UPDATE tasks SET prompt = 'changed'", "permission denied for table tasks"),
    ("INSERT INTO tasks (id, task_type, prompt) VALUES (gen_random_uuid(), 'chat', 'p')",
     "permission denied for table tasks"),
    ("SELECT * FROM workers", "permission denied for table workers"),
    ("DELETE FROM task_transitions", "permission denied for table task_transitions"),
    ("SELECT * FROM audit", "permission denied for table audit"),
    ("ALTER TABLE tasks ADD COLUMN x int", "must be owner of table tasks"),
    ("CREATE TABLE mine (x int)", "permission denied for schema public"),
])
def test_a_worker_login_is_refused_what_a_worker_never_does(cluster, statement, error):
    assert refused(cluster, HOST_A, statement) == error


def test_the_coordinators_login_writes_rows_but_cannot_change_the_schema(cluster):
    task_id = new_task(cluster)
    token = claim(cluster, HOST_A, task_id)
    requeue, params = sm.requeue_task(task_id, "running", token, contract.WEB_QUEUE,
                                      contract.WEB_QUEUE, contract.DEFAULT_WORKER)
    assert coordinator_sql(cluster, requeue, params) == [(task_id,)]
    with psycopg.connect(cluster["coordinator"], autocommit=True) as conn, \
            pytest.raises(psycopg.errors.InsufficientPrivilege) as caught:
        conn.execute("DROP TABLE tasks")
    assert str(caught.value) == "must be owner of table tasks"


def test_a_login_that_cannot_act_as_the_owner_is_told_what_to_grant(cluster):
    with pytest.raises(RuntimeError) as caught:
        migrate(cluster["stranger"])
    assert str(caught.value) == (
        f"the login {STRANGER} cannot act as the database's owner {OWNER}, which owns the "
        f"schema (GRANT {OWNER} TO {STRANGER}): run site.yml, which grants it")


def test_worker_logins_are_one_per_host_and_their_passwords_follow_the_key():
    assert contract.worker_db_role("Lab-Worker.fast") == "worker_lab_worker_fast"
    assert len(contract.worker_db_role("h" * 100)) == 63
    password = contract.worker_db_password(KEY, HOST_A)
    assert password != contract.worker_db_password(KEY, HOST_B)
    assert password != contract.worker_db_password("another key", HOST_A)
    assert password == contract.worker_db_password(KEY, HOST_A)
