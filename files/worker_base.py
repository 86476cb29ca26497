"""What the Coordinator's workers share: worker_web.py and worker_infer.py subclass `Worker`.

A worker subclasses `Worker`, names its program, kind, version and queues, adds its backend
checks and `execute`, and calls `main(MyWorker, MyConfig)`. This module does the rest, as
docs/design.md describes it, in parts:

- configuration from the environment (`BaseConfig`);
- `StartupChecks`: Redis, PostgreSQL login and a write to `tasks`, then the worker's own
  backends; `--check` runs only these (`--check --json` prints their results);
- `TaskStore`: PostgreSQL, the session advisory lock that allows one process per WORKER_ID,
  the guarded claim and result write (retried until PostgreSQL takes it);
- `CoordinatorClient`: registration, heartbeats (and the drain they answer), the goodbye;
- `Worker`, the loop using them: the reliable take (`BLMOVE <queue> processing:<id> RIGHT
  LEFT`), recovery of the processing list, the drain hints, and SIGTERM.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import platform
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlparse

import psycopg2
import psycopg2.errors
import psycopg2.extensions
import redis
import redis.backoff
import redis.retry
import requests
from coordinator_contract import (
    COORDINATOR_CA_FILE_ENV,
    PROBE_TYPE,
    REDIS_CA_FILE_ENV,
    WORKER_BUILD_ENV,
    WORKER_DB_GROUP,
    WORKER_DB_ROLE_PREFIX,
    coordinator_tls_problem,
    coordinator_url_problem,
    drain_hint,
    has_model,
    processing_list,
    redis_tls_options,
    redis_tls_problem,
)
from coordinator_sql import SQL

# BLMOVE blocks at most this long so the loop notices SIGTERM promptly.
TAKE_BLOCK_SECONDS = 1
# A drain hint wakes the heartbeat at most this often (a hint the Coordinator failed to
# remove lives on for its TTL; the heartbeat answer is what counts).
HINT_BEAT_SECONDS = 1.0
MAX_RETRY_DELAY = 5.0

# The server drops a dead host's session (and so its lock) within about 25 s.
LOCK_SESSION_OPTIONS = "-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 " \
    "-c tcp_keepalives_count=3"

log = logging.getLogger("worker")
T = TypeVar("T")


class ConfigError(Exception):
    """The environment is incomplete or malformed; the message says which variable."""


class CheckFailed(Exception):
    """A start-up check failed; the message is the one line the operator reads."""


class CoordinatorUnreachable(OSError):
    """No Coordinator of COORDINATOR_URL answered: each URL with its error. An OSError, as
    requests' own errors are, so a caller catches both alike."""

    def __init__(self, failures: list[tuple[str, BaseException]]) -> None:
        self.failures = failures
        text = (one_line(failures[0][1]) if len(failures) == 1 else
                "; ".join(f"{url}: {one_line(error)}" for url, error in failures))
        super().__init__(text)


# --- configuration ------------------------------------------------------------------------

class EnvReader:
    """Reads variables, collecting every missing required one so one message names all."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.missing: list[str] = []

    def required(self, name: str) -> str:
        value = self.env.get(name, "").strip()
        if not value:
            self.missing.append(name)
        return value

    def optional(self, name: str, default: str | None = None) -> str | None:
        return self.env.get(name) or default

    def seconds(self, name: str, default: float) -> float:
        raw = self.env.get(name, "").strip()
        try:
            value = float(raw) if raw else default
        except ValueError:
            raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from None
        if value <= 0:
            raise ConfigError(f"{name} must be positive, got {raw!r}")
        return value

    def count(self, name: str, default: int) -> int:
        raw = self.env.get(name, "").strip() or str(default)
        if not raw.isdigit() or int(raw) == 0:
            raise ConfigError(f"{name} must be a positive whole number, got {raw!r}")
        return int(raw)

    def port(self, name: str, default: int) -> int:
        raw = self.env.get(name, "").strip() or str(default)
        if not raw.isdigit() or not 0 < int(raw) < 65536:
            raise ConfigError(f"{name} must be a port number, got {raw!r}")
        return int(raw)

    def finish(self) -> None:
        if self.missing:
            plural = "s" if len(self.missing) > 1 else ""
            raise ConfigError(f"missing required environment variable{plural}: "
                              f"{', '.join(self.missing)} (see docs/workers.md)")


@dataclass(frozen=True)
class BaseConfig:
    redis_host: str
    redis_port: int
    redis_password: str | None
    pg_dsn: str
    # COORDINATOR_URL: the cluster's Coordinators, in the order they are tried.
    coordinator_urls: tuple[str, ...]
    coordinator_token: str | None
    worker_id: str
    worker_host: str
    coordinator_timeout: float
    shutdown_timeout: float
    # The Redis ACL user (worker_<host>, from the worker role); None is Redis' default user.
    redis_username: str | None
    # The CA certificate of a Redis serving TLS (the cluster CA's); None: plain TCP.
    redis_ca_file: str | None
    # The CA certificate an https:// Coordinator's is verified against; None: the system's.
    coordinator_ca_file: str | None

    @classmethod
    def base_fields(cls, env: EnvReader) -> dict[str, Any]:
        return {
            "redis_host": env.required("REDIS_HOST"),
            "redis_port": env.port("REDIS_PORT", 6379),
            "redis_password": env.optional("REDIS_PASSWORD"),
            "redis_username": env.optional("REDIS_USERNAME"),
            "redis_ca_file": env.optional(REDIS_CA_FILE_ENV),
            "pg_dsn": env.required("PG_DSN"),
            "coordinator_urls": http_urls(env.required("COORDINATOR_URL")),
            "coordinator_ca_file": env.optional(COORDINATOR_CA_FILE_ENV),
            "coordinator_token": env.optional("COORDINATOR_TOKEN"),
            "worker_id": env.required("WORKER_ID"),
            "worker_host": env.required("WORKER_HOST"),
            "coordinator_timeout": env.seconds("COORDINATOR_TIMEOUT", 5),
            "shutdown_timeout": env.seconds("SHUTDOWN_TIMEOUT", 30),
        }

    @classmethod
    def own_fields(cls, env: EnvReader) -> dict[str, Any]:
        """A subclass's own settings (its added dataclass fields), read from ``env``."""
        return {}

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> BaseConfig:
        env = EnvReader(environ)
        fields = {**cls.base_fields(env), **cls.own_fields(env)}
        env.finish()
        if not fields["coordinator_urls"]:
            raise ConfigError(f"COORDINATOR_URL {environ['COORDINATOR_URL']!r} names no "
                              "Coordinator: give its URL, or the cluster's comma-separated")
        for url in fields["coordinator_urls"]:
            problem = coordinator_url_problem(url, fields["coordinator_ca_file"])
            if problem:
                raise ConfigError(problem)
        return cls(**fields)


