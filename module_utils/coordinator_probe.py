"""Pure logic of the ``coordinator_task`` probe: no I/O, no Ansible, no database driver.

The module (library/coordinator_task.py) routes a task through the Coordinator API and reads
the task's row in PostgreSQL; everything that decides *what to send* and *what a row means*
lives here so it can be unit-tested without servers. Every failure is one line that says what
was seen and what to check, because it is what a user reads at the end of a playbook run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ansible.module_utils.coordinator_contract import (
    WORKER_DB_GROUP,
    coordinator_tls_problem,
    coordinator_url_problem,
    first_line,
    worker_db_role,
)

FINAL_STATUSES = frozenset({"done", "failed"})
# What a message quotes of a driver's or server's error that has no text.
NO_MESSAGE = "(no message)"
# Who takes each shared-queue task type; inference types go to one worker's own queue.
SHARED_QUEUE_WORKERS = {"web_search": "web worker", "rag": "RAG worker"}
# How much of a fallback answer's first line a failure quotes: the worker writes why there
# (files/worker_web.py: "Summary failed (<why>); here are ...", "No search results: SearXNG's
# engines did not answer: ..."), and the rest is search results, not a playbook's last line.
FALLBACK_REASON_CHARS = 200


@dataclass(frozen=True)
class RouteRequest:
    url: str
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class TaskRow:
    id: str
    task_type: str
    status: str
    queue: str | None
    worker: str | None
    worker_id: str | None
    worker_host: str | None
    result: str | None
    fallback: bool
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    answered_model: str | None = None
    claimed_by: str | None = None
    claimed_by_worker_login: bool = False


@dataclass(frozen=True)
class Expectation:
    worker_host: str | None
    allow_fallback: bool
    answered_model: str | None = None
    # Inventory name of the host whose own login must have claimed the task.
    claimed_by_host: str | None = None


class ProbeError(Exception):
    """A failure whose message is the one line the module reports.

    ``fields`` are what is known of the task at that point (its id, or its whole row), so a
    playbook that ignores the failure can still look at them.
    """

    def __init__(self, message: str, fields: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.fields = fields or {}


# -- options --------------------------------------------------------------------------------


def check_options(coordinator_url: str, timeout: int, poll_interval: float) -> str | None:
    """The one-line complaint about an unusable option, or ``None``."""
    if not coordinator_url.startswith(("http://", "https://")):
        return (
            f"coordinator_url={coordinator_url!r} is not an http(s) URL: use e.g. "
            "http://ai-core:8000"
        )
    if timeout < 1:
        return f"timeout={timeout} is too small: give the task at least 1 second (default 60)"
    if poll_interval <= 0:
        return f"poll_interval={poll_interval:g} must be above 0 seconds (default 1)"
    return None


# -- options → PostgreSQL connection ---------------------------------------------------------


def _quote_conninfo_value(value: str) -> str:
    # libpq conninfo: single-quoted, with backslash and quote escaped by a backslash.
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def build_conninfo(
    *,
    pg_dsn: str | None,
    login_host: str,
    login_unix_socket: str,
    login_port: int,
    login_user: str,
    login_password: str,
    login_db: str,
    ssl_mode: str,
    ca_cert: str = "",
) -> str:
    """The libpq connection string for the module's options; ``pg_dsn`` wins when given.

    An empty ``login_host`` and ``login_unix_socket`` leave ``host`` out so libpq uses its
    default Unix socket, as community.postgresql does.
    """
    if pg_dsn:
        return pg_dsn
    params: dict[str, str] = {}
    host = login_unix_socket or login_host
    if host:
        params["host"] = host
    params["port"] = str(login_port)
    params["dbname"] = login_db
    params["user"] = login_user
    if login_password:
        params["password"] = login_password
    params["sslmode"] = ssl_mode
    if ca_cert:
        params["sslrootcert"] = ca_cert
    return " ".join(f"{key}={_quote_conninfo_value(value)}" for key, value in params.items())


def describe_target(params: dict[str, Any]) -> str:
    """``user U at HOST:PORT, database D`` from parsed conninfo; never shows the password."""
    port = params.get("port") or "5432"
    host = params.get("host")
    where = f"{host}:{port}" if host else f"the default Unix socket, port {port}"
    user = params.get("user") or "(default user)"
    dbname = params.get("dbname") or user
    return f"user {user} at {where}, database {dbname}"


def describe_pg_connect_error(target: str, error: str) -> str:
    """One line for a failed PostgreSQL connection: refused login or unreachable server."""
    first = first_line(error, NO_MESSAGE)
    lowered = first.lower()
    if "pg_hba.conf" in lowered:
        return (
            f"PostgreSQL refused login for {target}: {first}; a pg_hba.conf line allowing "
            "this host is missing on the database server"
        )
    if "authentication failed" in lowered or "password" in lowered:
        return (
            f"PostgreSQL refused login for {target}: {first}; check login_user/login_password "
            "(or pg_dsn), and that a pg_hba.conf line allows this host"
        )
    if "does not exist" in lowered:
        return f"PostgreSQL refused login for {target}: {first}; check login_db/login_user"
    return (
        f"PostgreSQL unreachable for {target}: {first}; check login_host/login_port "
        "(or pg_dsn) and that the server listens on that address"
    )


def describe_missing_table(target: str, error: str) -> str:
    return (
        f"no tasks table for {target} ({first_line(error, NO_MESSAGE)}): the Coordinator "
        "writes to another database; point login_host/login_db (or pg_dsn) at the "
        "Coordinator's PG_DSN"
    )


def describe_row_not_found(task_id: str, target: str) -> str:
    return (
        f"task {task_id} not found in PostgreSQL ({target}): the Coordinator writes to another "
        "database than the one checked; point login_host/login_db (or pg_dsn) at the "
        "Coordinator's PG_DSN"
    )


# -- the route request and its answer --------------------------------------------------------


def build_route_request(
    *,
    coordinator_url: str,
    coordinator_token: str | None,
    prompt: str,
    task_type: str,
    model: str | None,
    target_worker: str | None,
    options: dict[str, Any] | None = None,
) -> RouteRequest:
    """``POST /route`` as docs/design.md defines it: optional keys only when set."""
    body: dict[str, Any] = {"prompt": prompt, "task_type": task_type}
    if model:
        body["model"] = model
    if target_worker:
        body["worker"] = target_worker
    if options:
        body["options"] = options
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if coordinator_token:
        headers["Authorization"] = f"Bearer {coordinator_token}"
    return RouteRequest(
        url=coordinator_url.rstrip("/") + "/route",
        headers=headers,
        body=json.dumps(body).encode(),
    )


def parse_route_answer(coordinator_url: str, body: bytes) -> str:
    """The task id from a successful ``POST /route`` answer."""
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    task_id = answer.get("task_id") if isinstance(answer, dict) else None
    if not isinstance(task_id, str) or not task_id:
        shown = first_line(body.decode("utf-8", "replace"), NO_MESSAGE)[:200]
        raise ProbeError(
            f"Coordinator at {coordinator_url} answered POST /route without a task_id "
            f"({shown}); check coordinator_url points at the Coordinator API"
        )
    return task_id


def describe_http_error(
    coordinator_url: str, status: int, body: bytes, token_given: bool,
    request: str = "POST /route",
) -> str:
    """One line for a non-2xx answer to ``request`` (``POST /route``, ``GET /workers``)."""
    if status == 401:
        if token_given:
            return (
                f"Coordinator at {coordinator_url} refused the token (401 on {request}): "
                "check coordinator_token"
            )
        return (
            f"Coordinator at {coordinator_url} needs a token (401 on {request}): "
            "set coordinator_token"
        )
    reason = _error_from_body(body)
    if status == 404:
        return (
            f"Coordinator at {coordinator_url} answered 404 on {request} ({reason}): "
            "check coordinator_url points at the Coordinator API"
        )
    return f"Coordinator at {coordinator_url} answered {status} on {request}: {reason}"


def _error_from_body(body: bytes) -> str:
    # Every 4xx body of the Coordinator is {"error": "<one line>"}; other servers (a proxy,
    # a wrong URL) answer anything, so show the start of it instead.
    text = body.decode("utf-8", "replace")
    try:
        answer = json.loads(text)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and isinstance(answer.get("error"), str):
        return first_line(answer["error"], NO_MESSAGE)
    return first_line(text, NO_MESSAGE)[:200] if text.strip() else "(empty answer)"


def is_restarting(status: int | None, reason: object = None) -> bool:
    """Whether an HTTP status or a connection failure's reason is a Coordinator restarting:
    nothing listens on its port (refused), or it could not store a task (503, PostgreSQL
    restarting). Asking again a moment later is safe: such a request had no effect."""
    return status == 503 or isinstance(reason, ConnectionRefusedError)


def describe_unreachable(coordinator_url: str, reason: str, ca_path: str | None = None) -> str:
    fix = coordinator_tls_problem(coordinator_url, reason, ca_path, "ca_path")
    return (
        f"Coordinator unreachable at {coordinator_url} ({first_line(reason, NO_MESSAGE)}): "
        f"{fix or 'check coordinator_url'}"
    )


def describe_unanswered(failures: list[tuple[str, object]], ca_path: str | None = None) -> str:
    """No Coordinator of coordinator_url answered: each URL with its reason ((url, reason)
    pairs, in the order tried), and the fix the first TLS reason calls for."""
    if len(failures) == 1:
        return describe_unreachable(failures[0][0], str(failures[0][1]), ca_path)
    fixes = [coordinator_tls_problem(url, str(reason), ca_path, "ca_path")
             for url, reason in failures]
    each = "; ".join(f"{url} ({first_line(str(reason), NO_MESSAGE)})" for url, reason in failures)
    fix = next((found for found in fixes if found), "check coordinator_url")
    return f"Coordinator unreachable at every URL of coordinator_url: {each}: {fix}"


def describe_url_problem(coordinator_url: str, ca_path: str | None) -> str | None:
    """An http:// coordinator_url with a ca_path, which only an HTTPS Coordinator needs."""
    return coordinator_url_problem(coordinator_url, ca_path, "coordinator_url", "ca_path")


