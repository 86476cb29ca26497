"""The guarded state machine, run against PostgreSQL: the workers' transitions and the
Coordinator's (coordinator_sql's statements, coordinator.statemachine's parameters). Every
guard is tried with what it must refuse: a second claim, a stale claim's result, a second
result, a re-queue or failure of a task that moved on."""

from __future__ import annotations

import uuid

import coordinator_contract as contract
from coordinator_sql import SQL

from coordinator import statemachine as sm

from .coordkit import Backends


def new_task(backends: Backends, queue: str = contract.WEB_QUEUE) -> uuid.UUID:
    task_id = uuid.uuid4()
    sql, columns = sm.insert_tasks([sm.NewTask(task_id, "web_search", "p", None, queue,
                                               contract.DEFAULT_WORKER, 3, None)])
    with backends.db() as conn:
        conn.execute(sql, columns)
    return task_id


def run(backends: Backends, sql: str, params: dict) -> int:
    """Rows the statement changed."""
    with backends.db() as conn:
        return conn.execute(sql, params).rowcount


def claim(task_id: uuid.UUID, worker_id: str, queues: list[str]) -> dict:
    return {"id": task_id, "claim": uuid.uuid4(), "worker_id": worker_id, "host": "h",
            "queues": queues}


def result(task_id: uuid.UUID, claim_token: uuid.UUID, status: str = "done") -> dict:
    return {"id": task_id, "claim": claim_token, "status": status, "result": "r",
            "fallback": False, "error": None, "worker": contract.WEB_RESULT_WORKER,
            "answered_model": None}


def test_one_claim_one_result(backends: Backends) -> None:
    task_id = new_task(backends)
    # A worker of another queue cannot claim it.
    assert run(backends, SQL.CLAIM, claim(task_id, "b", ["tasks:rag"])) == 0
    first = claim(task_id, "a", [contract.WEB_QUEUE])
    assert run(backends, SQL.CLAIM, first) == 1
    # A second copy of the id: the guard is false.
    assert run(backends, SQL.CLAIM, claim(task_id, "b", [contract.WEB_QUEUE])) == 0
    # A result needs the claim's token.
    assert run(backends, SQL.RESULT, result(task_id, uuid.uuid4())) == 0
    assert run(backends, SQL.RESULT, result(task_id, first["claim"])) == 1
    assert run(backends, SQL.RESULT, result(task_id, first["claim"], "failed")) == 0
    row = backends.task(str(task_id))
    assert (row["status"], row["worker"], row["attempts"]) == ("done", "web-worker", 1)


def test_reclaim_only_by_the_same_worker_of_a_running_task(backends: Backends) -> None:
    task_id = new_task(backends)
    assert run(backends, SQL.CLAIM, claim(task_id, "a", [contract.WEB_QUEUE])) == 1
    assert run(backends, SQL.RECLAIM, claim(task_id, "b", [contract.WEB_QUEUE])) == 0
    again = claim(task_id, "a", [contract.WEB_QUEUE])
    assert run(backends, SQL.RECLAIM, again) == 1
    assert backends.task(str(task_id))["attempts"] == 2
    # The token of the first process is no longer the claim.
    assert run(backends, SQL.RESULT, result(task_id, again["claim"])) == 1


def test_reaper_moves_only_what_it_saw(backends: Backends) -> None:
    task_id = new_task(backends)
    first = claim(task_id, "a", [contract.WEB_QUEUE])
    assert run(backends, SQL.CLAIM, first) == 1
    stale = uuid.uuid4()
    assert run(backends, *sm.requeue_task(task_id, "running", stale, contract.WEB_QUEUE,
                                          contract.WEB_QUEUE, "default")) == 0
    assert run(backends, *sm.fail_task(task_id, "queued", None, "why")) == 0
    assert run(backends, *sm.fail_task(task_id, "running", first["claim"], "why")) == 1
    # A worker's late result after the Reaper failed the task changes nothing.
    assert run(backends, SQL.RESULT, result(task_id, first["claim"])) == 0
    row = backends.task(str(task_id))
    assert (row["status"], row["error"]) == ("failed", "why")
