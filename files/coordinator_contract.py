# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the Coordinator, the workers and the Ansible modules share (docs/design.md).

The one place for the names every part must agree on: the routing table (task types, the
kind of worker that serves each, the shared queues), the Redis key names, the literals the
`tasks` table holds, and the rule by which a model name matches the ones an Ollama server
lists. The SQL on `tasks` and `workers` is coordinator_sql's. Pure Python, no dependencies.

It ships three ways, always this file: the worker role and the coordinator role copy it to
the nodes beside the programs (``import coordinator_contract``), and the modules of
library/ import it as ``ansible.module_utils.coordinator_contract`` (module_utils/ has a link
to this file).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import ssl
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# -- routing ---------------------------------------------------------------------------------

WEB_QUEUE = "tasks:web"
RAG_QUEUE = "tasks:rag"
SHARED_QUEUES = (WEB_QUEUE, RAG_QUEUE)
WORKER_KINDS = ("web", "inference", "rag")
#: task type -> (the kind of worker that serves it, its shared queue or None for the queue
#: of one inference worker)
ROUTES: dict[str, tuple[str, str | None]] = {
    "web_search": ("web", WEB_QUEUE),
    "rag": ("rag", RAG_QUEUE),
    "generate": ("inference", None),
    "chat": ("inference", None),
    "summarize": ("inference", None),
}
TASK_TYPES = tuple(sorted(ROUTES))
INFERENCE_TYPES = tuple(t for t in TASK_TYPES if ROUTES[t][0] == "inference")
SHARED_TYPES = tuple(t for t in TASK_TYPES if ROUTES[t][0] != "inference")
#: The queue a worker of each shared kind takes from.
KIND_QUEUES = {kind: queue for kind, queue in ROUTES.values() if queue is not None}

#: The task type of a worker probe (docs/coordinator.md, "Probes"): the Coordinator routes one
#: to each alive, undrained worker of PROBED_KINDS through its own queue, and the worker runs
#: it as any task, from its host: the web worker one search and a one-token summary, an
#: inference worker one token of its model. Not a type POST /route takes (not in ROUTES).
PROBE_TYPE = "probe"
#: What a probe searches for and asks the model.
PROBE_PROMPT = "coordinator probe"
#: The kinds of worker that are probed: those whose programs answer probes (worker_web.py,
#: worker_infer.py).
PROBED_KINDS = ("web", "inference")

#: tasks.worker while a shared-queue task waits for any worker of its kind.
DEFAULT_WORKER = "default"
#: tasks.worker once a web worker wrote the result, whichever host it ran on.
WEB_RESULT_WORKER = "web-worker"


def inference_queue(device: str, worker_id: str) -> str:
    """An inference worker's own queue, e.g. ``tasks:cpu:macbookair``."""
    return f"tasks:{device}:{worker_id}"


def processing_list(worker_id: str) -> str:
    """The Redis list holding the ids a worker took and has not finished."""
    return f"processing:{worker_id}"


def drain_hint(worker_id: str) -> str:
    """The Redis key the Coordinator sets, for a heartbeat TTL, when it drains a worker: a
    worker that sees it between two takes heartbeats at once, and so learns of the drain in
    about a second instead of at its next heartbeat. Only a hint: the workers table is the
    record, and the heartbeat answer is what the worker follows; a lost hint costs only the
    wait for that heartbeat."""
    return f"drain:{worker_id}"


# -- worker tokens -----------------------------------------------------------------------------

WORKER_TOKEN_PREFIX = "worker."


