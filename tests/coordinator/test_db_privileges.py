"""Least privilege in PostgreSQL, against a real server, laid out as the postgresql_access role
lays it out: the database owned by an owner role, the Coordinator's login a NOINHERIT member
of it, each worker host a login of its own in coordinator_contract.WORKER_DB_GROUP, and its
grant written from the role's own filters with the statements its module runs. A worker login
claims and answers its own host's tasks, as its own host's workers, and is refused everything
else with PostgreSQL's own error; the Coordinator's login reads and writes rows and cannot
change the schema. What the database records of a claim is what coordinator_task's proof
reads."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterable, Iterator

import coordinator_contract as contract
import psycopg
import psycopg2
import pytest
from coordinator_sql import SQL

from coordinator import statemachine as sm
from coordinator.schema import MIGRATIONS, ensure_schema
from lab.throwaway import ThrowawayPostgres
from module_utils import coordinator_probe as probe
from tests.filter_kit import REPO, load

DATABASE = "privileges"
OWNER, COORDINATOR, STRANGER = "privileges_owner", "privileges_coordinator", "privileges_other"
# A runs the web worker and an inference worker, B an inference worker; C has a login (a
# member of the workers' group) but is in no worker group, so it has no grant.
HOST_A, HOST_B, HOST_C = "lab-worker-fast", "lab-worker-slow", "lab-worker-new"
# Each host's WORKER_HOST (its node_address), which its workers write as worker_host.
ADDRESS = {HOST_A: "192.0.2.41", HOST_B: "192.0.2.42", HOST_C: "192.0.2.43"}
KEY = "test-worker-db-key"
GROUPS = {"web_workers": [HOST_A], "inference_workers": [HOST_A, HOST_B]}

# The postgresql_access role's filters, by the names its variables call them.
pg_role = load(REPO / "roles" / "postgresql_access" / "filter_plugins" / "pg_hba.py")
FILTERS = pg_role.FilterModule().filters()


def web_worker(host: str) -> str:
    return f"web-worker-{host}"


def own_queue(host: str) -> str:
    return contract.inference_queue("cpu", host)


def worker_status(host: str, web: str | None) -> list[dict]:
    """The records the worker role publishes for ``host`` (its ``tasks_from: status``): an
    inference worker, and a web worker declared ``web`` (present or absent) or none."""
    records = [{"name": "inference-worker", "kind": "inference", "state": "present",
                "worker_id": host, "host": ADDRESS[host], "queues": [own_queue(host)]}]
    if web:
        records.append({"name": "web-worker", "kind": "web", "state": web,
                        "worker_id": web_worker(host), "host": ADDRESS[host],
                        "queues": [contract.WEB_QUEUE]})
    return records


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
    worker_logins = {host: contract.worker_db_role(host) for host in ADDRESS}
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
            "stranger": login_dsn(pg, STRANGER, "s"),
            "admin": f"host={pg.sockdir} port={pg.port} dbname={DATABASE} user=postgres"}
    for host, login in worker_logins.items():
        dsns[host] = login_dsn(pg, login, contract.worker_db_password(KEY, host))
    assert migrate(dsns["coordinator"]) == [version for version, _, _ in MIGRATIONS]
    assert write_grants(dsns) == 2  # one row per worker host: A and B, not C
    yield dsns
    drop()


def write_grants(cluster: dict[str, str], web_a: str = "present",
                 web_b: str | None = None, keep_hosts: Iterable[str] = ()) -> int:
    """The grants as the postgresql_access role writes them (its filters, then the statements
    of its module coordinator_database, as the schema's owner), from the records site.yml's
    first play publishes; the rows the statement changed."""
    hostvars = {HOST_A: {"worker_status": worker_status(HOST_A, web_a)},
                HOST_B: {"worker_status": worker_status(HOST_B, web_b)}}
    groups = GROUPS | ({"web_workers": [HOST_B]} if web_b == "present" else {})
    grants = FILTERS["worker_grants"](groups, hostvars, ["web_workers", "inference_workers"],
                                      keep_hosts)
    rows = FILTERS["worker_db_grants"](grants, [HOST_A, HOST_B])
    with psycopg.connect(cluster["admin"], autocommit=True) as conn:
        conn.execute(f"SET ROLE {OWNER}")
        conn.execute(contract.WORKER_GRANTS_DDL)
        (changes,) = conn.execute(contract.WORKER_GRANTS_WRITE_SQL,
                                  {"grants": json.dumps(rows)}).fetchone()
    return changes


def coordinator_sql(cluster: dict[str, str], statement: str, params=None) -> list[tuple]:
    with psycopg.connect(cluster["coordinator"], autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def new_task(cluster: dict[str, str], queue: str = contract.WEB_QUEUE) -> uuid.UUID:
    task_id = uuid.uuid4()
    task_type, worker = (("web_search", contract.DEFAULT_WORKER) if queue == contract.WEB_QUEUE
                         else ("chat", queue.rsplit(":", 1)[-1]))
    statement, columns = sm.insert_tasks([sm.NewTask(
        task_id, task_type, "a prompt", None, queue, worker, 3, None)])
    coordinator_sql(cluster, statement, columns)
    return task_id


def worker(cluster: dict[str, str], host: str):
    conn = psycopg2.connect(cluster[host])
    conn.autocommit = True
    return conn


def claim_params(task_id: uuid.UUID, host: str, queue: str = contract.WEB_QUEUE,
                 worker_id: str | None = None, worker_host: str | None = None) -> dict:
    """CLAIM_SQL's parameters as ``host``'s worker of ``queue`` sends them; ``worker_id`` and
    ``worker_host`` name another worker or host, as a forged claim would."""
    default_id = web_worker(host) if queue == contract.WEB_QUEUE else host
    return {"id": str(task_id), "claim": str(uuid.uuid4()),
            "worker_id": worker_id or default_id, "host": worker_host or ADDRESS[host],
            "queues": [queue]}


def claim(cluster: dict[str, str], host: str, task_id: uuid.UUID,
          queue: str = contract.WEB_QUEUE) -> uuid.UUID:
    params = claim_params(task_id, host, queue)
    with worker(cluster, host) as conn, conn.cursor() as cur:
        cur.execute(SQL.CLAIM_ASYNC_COMMIT, params)
        assert cur.rowcount == 1
    return uuid.UUID(params["claim"])


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
        cur.execute(SQL.RESULT, result_params(task_id, token))
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
    message = refused(cluster, HOST_B, SQL.RESULT, result_params(task_id, token))
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
        cur.execute(SQL.RESULT, result_params(task_id, token))
    message = refused(cluster, HOST_A, "UPDATE tasks SET result = 'forged' WHERE id = %s",
                      (str(task_id),))
    assert message.startswith(f"permission denied: task {task_id} is done and claimed by")


def test_a_worker_cannot_finish_a_queued_task_without_claiming_it(cluster):
    task_id = new_task(cluster)
    message = refused(cluster, HOST_A, "UPDATE tasks SET status = 'done' WHERE id = %s",
                      (str(task_id),))
    assert message.startswith(f"permission denied: task {task_id} is queued and claimed by "
                              "nobody")


def task_state(cluster: dict[str, str], task_id: uuid.UUID) -> tuple:
    (state,) = coordinator_sql(cluster, "SELECT status, claimed_by, worker_id FROM tasks"
                                        " WHERE id = %s", (task_id,))
    return state


def test_a_worker_cannot_claim_a_task_of_another_hosts_queue_even_naming_its_worker(cluster):
    # A's login takes a task queued for B's inference worker and writes B's worker and host:
    # were it let through, the row would say B did the work.
    task_id = new_task(cluster, own_queue(HOST_B))
    forged = claim_params(task_id, HOST_A, own_queue(HOST_B), worker_id=HOST_B,
                          worker_host=ADDRESS[HOST_B])
    assert refused(cluster, HOST_A, SQL.CLAIM_ASYNC_COMMIT, forged) == (
        f"permission denied: {contract.worker_db_role(HOST_A)} may not take task {task_id} "
        f"from queue {own_queue(HOST_B)}: host {HOST_A} serves {own_queue(HOST_A)}, "
        f"{contract.WEB_QUEUE}")
    assert task_state(cluster, task_id) == ("queued", None, None)
    # B itself takes it.
    claim(cluster, HOST_B, task_id, own_queue(HOST_B))
    assert task_state(cluster, task_id) == ("running", contract.worker_db_role(HOST_B), HOST_B)


def test_a_claim_may_name_only_its_own_hosts_workers_and_address(cluster):
    task_id = new_task(cluster)  # tasks:web, which A serves
    login = contract.worker_db_role(HOST_A)
    as_b = claim_params(task_id, HOST_A, worker_id=web_worker(HOST_B))
    assert refused(cluster, HOST_A, SQL.CLAIM_ASYNC_COMMIT, as_b) == (
        f"permission denied: {login} may not write task {task_id} (queue {contract.WEB_QUEUE}) "
        f"as worker {web_worker(HOST_B)}: host {HOST_A} runs {HOST_A}, {web_worker(HOST_A)}")
    at_b = claim_params(task_id, HOST_A, worker_host=ADDRESS[HOST_B])
    assert refused(cluster, HOST_A, SQL.CLAIM_ASYNC_COMMIT, at_b) == (
        f"permission denied: {login} may not write task {task_id} (queue {contract.WEB_QUEUE}) "
        f"as host {ADDRESS[HOST_B]}: host {HOST_A}'s workers are {ADDRESS[HOST_A]}")
    assert task_state(cluster, task_id) == ("queued", None, None)
    # Nor can its own claim's result rename the worker afterwards.
    token = claim(cluster, HOST_A, task_id)
    message = refused(cluster, HOST_A, "UPDATE tasks SET worker_host = %(host)s"
                                       " WHERE id = %(id)s AND claim = %(claim)s",
                      {"host": ADDRESS[HOST_B], "id": str(task_id), "claim": str(token)})
    assert message.startswith(f"permission denied: {login} may not write task {task_id}")


def test_a_worker_claims_reclaims_and_finishes_its_own_hosts_task(cluster):
    task_id = new_task(cluster, own_queue(HOST_A))
    claim(cluster, HOST_A, task_id, own_queue(HOST_A))
    # Its next process, the earlier one dead mid-task, claims it again with a new token.
    again = claim_params(task_id, HOST_A, own_queue(HOST_A))
    with worker(cluster, HOST_A) as conn, conn.cursor() as cur:
        cur.execute(SQL.RECLAIM_ASYNC_COMMIT, again)
        assert cur.rowcount == 1
        cur.execute(SQL.RESULT, result_params(task_id, uuid.UUID(again["claim"])))
        assert cur.rowcount == 1
    assert coordinator_sql(cluster, "SELECT status, attempts, claimed_by, worker_host FROM tasks"
                                    " WHERE id = %s", (task_id,)) == [
        ("done", 2, contract.worker_db_role(HOST_A), ADDRESS[HOST_A])]
    events = coordinator_sql(cluster, "SELECT event FROM task_transitions WHERE task_id = %s"
                                      " ORDER BY id", (task_id,))
    assert [e for (e,) in events] == ["created", "claimed", "claimed again", "done"]


def test_a_login_without_a_grant_takes_nothing(cluster):
    task_id = new_task(cluster)
    message = refused(cluster, HOST_C, SQL.CLAIM_ASYNC_COMMIT, claim_params(task_id, HOST_C))
    assert message == (
        f"permission denied: {contract.worker_db_role(HOST_C)} has no grant, so it may take no "
        f"task (task {task_id} on queue {contract.WEB_QUEUE}): run site.yml, which grants each "
        "worker host its workers' queues")
    assert task_state(cluster, task_id) == ("queued", None, None)


def test_the_claim_records_the_login_that_authenticated_whatever_role_it_sets(cluster):
    # The workers' group role has no grant of its own, and the claim is A's all the same.
    task_id = new_task(cluster)
    with worker(cluster, HOST_A) as conn, conn.cursor() as cur:
        cur.execute(f"SET ROLE {contract.WORKER_DB_GROUP}")
        cur.execute(SQL.CLAIM_ASYNC_COMMIT, claim_params(task_id, HOST_A))
        assert cur.rowcount == 1
    assert task_state(cluster, task_id)[1] == contract.worker_db_role(HOST_A)


def test_during_a_move_both_web_hosts_take_tasks_web_and_after_it_only_the_new_one(cluster):
    try:
        # migrate-web.yml's grants: B declared the web host, A's worker kept until stopped.
        assert write_grants(cluster, web_a="absent", web_b="present", keep_hosts=[HOST_A]) == 1
        for host in (HOST_A, HOST_B):
            claim(cluster, host, new_task(cluster))
        # Its last play: A's web worker stopped, its grant loses tasks:web.
        assert write_grants(cluster, web_a="absent", web_b="present") == 1
        task_id = new_task(cluster)
        assert refused(cluster, HOST_A, SQL.CLAIM_ASYNC_COMMIT, claim_params(task_id, HOST_A)) == (
            f"permission denied: {contract.worker_db_role(HOST_A)} may not take task {task_id} "
            f"from queue {contract.WEB_QUEUE}: host {HOST_A} serves {own_queue(HOST_A)}")
        claim(cluster, HOST_B, task_id)
    finally:
        write_grants(cluster)
    assert write_grants(cluster) == 0  # the role's second run changes nothing


def proof(cluster: dict[str, str], task_id: uuid.UUID, host: str) -> tuple[str | None, ...]:
    """coordinator_task's verdict and warning on the task's row, read as it reads it."""
    (values,) = coordinator_sql(cluster, SQL.PROBE_TASK, probe.task_query(str(task_id)))
    row = probe.row_from_tuple(values)
    expect = probe.Expectation(ADDRESS[host], allow_fallback=False, claimed_by_host=host)
    return probe.judge_final(row, expect), probe.identity_warning(row, expect)


def test_the_proof_reads_the_login_the_database_recorded_not_the_workers_word(cluster):
    task_id = new_task(cluster, own_queue(HOST_B))
    token = claim(cluster, HOST_B, task_id, own_queue(HOST_B))
    with worker(cluster, HOST_B) as conn, conn.cursor() as cur:
        cur.execute(SQL.RESULT, result_params(task_id, token))
    assert proof(cluster, task_id, HOST_B) == (None, None)
    # A row whose worker columns say A, as a worker wrote them before the grants (here the
    # Coordinator's login rewrites them): the login that claimed it is still B's.
    coordinator_sql(cluster, "UPDATE tasks SET worker_id = %s, worker_host = %s WHERE id = %s",
                    (HOST_A, ADDRESS[HOST_A], task_id))
    assert proof(cluster, task_id, HOST_A) == (
        f"task {task_id} is done, and the row claims host {ADDRESS[HOST_A]} but was claimed by "
        f"login {contract.worker_db_role(HOST_B)}, not {HOST_A}'s own "
        f"{contract.worker_db_role(HOST_A)}: worker_id and worker_host are what a worker "
        "wrote, the login is what the database established", None)


def test_a_claim_by_the_shared_coordinator_login_proves_no_host_and_says_so(cluster):
    # Without a worker key every worker host logs in as the Coordinator's login.
    task_id = new_task(cluster)
    params = claim_params(task_id, HOST_A)
    coordinator_sql(cluster, SQL.CLAIM, params)
    coordinator_sql(cluster, SQL.RESULT,
                    result_params(task_id, uuid.UUID(params["claim"])))
    verdict, warning = proof(cluster, task_id, HOST_A)
    assert verdict is None
    assert warning.startswith(f"task {task_id} was claimed by login {COORDINATOR}, no worker "
                              "host's own")


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
    # Its grant is read only: the role writes it.
    ("UPDATE worker_grants SET queues = '{tasks:web}'",
     "permission denied for table worker_grants"),
    ("INSERT INTO worker_grants VALUES ('x', 'x', '{}', '{}', '{}')",
     "permission denied for table worker_grants"),
    ("DELETE FROM worker_grants", "permission denied for table worker_grants"),
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