@dataclass(frozen=True)
class OllamaConfig(BaseConfig):
    """The settings of a worker that asks an Ollama (both kinds do)."""
    ollama_host: str
    ollama_model: str
    ollama_timeout: float

    #: OLLAMA_TIMEOUT when it is not set: a summary is short, a generation may be long.
    ollama_timeout_default: ClassVar[float] = 90

    @classmethod
    def own_fields(cls, env: EnvReader) -> dict[str, Any]:
        return {
            "ollama_host": http_url(env.required("OLLAMA_HOST")),
            "ollama_model": env.required("OLLAMA_MODEL"),
            "ollama_timeout": env.seconds("OLLAMA_TIMEOUT", cls.ollama_timeout_default),
        }


def http_url(raw: str) -> str:
    """Accept `host:port` as Ollama's own OLLAMA_HOST does; drop a trailing slash."""
    url = raw.strip().rstrip("/")
    return url if "://" in url or not url else f"http://{url}"


def http_urls(raw: str) -> tuple[str, ...]:
    """COORDINATOR_URL: one URL, or the cluster's Coordinators comma-separated (each as
    http_url takes it); an empty one is none (EnvReader names a missing variable)."""
    return tuple(http_url(part) for part in raw.split(",") if part.strip())


def dsn_password(dsn: str) -> str | None:
    try:
        return psycopg2.extensions.parse_dsn(dsn).get("password")
    except psycopg2.ProgrammingError:
        return None


def masked_dsn(dsn: str) -> str:
    """The DSN as key=value pairs with the password replaced, for log lines."""
    try:
        params = psycopg2.extensions.parse_dsn(dsn)
    except psycopg2.ProgrammingError:
        return "<unparsable PG_DSN>"
    if "password" in params:
        params["password"] = "***"
    first = [key for key in ("host", "hostaddr", "port", "dbname", "user") if key in params]
    keys = first + [key for key in params if key not in first]
    return " ".join(f"{key}={params[key]}" for key in keys)


def env_secrets(env: Mapping[str, str]) -> list[str]:
    """Values never to be logged, read before the config is validated."""
    found = [env.get("REDIS_PASSWORD"), env.get("COORDINATOR_TOKEN"),
             dsn_password(env.get("PG_DSN", ""))]
    return [secret for secret in found if secret]


# --- logging ------------------------------------------------------------------------------