def worker_token(key: str, worker_id: str) -> str:
    """The API token of one worker id: ``worker.<id>.<HMAC-SHA256(key, id)>``.

    The Coordinator holds ``key`` (COORDINATOR_WORKER_TOKEN_KEY) and checks a token by
    deriving it again, so it needs no list of tokens and a new worker needs no change on the
    Coordinator; Ansible derives each worker's token from the same key and writes it only to
    that worker's host. A token names its worker, and is accepted only for that worker's
    registration, heartbeats and goodbye; without the key, one worker's token says nothing
    about another's."""
    mac = hmac.new(key.encode(), f"worker-token:{worker_id}".encode(), hashlib.sha256)
    return f"{WORKER_TOKEN_PREFIX}{worker_id}.{mac.hexdigest()}"


def token_worker(key: str, token: str) -> str | None:
    """The worker id a token was made for with ``key``, or None for any other text."""
    if not token.startswith(WORKER_TOKEN_PREFIX) or token.count(".") < 2:
        return None
    worker_id = token[len(WORKER_TOKEN_PREFIX):token.rindex(".")]
    expected = worker_token(key, worker_id)
    return worker_id if hmac.compare_digest(token.encode(), expected.encode()) else None


# -- worker database logins ----------------------------------------------------------------

#: The PostgreSQL group role holding what a worker may do (docs/design.md, "Privileges"):
#: read `tasks`, claim a queued task, write the result of its own claim. Each worker host
#: logs in as its own member of it.
WORKER_DB_GROUP = "coordinator_workers"
WORKER_DB_ROLE_PREFIX = "worker_"
_ROLE_UNSAFE = re.compile(r"[^a-z0-9_]")


def worker_db_role(host: str) -> str:
    """The PostgreSQL login of one worker host: ``worker_<host>``, lower-cased, every other
    character than a letter, digit or ``_`` made ``_``, at most 63 bytes (PostgreSQL's
    limit); e.g. ``worker_lab_worker_fast`` for ``lab-worker-fast``."""
    return (WORKER_DB_ROLE_PREFIX + _ROLE_UNSAFE.sub("_", host.lower()))[:63]


def worker_db_password(key: str, host: str) -> str:
    """The password of ``worker_db_role(host)``, derived from ``key`` so that one vault
    secret serves any number of hosts; Ansible sets it on the database host and writes it
    only to that worker host. Another key (a rotation) gives every host a new one."""
    return hmac.new(key.encode(), f"worker-db:{host}".encode(), hashlib.sha256).hexdigest()


# -- libpq connection strings (PG_DSN) ---------------------------------------------------------


def libpq_escape(value: str) -> str:
    """A libpq keyword/value's text between its single quotes: backslash and quote escaped."""
    return value.replace("\\", "\\\\").replace("'", "\\'")


def libpq_quote(value: str) -> str:
    """A libpq keyword/value: single-quoted, backslash and quote escaped."""
    return "'" + libpq_escape(value) + "'"


def pg_dsn(host: str, port: int | str, dbname: str, user: str, password: str,
           ssl_root_cert: str = "") -> str:
    """The libpq DSN of a Coordinator's or a worker's login (their PG_DSN); with
    ``ssl_root_cert`` (the cluster CA's certificate on the host) TLS is required and the
    server's certificate must name ``host`` (verify-full). ``host`` may list several hosts
    (``a,b``, a primary and its standbys, docs/scaling.md): libpq then takes the first that
    accepts writes (``target_session_attrs=read-write``)."""
    dsn = (f"host={host} port={port} dbname={dbname} user={user} "
           f"password={libpq_quote(str(password))}")
    if "," in str(host):
        dsn += " target_session_attrs=read-write"
    if ssl_root_cert:
        dsn += f" sslmode=verify-full sslrootcert={libpq_quote(ssl_root_cert)}"
    return dsn


# -- what each worker host may take (its grant) ----------------------------------------------

