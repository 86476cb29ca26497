"""Least privilege in Redis, against a real redis-server loaded with the ACL file the redis
role writes: the role's template rendered with its filters' lines, made from the records the
worker role's filter makes for two worker hosts (as site.yml feeds them). A worker host's user
runs every command the workers send on its own keys and is refused everything else with
Redis' own NOPERM; the Coordinator's user routes and reaps; `default` is off. The real
Coordinator and the real web worker run against it with the credentials the roles give them."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import coordinator_contract as contract
import jinja2
import pytest
import redis
import requests

from lab.processes import CoordinatorProcess
from lab.throwaway import ThrowawayPostgres, ThrowawayRedis
from tests.conftest import create_schema
from tests.filter_kit import REPO, cluster, redis_role
from tests.filter_kit import worker as worker_role

from .conftest import MODEL, TOKYO, WAITING, Tasks, WorkerFactory, wait_until

ADMIN_PASSWORD = "the-redis-admin-password"
KEY = "the-workers-key-from-the-vault"
WEB_HOST, OTHER_HOST = "lab-worker-slow", "lab-worker-fast"
DATABASE = "redis_acl"




def host_workers(host: str, web: bool) -> dict[str, Any]:
    """What the worker role resolves for ``host`` (inventory/home's worker_instances: web
    present only where ``web``), with its key-derived Redis user."""
    instances = [{"name": "inference-worker", "kind": "inference"},
                 {"name": "web-worker", "kind": "web", "state": "present" if web else "absent"}]
    return worker_role.worker_records(
        instances, node_name=host, node_address="127.0.0.1", base_env={}, worker_env={},
        db={"host": "127.0.0.1", "port": 5432, "name": "coordinator", "user": "c",
            "password": "p"},
        scripts={"web": "worker_web.py", "inference": "worker_infer.py"},
        default_device="cpu", label_prefix="x.", config_dir="/etc/w", launchd_dir="/l",
        log_dir="/log", redis={"password_key": KEY, "login_host": host})


def render_acl_file(hosts: dict[str, dict[str, Any]]) -> str:
    """The role's users.acl.j2, rendered with the lines its vars/main.yml asks the filter for,
    from the grants of the records each host published."""
    hostvars = {host: {"worker_status": resolved["records"]} for host, resolved in hosts.items()}
    groups = {"inference_workers": sorted(hosts), "web_workers": [WEB_HOST]}
    grants = redis_role.redis_worker_grants(groups, hostvars, ["web_workers", "inference_workers"])
    lines = redis_role.redis_acl_lines(grants, admin_user="admin", admin_password=ADMIN_PASSWORD,
                                       coordinator_user="coordinator", worker_password_key=KEY)
    template = (REPO / "roles" / "redis" / "templates" / "users.acl.j2").read_text()
    # Ansible's template module renders with trim_blocks.
    return jinja2.Environment(trim_blocks=True).from_string(template).render(
        redis__acl_lines=lines)


HOSTS = {WEB_HOST: host_workers(WEB_HOST, web=True),
         OTHER_HOST: host_workers(OTHER_HOST, web=False)}


@pytest.fixture(scope="module")
def acl_redis() -> Iterator[ThrowawayRedis]:
    rendered = render_acl_file(HOSTS)
    with ThrowawayRedis(ADMIN_PASSWORD, acl_lines=rendered.splitlines()) as server:
        yield server


def login(server: ThrowawayRedis, name: str, password: str) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=server.port, username=name, password=password,
                       decode_responses=True)


def worker_login(server: ThrowawayRedis, host: str) -> redis.Redis:
    env = HOSTS[host]["envs"]["inference-worker"]
    return login(server, env["REDIS_USERNAME"], env["REDIS_PASSWORD"])


def admin(server: ThrowawayRedis) -> redis.Redis:
    return login(server, contract.REDIS_ADMIN_USER, ADMIN_PASSWORD)


def noperm(call: Any) -> str:
    with pytest.raises(redis.exceptions.NoPermissionError) as refused:
        call()
    return str(refused.value)


NO_KEYS = "this user has no permissions to access one of the keys used as arguments"


def test_the_file_holds_hashes_only_and_redis_loaded_every_user(acl_redis):
    text = (acl_redis.root / "users.acl").read_text()
    passwords = [ADMIN_PASSWORD, contract.coordinator_redis_password(ADMIN_PASSWORD),
                 *(contract.worker_redis_password(KEY, host) for host in HOSTS)]
    assert not any(password in text for password in passwords)
    assert all(hashlib.sha256(p.encode()).hexdigest() in text for p in passwords)
    with admin(acl_redis) as client:
        assert sorted(client.acl_users()) == sorted([
            "admin", "coordinator", "default", "worker_lab_worker_fast",
            "worker_lab_worker_slow"])


def test_default_is_off(acl_redis):
    anonymous = redis.Redis(host="127.0.0.1", port=acl_redis.port)
    # NOAUTH, or (RESP3) HELLO refused before AUTH.
    with pytest.raises(redis.exceptions.AuthenticationError, match="authenticat"):
        anonymous.ping()
    # Not even the admin password logs in as default (requirepass-style AUTH <password>).
    as_default = redis.Redis(host="127.0.0.1", port=acl_redis.port, password=ADMIN_PASSWORD)
    with pytest.raises(redis.exceptions.AuthenticationError,
                       match="invalid username-password pair or user is disabled"):
        as_default.ping()


def test_a_worker_user_runs_what_the_workers_send_on_its_own_keys(acl_redis):
    env = HOSTS[WEB_HOST]["envs"]["web-worker"]
    own = contract.processing_list(env["WORKER_ID"])
    with worker_login(acl_redis, WEB_HOST) as client:
        # contract.WORKER_REDIS_COMMANDS, each as files/worker_base.py sends it.
        assert client.ping()
        assert client.llen(contract.WEB_QUEUE) == 0
        with admin(acl_redis) as root:
            root.lpush(contract.WEB_QUEUE, "id-1")
        assert client.blmove(contract.WEB_QUEUE, own, 1, "RIGHT", "LEFT") == "id-1"
        assert client.lindex(own, -1) == "id-1"
        assert client.lpos(own, "id-1") == 0
        assert client.rpush(own, "id-2") == 2
        pipe = client.pipeline(transaction=False)
        pipe.lrem(own, 0, "id-1").lrem(own, 0, "id-2").llen(own)
        assert pipe.execute() == [1, 1, 0]
        own_queue = contract.inference_queue("cpu", WEB_HOST)
        assert client.llen(own_queue) == 0
        # Its drain hint, read only: the Coordinator's to set.
        assert client.exists(contract.drain_hint(env["WORKER_ID"])) == 0


def test_a_worker_user_is_refused_everything_else(acl_redis):
    with worker_login(acl_redis, WEB_HOST) as client:
        assert noperm(client.flushall) == (
            "this user has no permissions to run the 'flushall' command")
        assert noperm(lambda: client.config_set("maxmemory", "1")) == (
            "this user has no permissions to run the 'config|set' command")
        assert noperm(lambda: client.keys("*")) == (
            "this user has no permissions to run the 'keys' command")
        # Another worker's processing list and queue.
        other_id = HOSTS[OTHER_HOST]["envs"]["inference-worker"]["WORKER_ID"]
        assert noperm(lambda: client.llen(contract.processing_list(other_id))) == NO_KEYS
        assert noperm(lambda: client.blmove(contract.inference_queue("cpu", other_id),
                                            contract.processing_list(other_id), 1)) == NO_KEYS
        # Its own list, but a command no worker sends.
        own_id = HOSTS[WEB_HOST]["envs"]["web-worker"]["WORKER_ID"]
        own = contract.processing_list(own_id)
        assert noperm(lambda: client.delete(own)) == (
            "this user has no permissions to run the 'del' command")
        # Its own drain hint is read only; another worker's, not even that.
        assert noperm(lambda: client.rpush(contract.drain_hint(own_id), "x")) == NO_KEYS
        assert noperm(lambda: client.exists(contract.drain_hint(other_id))) == NO_KEYS
    # A host without a web worker cannot take from tasks:web.
    with worker_login(acl_redis, OTHER_HOST) as client:
        assert noperm(lambda: client.llen(contract.WEB_QUEUE)) == NO_KEYS


def test_the_coordinator_user_routes_and_reaps_and_nothing_more(acl_redis):
    name, password = (cluster.coordinator_redis_login(ADMIN_PASSWORD)[k]
                      for k in ("name", "password"))
    with login(acl_redis, name, password) as client:
        assert client.client_setname("coordinator")
        assert client.lpush(contract.WEB_QUEUE, "id-a") == 1
        pipe = client.pipeline(transaction=True)
        pipe.llen(contract.WEB_QUEUE).lrange(contract.WEB_QUEUE, 0, -1)
        pipe.llen(contract.processing_list("web-worker-x"))
        assert pipe.execute() == [1, ["id-a"], 0]
        # A worker's drain hint: set for a while, then removed.
        assert client.set(contract.drain_hint("web-worker-x"), "1", ex=15)
        assert client.delete(contract.drain_hint("web-worker-x")) == 1
        assert noperm(client.flushall).endswith("'flushall' command")
        assert noperm(lambda: client.llen("some:other:key")) == NO_KEYS
        assert noperm(lambda: client.rpop(contract.WEB_QUEUE)).endswith("'rpop' command")
    with admin(acl_redis) as root:
        root.delete(contract.WEB_QUEUE)


@pytest.fixture(scope="module")
def acl_dsn(pg: ThrowawayPostgres) -> str:
    """A database of its own: the session Coordinator's Reaper would push this module's
    queued tasks into its own Redis."""
    dsn = pg.database(DATABASE)
    create_schema(dsn)
    return dsn


@pytest.fixture
def acl_coordinator(acl_dsn: str, acl_redis: ThrowawayRedis,
                    tmp_path: Path) -> Iterator[CoordinatorProcess]:
    login_ = cluster.coordinator_redis_login(ADMIN_PASSWORD)
    with CoordinatorProcess(acl_dsn, acl_redis, tmp_path / "coordinator.log",
                            redis_login=(login_["name"], login_["password"]),
                            heartbeat_ttl=2, repush_grace=1) as coordinator:
        yield coordinator


def web_worker_env(host: str, dsn: str, server: ThrowawayRedis, coordinator: CoordinatorProcess,
                   searxng: Any, ollama: Any) -> dict[str, str]:
    """The web worker's environment as the worker role writes it for ``host`` (its own Redis
    user and password), pointed at this test's servers."""
    role_env = HOSTS[host]["envs"]["web-worker"]
    return {"PATH": os.environ["PATH"], "REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(server.port),
            "REDIS_USERNAME": role_env["REDIS_USERNAME"],
            "REDIS_PASSWORD": role_env["REDIS_PASSWORD"], "PG_DSN": dsn,
            "SEARXNG_URL": searxng.url, "OLLAMA_HOST": ollama.url, "OLLAMA_MODEL": MODEL,
            "COORDINATOR_URL": coordinator.url, "WORKER_ID": role_env["WORKER_ID"],
            "WORKER_HOST": "127.0.0.1", "SHUTDOWN_TIMEOUT": "30"}


