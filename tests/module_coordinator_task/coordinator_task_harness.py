"""Helpers to run coordinator_task the way Ansible does, against real PostgreSQL.

``run_probe`` writes a one-task playbook into a temporary directory and runs
``ansible-playbook`` on localhost (connection local, this venv's Python), with ANSIBLE_LIBRARY
and ANSIBLE_MODULE_UTILS pointing at this repository, so neither the repo's ansible.cfg nor an
installed copy is involved. ``SqlWorker`` plays the worker with the guarded SQL of
docs/design.md while the module waits.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import coordinator_contract as contract
import psycopg
import pytest
import requests
from coordinator_sql import SQL

from lab.processes import CoordinatorProcess
from lab.throwaway import DB_NAME, DB_USER, Certificates, ThrowawayPostgres, ThrowawayRedis

from ..conftest import create_schema
from ..library_kit import module_env

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
ANSIBLE_PLAYBOOK = str(Path(PYTHON).parent / "ansible-playbook")


@dataclass
class ProbeRun:
    """What ansible-playbook reported for the probe task."""

    rc: int
    result: dict
    stdout: str
    stderr: str

    @property
    def failed(self) -> bool:
        return bool(self.result.get("failed"))

    @property
    def msg(self) -> str:
        return self.result.get("msg", "")


@dataclass(frozen=True)
class TasksDb:
    """A database of the probe tests' own on the shared throwaway server.

    Their Coordinator, Redis and tasks (some left ``queued`` on purpose) never meet other
    tests' Coordinators and workers, which share the ``coordinator`` database.
    """

    server: ThrowawayPostgres
    name: str

    @property
    def dsn(self) -> str:
        return self.server.dsn.replace(f"dbname={DB_NAME} ", f"dbname={self.name} ")

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def password(self) -> str:
        return self.server.password

    def create(self) -> TasksDb:
        """(Re)create the database, empty; ``with_schema`` adds the Coordinator's tables."""
        self.server.database(self.name)
        return self

    def with_schema(self) -> TasksDb:
        create_schema(self.dsn)
        return self


def pg_args(db: TasksDb, **changes: object) -> dict[str, object]:
    """The module's PostgreSQL options for a database on the throwaway server."""
    args: dict[str, object] = {
        "login_host": "127.0.0.1",
        "login_port": db.port,
        "login_user": DB_USER,
        "login_password": db.password,
        "login_db": db.name,
    }
    args.update(changes)
    return args


def _playbook(args: dict[str, object], module: str) -> str:
    # JSON is YAML: the arguments go in verbatim, with no quoting surprises.
    play = [{
        "hosts": "localhost",
        "gather_facts": False,
        "tasks": [{"name": "probe", module: args}],
    }]
    return json.dumps(play, ensure_ascii=False)