#: The table of the grants (docs/design.md, "Privileges"): one row per worker host's login,
#: the queues its workers take from, their ids and the WORKER_HOST they write. The schema's
#: guard holds every write of a worker login to its row; the postgresql_access role writes
#: the rows, from the same derivation as the Redis users (``worker_grants``). Both create the
#: table, whichever comes first (on a first install the role runs before the Coordinator
#: makes its schema), as the owner of the schema.
WORKER_GRANTS_TABLE = "worker_grants"
WORKER_GRANTS_DDL = f"""CREATE TABLE IF NOT EXISTS {WORKER_GRANTS_TABLE} (
    login        name PRIMARY KEY,
    host         text NOT NULL,
    worker_hosts text[] NOT NULL,
    queues       text[] NOT NULL,
    worker_ids   text[] NOT NULL
)"""
#: Make the table hold exactly the grants of ``%(grants)s`` (JSON: a list of {login, host,
#: worker_hosts, queues, worker_ids}); answers ``changes``, the rows it inserted, changed or
#: deleted (0 when the table already held them).
WORKER_GRANTS_WRITE_SQL = f"""WITH wanted AS (
    SELECT * FROM jsonb_to_recordset(%(grants)s::jsonb)
        AS g(login name, host text, worker_hosts text[], queues text[], worker_ids text[])
), dropped AS (
    DELETE FROM {WORKER_GRANTS_TABLE} AS t
     WHERE NOT EXISTS (SELECT FROM wanted w WHERE w.login = t.login)
    RETURNING t.login
), written AS (
    INSERT INTO {WORKER_GRANTS_TABLE} AS t (login, host, worker_hosts, queues, worker_ids)
    SELECT login, host, worker_hosts, queues, worker_ids FROM wanted
    ON CONFLICT (login) DO UPDATE
       SET host = EXCLUDED.host, worker_hosts = EXCLUDED.worker_hosts,
           queues = EXCLUDED.queues, worker_ids = EXCLUDED.worker_ids
     WHERE (t.host, t.worker_hosts, t.queues, t.worker_ids) IS DISTINCT FROM
           (EXCLUDED.host, EXCLUDED.worker_hosts, EXCLUDED.queues, EXCLUDED.worker_ids)
    RETURNING t.login
)
SELECT (SELECT count(*) FROM dropped) + (SELECT count(*) FROM written) AS changes"""


class WorkerGrantError(ValueError):
    """An inventory the grants cannot be derived from; the message names the host and the
    fix."""


def worker_grants(groups: Mapping[str, Sequence[str]], hostvars: Mapping[str, Any],
                  worker_groups: Iterable[str],
                  keep_hosts: Iterable[str] = ()) -> list[dict[str, Any]]:
    """What each host of ``worker_groups`` may take, the one derivation behind its Redis user
    and its PostgreSQL grant: {host, queues, worker_ids, worker_hosts}, sorted by host, from
    the ``worker_status`` records it published (the worker role's ``tasks_from: status``,
    which site.yml and migrate-web.yml run on every host first); ``worker_hosts`` are the
    WORKER_HOST values its workers write. Workers declared absent get nothing, except on
    ``keep_hosts`` (a web worker being moved away keeps its queue until it is stopped; those
    hosts are granted even outside the groups)."""
    keep = list(keep_hosts or ())
    hosts = sorted({h for g in worker_groups for h in groups.get(g) or ()} | set(keep))
    grants = []
    for host in hosts:
        records = hostvars[host].get("worker_status")
        if records is None:
            raise WorkerGrantError(
                f"{host} published no worker records (worker_status): run the worker role's "
                "`tasks_from: status` on every worker host before the redis and "
                "postgresql_access roles (site.yml and migrate-web.yml do), or set their "
                "grants (redis_workers, postgresql_access_workers)")
        kept = [r for r in records
                if host in keep or (r.get("state") or "present") == "present"]
        grants.append({
            "host": host,
            "queues": sorted({q for r in kept for q in r.get("queues") or ()}),
            "worker_ids": sorted({r["worker_id"] for r in kept}),
            "worker_hosts": sorted({r["host"] for r in kept if r.get("host")}),
        })
    return grants


# -- Redis users ------------------------------------------------------------------------------