class _MaskSecrets(logging.Filter):
    """Last line of defence: no secret reaches the log even inside a library's message."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = masked(record.getMessage(), self.secrets), None
        return True


def masked(message: str, secrets: list[str]) -> str:
    for secret in secrets:
        message = message.replace(secret, "***")
    return message


def setup_logging(secrets: list[str]) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    handler.addFilter(_MaskSecrets(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    # urllib3 would log every retried connection; the worker logs outages once itself.
    logging.getLogger("urllib3").setLevel(logging.ERROR)


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def error_text(response: requests.Response) -> str:
    """The `error` of a JSON error body (Coordinator, Ollama), else the start of the body."""
    try:
        body = response.json()
    except ValueError:
        return " ".join(response.text.split())[:200]
    return str(body.get("error", "")) if isinstance(body, dict) else ""


# --- start-up check diagnostics ----------------------------------------------------------

_HBA_RE = re.compile(r'no pg_hba\.conf entry for host "([^"]+)", user "([^"]+)", '
                     r'database "([^"]+)"')


def postgres_login_hint(error: str, dsn: str, worker_host: str) -> str:
    """The likely fix for a refused PostgreSQL login, in one line."""
    if "no pg_hba.conf entry" in error:
        hba = _HBA_RE.search(error)
        if hba:
            client, user, database = hba.groups()
        else:
            params = psycopg2.extensions.parse_dsn(dsn)
            client, user = worker_host, params.get("user", "coordinator")
            database = params.get("dbname", user)
        prefix = "128" if ":" in client else "32"
        line = f"host {database} {user} {client}/{prefix} scram-sha-256"
        if user.startswith(WORKER_DB_ROLE_PREFIX):
            # A worker host's own login, made and allowed by site.yml from that host only.
            return (f"fix: {user} logs in from its own host only: on another host use that "
                    f"host's own login (site.yml writes it to PG_DSN); if {client} is now "
                    f"{user}'s host, run site.yml, which adds `{line}` to pg_hba.conf")
        return f"fix: add `{line}` to pg_hba.conf on the PostgreSQL server, then reload it"
    if "password authentication failed" in error:
        return "fix: the password in PG_DSN is wrong; use the role's password"
    if "does not exist" in error:
        return "fix: check dbname and user in PG_DSN"
    return ("fix: check that PostgreSQL runs, that listen_addresses in postgresql.conf "
            "covers this network, and the firewall")


def base_interpreter() -> str:
    """The Python binary this process runs, past the virtualenv's link: macOS's Local
    Network privacy grants a binary, and a venv's python is a link to its base interpreter
    (sys._base_executable, the venv's `home` interpreter)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def local_network_hint(error: str, system: str, interpreter: str) -> str | None:
    """The fix for a LAN connection macOS's Local Network privacy denied, else None.

    macOS 15 answers such a connect() with EHOSTUNREACH (65) for a program without the
    grant, and asks no one when the program is a LaunchAgent's; the same check run from an
    SSH session connects. Redis, psycopg2 (libpq) and requests all put the system's text of
    the error in their messages."""
    if system != "Darwin" or os.strerror(errno.EHOSTUNREACH) not in error:
        return None
    return (f"macOS's Local Network privacy may deny this program the LAN (EHOSTUNREACH, while "
            f"the same check run over SSH connects): allow {interpreter} in System Settings > "
            "Privacy & Security > Local Network, then restart the worker; a virtualenv built "
            "on another Python needs that one allowed")


def is_loopback(host: str | None) -> bool:
    return host in (None, "localhost", "127.0.0.1", "::1", "0.0.0.0")


# --- the task store: PostgreSQL -----------------------------------------------------------

@dataclass
class Task:
    id: str
    claim: str
    task_type: str
    prompt: str
    model: str | None
    # The Ollama options POST /route gave (tasks.options), for the model the worker asks.
    options: dict[str, Any] | None = None


@dataclass
class Outcome:
    status: str
    result: str | None = None
    error: str | None = None
    fallback: bool = False
    # The model whose answer is the result (tasks.answered_model).
    answered_model: str | None = None


class TaskStore:
    """The worker's side of the ``tasks`` table: its PostgreSQL connection, the session
    advisory lock that allows one process per WORKER_ID, and the guarded claim and result
    write, retried until PostgreSQL takes them (the statements are coordinator_sql's)."""

    def __init__(self, cfg: BaseConfig, program: str, queues: list[str]) -> None:
        self.cfg = cfg
        self.program = program
        self.queues = queues
        self.app_name = f"{program} {cfg.worker_id} {cfg.worker_host} pid={os.getpid()}"
        self.db: psycopg2.extensions.connection | None = None
        self.lock_db: psycopg2.extensions.connection | None = None
        self.lock_outage = False
        # What the heartbeat reports of the writes.
        self.db_write_failures = 0
        self.last_error: str | None = None

    def connect(self, options: str | None = None) -> psycopg2.extensions.connection:
        extra = {"options": options} if options else {}
        conn = psycopg2.connect(
            self.cfg.pg_dsn, connect_timeout=5, application_name=self.app_name,
            keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3,
            **extra,
        )
        # Each write is one guarded UPDATE, atomic on its own: autocommit saves the BEGIN and
        # COMMIT round trips that were half of a no-op task's time (bench/dispatch.py).
        conn.autocommit = True
        return conn

    # -- one process per WORKER_ID ----------------------------------------------------------
    def take_lock(self) -> None:
        """Hold `hashtext('worker:' || worker_id)` for the life of this process."""
        conn = self.connect(LOCK_SESSION_OPTIONS)
        with conn.cursor() as cur:
            cur.execute(SQL.WORKER_LOCK, {"worker_id": self.cfg.worker_id})
            got = cur.fetchone()[0]
            holder = None if got else self.lock_holder(cur)
        if holder is not None:
            conn.close()
            raise CheckFailed(holder)
        self.lock_db = conn
        self.lock_outage = False
        log.info("Lock worker:%s taken (one process per WORKER_ID)", self.cfg.worker_id)

    def lock_holder(self, cur: psycopg2.extensions.cursor) -> str:
        cur.execute(SQL.WORKER_LOCK_HOLDER, {"worker_id": self.cfg.worker_id})
        row = cur.fetchone()
        match = re.fullmatch(r"(\S+) (\S+) (\S+) pid=(\d+)", row[0] or "") if row else None
        if match:
            who = f"on host {match.group(3)} pid {match.group(4)}"
        elif row:
            who = f"from {row[1]} ({row[0]!r})"
        else:
            who = "(it has just exited; start again)"
        return (f"Another {self.program} with WORKER_ID={self.cfg.worker_id} is already "
                f"running {who}; stop it there first: two copies would race for "
                f"{', '.join(self.queues)}")

    def keep_lock(self, retry_every: float) -> None:
        """Re-take the lock after its connection was lost (e.g. PostgreSQL restarted); raises
        CheckFailed when another process took it meanwhile."""
        try:
            if self.lock_db is not None and not self.lock_db.closed:
                with self.lock_db.cursor() as cur:
                    cur.execute("SELECT 1")
                return
        except psycopg2.Error as error:
            log.warning("Lost the lock connection to PostgreSQL (%s); re-taking the lock",
                        one_line(error))
        if self.lock_db is not None:
            self.lock_db.close()
            self.lock_db = None
        try:
            self.take_lock()
        except psycopg2.Error as error:
            if not self.lock_outage:
                log.warning("Cannot re-take the lock yet (%s); retrying every %gs",
                            one_line(error), retry_every)
            self.lock_outage = True

    # -- the guarded transitions ------------------------------------------------------------
    def running(self) -> list[str]:
        """The tasks `running` under this worker id: an earlier process claimed them."""
        with self.db, self.db.cursor() as cur:
            cur.execute(SQL.ADOPT, {"worker_id": self.cfg.worker_id, "queues": self.queues})
            return [row[0] for row in cur.fetchall()]

    def with_retry(self, what: str, task_id: str, processing: str,
                   action: Callable[[], T]) -> T:
        """Retry until PostgreSQL takes it, reconnecting; every failure is logged and counted
        for the heartbeat. The id stays in the processing list meanwhile."""
        delay = 0.5
        attempt = 1
        while True:
            try:
                if self.db is None or self.db.closed:
                    self.db = self.connect()
                return action()
            except psycopg2.Error as error:
                self.db_write_failures += 1
                self.last_error = f"{what} of task {task_id} failed: {one_line(error)}"
                log.error("%s (attempt %d); task stays in %s, retrying in %gs",
                          self.last_error, attempt, processing, delay)
                if self.db is not None:
                    self.db.close()
                    self.db = None
                time.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY)
                attempt += 1

    def claim(self, task_id: str) -> Task | None:
        token = str(uuid.uuid4())
        params = {"id": task_id, "claim": token, "worker_id": self.cfg.worker_id,
                  "host": self.cfg.worker_host, "queues": self.queues}
        with self.db.cursor() as cur:
            cur.execute(SQL.CLAIM_ASYNC_COMMIT, params)
            row = cur.fetchone()
            if row is None:
                # Ours and `running`: this worker id's previous process died mid-task.
                cur.execute(SQL.RECLAIM_ASYNC_COMMIT, params)
                row = cur.fetchone()
            if row is not None:
                log.info("Task %s claimed", task_id)
                return Task(task_id, token, *row)
            cur.execute(SQL.TASK_STATE, params)
            state = cur.fetchone()
        if state is None:
            log.warning("Dropping task %s: it is not in the tasks table", task_id)
        else:
            log.info("Dropping task %s: it is %s (worker %s), nothing to do", task_id,
                     state[0], state[1] or "none")
        return None

    def write_result(self, task: Task, outcome: Outcome, worker: str) -> None:
        """``worker`` is what the result puts in tasks.worker."""
        with self.db.cursor() as cur:
            cur.execute(SQL.RESULT, {
                "id": task.id, "claim": task.claim, "status": outcome.status,
                "result": outcome.result, "error": outcome.error,
                "fallback": outcome.fallback, "worker": worker,
                "answered_model": outcome.answered_model,
            })
            written = cur.rowcount == 1
        if written:
            log.info("Task %s %s%s%s", task.id, outcome.status,
                     " (fallback answer)" if outcome.fallback else "",
                     f": {outcome.error}" if outcome.error else "")
        else:
            log.warning("Task %s: result not written, the claim was lost (the Reaper or "
                        "another worker moved it on)", task.id)