def start_probe(
    tmp: Path, args: dict[str, object], check: bool = False, env: dict[str, str] | None = None,
    module: str = "coordinator_task",
) -> subprocess.Popen[str]:
    """ansible-playbook running ``module`` (a module of library/) once on localhost."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "probe.yml").write_text(_playbook(args, module))
    command = [
        ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local",
        "-e", f"ansible_python_interpreter={PYTHON}", "probe.yml",
    ]
    if check:
        command.append("--check")
    return subprocess.Popen(
        command, cwd=tmp, env=module_env(tmp, **(env or {})), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


def finish_probe(proc: subprocess.Popen[str]) -> ProbeRun:
    stdout, stderr = proc.communicate(timeout=180)
    try:
        report = json.loads(stdout)
        result = report["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError):
        pytest.fail(f"ansible-playbook gave no JSON result (rc {proc.returncode}):\n"
                    f"{stdout}\n{stderr}")
    return ProbeRun(proc.returncode, result, stdout, stderr)


class SqlWorker:
    """Plays a web worker with plain SQL: the guarded claim and result of docs/design.md."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)

    def wait_for_task(self, prompt: str, proc: subprocess.Popen[str]) -> str:
        """The id of the task routed with ``prompt``, once the Coordinator has written it."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            row = self.conn.execute(
                "SELECT id::text FROM tasks WHERE prompt = %s", (prompt,)
            ).fetchone()
            if row:
                return row[0]
            if proc.poll() is not None:
                pytest.fail(f"the probe ended before routing: {finish_probe(proc).msg}")
            time.sleep(0.05)
        pytest.fail(f"no task with prompt {prompt!r} appeared in PostgreSQL within 60s")

    def claim(self, task_id: str, worker_id: str, host: str) -> uuid.UUID:
        claim = uuid.uuid4()
        row = self.conn.execute(SQL.CLAIM, {
            "id": task_id, "claim": claim, "worker_id": worker_id, "host": host,
            "queues": [contract.WEB_QUEUE]}).fetchone()
        assert row is not None, f"task {task_id} could not be claimed"
        return claim

    def finish(
        self, task_id: str, claim: uuid.UUID, status: str = "done", result: str | None = None,
        fallback: bool = False, error: str | None = None,
    ) -> None:
        written = self.conn.execute(SQL.RESULT, {
            "id": task_id, "claim": claim, "status": status, "result": result,
            "fallback": fallback, "error": error, "worker": contract.WEB_RESULT_WORKER,
            "answered_model": None})
        assert written.rowcount == 1, f"task {task_id}'s result could not be written"

    def count(self, prompt: str | None = None) -> int:
        if prompt is None:
            return self.conn.execute("SELECT count(*) FROM tasks").fetchone()[0]
        return self.conn.execute("SELECT count(*) FROM tasks WHERE prompt = %s",
                                 (prompt,)).fetchone()[0]

    def close(self) -> None:
        self.conn.close()


def unique_prompt(label: str) -> str:
    """A prompt no other test routes, so the worker finds exactly this test's task."""
    return f"What is the weather in Tokyo today? ({label} {uuid.uuid4()})"


def start_coordinator(db: TasksDb, redis: ThrowawayRedis, workdir: Path,
                      port: int | None = None, token: str | None = None,
                      tls: Certificates | None = None) -> CoordinatorProcess:
    """The real Coordinator with a token (a fresh one unless given), on ``port`` or a free one;
    with ``tls``, over HTTPS."""
    return CoordinatorProcess(db.dsn, redis, workdir / "coordinator.log", port=port,
                              token=token or secrets.token_urlsafe(24), tls=tls)


class Registration:
    """A web worker as the registry sees it: registered, heartbeating until stopped."""

    def __init__(self, coordinator: CoordinatorProcess, host: str, pid: int) -> None:
        self.url = coordinator.url
        self.headers = {"Authorization": f"Bearer {coordinator.token}"}
        self.worker_id = f"web-worker-test-{uuid.uuid4().hex[:8]}"
        self.instance_id = str(uuid.uuid4())
        self.host, self.pid = host, pid
        self.beating = threading.Event()

    def post(self, path: str, body: dict) -> None:
        answer = requests.post(f"{self.url}{path}", json=body, headers=self.headers, timeout=5)
        assert answer.status_code == 200, answer.text

    def register(self) -> Registration:
        self.post("/workers/register", {
            "worker_id": self.worker_id, "host": self.host, "kind": "web",
            "queues": ["tasks:web"], "version": "2.1", "pid": self.pid,
            "instance_id": self.instance_id})
        return self

    def heartbeat_every(self, seconds: float) -> Registration:
        def beat() -> None:
            while not self.beating.wait(seconds):
                self.post(f"/workers/{self.worker_id}/heartbeat",
                          {"instance_id": self.instance_id, "pid": self.pid})
        threading.Thread(target=beat, daemon=True).start()
        return self

    def deregister(self) -> None:
        self.beating.set()
        self.post(f"/workers/{self.worker_id}/deregister", {"instance_id": self.instance_id})