def test_the_real_coordinator_and_web_worker_with_their_own_users(
        pg, acl_redis, acl_dsn, acl_coordinator, start_worker: WorkerFactory, searxng, ollama):
    tasks = Tasks(pg, acl_dsn)
    # Routed while no web worker runs; then Redis loses the id: the Reaper (MULTI, LLEN,
    # LRANGE as the Coordinator's user) finds it missing and pushes it again.
    response = requests.post(f"{acl_coordinator.url}/route", timeout=10,
                             json={"prompt": TOKYO, "task_type": "web_search"})
    assert response.status_code == 201, response.text
    task_id = response.json()["task_id"]
    with admin(acl_redis) as root:
        assert root.lrange(contract.WEB_QUEUE, 0, -1) == [task_id]
        root.delete(contract.WEB_QUEUE)
        wait_until(lambda: root.lrange(contract.WEB_QUEUE, 0, -1) == [task_id], 30,
                   "the Reaper to push the lost id again")
    env = web_worker_env(WEB_HOST, acl_dsn, acl_redis, acl_coordinator, searxng, ollama)
    worker = start_worker(env)
    worker.wait_for(WAITING)
    assert tasks.wait_status(task_id, "done")["worker_host"] == "127.0.0.1"
    # A change of users is an ACL LOAD (the role's handler), not a restart: the running worker
    # and Coordinator reconnect and go on.
    more = {**HOSTS, "lab-ai-core": host_workers("lab-ai-core", web=False)}
    (acl_redis.root / "users.acl").write_text(render_acl_file(more))
    with admin(acl_redis) as root:
        assert root.execute_command("ACL", "LOAD") in ("OK", b"OK", True)
        assert "worker_lab_ai_core" in root.acl_users()
    response = requests.post(f"{acl_coordinator.url}/route", timeout=10,
                             json={"prompt": TOKYO, "task_type": "web_search"})
    assert response.status_code == 201, response.text
    assert tasks.wait_status(response.json()["task_id"], "done", timeout=30)["status"] == "done"
    assert "NOPERM" not in worker.output() and "NOPERM" not in acl_coordinator.process.output()
    tasks.conn.close()