# -- interpreting the task row ---------------------------------------------------------------


def task_query(task_id: str) -> dict[str, str]:
    """The parameters of ``SQL.PROBE_TASK`` for ``task_id``."""
    return {"id": task_id, "group": WORKER_DB_GROUP}


def row_from_tuple(values: tuple[Any, ...] | list[Any]) -> TaskRow:
    """A TaskRow from one row selected with ``SQL.PROBE_TASK`` (its columns in the order of
    the fields)."""
    return TaskRow(*values)


def is_final(row: TaskRow) -> bool:
    return row.status in FINAL_STATUSES


def _where(row: TaskRow) -> str:
    # The host is what a migration is about; fall back to the worker id when a row has none.
    return row.worker_host or row.worker_id or "an unknown host"


def judge_final(row: TaskRow, expect: Expectation) -> str | None:
    """``None`` when a final row is what was expected, else the one-line failure."""
    if row.status == "failed":
        return f"task {row.id} failed on {_where(row)}: {row.error or 'no error recorded'}"
    if expect.worker_host and (row.worker_host or "").casefold() != expect.worker_host.casefold():
        return f"task {row.id} done on {_where(row)}, expected {expect.worker_host}"
    if expect.claimed_by_host and row.claimed_by_worker_login:
        login = worker_db_role(expect.claimed_by_host)
        if row.claimed_by != login:
            return (f"task {row.id} is done, and the row claims host {_where(row)} but was claimed "
                    f"by login {row.claimed_by}, not {expect.claimed_by_host}'s own {login}: "
                    "worker_id and worker_host are what a worker wrote, the login is what the "
                    "database established")
    if row.fallback and not expect.allow_fallback:
        return f"task {row.id} done with fallback on {_where(row)}: {fallback_reason(row)}"
    if expect.answered_model and (
            (row.answered_model or "").casefold() != expect.answered_model.casefold()):
        answered = (f"model {row.answered_model}" if row.answered_model
                    else "no model (a fallback answer)")
        return (f"task {row.id} done on {_where(row)} by {answered}, expected model "
                f"{expect.answered_model}")
    return None