# --- the start-up checks ------------------------------------------------------------------

@dataclass(frozen=True)
class CheckResult:
    """One start-up check as `--check --json` reports it."""

    name: str
    ok: bool
    message: str  # its `<Backend> OK (...)` line, or the one line saying what failed and why


def check_report(results: list[CheckResult], secrets: list[str]) -> str:
    """`--check --json`: one JSON object, the failed check's line first ("" when all
    passed), then every check run, in order; no secret in it, as in the log."""
    failed = [result.message for result in results if not result.ok]
    checks = [{**asdict(result), "message": masked(result.message, secrets)}
              for result in results]
    return json.dumps({"error": masked(failed[0], secrets) if failed else "",
                       "checks": checks})


#: A named check: it returns the line it logs when it passes, or raises CheckFailed.
Check = tuple[str, Callable[[], str]]


class StartupChecks:
    """The checks a worker runs before it takes anything, in the order they are logged:
    Redis (every key the loop uses), PostgreSQL (the login and a write to `tasks`), then the
    worker's own backends. `--check` runs only these; `results` is what passed and the one
    that failed."""

    def __init__(self, cfg: BaseConfig, rds: redis.Redis, store: TaskStore, keys: list[str],
                 backends: list[Check]) -> None:
        self.cfg = cfg
        self.redis = rds
        self.store = store
        self.keys = keys
        self.checks: list[Check] = [("redis", self.check_redis),
                                    ("postgresql", self.check_postgres), *backends]
        self.results: list[CheckResult] = []

    def run(self) -> None:
        """Every check in order; the first failure stops them (CheckFailed)."""
        for name, check in self.checks:
            try:
                message = check()
            except CheckFailed as error:
                self.results.append(CheckResult(name, False, str(error)))
                raise
            log.info("%s", message)
            self.results.append(CheckResult(name, True, message))

    def check_redis(self) -> str:
        address = f"{self.cfg.redis_host}:{self.cfg.redis_port}"
        user = self.cfg.redis_username or "default"
        try:
            self.redis.ping()
            # Every key the loop uses, so a user without them fails here, not at the first
            # task (LLEN is read-only).
            for key in self.keys:
                self.redis.llen(key)
        except redis.AuthenticationError as error:
            raise CheckFailed(
                f"Redis check FAILED at {address}: user '{user}' refused: {one_line(error)}; "
                "fix: check REDIS_USERNAME and REDIS_PASSWORD (the worker role derives them "
                "for this host, worker_<host>, from worker_redis_password_key; run site.yml "
                "so the redis role has the same user)"
            ) from None
        except redis.exceptions.NoPermissionError as error:
            raise CheckFailed(
                f"Redis check FAILED at {address}: user '{user}' may not use its keys: "
                f"{one_line(error)}; fix: run site.yml (or migrate-web.yml for a web worker) "
                "so the redis role grants this host's user its workers' queues and "
                "processing lists"
            ) from None
        except redis.RedisError as error:
            text = one_line(error)
            tls_problem = redis_tls_problem(text, self.cfg.redis_ca_file)
            local_network = local_network_hint(text, platform.system(), base_interpreter())
            if local_network:
                fix = f"fix: {local_network}"
            elif tls_problem:
                fix = f"fix: {tls_problem}"
            elif "AUTH" in text and "without any password configured" in text:
                fix = "fix: this Redis has no password; unset REDIS_PASSWORD"
            else:
                fix = ("fix: check REDIS_HOST/REDIS_PORT, and in redis.conf on that host `bind` "
                       "(must include its LAN address) and `protected-mode`, and the firewall")
            raise CheckFailed(f"Redis check FAILED at {address}: {text}; {fix}") from None
        transport = (f"TLS, certificate from {self.cfg.redis_ca_file}" if self.cfg.redis_ca_file
                     else "plain TCP")
        return f"Redis OK ({address}, {transport})"

    def check_postgres(self) -> str:
        """The login and a write to `tasks`; the connection becomes the store's."""
        where = masked_dsn(self.cfg.pg_dsn)
        try:
            conn = self.store.connect()
        except psycopg2.Error as error:
            text = one_line(error)
            local_network = local_network_hint(text, platform.system(), base_interpreter())
            hint = (f"fix: {local_network}" if local_network
                    else postgres_login_hint(text, self.cfg.pg_dsn, self.cfg.worker_host))
            raise CheckFailed(f"PostgreSQL check FAILED at {where}: login refused: {text}; "
                              f"{hint}") from None
        try:
            with conn.cursor() as cur:
                cur.execute(SQL.WRITE_CHECK)
        except psycopg2.errors.UndefinedTable:
            raise CheckFailed(f"PostgreSQL check FAILED at {where}: there is no tasks table; "
                              "fix: start the Coordinator once, it creates the schema") from None
        except psycopg2.errors.InsufficientPrivilege as error:
            raise CheckFailed(f"PostgreSQL check FAILED at {where}: cannot write the tasks "
                              f"table: {one_line(error)}; fix: GRANT {WORKER_DB_GROUP} TO "
                              f"{conn.info.user}, as site.yml does for each worker host's "
                              "login") from None
        except psycopg2.Error as error:
            raise CheckFailed(f"PostgreSQL check FAILED at {where}: cannot write the tasks "
                              f"table: {one_line(error)}") from None
        finally:
            conn.rollback()
        self.store.db = conn
        return f"PostgreSQL OK ({where}, can write tasks)"



