"""coordinator_task routing through the real Coordinator, with SQL playing the web worker.

Each test routes a task with its own prompt; ``SqlWorker`` finds that task in PostgreSQL,
claims it and writes a result with the guarded UPDATEs of docs/design.md while the module,
run by ansible-playbook, polls the row.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import worker_web

from coordinator.routing import RequestError, parse_route_request
from lab.processes import CoordinatorProcess
from lab.throwaway import free_port

from .coordinator_task_harness import (
    ProbeRun,
    SqlWorker,
    TasksDb,
    finish_probe,
    pg_args,
    start_coordinator,
    start_probe,
    unique_prompt,
)

FAST = {"poll_interval": 0.2}


def probe_args(
    coordinator: CoordinatorProcess, db: TasksDb, prompt: str, **changes: object
) -> dict[str, object]:
    args: dict[str, object] = {
        "coordinator_url": coordinator.url,
        "coordinator_token": coordinator.token,
        "prompt": prompt,
        **pg_args(db),
        **FAST,
    }
    args.update(changes)
    return args


def route_and_work(
    tmp_path: Path,
    worker: SqlWorker,
    args: dict[str, object],
    work: Callable[[str], None],
) -> tuple[str, ProbeRun]:
    """Start the probe, let ``work(task_id)`` play the worker, return the id and the result."""
    proc = start_probe(tmp_path, args)
    task_id = worker.wait_for_task(str(args["prompt"]), proc)
    work(task_id)
    return task_id, finish_probe(proc)


def answer(worker: SqlWorker, host: str, **result: object) -> Callable[[str], None]:
    def work(task_id: str) -> None:
        claim = worker.claim(task_id, f"web-worker-{host}", host)
        worker.finish(task_id, claim, **result)

    return work


def test_done_on_expected_host(coordinator, tasks_db, sql_worker, tmp_path):
    prompt = unique_prompt("success")
    task_id, run = route_and_work(
        tmp_path, sql_worker, probe_args(coordinator, tasks_db, prompt, worker_host="macbookair"),
        answer(sql_worker, "macbookair", result="Sunny, 14 degrees"),
    )
    assert run.rc == 0, run.stdout + run.stderr
    assert run.result["changed"] is False
    assert run.result["task_id"] == task_id
    assert run.result["status"] == "done"
    assert run.result["worker"] == "web-worker"
    assert run.result["worker_id"] == "web-worker-macbookair"
    assert run.result["worker_host"] == "macbookair"
    assert run.result["fallback"] is False
    assert run.result["answer"] == "Sunny, 14 degrees"
    total, delay = sql_worker.conn.execute(
        "SELECT round(extract(epoch FROM finished_at - created_at), 3)::float8,"
        " round(extract(epoch FROM started_at - created_at), 3)::float8"
        " FROM tasks WHERE id = %s", (task_id,),
    ).fetchone()
    assert run.result["seconds"] == pytest.approx(total, abs=0.0015)
    assert run.result["start_delay_seconds"] == pytest.approx(delay, abs=0.0015)
    assert run.msg == (
        f"task {task_id} done on web-worker-macbookair (macbookair) in {run.result['seconds']:g}s"
    )
    assert coordinator.token not in run.stdout + run.stderr
    assert tasks_db.password not in run.stdout + run.stderr


def test_routed_through_the_first_coordinator_that_answers(coordinator, tasks_db, sql_worker,
                                                            tmp_path):
    """coordinator_url lists the cluster's Coordinators: one where nothing listens is passed
    over, the task routed through the next and proved done."""
    down = f"http://127.0.0.1:{free_port()}"
    prompt = unique_prompt("failover")
    task_id, run = route_and_work(
        tmp_path, sql_worker,
        probe_args(coordinator, tasks_db, prompt, coordinator_url=[down, coordinator.url]),
        answer(sql_worker, "macbookair", result="Sunny"),
    )
    assert run.rc == 0, run.stdout + run.stderr
    assert (run.result["task_id"], run.result["status"]) == (task_id, "done")


def test_done_on_the_old_host(coordinator, tasks_db, sql_worker, tmp_path):
    prompt = unique_prompt("wrong host")
    task_id, run = route_and_work(
        tmp_path, sql_worker, probe_args(coordinator, tasks_db, prompt, worker_host="macbookair"),
        answer(sql_worker, "ai-core", result="Sunny"),
    )
    assert run.failed
    assert run.msg == f"task {task_id} done on ai-core, expected macbookair"
    assert run.result["worker_host"] == "ai-core"
    assert run.result["changed"] is False


def test_a_claim_by_a_login_every_host_shares_passes_with_a_warning(coordinator, tasks_db,
                                                                    sql_worker, tmp_path):
    # SqlWorker claims as the Coordinator's own login, as workers do without a worker key:
    # the database cannot say which host took the task, and the module says so.
    prompt = unique_prompt("shared login")
    task_id, run = route_and_work(
        tmp_path, sql_worker, probe_args(coordinator, tasks_db, prompt, worker_host="macbookair",
                                         claimed_by_host="macbookair"),
        answer(sql_worker, "macbookair", result="Sunny"),
    )
    assert run.rc == 0, run.stdout + run.stderr
    assert run.result["claimed_by"] == "coordinator"
    assert run.result["warnings"] == [
        f"task {task_id} was claimed by login coordinator, no worker host's own (without "
        "postgresql_access_worker_password_key every worker host logs in as the Coordinator's "
        "login): the database cannot tell hosts apart, so that macbookair did the work rests "
        "on the worker's own word (worker_host macbookair)"]


def test_fallback_refused_by_default(coordinator, tasks_db, sql_worker, tmp_path):
    prompt = unique_prompt("fallback refused")
    raw = worker_web.fallback_answer("Ollama timed out", [{"title": "t", "url": "https://t"}])
    task_id, run = route_and_work(
        tmp_path, sql_worker, probe_args(coordinator, tasks_db, prompt),
        answer(sql_worker, "macbookair", result=raw, fallback=True),
    )
    assert run.failed
    assert run.msg == (f"task {task_id} done with fallback on macbookair: Summary failed (Ollama "
                       "timed out); here are the search results instead.")
    assert run.result["fallback"] is True


def test_fallback_allowed(coordinator, tasks_db, sql_worker, tmp_path):
    prompt = unique_prompt("fallback allowed")
    task_id, run = route_and_work(
        tmp_path, sql_worker,
        probe_args(coordinator, tasks_db, prompt, allow_fallback=True, worker_host="macbookair"),
        answer(sql_worker, "macbookair", result="raw results", fallback=True),
    )
    assert run.rc == 0, run.stdout + run.stderr
    assert run.result["task_id"] == task_id
    assert run.result["fallback"] is True
    assert run.result["answer"] == "raw results"


def test_failed_task(coordinator, tasks_db, sql_worker, tmp_path):
    prompt = unique_prompt("failed")
    error = "SearXNG at http://127.0.0.1:8888 did not answer within 10s: check SEARXNG_URL"
    task_id, run = route_and_work(
        tmp_path, sql_worker, probe_args(coordinator, tasks_db, prompt),
        answer(sql_worker, "macbookair", status="failed", error=error),
    )
    assert run.failed
    assert run.msg == f"task {task_id} failed on macbookair: {error}"
    assert run.result["status"] == "failed"
    assert run.result["error"] == error


def test_still_queued_when_no_web_worker(coordinator, tasks_db, sql_worker, tmp_path):
    prompt = unique_prompt("queued")
    task_id, run = route_and_work(
        tmp_path, sql_worker, probe_args(coordinator, tasks_db, prompt, timeout=2),
        lambda task_id: None,
    )
    assert run.failed
    assert run.msg == f"task {task_id} still 'queued' after 2s: no web worker took it"
    assert run.result["status"] == "queued"
    assert run.result["worker"] == "default"


def test_still_queued_inference_without_worker(coordinator, tasks_db, sql_worker, tmp_path):
    prompt = unique_prompt("inference queued")
    proc = start_probe(
        tmp_path, probe_args(coordinator, tasks_db, prompt, task_type="generate", timeout=2),
    )
    task_id = sql_worker.wait_for_task(prompt, proc)
    run = finish_probe(proc)
    assert run.failed
    assert run.msg == f"task {task_id} still 'queued' after 2s: no worker took it"


def test_still_running(coordinator, tasks_db, sql_worker, tmp_path):
    prompt = unique_prompt("running")
    task_id, run = route_and_work(
        tmp_path, sql_worker, probe_args(coordinator, tasks_db, prompt, timeout=3),
        lambda task_id: sql_worker.claim(task_id, "web-worker-macbookair", "macbookair"),
    )
    assert run.failed
    assert run.msg == (
        f"task {task_id} still 'running' after 3s on web-worker-macbookair (macbookair)"
    )


def test_row_in_another_database(coordinator, tasks_db, sql_worker, run_probe):
    # The Coordinator writes to tasks_db; the probe reads a database with the same schema.
    elsewhere = TasksDb(tasks_db.server, "coordinator_task_elsewhere").create().with_schema()
    prompt = unique_prompt("elsewhere")
    run = run_probe(probe_args(coordinator, elsewhere, prompt))
    task_id = sql_worker.conn.execute(
        "SELECT id::text FROM tasks WHERE prompt = %s", (prompt,)
    ).fetchone()[0]
    assert run.failed
    assert run.result["task_id"] == task_id
    assert run.msg == (
        f"task {task_id} not found in PostgreSQL (user coordinator at 127.0.0.1:{tasks_db.port}"
        f", database {elsewhere.name}): the Coordinator writes to another database than the one "
        "checked; point login_host/login_db (or pg_dsn) at the Coordinator's PG_DSN"
    )


def test_wrong_token(coordinator, tasks_db, sql_worker, run_probe):
    before = sql_worker.count()
    run = run_probe(probe_args(coordinator, tasks_db, unique_prompt("token"),
                               coordinator_token="not-the-token"))
    assert run.failed
    assert run.msg == (
        f"Coordinator at {coordinator.url} refused the token (401 on POST /route): "
        "check coordinator_token"
    )
    assert "not-the-token" not in run.stdout + run.stderr
    assert sql_worker.count() == before


def test_missing_token(coordinator, tasks_db, run_probe):
    args = probe_args(coordinator, tasks_db, unique_prompt("no token"))
    del args["coordinator_token"]
    run = run_probe(args)
    assert run.failed
    assert run.msg == (
        f"Coordinator at {coordinator.url} needs a token (401 on POST /route): "
        "set coordinator_token"
    )


def test_coordinator_rejects_the_request(coordinator, tasks_db, run_probe):
    prompt = unique_prompt("rejected")
    run = run_probe(probe_args(coordinator, tasks_db, prompt, target_worker="macbookair"))
    body = json.dumps({"prompt": prompt, "task_type": "web_search", "worker": "macbookair"})
    with pytest.raises(RequestError) as rejected:
        parse_route_request(body.encode(), 1024 * 1024)
    assert run.failed
    assert run.msg == (
        f"Coordinator at {coordinator.url} answered {rejected.value.status} on POST /route: "
        f"{rejected.value.message}"
    )


def test_check_mode_routes_nothing(coordinator, tasks_db, sql_worker, run_probe):
    before = sql_worker.count()
    run = run_probe(probe_args(coordinator, tasks_db, unique_prompt("check")), check=True)
    assert run.rc == 0, run.stdout + run.stderr
    assert run.result["changed"] is False
    assert run.msg.startswith(f"check mode: would route a web_search task through "
                              f"{coordinator.url} and require it done in PostgreSQL (")
    assert "task_id" not in run.result
    assert sql_worker.count() == before


def test_a_coordinator_that_restarts_is_asked_again(tasks_db, probe_redis, sql_worker, tmp_path):
    # Nothing listens on the port for the first seconds (the Coordinator restarting): the
    # module asks again every second, within its timeout, and no task is made twice.
    port, token = free_port(), "restart-token"
    prompt = unique_prompt("restart")
    args = {"coordinator_url": f"http://127.0.0.1:{port}", "coordinator_token": token,
            "prompt": prompt, "timeout": 60, **pg_args(tasks_db), **FAST}
    proc = start_probe(tmp_path, args)
    time.sleep(3)
    assert proc.poll() is None, "the module gave up while the Coordinator was down"
    coordinator = start_coordinator(tasks_db, probe_redis, tmp_path, port=port, token=token)
    try:
        task_id = sql_worker.wait_for_task(prompt, proc)
        answer(sql_worker, "macbookair", result="Sunny")(task_id)
        run = finish_probe(proc)
    finally:
        coordinator.stop()
    assert run.rc == 0, run.stdout + run.stderr
    assert run.result["task_id"] == task_id
    assert sql_worker.count(prompt) == 1


def test_postgresql_lost_while_waiting_is_reconnected(coordinator, tasks_db, sql_worker, pg,
                                                      tmp_path):
    prompt = unique_prompt("pg-restart")

    def restart_then_answer(task_id: str) -> None:
        pg.restart()
        after = SqlWorker(tasks_db.dsn)
        try:
            answer(after, "macbookair", result="Sunny")(task_id)
        finally:
            after.close()

    task_id, run = route_and_work(tmp_path, sql_worker,
                                  probe_args(coordinator, tasks_db, prompt, timeout=60),
                                  restart_then_answer)
    assert run.rc == 0, run.stdout + run.stderr
    assert (run.result["task_id"], run.result["status"]) == (task_id, "done")