def test_a_worker_whose_user_predates_drain_hints_says_so_once_and_serves_on(
        pg, acl_redis, acl_dsn, acl_coordinator, start_worker: WorkerFactory, searxng, ollama):
    # The ACL of an older redis role: the same user without EXISTS. The worker's first task
    # is queued before it starts, so its first look at the hint is in the LREM round trip.
    env = web_worker_env(WEB_HOST, acl_dsn, acl_redis, acl_coordinator, searxng, ollama)
    user = env["REDIS_USERNAME"]
    tasks = Tasks(pg, acl_dsn)
    with admin(acl_redis) as root:
        root.execute_command("ACL", "SETUSER", user, "-exists")
    try:
        routed = [requests.post(f"{acl_coordinator.url}/route", timeout=10,
                                json={"prompt": TOKYO, "task_type": "web_search"})
                  for _ in range(2)]
        worker = start_worker(env)
        for response in routed:
            assert response.status_code == 201, response.text
            assert tasks.wait_status(response.json()["task_id"], "done")["status"] == "done"
        hint = contract.drain_hint(env["WORKER_ID"])
        refusals = [line for line in worker.output().splitlines()
                    if f"Redis refused to read {hint}" in line]
        assert len(refusals) == 1, worker.output()
        assert refusals[0].endswith(
            "its ACL predates drain hints (run site.yml); a drain reaches this worker with "
            "its next heartbeat")
        assert "LREM of task" not in worker.output()
    finally:
        with admin(acl_redis) as root:
            assert root.execute_command("ACL", "LOAD") in ("OK", b"OK", True)
        tasks.conn.close()