# --- the Coordinator client ---------------------------------------------------------------

class CoordinatorClient:
    """The worker's side of the Coordinator's API: its registration, the heartbeats (a thread
    that runs until the goodbye) with the drain they answer, and the goodbye at exit.

    ``registration`` gives the body of a registration, ``status`` the worker's part of a
    heartbeat (in_flight, db_write_failures, last_error), ``before_beat`` runs before each
    heartbeat (the worker keeps its lock there)."""

    def __init__(self, cfg: BaseConfig, instance_id: str, queues: list[str],
                 registration: Callable[[], dict[str, Any]],
                 status: Callable[[], dict[str, Any]], before_beat: Callable[[], None]) -> None:
        self.cfg = cfg
        self.instance_id = instance_id
        self.queues = queues
        self.registration = registration
        self.status = status
        self.before_beat = before_beat
        self.http = requests.Session()
        if cfg.coordinator_ca_file:
            self.http.verify = cfg.coordinator_ca_file
        if cfg.coordinator_token:
            self.http.headers["Authorization"] = f"Bearer {cfg.coordinator_token}"
        self.heartbeat_interval = 10.0
        self.heartbeat_thread = threading.Thread(target=self.heartbeat_loop, name="heartbeat",
                                                 daemon=True)
        # Set once the worker says goodbye: no heartbeat may follow it.
        self.heartbeats_over = threading.Event()
        # Wakes the heartbeat thread before its interval (a drain just finished, goodbye).
        self.beat_now = threading.Event()
        # Set while the Coordinator says the worker is drained (register and heartbeat
        # answers); `drained` once it also holds no task, which the next heartbeat reports.
        self.drain = threading.Event()
        self.drained = False
        self.hint_beat_at = 0.0
        # Which of COORDINATOR_URL answered last: asked first next time.
        self.coordinator_at = 0

    @property
    def coordinator_url(self) -> str:
        """The Coordinator the worker uses now (the one of COORDINATOR_URL that answered
        last)."""
        return self.cfg.coordinator_urls[self.coordinator_at]

    def post_coordinator(self, path: str, body: dict[str, Any]) -> requests.Response:
        """POST ``path`` to the Coordinator that answered last, else to the next of
        COORDINATOR_URL that answers, which is used from then on (said in the log); every
        instance serves the same cluster, so any answer counts, an error status too.
        CoordinatorUnreachable, with each URL's error, when none answers."""
        urls = self.cfg.coordinator_urls
        first = self.coordinator_at
        failures: list[tuple[str, BaseException]] = []
        for step in range(len(urls)):
            at = (first + step) % len(urls)
            try:
                response = self.http.post(urls[at] + path, json=body,
                                          timeout=self.cfg.coordinator_timeout)
            except OSError as error:  # requests' errors, and its OSError for a missing CA file
                failures.append((urls[at], error))
                continue
            if at != first:
                self.coordinator_at = at
                log.warning("Using the Coordinator at %s: %s did not answer (%s)", urls[at],
                            urls[first], one_line(failures[0][1]))
            return response
        raise CoordinatorUnreachable(failures)

    def register(self) -> None:
        path = "/workers/register"
        body = self.registration()
        try:
            response = self.post_coordinator(path, body)
        except CoordinatorUnreachable as unreachable:
            url, error = unreachable.failures[0]
            fix = (local_network_hint(one_line(error), platform.system(), base_interpreter())
                   or coordinator_tls_problem(url, repr(error), self.cfg.coordinator_ca_file)
                   or "check COORDINATOR_URL and that the Coordinator runs")
            where = ", ".join(self.cfg.coordinator_urls)
            raise CheckFailed(f"Coordinator check FAILED: not reachable at "
                              f"{'any of ' if len(self.cfg.coordinator_urls) > 1 else ''}"
                              f"{where} ({unreachable}); fix: {fix}") from None
        if response.status_code == 401:
            raise CheckFailed(f"Coordinator check FAILED at {self.coordinator_url}: 401, "
                              "fix: set COORDINATOR_TOKEN to the Coordinator's token")
        if response.status_code != 200:
            raise CheckFailed(f"Coordinator check FAILED at {self.coordinator_url}{path}: HTTP "
                              f"{response.status_code} {error_text(response)}")
        answer = response.json()
        self.heartbeat_interval = float(answer["heartbeat_interval"])
        log.info("register: %s as %s worker on %s at %s (v%s, heartbeat every %gs)",
                 self.cfg.worker_id, body["kind"], self.queues, self.coordinator_url,
                 body["version"], self.heartbeat_interval)
        self.set_drain(bool(answer.get("drain")))

    def start_heartbeats(self) -> None:
        self.heartbeat_thread.start()

    def set_drain(self, drain: bool) -> None:
        """Follow the Coordinator's word on draining; log each change once."""
        if drain and not self.drain.is_set():
            self.drain.set()
            log.info("Drained by the Coordinator: finishing %s, taking no new task from %s "
                     "until undrained",
                     "the task held" if self.status()["in_flight"] else "nothing held",
                     ", ".join(self.queues))
        elif not drain and self.drain.is_set():
            self.drain.clear()
            self.drained = False
            log.info("Undrained by the Coordinator: taking tasks from %s again",
                     ", ".join(self.queues))

    def report_drained(self) -> None:
        """The worker holds no task while drained: say so now, not at the next interval."""
        self.drained = True
        self.beat_now.set()

    def drain_hinted(self) -> None:
        """The Coordinator's drain hint is in Redis: heartbeat now (at most every
        HINT_BEAT_SECONDS), and so take the drain from the answer at once."""
        if self.drain.is_set():
            return
        now = time.monotonic()
        if now - self.hint_beat_at >= HINT_BEAT_SECONDS:
            self.hint_beat_at = now
            self.beat_now.set()

    def heartbeat_loop(self) -> None:
        path = f"/workers/{self.cfg.worker_id}/heartbeat"
        outage: str | None = None
        warned_duplicate = False
        # Runs until the goodbye, so heartbeats continue while a SIGTERM drains.
        while True:
            self.beat_now.wait(self.heartbeat_interval)
            self.beat_now.clear()
            if self.heartbeats_over.is_set():
                return
            self.before_beat()
            body = {
                "instance_id": self.instance_id, "pid": os.getpid(), **self.status(),
                # only a Coordinator that drains knows the field
                **({"drained": self.drained} if self.drain.is_set() else {}),
            }
            try:
                if self.heartbeats_over.is_set():
                    return
                duplicate = self.beat(path, body)
                if duplicate is None:
                    continue
            except (OSError, CheckFailed, ValueError) as error:  # OSError: requests' too
                if outage is None:
                    outage = one_line(error)
                    log.warning("Heartbeat to %s failed (%s); still processing tasks, "
                                "retrying every %gs", ", ".join(self.cfg.coordinator_urls),
                                outage, self.heartbeat_interval)
                continue
            if outage is not None:
                log.info("Heartbeat to %s works again", self.coordinator_url)
                outage = None
            if duplicate and not warned_duplicate:
                log.warning("The Coordinator sees another live instance of %s: stop the "
                            "extra copy", self.cfg.worker_id)
            warned_duplicate = duplicate

    def beat(self, path: str, body: dict[str, Any]) -> bool | None:
        """One heartbeat, following the drain it answers; whether the Coordinator sees
        another live instance, None when it did not know the worker, which registered
        again."""
        response = self.post_coordinator(path, body)
        if response.status_code == 404:
            log.info("Coordinator does not know %s; registering again", self.cfg.worker_id)
            self.register()
            return None
        if response.status_code != 200:
            raise requests.RequestException(
                f"HTTP {response.status_code} {error_text(response)}")
        answer = response.json()
        self.set_drain(isinstance(answer, dict) and bool(answer.get("drain")))
        return isinstance(answer, dict) and bool(answer.get("duplicate"))

    def goodbye(self) -> None:
        """Tell the Coordinator this process stops, so its registry lists the worker as
        stopped at once instead of alive until the heartbeat TTL runs out. Best effort: a
        Coordinator that does not answer learns it from the missing heartbeats."""
        self.heartbeats_over.set()
        self.beat_now.set()
        if self.heartbeat_thread.is_alive():
            self.heartbeat_thread.join(self.cfg.coordinator_timeout + 1)
        try:
            response = self.post_coordinator(f"/workers/{self.cfg.worker_id}/deregister",
                                             {"instance_id": self.instance_id})
        except OSError as error:  # CoordinatorUnreachable, requests' own errors
            log.warning("Could not deregister from %s (%s); it marks %s dead after the "
                        "heartbeat TTL", ", ".join(self.cfg.coordinator_urls), one_line(error),
                        self.cfg.worker_id)
            return
        if response.status_code == 200:
            log.info("Deregistered %s from %s", self.cfg.worker_id, self.coordinator_url)
        else:
            log.warning("Deregistering from %s answered HTTP %s %s", self.coordinator_url,
                        response.status_code, error_text(response))


