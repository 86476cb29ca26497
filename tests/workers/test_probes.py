"""The Coordinator's worker probes run by the real worker programs: the web worker's probe
searches SearXNG and asks Ollama for one token, an inference worker's asks its model for one;
each is claimed and written from the worker's host like a task, and a failure is shown on the
worker with the worker's own error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from coordinator_contract import PROBE_TYPE

from lab.processes import CoordinatorProcess, Standin
from lab.throwaway import ThrowawayPostgres, ThrowawayRedis

from .conftest import HEARTBEAT_TTL, MODEL, WAITING, Tasks, wait_until
from .test_infer import infer_env


@pytest.fixture(scope="module")
def prober(pg: ThrowawayPostgres, redis_server: ThrowawayRedis,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoordinatorProcess]:
    """A Coordinator that probes each worker as soon as it registers (and hourly after)."""
    log = tmp_path_factory.mktemp("prober") / "coordinator.log"
    with CoordinatorProcess(pg.dsn, redis_server, log, heartbeat_ttl=HEARTBEAT_TTL,
                            probe_interval=3600, probe_timeout=30) as coordinator:
        yield coordinator


def probed(coordinator: CoordinatorProcess, worker_id: str) -> dict[str, Any]:
    """The worker as GET /workers shows it, once its first probe has a verdict."""

    def verdict() -> dict[str, Any] | None:
        answer = requests.get(f"{coordinator.url}/workers", timeout=5)
        answer.raise_for_status()
        found = [w for w in answer.json()["workers"] if w["worker_id"] == worker_id]
        return found[0] if found and found[0]["probe_ok"] is not None else None

    return wait_until(verdict, 30, f"a probe verdict on {worker_id}")


def probe_row(tasks: Tasks, worker_id: str) -> dict[str, Any]:
    with tasks.conn.cursor() as cur:
        cur.execute("SELECT id::text FROM tasks WHERE task_type = %s AND requested_worker = %s",
                    (PROBE_TYPE, worker_id))
        [(task_id,)] = cur.fetchall()
    return tasks.get(task_id)


def test_a_web_workers_probe_searches_and_generates_one_token(
        web_env, start_worker, prober, tasks, searxng: Standin, ollama: Standin, rds) -> None:
    env = {**web_env, "COORDINATOR_URL": prober.url}
    worker = start_worker(env)
    worker.wait_for(WAITING)
    shown = probed(prober, env["WORKER_ID"])
    assert (shown["probe_ok"], shown["probe_error"]) == (True, None), shown
    row = probe_row(tasks, env["WORKER_ID"])
    assert (row["status"], row["queue"], row["worker_id"], row["worker_host"],
            row["answered_model"]) == ("done", "tasks:web", env["WORKER_ID"], "worker-host-a",
                                       MODEL)
    assert row["result"] == (f"SearXNG at {searxng.url} answered 5 result(s); Ollama at "
                             f"{ollama.url} ran {MODEL} for one token")
    worker.wait_for(f"Task {row['id']} done")


def test_a_web_workers_failed_probe_shows_its_own_error(
        web_env, start_worker, prober, ollama: Standin, rds) -> None:
    # Ollama lists its models (the start-up check passes) but fails every generation.
    ollama.config(fail="error", fail_generate_only=True)
    env = {**web_env, "COORDINATOR_URL": prober.url}
    start_worker(env).wait_for(WAITING)
    shown = probed(prober, env["WORKER_ID"])
    assert (shown["probe_ok"], shown["probe_error"]) == (False, (
        f"Ollama at {ollama.url} answered HTTP 500 llama runner process has terminated: "
        "exit status 2")), shown


def test_an_inference_workers_probe_runs_its_model_for_one_token(
        web_env, start_worker, prober, tasks, ollama: Standin) -> None:
    env = {**infer_env(web_env, "probed"), "COORDINATOR_URL": prober.url}
    start_worker(env, "worker_infer.py").wait_for("Waiting on queues")
    shown = probed(prober, env["WORKER_ID"])
    assert (shown["probe_ok"], shown["probe_error"]) == (True, None), shown
    row = probe_row(tasks, env["WORKER_ID"])
    assert (row["queue"], row["worker_host"], row["answered_model"], row["result"]) == (
        f"tasks:cpu:{env['WORKER_ID']}", "host-probed", MODEL,
        f"Ollama at {ollama.url} ran {MODEL} for one token")