def fallback_reason(row: TaskRow) -> str:
    """Why a fallback answer is one, as its worker wrote it: the answer's first line, cut."""
    if not (row.result or "").strip():
        return "no answer recorded"
    line = first_line(row.result, NO_MESSAGE)
    return line if len(line) <= FALLBACK_REASON_CHARS else (
        line[:FALLBACK_REASON_CHARS - 1] + "\u2026")


def identity_warning(row: TaskRow, expect: Expectation) -> str | None:
    """What a done row cannot prove about its host, or ``None``: a task claimed by a login
    that is no worker host's own (the workers share the Coordinator's login when the
    postgresql_access role has no worker key) says nothing of which host took it."""
    if not expect.claimed_by_host or row.claimed_by_worker_login:
        return None
    who = f"login {row.claimed_by}" if row.claimed_by else "a login the database did not record"
    return (f"task {row.id} was claimed by {who}, no worker host's own (without "
            "postgresql_access_worker_password_key every worker host logs in as the "
            "Coordinator's login): the database cannot tell hosts apart, so that "
            f"{expect.claimed_by_host} did the work rests on the worker's own word "
            f"(worker_host {row.worker_host or 'none'})")


def describe_timeout(row: TaskRow, waited_seconds: float) -> str:
    """One line for a task still not final when the probe's time ran out."""
    waited = f"{waited_seconds:g}s"
    if row.status == "running":
        worker = row.worker_id or "an unknown worker"
        return f"task {row.id} still 'running' after {waited} on {worker} ({_where(row)})"
    taker = SHARED_QUEUE_WORKERS.get(row.task_type, "worker")
    if row.status == "queued":
        return f"task {row.id} still 'queued' after {waited}: no {taker} took it"
    return f"task {row.id} still '{row.status}' after {waited}"