# --- the worker: the loop -----------------------------------------------------------------

class Worker:
    """One worker process: the loop that takes task ids from Redis and runs each through the
    task store (claim, work, result), with its start-up checks and its Coordinator client.
    Subclasses fill in the class attributes and the hooks below."""

    program: ClassVar[str]  # first word of application_name, e.g. "worker_infer"
    title: ClassVar[str]  # banner: "<title> starting (v<version>)."
    kind: ClassVar[str]
    version: ClassVar[str]

    def __init__(self, cfg: BaseConfig) -> None:
        self.cfg = cfg
        self.processing = processing_list(cfg.worker_id)
        self.redis = redis.Redis(
            host=cfg.redis_host, port=cfg.redis_port, username=cfg.redis_username,
            password=cfg.redis_password, socket_connect_timeout=5,
            socket_timeout=TAKE_BLOCK_SECONDS + 10, decode_responses=True,
            # One immediate reconnect (an idle connection the server closed); longer outages
            # are the worker's own loop, which logs them once.
            retry=redis.retry.Retry(redis.backoff.NoBackoff(), 1),
            **redis_tls_options(cfg.redis_ca_file),
        )
        self.store = TaskStore(cfg, self.program, self.queues)
        self.checks = StartupChecks(cfg, self.redis, self.store,
                                    [*self.queues, self.processing], self.backend_checks())
        self.coordinator = CoordinatorClient(cfg, str(uuid.uuid4()), self.queues,
                                             self.registration, self.status, self.keep_lock)
        # The Coordinator's hint of a drain (coordinator_contract.drain_hint), looked at
        # between two takes; off once Redis refuses it (an ACL from before the hints).
        self.drain_hint = drain_hint(cfg.worker_id)
        self.hint_allowed = True
        self.stopping = threading.Event()
        self.exit_code = 0
        self.in_flight = 0
        # Set once an LLEN saw our processing list empty: only then may the loop take a new
        # id without looking in the list first (one round trip less per task).
        self.processing_empty = False

    # -- hooks ------------------------------------------------------------------------------
    @property
    def queues(self) -> list[str]:
        raise NotImplementedError

    def backend_checks(self) -> list[Check]:
        """The checks of what the work needs, after Redis and PostgreSQL, in order."""
        return []

    def registration_extra(self) -> dict[str, Any]:
        """Kind-specific fields of the registration body: a worker of a shared queue names
        it (the web worker its model too); an inference worker sends its device and models
        instead (the Coordinator derives its queue, tasks:<device>:<worker_id>, from them)."""
        return {"queues": self.queues}

    def execute(self, task: Task) -> Outcome:
        raise NotImplementedError

    def probe(self, task: Task) -> Outcome:
        """The Coordinator's probe (PROBE_TYPE): the least of this worker's own work, done
        and written like a task's, so that its result proves the whole path: the take from
        its queue, the claim and the write from this host, its backends."""
        return Outcome("failed", error=f"{self.program} answers no probe")

    def result_worker(self) -> str:
        """What the result write puts in tasks.worker."""
        return self.cfg.worker_id

    # -- what the Coordinator is told -------------------------------------------------------
    def registration(self) -> dict[str, Any]:
        return {
            "worker_id": self.cfg.worker_id, "host": self.cfg.worker_host, "kind": self.kind,
            "version": self.version, "pid": os.getpid(),
            "instance_id": self.coordinator.instance_id,
            "os": f"{platform.system()} {platform.release()}".strip(),
            **self.registration_extra(),
        }

    def status(self) -> dict[str, Any]:
        return {"in_flight": self.in_flight, "db_write_failures": self.store.db_write_failures,
                "last_error": self.store.last_error}

    def keep_lock(self) -> None:
        """Before each heartbeat: the lock still held, else re-taken; lost to another process,
        this one exits after its current task."""
        try:
            self.store.keep_lock(self.coordinator.heartbeat_interval)
        except CheckFailed as error:
            log.error("%s; exiting after the current task", error)
            self.exit_code = 1
            self.stopping.set()

    # -- start-up ---------------------------------------------------------------------------
    def start(self) -> None:
        self.checks.run()
        self.store.take_lock()
        self.adopt_running()
        leftovers = self.redis.llen(self.processing)
        if leftovers:
            log.info("%s holds %d task(s) from a previous run; finishing them first",
                     self.processing, leftovers)
        self.coordinator.register()
        self.coordinator.start_heartbeats()

    def adopt_running(self) -> None:
        """A task `running` under this worker id but missing from our processing list was
        claimed by an earlier process that died after Redis lost the list (restarted or
        flushed). Only this process (it holds the lock) can finish it, so list it again."""
        for task_id in self.store.running():
            if self.redis.lpos(self.processing, task_id) is None:
                log.warning("Task %s is running under %s but missing from %s (Redis lost "
                            "it); finishing it", task_id, self.cfg.worker_id, self.processing)
                self.redis.rpush(self.processing, task_id)

    # -- processing -------------------------------------------------------------------------
    def run(self) -> int:
        log.info("Waiting on queues %s", self.queues)
        redis_outage = False
        while not self.stopping.is_set():
            try:
                task_id = self.next_task_id()
            except redis.RedisError as error:
                self.processing_empty = False  # a BLMOVE may have moved an id, then failed
                if not redis_outage:
                    log.error("Redis at %s:%s failed (%s); retrying", self.cfg.redis_host,
                              self.cfg.redis_port, one_line(error))
                    redis_outage = True
                self.stopping.wait(2)
                continue
            if redis_outage:
                log.info("Redis works again")
                redis_outage = False
            if task_id is not None:
                self.handle(task_id)
        self.coordinator.goodbye()
        log.info("Stopped (exit code %d)", self.exit_code)
        return self.exit_code

    def next_task_id(self) -> str | None:
        """An id left in our processing list first (a previous run or a lost LREM); while
        drained, nothing else."""
        if not self.processing_empty:
            left = self.redis.lindex(self.processing, -1)
            if left is not None:
                log.info("Task %s is in %s from before; finishing it", left, self.processing)
                return left
            self.processing_empty = True
        if self.coordinator.drain.is_set():
            if not self.coordinator.drained:
                log.info("Drained: holding no task, taking none until undrained")
                self.coordinator.report_drained()
            self.stopping.wait(TAKE_BLOCK_SECONDS)
            return None
        for queue in self.queues:
            task_id = self.redis.blmove(queue, self.processing, TAKE_BLOCK_SECONDS,
                                        "RIGHT", "LEFT")
            if task_id is not None:
                return task_id
        if self.hint_allowed:
            try:
                self.follow_drain_hint(self.redis.exists(self.drain_hint))
            except redis.exceptions.NoPermissionError as error:
                self.drain_hint_refused(error)
        return None

    def follow_drain_hint(self, hinted: object) -> None:
        if hinted:
            self.coordinator.drain_hinted()

    def drain_hint_refused(self, error: redis.RedisError) -> None:
        self.hint_allowed = False
        log.warning("Redis refused to read %s (%s): its ACL predates drain hints (run "
                    "site.yml); a drain reaches this worker with its next heartbeat",
                    self.drain_hint, one_line(error))

    def handle(self, task_id: str) -> None:
        self.in_flight = 1
        try:
            try:
                uuid.UUID(task_id)
            except ValueError:
                log.error("Dropping %r from %s: not a task id", task_id, self.processing)
            else:
                task = self.store.with_retry("claim", task_id, self.processing,
                                             lambda: self.store.claim(task_id))
                if task is not None:
                    outcome = self.execute_guarded(task)
                    self.store.with_retry(
                        "result write", task_id, self.processing,
                        lambda: self.store.write_result(task, outcome, self.result_worker()))
            self.forget(task_id)
        finally:
            self.in_flight = 0

    def execute_guarded(self, task: Task) -> Outcome:
        """A bug in the work must fail the task, not crash-loop the worker on the same id."""
        try:
            if task.task_type == PROBE_TYPE:
                return self.probe(task)
            return self.execute(task)
        except Exception as error:
            log.exception("Task %s: unexpected error", task.id)
            return Outcome("failed", error=f"{self.program} internal error: "
                                           f"{one_line(error)}; see the worker's log")

    def forget(self, task_id: str) -> None:
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.lrem(self.processing, 0, task_id)
            pipe.llen(self.processing)
            if self.hint_allowed:
                pipe.exists(self.drain_hint)  # in the same round trip
            removed, left, *hint = pipe.execute(raise_on_error=False)
            for answer in (removed, left):
                if isinstance(answer, Exception):
                    raise answer
            self.processing_empty = left == 0
            if hint and isinstance(hint[0], redis.exceptions.NoPermissionError):
                self.drain_hint_refused(hint[0])
            elif hint and not isinstance(hint[0], Exception):
                self.follow_drain_hint(hint[0])
        except redis.RedisError as error:
            self.processing_empty = False
            # The id stays listed; the next loop finds it written and drops it.
            log.error("LREM of task %s from %s failed (%s)", task_id, self.processing,
                      one_line(error))

    # -- shutdown ---------------------------------------------------------------------------
    def on_signal(self, signum: int, _frame: object) -> None:
        if self.stopping.is_set():
            return
        log.info("%s: finishing the current task (at most %gs), then exiting",
                 signal.Signals(signum).name, self.cfg.shutdown_timeout)
        self.stopping.set()
        threading.Thread(target=self.shutdown_watchdog, name="watchdog", daemon=True).start()

    def shutdown_watchdog(self) -> None:
        time.sleep(self.cfg.shutdown_timeout)
        log.error("The current task did not finish within %gs; exiting, it stays in %s and "
                  "is finished at the next start", self.cfg.shutdown_timeout, self.processing)
        self.coordinator.goodbye()
        logging.shutdown()
        os._exit(1)


