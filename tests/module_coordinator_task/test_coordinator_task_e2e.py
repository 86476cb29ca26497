"""End to end: the real web worker (files/worker_web.py) answers the probe's task.

The worker runs as a user starts it (``python worker_web.py`` with its environment) against
the probe tests' Coordinator, PostgreSQL and Redis, with the SearXNG and Ollama stand-ins of
lab/standins. The worker is stopped when this module ends, so the other probe tests keep
playing the worker with SQL alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.error import URLError
from urllib.request import Request, urlopen

import pytest

from lab.throwaway import ThrowawayRedis, free_port, ship_worker_programs

from .coordinator_task_harness import (
    PYTHON,
    REPO,
    RunningCoordinator,
    TasksDb,
    pg_args,
    unique_prompt,
)

MODEL = "hf.co/LiquidAI/LFM2.5-1.2B-JP-GGUF:Q4_K_M"
# Not the id the SQL worker of the other tests uses: once this worker is stopped and dead,
# the Reaper may fail web tasks still running under its id.
WORKER_ID = "web-worker-e2e"
WORKER_HOST = "macbookair"


@dataclass
class Process:
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def start(args: list[str], env: dict[str, str], cwd: Path, log: Path) -> Process:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    return Process(proc, log)


def wait_for(process: Process, ready: str, what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if ready in process.output():
            return
        if process.proc.poll() is not None:
            pytest.fail(f"{what} exited with {process.proc.returncode}:\n{process.output()}")
        time.sleep(0.1)
    pytest.fail(f"{what} did not log {ready!r} within 60s:\n{process.output()}")


@dataclass
class Standin:
    url: str
    process: Process

    def config(self, **settings: object) -> None:
        request = Request(f"{self.url}/_standin/config", data=json.dumps(settings).encode(),
                          headers={"Content-Type": "application/json"}, method="POST")
        with urlopen(request, timeout=5) as answer:
            assert answer.status == 200


def start_standin(name: str, workdir: Path) -> Standin:
    port = free_port()
    process = start(
        [PYTHON, "-m", f"lab.standins.{name}", "--bind", "127.0.0.1", "--port", str(port)],
        dict(os.environ), REPO, workdir / f"{name}.log",
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urlopen(f"{url}/_standin/config", timeout=1):
                return Standin(url, process)
        except (URLError, OSError):
            if process.proc.poll() is not None:
                pytest.fail(f"the {name} stand-in exited:\n{process.output()}")
            time.sleep(0.1)
    process.stop()
    pytest.fail(f"the {name} stand-in did not answer within 30s:\n{process.output()}")


@pytest.fixture(scope="module")
def ollama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standin]:
    standin = start_standin("ollama", tmp_path_factory.mktemp("ollama"))
    yield standin
    standin.process.stop()


@pytest.fixture(scope="module")
def web_worker(
    coordinator: RunningCoordinator,
    tasks_db: TasksDb,
    probe_redis: ThrowawayRedis,
    ollama: Standin,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Process]:
    """worker_web.py in a folder with what the worker role ships beside it, with the post's
    env."""
    workdir = tmp_path_factory.mktemp("web-worker")
    searxng = start_standin("searxng", workdir)
    ship_worker_programs(workdir)
    env = {
        "PATH": os.environ["PATH"],
        "REDIS_HOST": "127.0.0.1",
        "REDIS_PORT": str(probe_redis.port),
        "REDIS_PASSWORD": probe_redis.password,
        "PG_DSN": tasks_db.dsn,
        "SEARXNG_URL": searxng.url,
        "OLLAMA_HOST": ollama.url,
        "OLLAMA_MODEL": MODEL,
        "COORDINATOR_URL": coordinator.url,
        "COORDINATOR_TOKEN": coordinator.token,
        "WORKER_ID": WORKER_ID,
        "WORKER_HOST": WORKER_HOST,
    }
    worker = start([PYTHON, "worker_web.py"], env, workdir, workdir / "worker_web.log")
    try:
        wait_for(worker, "Waiting on queues", "worker_web.py")
        yield worker
    finally:
        worker.stop()
        searxng.process.stop()


def probe_args(coordinator: RunningCoordinator, db: TasksDb, **changes: object) -> dict:
    return {
        "coordinator_url": coordinator.url,
        "coordinator_token": coordinator.token,
        "prompt": unique_prompt("e2e"),
        "worker_host": WORKER_HOST,
        "poll_interval": 0.2,
        "timeout": 30,
        **pg_args(db),
        **changes,
    }


def test_real_web_worker_answers(web_worker, coordinator, tasks_db, ollama, run_probe):
    ollama.config(fail=None, fail_generate_only=False)
    run = run_probe(probe_args(coordinator, tasks_db))
    assert run.rc == 0, run.stdout + run.stderr + web_worker.output()
    assert run.result["changed"] is False
    assert run.result["worker"] == "web-worker"
    assert run.result["worker_id"] == WORKER_ID
    assert run.result["worker_host"] == WORKER_HOST
    assert run.result["fallback"] is False
    assert run.result["answer"]
    assert f"Task {run.result['task_id']} claimed" in web_worker.output()


def test_real_web_worker_fallback_is_refused(web_worker, coordinator, tasks_db, ollama,
                                             run_probe):
    ollama.config(fail="error", fail_generate_only=True)
    try:
        run = run_probe(probe_args(coordinator, tasks_db))
    finally:
        ollama.config(fail=None, fail_generate_only=False)
    assert run.failed, run.stdout
    assert run.msg == (
        f"task {run.result['task_id']} done with fallback: summarisation failed on {WORKER_HOST}"
    )
    assert run.result["answer"]
