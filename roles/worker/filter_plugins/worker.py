# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the worker role: its workers as records, and what the service manager says.

``worker_records`` resolves each ``worker_instances`` entry into a record that tasks may loop
over (names, ids, files, no secrets) and its environment, kept apart because it holds the
passwords and the token and -vvv prints every loop item. ``worker_states`` joins the records
with what systemd or launchd report (host_state's read of units or agents), into the
``worker_status`` fact the role publishes. ``worker_versions``,
``expected_registrations``, ``missing_registrations`` and ``registration_report`` are the
registration check (tasks/verify.yml): what the Coordinator must list, what it does not, and
the message that says so.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import markupsafe
from ansible.errors import AnsibleFilterError

# The programs' shared contract (files/, beside roles/), for the worker tokens' derivation:
# the Coordinator checks them with the same function.
_CONTRACT = Path(__file__).resolve().parents[3] / "files" / "coordinator_contract.py"
_spec = importlib.util.spec_from_file_location("coordinator_contract_for_worker_role",
                                               _CONTRACT)
contract = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(contract)


# The Coordinator's PG_DSN is written from the same functions (filter pg_dsn, playbooks).
libpq_escape = contract.libpq_escape
pg_dsn = contract.pg_dsn


def worker_env_quote(value: Any) -> str:
    """A value as worker.env.j2 writes it between the double quotes of a systemd
    EnvironmentFile line: backslash and quote escaped (worker_env_value undoes it)."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"')


def secret_spellings(secrets: Iterable[str]) -> list[str]:
    """Every way a worker's environment file or launchd plist spells ``secrets``: each as it
    is and inside a libpq quoted value (PG_DSN's password), both as worker.env.j2 quotes them
    and as worker.plist.j2 escapes them (Jinja's ``e``); what sync_tree masks in the diff of
    those files."""
    spelled: set[str] = set()
    for secret in (str(value) for value in secrets if value):
        for form in (secret, libpq_escape(secret)):
            spelled |= {form, worker_env_quote(form), str(markupsafe.escape(form))}
    return sorted(spelled)


def worker_records(
    instances: Sequence[Mapping[str, Any]],
    *,
    node_name: str,
    node_address: str,
    base_env: Mapping[str, Any],
    worker_env: Mapping[str, Any],
    db: Mapping[str, Any],
    scripts: Mapping[str, str],
    default_device: str,
    label_prefix: str,
    config_dir: str,
    launchd_dir: str,
    log_dir: str,
    token_key: str | None = None,
    redis: Mapping[str, Any] | None = None,
    coordinator_ca_file: str = "",
    build: str = "",
) -> dict[str, Any]:
    """{"records": [one per worker], "envs": {name: its environment}, "secrets": [...]}.

    ``db`` holds host, port, name, optionally ``ssl_root_cert``, and either user and
    password or ``password_key`` and ``login_host``: the inventory host whose own login
    (worker_<host>) the workers use.
    Each worker's environment is ``base_env`` (the role's settings), its PG_DSN, WORKER_ID,
    WORKER_HOST and (inference) WORKER_DEVICE, with ``token_key`` its own COORDINATOR_TOKEN
    (derived from the key and its id), then ``worker_env``, then the entry's own ``env``;
    every value a string, as a process environment has them.

    ``redis`` holds ``user`` and ``password``, or ``password_key`` and ``login_host``: then
    REDIS_USERNAME and REDIS_PASSWORD are the host's own Redis ACL user (worker_<host>, the
    redis role makes it from the same key); with ``ca_file``, REDIS_CA_FILE names the CA
    certificate of a Redis serving TLS. Each record names the ``queues`` its worker
    takes from, which the redis role grants to that host's user with its processing list.

    With ``coordinator_ca_file``, COORDINATOR_CA_FILE names the CA certificate the
    Coordinator's HTTPS certificate must come from.

    With ``build`` (worker_build of the code shipped), WORKER_BUILD holds it: the worker logs
    it at start, and its environment changes with the code and the requirements, so the
    converge that writes it restarts the worker (the role's handler), whichever run shipped
    the code (a move ships it to a host and restarts only the web worker there).

    ``secrets`` are the passwords and tokens the environments hold (the database's, Redis',
    each COORDINATOR_TOKEN), as the environment files spell them (secret_spellings)."""
    redis_env = {"REDIS_USERNAME": (redis or {}).get("user") or "",
                 "REDIS_PASSWORD": (redis or {}).get("password") or ""}
    if redis and redis.get("password_key"):
        redis_env = {
            "REDIS_USERNAME": contract.worker_redis_user(redis["login_host"]),
            "REDIS_PASSWORD": contract.worker_redis_password(redis["password_key"],
                                                             redis["login_host"]),
        }
    if redis and redis.get("ca_file"):
        redis_env[contract.REDIS_CA_FILE_ENV] = redis["ca_file"]
    user, password = db["user"], db.get("password") or ""
    if db.get("password_key"):
        # The host's own login (the postgresql_access role makes it from the same key).
        user = contract.worker_db_role(db["login_host"])
        password = contract.worker_db_password(db["password_key"], db["login_host"])
    dsn = pg_dsn(db["host"], db["port"], db["name"], user, password,
                 db.get("ssl_root_cert") or "")
    records, envs = [], {}
    for item in instances:
        name, kind = item["name"], item["kind"]
        default_id = f"web-worker-{node_name}" if kind == "web" else node_name
        env: dict[str, Any] = {
            **base_env,
            **redis_env,
            "PG_DSN": dsn,
            "WORKER_ID": item.get("worker_id") or default_id,
            "WORKER_HOST": node_address,
        }
        if coordinator_ca_file:
            env[contract.COORDINATOR_CA_FILE_ENV] = coordinator_ca_file
        if build:
            env[contract.WORKER_BUILD_ENV] = build
        if kind == "inference":
            env["WORKER_DEVICE"] = item.get("device") or default_device
        if token_key:
            env["COORDINATOR_TOKEN"] = contract.worker_token(token_key, env["WORKER_ID"])
        env.update(worker_env)
        env.update(item.get("env") or {})
        env = {key: "" if value is None else str(value) for key, value in env.items()}
        label = item.get("label") or f"{label_prefix}{name}"
        queues = ([contract.inference_queue(env.get("WORKER_DEVICE") or "cpu", env["WORKER_ID"])]
                  if kind == "inference" else [contract.KIND_QUEUES[kind]])
        records.append({
            "name": name,
            "kind": kind,
            "state": item.get("state") or "present",
            "worker_id": env["WORKER_ID"],
            "host": env["WORKER_HOST"],
            "queues": queues,
            "label": label,
            "script": scripts[kind],
            "unit": f"{name}.service",
            "env_file": f"{config_dir}/{name}.env",
            "plist": f"{launchd_dir}/{label}.plist",
            "log": f"{log_dir}/{name}.log",
        })
        envs[name] = env
    secrets = [password, redis_env["REDIS_PASSWORD"],
               *(env.get("COORDINATOR_TOKEN", "") for env in envs.values())]
    return {"records": records, "envs": envs, "secrets": secret_spellings(secrets)}


def worker_states(records: Sequence[Mapping[str, Any]],
                  read: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each record with what its service manager reports now, from host_state's ``read``:
    ``installed`` (its unit, or its plist, exists), ``enabled`` (starts at boot or login),
    ``running`` and ``pid`` (0 when not running). A read of launchd agents (it names its
    domain) is a Mac's: each agent by its label, the plist among the files read. Otherwise
    the units (unit -> LoadState, ActiveState, UnitFileState, MainPID; None where systemd did
    not answer)."""
    launchd = read.get("launchd_domain") is not None
    agents, files, units = (read.get(key) or {} for key in ("agents", "files", "units"))
    states = []
    for record in records:
        state = dict(record)
        if launchd:
            agent = agents.get(record["label"]) or {}
            installed = files.get(record["plist"]) is not None
            state.update(installed=installed, enabled=installed and bool(agent.get("enabled")),
                         running=bool(agent.get("running")), pid=int(agent.get("pid") or 0))
        else:
            unit = units.get(record["unit"]) or {}
            running = unit.get("ActiveState") in ("active", "reloading", "deactivating")
            state.update(installed=unit.get("LoadState") == "loaded",
                         enabled=unit.get("UnitFileState") in ("enabled", "enabled-runtime"),
                         running=running,
                         pid=int(unit.get("MainPID") or 0) if running else 0)
        states.append(state)
    return states


def worker_env_value(result: Mapping[str, Any], name: str) -> str | None:
    """One variable's value from a registered read of a worker's environment: a
    ``NAME="value"`` line of its systemd EnvironmentFile (worker.env.j2's quoting undone), or
    the raw value ``plutil -extract`` printed from its plist. None when nothing was read."""
    if result.get("rc") != 0:
        return None
    text = str(result.get("stdout") or "").strip()
    prefix = f"{name}="
    if not text.startswith(prefix):
        return text or None
    value = text[len(prefix):]
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = re.sub(r"\\(.)", r"\1", value[1:-1])
    return value or None


def script_version(source: str) -> str | None:
    """A worker program's version: the string its top-level ``VERSION = "..."`` assigns (the
    one place the banner, --version and the registration read it from); None without one."""
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
                and any(isinstance(target, ast.Name) and target.id == "VERSION"
                        for target in node.targets)):
            return node.value.value
    return None


def worker_versions(source_dir: str, scripts: Iterable[str]) -> dict[str, str]:
    """script -> version of each program in the controller's ``source_dir``: the code the role
    ships, so the version a freshly started worker must register with."""
    versions = {}
    for script in sorted(set(scripts)):
        path = Path(source_dir) / script
        try:
            version = script_version(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError) as error:
            raise AnsibleFilterError(f"cannot read the version of {path}: {error}") from error
        if version is None:
            raise AnsibleFilterError(f'{path} has no top-level VERSION = "..." to read the '
                                     "version the worker registers with from")
        versions[script] = version
    return versions


def worker_build(source_dir: str, files: Iterable[str]) -> str:
    """SHA-1 of the files of ``source_dir`` the role ships (the programs and the
    requirements), by name and content: it changes when any of them does, whatever order
    ``files`` lists them in."""
    digest = hashlib.sha1(usedforsecurity=False)
    for name in sorted(set(files)):
        path = Path(source_dir) / name
        try:
            content = path.read_bytes()
        except OSError as error:
            raise AnsibleFilterError(f"cannot read {path} to take the code's digest: "
                                     f"{error}") from error
        digest.update(f"{name}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


def workers_written(records: Sequence[Mapping[str, Any]],
                    written: Iterable[str]) -> list[Mapping[str, Any]]:
    """The records one of whose files (environment file, systemd unit, launchd plist) is
    among ``written``: the names of the files a run wrote anew, as sync_tree's ``updated``
    lists them (relative to the directory it wrote) or as paths."""
    names = {Path(name).name for name in written}
    return [record for record in records
            if names & {Path(record[key]).name for key in ("env_file", "unit", "plist")}]


def expected_registrations(states: Sequence[Mapping[str, Any]], *, versions: Mapping[str, str],
                           envs: Mapping[str, Mapping[str, str]]) -> list[dict[str, Any]]:
    """What the Coordinator must list alive for each worker of ``states`` (worker_states'
    records): worker_id, host, the ``version`` of its program (``versions``: script ->
    version) and the ``pid`` its service manager runs (0: none); with the worker's name,
    unit and log, and ``url``, the Coordinator the registry is read from (the first of
    COORDINATOR_URL in its environment in ``envs``, no trailing slash: every Coordinator of a
    cluster reads the one registry in PostgreSQL, and site.yml converges them all before the
    workers)."""
    return [{"name": state["name"], "unit": state["unit"], "log": state["log"],
             "url": str(envs[state["name"]].get("COORDINATOR_URL", "")).split(",")[0]
             .strip().rstrip("/"),
             "worker_id": state["worker_id"], "host": state["host"],
             "version": versions[state["script"]], "pid": int(state["pid"])}
            for state in states]


def registered_workers(expected: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """name -> {worker_id, host, version, pid}: the ``worker_registered`` fact, once the
    Coordinator lists every registration of ``expected``."""
    return {e["name"]: {key: e[key] for key in ("worker_id", "host", "version", "pid")}
            for e in expected}


def _listed_workers(answer: Any) -> list[Mapping[str, Any]]:
    """The workers of a GET /workers answer: a list, or an object with a ``workers`` list."""
    workers = answer.get("workers") if isinstance(answer, Mapping) else answer
    return [w for w in workers if isinstance(w, Mapping)] if isinstance(workers, list) else []


def _is_listed(expected: Mapping[str, Any], answer: Any) -> bool:
    return expected["pid"] != 0 and any(
        w.get("alive") and (w.get("worker_id"), w.get("host"), w.get("version"))
        == (expected["worker_id"], expected["host"], expected["version"])
        and str(w.get("pid")) == str(expected["pid"])
        for w in _listed_workers(answer))


def missing_registrations(expected: Sequence[Mapping[str, Any]],
                          answers: Iterable[Any]) -> list[Mapping[str, Any]]:
    """The ``expected`` registrations that no GET /workers answer of ``answers`` lists alive,
    with the same host, version and pid. A worker no process runs (pid 0) is always missing."""
    answers = list(answers)
    return [e for e in expected if not any(_is_listed(e, answer) for answer in answers)]


# The text every libc gives EHOSTUNREACH (65 on macOS, 113 on Linux), which Redis, libpq and
# requests put in their messages.
NO_ROUTE = "No route to host"


def registration_report(missing: Sequence[Mapping[str, Any]], *, hostname: str,
                        registry: Sequence[Mapping[str, Any]] = (),
                        logs: Sequence[Mapping[str, Any]] = (),
                        local_network: Mapping[str, str] | None = None) -> str:
    """One line per worker of ``missing`` (expected_registrations' records, or bare worker
    records when the check stopped before knowing more): what was expected, what the
    Coordinator says of it and its last log lines. ``registry`` holds the results of GET
    /workers looped over the Coordinators' URLs, ``logs`` those of the log reads looped over
    the missing workers. ``local_network`` (a Mac: {interpreter, settings}) adds the fix when
    a worker's log says its LAN connections got EHOSTUNREACH: macOS's Local Network privacy
    denies a LaunchAgent's interpreter without the grant, while the same checks run over SSH
    (the role's preflight) connect."""
    answers = {r.get("item"): r for r in registry if isinstance(r, Mapping)}
    log_lines = {r["item"]["name"]: r.get("stdout_lines") or [] for r in logs
                 if isinstance(r, Mapping) and isinstance(r.get("item"), Mapping)}
    lines = []
    for worker in missing:
        url = worker.get("url", "")
        result = answers.get(url)
        if result is not None and result.get("status") == 200:
            listed = [w for w in _listed_workers(result.get("json"))
                      if w.get("worker_id") == worker["worker_id"]]
            says = listed[0] if listed else "not registered"
        elif result is not None:
            detail = result.get("json", {}).get("detail") if isinstance(
                result.get("json"), Mapping) else None
            says = " ".join(str(part) for part in (result.get("msg") or "no answer", detail)
                            if part)
        else:
            says = "no answer"
        pid = worker.get("pid", "?")
        if pid == 0:
            pid = "? (no process runs it)"
        lines.append(
            f"{worker['name']} ({worker['worker_id']}) on {hostname} is not registered alive "
            f"with the Coordinator at {url or '?'} as host {worker.get('host', '?')}, version "
            f"{worker.get('version', '?')}, pid {pid} (Coordinator says: {says}); its last log "
            f"lines: {' | '.join(log_lines.get(worker['name'], []))}")
    denied = local_network and any(NO_ROUTE in line for worker in missing
                                   for line in log_lines.get(worker["name"], []))
    if denied:
        lines.append(
            f"{hostname} is a Mac whose workers, started by launchd, get EHOSTUNREACH ({NO_ROUTE}) "
            f"on the LAN: macOS's Local Network privacy denies {local_network['interpreter']} "
            f"until it is allowed in {local_network['settings']}; allow it there (logged in at "
            "the console), then run again")
    return "; ".join(lines)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "worker_records": worker_records,
            "worker_env_quote": worker_env_quote,
            "worker_states": worker_states,
            "worker_env_value": worker_env_value,
            "worker_versions": worker_versions,
            "worker_build": worker_build,
            "workers_written": workers_written,
            "expected_registrations": expected_registrations,
            "missing_registrations": missing_registrations,
            "registered_workers": registered_workers,
            "registration_report": registration_report,
        }