#: The Redis ACL user of each worker host is ``worker_<host>`` (like its PostgreSQL login);
#: the Coordinator (its Reaper included) has its own; the redis role's own admin user runs
#: ``ACL LOAD`` and health checks; ``default`` is off (docs/threat-model.md).
WORKER_REDIS_USER_PREFIX = "worker_"
COORDINATOR_REDIS_USER = "coordinator"
REDIS_ADMIN_USER = "admin"
#: What a worker sends (files/worker_base.py): PING (start-up check), LLEN, LPOS, RPUSH,
#: LINDEX, BLMOVE and LREM on its own queues and its own processing lists, EXISTS on its
#: drain hint (read only). AUTH and HELLO need no grant; CLIENT SETINFO, which the client
#: library tries, may be refused.
WORKER_REDIS_COMMANDS = ("ping", "llen", "lpos", "rpush", "lindex", "blmove", "lrem", "exists")
#: What the Coordinator and its Reaper send (files/coordinator/): PING, LPUSH, LLEN, LRANGE,
#: MULTI/EXEC (the Reaper's snapshot; DISCARD if it is abandoned), CLIENT SETNAME, and SET
#: and DEL of the drain hints.
COORDINATOR_REDIS_COMMANDS = ("ping", "llen", "lpush", "lrange", "multi", "exec", "discard",
                              "client|setname", "set", "del")
#: The key patterns of the Coordinator's user: every queue, processing list and drain hint.
COORDINATOR_REDIS_KEYS = ("tasks:*", "processing:*", "drain:*")


def worker_redis_user(host: str) -> str:
    """The Redis ACL user of one worker host: ``worker_<host>``, the same name as its
    PostgreSQL login (``worker_db_role``), e.g. ``worker_lab_worker_fast``."""
    return WORKER_REDIS_USER_PREFIX + _ROLE_UNSAFE.sub("_", host.lower())


def worker_redis_password(key: str, host: str) -> str:
    """The password of ``worker_redis_user(host)``, derived from ``key`` (the inventories use
    the same vault key as ``worker_db_password``; the label differs, so neither password says
    anything about the other). Ansible puts its SHA-256 in the Redis ACL file and the
    password itself only on that worker host."""
    return hmac.new(key.encode(), f"worker-redis:{host}".encode(), hashlib.sha256).hexdigest()


def coordinator_redis_password(key: str) -> str:
    """The password of the Coordinator's Redis user, derived from ``key`` (the Redis admin
    password): the Coordinator's environment then holds nothing that logs in as admin."""
    return hmac.new(key.encode(), b"coordinator-redis", hashlib.sha256).hexdigest()


def worker_redis_keys(queues: Iterable[str], worker_ids: Iterable[str]) -> list[str]:
    """The keys a worker host's Redis user may touch: its workers' queues and their own
    processing lists, sorted, each once."""
    return sorted(set(queues) | {processing_list(worker_id) for worker_id in worker_ids})


def worker_redis_read_keys(worker_ids: Iterable[str]) -> list[str]:
    """The keys a worker host's Redis user may only read: its workers' drain hints."""
    return sorted({drain_hint(worker_id) for worker_id in worker_ids})


# -- Redis over TLS (docs/tls.md) -----------------------------------------------------------

#: The environment variable naming the CA certificate a Redis client verifies the server's
#: against; set, the client speaks TLS only (the redis role's redis_tls_cert_file).
REDIS_CA_FILE_ENV = "REDIS_CA_FILE"


def redis_tls_options(ca_file: str | None) -> dict[str, object]:
    """redis-py connection options for a Redis serving TLS: the server's certificate must
    come from ``ca_file`` (the cluster CA's) and name the host connected to. No ``ca_file``:
    plain TCP, no options."""
    if not ca_file:
        return {}
    return {"ssl": True, "ssl_ca_certs": ca_file, "ssl_cert_reqs": "required",
            "ssl_check_hostname": True, "ssl_min_version": ssl.TLSVersion.TLSv1_2}