def test_a_worker_without_the_queue_fails_its_check_naming_the_user_and_the_fix(
        acl_redis, acl_dsn, acl_coordinator, start_worker: WorkerFactory, searxng, ollama):
    # OTHER_HOST's user, which has no tasks:web, running a web worker.
    env = web_worker_env(OTHER_HOST, acl_dsn, acl_redis, acl_coordinator, searxng, ollama)
    env["REDIS_USERNAME"] = HOSTS[OTHER_HOST]["envs"]["inference-worker"]["REDIS_USERNAME"]
    env["REDIS_PASSWORD"] = HOSTS[OTHER_HOST]["envs"]["inference-worker"]["REDIS_PASSWORD"]
    worker = start_worker(env)
    assert worker.wait_exit() == 1
    assert (f"Redis check FAILED at 127.0.0.1:{acl_redis.port}: user 'worker_lab_worker_fast' "
            f"may not use its keys: {NO_KEYS}; fix: run site.yml") in worker.output()
    wrong = {**env, "REDIS_PASSWORD": "not-the-password"}
    worker = start_worker(wrong)
    assert worker.wait_exit() == 1
    assert ("user 'worker_lab_worker_fast' refused: invalid username-password pair or user is "
            "disabled.; fix: check REDIS_USERNAME and REDIS_PASSWORD") in worker.output()


def test_the_handler_quoting_passes_any_password_to_redis_cli():
    # The role's ACL LOAD handler writes AUTH on redis-cli's standard input (the command line
    # is what -vvv prints), each argument through the filter redis_cli_quote.
    password = 'a "quoted" \\ pass\'word with spaces'
    digest = hashlib.sha256(password.encode()).hexdigest()
    lines = ["user default off -@all", f"user admin on #{digest} ~* &* +@all"]
    with ThrowawayRedis(password, acl_lines=lines) as server:
        line = (f"AUTH {redis_role.redis_cli_quote('admin')} "
                f"{redis_role.redis_cli_quote(password)}\nACL LOAD\n")
        done = subprocess.run(["redis-cli", "-p", str(server.port), "--no-auth-warning"],
                              input=line, capture_output=True, text=True, timeout=10,
                              check=True)
        assert done.stdout == "OK\nOK\n"
        wrong = line.replace(redis_role.redis_cli_quote(password),
                             redis_role.redis_cli_quote(password + "x"))
        done = subprocess.run(["redis-cli", "-p", str(server.port), "--no-auth-warning"],
                              input=wrong, capture_output=True, text=True, timeout=10)
        assert "WRONGPASS" in done.stdout + done.stderr