class OllamaError(Exception):
    """Ollama did not answer as asked; the message says why, for the task's error."""


class OllamaWorker(Worker):
    """A worker whose work is asking an Ollama (OLLAMA_HOST, OLLAMA_MODEL, OLLAMA_TIMEOUT)."""

    cfg: OllamaConfig

    def models(self) -> list[str]:
        """The names of the models the Ollama has (`GET /api/tags`)."""
        response = requests.get(f"{self.cfg.ollama_host}/api/tags",
                                timeout=min(self.cfg.ollama_timeout, 10))
        response.raise_for_status()
        return [model["name"] for model in response.json().get("models", [])]

    def pull_hint(self, model: str) -> str:
        host = urlparse(self.cfg.ollama_host).hostname
        return f"run `ollama pull {model}` on {self.cfg.worker_host if is_loopback(host) else host}"

    def backend_checks(self) -> list[Check]:
        return [("ollama", self.check_ollama)]

    def check_ollama(self) -> str:
        """Ollama answers and has OLLAMA_MODEL."""
        url, model = self.cfg.ollama_host, self.cfg.ollama_model
        try:
            names = self.models()
        except (requests.RequestException, ValueError) as error:
            raise CheckFailed(f"Ollama check FAILED at {url}: {one_line(error)}; fix: check "
                              "OLLAMA_HOST and that `ollama serve` runs there") from None
        if not has_model(names, model):
            raise CheckFailed(f"Ollama check FAILED at {url}: model {model} is not there "
                              f"(it has: {', '.join(names) or 'none'}); fix: "
                              f"{self.pull_hint(model)}")
        return f"Ollama OK ({url}, model {model} present)"

    def ollama(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` (unstreamed) to the Ollama API at ``path``; its JSON answer, or
        OllamaError with a line that says what went wrong and where."""
        url = self.cfg.ollama_host
        try:
            response = requests.post(f"{url}{path}", json={**body, "stream": False},
                                     timeout=(5, self.cfg.ollama_timeout))
        except requests.Timeout:
            raise OllamaError(f"Ollama at {url} did not answer within "
                              f"{self.cfg.ollama_timeout:g}s") from None
        except requests.RequestException as error:
            raise OllamaError(f"Ollama at {url} is not reachable: {one_line(error)}") from None
        if response.status_code == 404:
            raise OllamaError(f"model {body['model']} is not on Ollama at {url}: "
                              f"{self.pull_hint(body['model'])}")
        if response.status_code != 200:
            raise OllamaError(f"Ollama at {url} answered HTTP {response.status_code} "
                              f"{error_text(response)}".rstrip())
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise OllamaError(f"Ollama at {url} did not answer a JSON object")
        return answer

    def one_token(self, model: str, prompt: str) -> str:
        """A generation of one token (a probe's): Ollama loads and runs ``model``, and the
        answer costs next to nothing. OllamaError when it does not."""
        answer = self.ollama("/api/generate", {"model": model, "prompt": prompt,
                                               "options": {"num_predict": 1}})
        if not isinstance(answer.get("response"), str):
            raise OllamaError(f"Ollama at {self.cfg.ollama_host} answered {model} without a "
                              "response")
        return answer["response"]


def env_lines(text: str) -> dict[str, str]:
    """NAME=value lines (as in a systemd EnvironmentFile without quoting); blank lines and
    comments are skipped, the value is everything after the first '='."""
    pairs = (line.split("=", 1) for line in text.splitlines()
             if line.strip() and not line.lstrip().startswith("#") and "=" in line)
    return {name.strip(): value for name, value in pairs}


def main(worker_class: type[Worker], config_class: type[BaseConfig],
         argv: list[str] | None = None) -> int:
    """The whole life of a worker process; returns its exit code."""
    parser = argparse.ArgumentParser(description=f"{worker_class.title} of the Coordinator "
                                                 "cluster; configured by environment only.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument("--check", action="store_true",
                        help="run the start-up checks with this environment and exit: 0 when "
                             "all pass (nothing is registered, no task is taken)")
    parser.add_argument("--json", action="store_true",
                        help="with --check: print the checks' results as one JSON object "
                             "({error, checks: [{name, ok, message}]}) on standard output")
    parser.add_argument("--env-stdin", action="store_true",
                        help="read NAME=value lines from standard input over the environment "
                             "(keeps secrets off command lines that tools print)")
    args = parser.parse_args(argv)
    if args.json and not args.check:
        parser.error("--json goes with --check")
    if args.version:
        print(worker_class.version)
        return 0
    if args.env_stdin:
        os.environ.update(env_lines(sys.stdin.read()))
    secrets = env_secrets(os.environ)
    setup_logging(secrets)
    build = os.environ.get(WORKER_BUILD_ENV, "")
    log.info("%s starting (v%s%s).", worker_class.title, worker_class.version,
             f", build {build[:12]}" if build else "")
    try:
        cfg = config_class.from_env(os.environ)
    except ConfigError as error:
        log.error("%s", error)
        if args.json:
            print(check_report([CheckResult("configuration", False, str(error))], secrets))
        return 2
    worker = worker_class(cfg)
    signal.signal(signal.SIGTERM, worker.on_signal)
    signal.signal(signal.SIGINT, worker.on_signal)
    if args.check:
        return check_only(worker, secrets if args.json else None)
    try:
        worker.start()
    except CheckFailed as error:
        log.error("%s", error)
        return 1
    return worker.run()


def check_only(worker: Worker, json_secrets: list[str] | None) -> int:
    """`--check`: the start-up checks alone; with `--json` (``json_secrets``, the values to
    keep out of it) their results are printed as one JSON object too."""
    try:
        worker.checks.run()
    except CheckFailed as error:
        log.error("%s", error)
        code = 1
    else:
        log.info("All start-up checks passed (--check: not registering, taking no task).")
        code = 0
    if json_secrets is not None:
        print(check_report(worker.checks.results, json_secrets))
    return code