def redis_tls_problem(error: str, ca_file: str | None) -> str | None:
    """What to fix when a Redis connection failed with ``error`` for a TLS reason, or None
    when the error says nothing of TLS."""
    lowered = error.lower()
    if ca_file and "no such file or directory" in lowered:
        return (f"{REDIS_CA_FILE_ENV} {ca_file} does not exist: run site.yml, which puts the "
                "cluster CA's certificate there (docs/tls.md)")
    if "certificate verify failed" in lowered:
        return (f"the server's certificate is not from the CA in {REDIS_CA_FILE_ENV} "
                f"({ca_file}) or does not name REDIS_HOST: use the cluster CA's ca.crt, and "
                "as REDIS_HOST the address site.yml gave the Redis host's certificate "
                "(docs/tls.md)")
    if ca_file and "timeout connecting" in lowered:
        # A plain Redis reads the TLS greeting as the start of a command and waits for more.
        return (f"{REDIS_CA_FILE_ENV} is set, and a Redis without TLS never answers the TLS "
                "handshake: run site.yml so the redis role gives it the cluster's "
                f"certificate, or unset {REDIS_CA_FILE_ENV}; else check REDIS_HOST/REDIS_PORT "
                "and the firewall")
    if not ca_file and ("reset by peer" in lowered or "closed by server" in lowered):
        return (f"this Redis may serve TLS only: set {REDIS_CA_FILE_ENV} to the cluster CA's "
                "certificate (docs/tls.md)")
    return None


#: The environment variable naming the CA certificate a client of the Coordinator's API
#: verifies its certificate against (an https:// COORDINATOR_URL; the cluster CA's).
COORDINATOR_CA_FILE_ENV = "COORDINATOR_CA_FILE"

#: The environment variable holding the digest of the code and requirements the worker role
#: shipped: the worker logs it at start, and the environment that holds it changes with the
#: code, which restarts the worker.
WORKER_BUILD_ENV = "WORKER_BUILD"


def coordinator_url_problem(url: str, ca_file: str | None, url_name: str = "COORDINATOR_URL",
                            ca_name: str = COORDINATOR_CA_FILE_ENV) -> str | None:
    """What is wrong with a client's Coordinator URL and CA file together, or None: a CA
    file says the Coordinator serves HTTPS, so an http:// URL would send the tokens in clear
    to a server that answers nothing but TLS. ``url_name`` and ``ca_name`` are the names the
    client's user sets them by (environment variables, or a module's options)."""
    if ca_file and url.startswith("http://"):
        return (f"{url_name} {url} is http://, and {ca_name} is set: the Coordinator serves "
                "HTTPS, use https://" + url.removeprefix("http://"))
    return None


def coordinator_tls_problem(url: str, error: str, ca_file: str | None,
                            ca_name: str = COORDINATOR_CA_FILE_ENV) -> str | None:
    """What to fix when a request to the Coordinator at ``url`` failed with ``error`` for a
    TLS reason, or None when the error says nothing of TLS."""
    lowered = error.lower()
    if ca_file and ("invalid path" in lowered or "no such file" in lowered):
        return (f"{ca_name} {ca_file} does not exist: run site.yml, which "
                "puts the cluster CA's certificate there (docs/tls.md)")
    if url.startswith("http://") and ("closed connection without response" in lowered
                                      or "remotedisconnected" in lowered
                                      or "reset by peer" in lowered):
        return (f"the Coordinator at {url} closed the connection without an answer, as one "
                "that serves HTTPS only does: use https:// and the cluster CA's certificate "
                f"({ca_name}, docs/tls.md)")
    if "certificate verify failed" in lowered:
        where = ca_file or "the system's CA store"
        return (f"the Coordinator's certificate is not from the CA in {where} or does not "
                f"name the host of {url}: use the cluster CA's ca.crt, and the address "
                "site.yml gave the Coordinator's certificate (docs/tls.md)")
    if url.startswith("https://") and "wrong version number" in lowered:
        return (f"the Coordinator at {url} does not speak TLS: run site.yml so the "
                "coordinator role gives it the cluster's certificate, or use http://")
    return None