def durations(row: TaskRow) -> tuple[float | None, float | None]:
    """Seconds from creation to finish, and from creation to the claim, from the table."""
    total = _seconds(row.created_at, row.finished_at)
    start_delay = _seconds(row.created_at, row.started_at)
    return total, start_delay


def _seconds(start: datetime, end: datetime | None) -> float | None:
    if end is None:
        return None
    return round((end - start).total_seconds(), 3)


def result_fields(row: TaskRow) -> dict[str, Any]:
    """What the module returns about a task, on success and on failure alike."""
    seconds, start_delay = durations(row)
    return {
        "task_id": row.id,
        "task_type": row.task_type,
        "status": row.status,
        "queue": row.queue,
        "worker": row.worker,
        "worker_id": row.worker_id,
        "worker_host": row.worker_host,
        "fallback": row.fallback,
        "answered_model": row.answered_model,
        "claimed_by": row.claimed_by,
        "answer": row.result,
        "error": row.error,
        "seconds": seconds,
        "start_delay_seconds": start_delay,
        "created_at": row.created_at.isoformat(),
        "started_at": row.started_at.isoformat() if row.started_at else None,
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
    }


def describe_plan(coordinator_url: str, task_type: str, target_worker: str | None,
                  timeout: int, expect: Expectation, target: str) -> str:
    """What a run would do, in one line: check mode routes nothing (a routed task is a row in
    ``tasks`` and work for a worker), so this is all it can say once PostgreSQL answered."""
    to = f" to worker {target_worker}" if target_worker else ""
    wanted = [f"within {timeout}s"]
    if expect.worker_host:
        wanted.append(f"on {expect.worker_host}")
    if expect.claimed_by_host:
        wanted.append(f"claimed by {expect.claimed_by_host}'s own login "
                      f"{worker_db_role(expect.claimed_by_host)}")
    if expect.answered_model:
        wanted.append(f"answered by {expect.answered_model}")
    if not expect.allow_fallback:
        wanted.append("without a fallback answer")
    return (f"check mode: would route a {task_type} task{to} through {coordinator_url} and "
            f"require it done in PostgreSQL ({target}) {', '.join(wanted)}; nothing was routed")


def describe_success(row: TaskRow) -> str:
    seconds, _start_delay = durations(row)
    took = f" in {seconds:g}s" if seconds is not None else ""
    return f"task {row.id} done on {row.worker_id or 'an unknown worker'} ({_where(row)}){took}"