# -- model names, as Ollama matches them ------------------------------------------------------

DEFAULT_REGISTRY = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"


def model_name_parts(name: str) -> tuple[str, str, str, str]:
    """A model name's host, namespace, model and tag, spelt as given.

    Follows Ollama's own parsing (types/model/name.go): the tag is what follows the last ``:``
    only when no ``/`` comes after it (so ``localhost:5000/x/y`` has no tag), then the last
    three ``/``-separated parts are host, namespace and model; missing parts take Ollama's
    defaults (registry.ollama.ai, library, latest). Raises ValueError for what is no model
    name."""
    text = name.strip()
    tag = DEFAULT_TAG
    colon = text.rfind(":")
    if colon >= 0 and "/" not in text[colon:]:
        text, tag = text[:colon], text[colon + 1:]
    parts = text.split("/")
    if not text or not tag or len(parts) > 3 or not all(parts) or len(name.split()) != 1:
        raise ValueError(
            f"invalid model name {name!r}: expected [host/][namespace/]model[:tag], "
            "for example llama3.2:3b or hf.co/LiquidAI/LFM2.5-1.2B-JP-GGUF:Q4_K_M"
        )
    host, namespace, model = [*[DEFAULT_REGISTRY, DEFAULT_NAMESPACE][: 3 - len(parts)], *parts]
    return host, namespace, model, tag


def canonical_model_name(name: str) -> str:
    """A model name as Ollama compares it: ``host/namespace/model:tag`` (model_name_parts),
    lower-cased, as Ollama compares names case-insensitively. Raises ValueError for what is
    no model name."""
    host, namespace, model, tag = model_name_parts(name)
    return f"{host}/{namespace}/{model}:{tag}".lower()


def same_model(a: str, b: str) -> bool:
    """Whether two spellings name the same model (``llama3.2`` and ``llama3.2:latest``)."""
    try:
        return canonical_model_name(a) == canonical_model_name(b)
    except ValueError:
        return False


def has_model(names: Iterable[str], model: str) -> bool:
    """Whether ``model`` is among the model ``names`` an Ollama server lists."""
    return any(same_model(name, model) for name in names)


def find_model(name: str, tags: Mapping[str, Any]) -> dict[str, Any] | None:
    """The entry of ``GET /api/tags`` that is model ``name``, or None.

    Ollama lists ``name`` and ``model`` in short form (``llama3.2:latest``); both are compared
    in canonical form so any spelling of the same model matches.
    """
    wanted = canonical_model_name(name)
    for entry in tags.get("models") or []:
        listed = entry.get("model") or entry.get("name")
        if listed and canonical_model_name(listed) == wanted:
            return entry
    return None


def normalize_digest(value: str) -> str:
    """A pin as ``GET /api/tags`` lists digests: 64 lowercase hex digits, no ``sha256:``."""
    digest = value.strip().lower()
    if digest.startswith("sha256:"):
        digest = digest[len("sha256:"):]
    if len(digest) != 64 or any(char not in "0123456789abcdef" for char in digest):
        raise ValueError(f"digest must be 64 hex digits (optionally after sha256:), got {value!r}")
    return digest


def first_line(value: object, empty: str = "") -> str:
    """The first non-empty line of ``value``'s text, stripped: what a one-line message quotes
    of an error or an answer. For an exception without a message, its type's name; else
    ``empty`` when there is no such line (or ``value`` is None)."""
    for line in ("" if value is None else str(value)).splitlines():
        if line.strip():
            return line.strip()
    return type(value).__name__ if isinstance(value, BaseException) else empty
