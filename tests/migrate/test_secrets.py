"""The lab's secrets stay secret: PostgreSQL, Redis and the Coordinator take clients only
over TLS from the cluster CA, rotation gives new secrets, nothing crosses the lab network in
clear, and no secret appears in the -vvv output of any playbook the lab tests ran.

Runs last (conftest.ORDER): the first converge, every move, every fault case and the README
steps, all at -vvv, the most Ansible ever prints (module arguments, loop items, commands).
"""

from __future__ import annotations

import json
import os
import re
import secrets as random_secrets
import subprocess
import uuid
from urllib.parse import urlsplit

import coordinator_contract as contract
import pytest
import requests
import yaml
from coordinator_sql import SQL

from coordinator.pages import PREFIX, STYLESHEET
from lab import capture, lab, throwaway

# Connects with the DSN on standard input; prints "ok" or PostgreSQL's first error line.
LOGIN = ("import sys, psycopg2\n"
         "try:\n    psycopg2.connect(sys.stdin.read(), connect_timeout=5).close(); print('ok')\n"
         "except psycopg2.Error as e:\n    print(str(e).strip().splitlines()[0])\n")


# Logs in to Redis with "user password host ca_file" on standard input (over TLS with that
# CA; "-": plain TCP); prints "ok" or the error.
REDIS_LOGIN = ("import sys, redis\nuser, password, host, ca = sys.stdin.read().split()\n"
               "tls = {} if ca == '-' else {'ssl': True, 'ssl_ca_certs': ca}\n"
               "try:\n    redis.Redis(host=host, username=user, password=password,\n"
               "                socket_timeout=5, **tls).ping(); print('ok')\n"
               "except redis.RedisError as e:\n    print(e)\n")


# Runs one statement with the DSN, SQL and parameters given as JSON on standard input;
# prints "claimed", "not claimed" or PostgreSQL's first error line.
CLAIM = ("import json, sys, psycopg2\nargs = json.load(sys.stdin)\n"
         "try:\n    conn = psycopg2.connect(args['dsn'], connect_timeout=5)\n"
         "    with conn, conn.cursor() as cur:\n"
         "        cur.execute(args['sql'], args['params'])\n"
         "        print('claimed' if cur.rowcount == 1 else 'not claimed')\n"
         "except psycopg2.Error as e:\n    print(str(e).strip().splitlines()[0])\n")


def redis_login_from(node, user: str, password: str, host: str, ca_file: str = "") -> str:
    return node.sh(f"{node.worker_base_dir}/venv/bin/python", "-c", REDIS_LOGIN,
                   input_text=f"{user} {password} {host} {ca_file or node.cluster_ca_file}",
                   check=True).stdout.strip()


def env_value(env: str, name: str) -> str:
    return next(line.split("=", 1)[1].strip().strip('"') for line in env.splitlines()
                if line.startswith(f"{name}="))


def login_from(node, dsn: str) -> str:
    return node.sh(f"{node.worker_base_dir}/venv/bin/python", "-c", LOGIN, input_text=dsn,
                   check=True).stdout.strip()


def server_certificate_serial(node, address: str, port: int) -> str:
    """The serial of the certificate the server at ``address``:``port`` serves (PostgreSQL's
    5432 after its own STARTTLS, Redis' TLS from the first byte), asked from ``node``."""
    starttls = "-starttls postgres " if port == 5432 else ""
    shown = node.sh("sh", "-c", f"openssl s_client {starttls}-connect {address}:{port} "
                    "</dev/null 2>/dev/null | openssl x509 -noout -serial", check=True)
    return shown.stdout.strip()


def make_other_ca(node) -> str:
    """A self-signed CA certificate made on ``node``: not the cluster's."""
    node.sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-nodes", "-keyout", "/tmp/other-ca.key", "-out", "/tmp/other-ca.crt", "-days", "1",
            "-subj", "/CN=another CA", check=True)
    return "/tmp/other-ca.crt"


def test_postgresql_takes_workers_only_over_tls_with_the_cluster_cas_certificate(cluster) -> None:
    """The worker's DSN requires TLS and a certificate for the database's address from the
    cluster CA (verify-full); without TLS no pg_hba.conf line admits it, and a client that
    trusts another CA, or none, is refused before it sends its password."""
    web_host = cluster.web_host()
    node = cluster.nodes[web_host]
    address = cluster.nodes["lab-ai-core"].address
    dsn = env_value(node.worker_env(), "PG_DSN")
    ca_file = node.cluster_ca_file
    assert dsn.endswith(f" sslmode=verify-full sslrootcert='{ca_file}'")
    assert login_from(node, dsn) == "ok"
    login = contract.worker_db_role(web_host)
    assert login_from(node, dsn.replace("sslmode=verify-full", "sslmode=disable")) == (
        f'connection to server at "{address}", port 5432 failed: FATAL:  no pg_hba.conf entry '
        f'for host "{node.address}", user "{login}", database "coordinator", no encryption')
    other = dsn.replace(ca_file, make_other_ca(node))
    assert login_from(node, other) == (
        f'connection to server at "{address}", port 5432 failed: SSL error: certificate '
        'verify failed')
    none = dsn.replace(ca_file, "/tmp/no-such-ca.crt")
    assert login_from(node, none) == (
        f'connection to server at "{address}", port 5432 failed: root certificate file '
        '"/tmp/no-such-ca.crt" does not exist')


def test_a_worker_hosts_own_login_cannot_take_or_sign_for_another_hosts_task(cluster) -> None:
    """A compromised worker host (docs/threat-model.md, B) with its own credentials, its env
    file's PG_DSN: its login may not claim a task queued for another host's worker, nor claim
    a task of its own queue naming another host's worker, so no row can say another host did
    the work. The database refuses, naming the login, the task and the queue, and the tasks
    stay queued for their own workers."""
    web_host = cluster.web_host()
    node, core = cluster.nodes[web_host], cluster.nodes["lab-ai-core"]
    dsn = env_value(node.worker_env(), "PG_DSN")
    login = contract.worker_db_role(web_host)
    victim = core.worker_env("inference-worker")
    victim_id = env_value(victim, "WORKER_ID")
    victim_queue = contract.inference_queue(env_value(victim, "WORKER_DEVICE"), victim_id)
    theirs, ours = str(uuid.uuid4()), str(uuid.uuid4())

    def psql(sql: str) -> str:
        return core.sh("psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d",
                       "coordinator", "-c", sql, user="postgres", check=True).stdout.strip()

    def claim(task_id: str, queue: str) -> str:
        params = {"id": task_id, "claim": str(uuid.uuid4()), "worker_id": victim_id,
                  "host": core.address, "queues": [queue]}
        return node.sh(f"{node.worker_base_dir}/venv/bin/python", "-c", CLAIM, check=True,
                       input_text=json.dumps({"dsn": dsn, "sql": SQL.CLAIM_ASYNC_COMMIT,
                                              "params": params})).stdout.strip()

    # Queued with no id in Redis, dispatched "in an hour" so that the Reaper, which re-pushes
    # queued tasks dispatched longer than COORDINATOR_REPUSH_GRACE ago, leaves them be.
    psql("INSERT INTO tasks (id, task_type, prompt, queue, worker, dispatched_at) VALUES "
         f"('{theirs}', 'chat', 'not yours', '{victim_queue}', '{victim_id}', "
         "clock_timestamp() + interval '1 hour'), "
         f"('{ours}', 'web_search', 'yours', '{contract.WEB_QUEUE}', "
         f"'{contract.DEFAULT_WORKER}', clock_timestamp() + interval '1 hour')")
    try:
        assert claim(theirs, victim_queue).startswith(
            f"permission denied: {login} may not take task {theirs} from queue {victim_queue}: "
            f"host {web_host} serves ")
        assert claim(ours, contract.WEB_QUEUE).startswith(
            f"permission denied: {login} may not write task {ours} (queue {contract.WEB_QUEUE}) "
            f"as worker {victim_id}: host {web_host} runs ")
        assert psql("SELECT string_agg(status || ' ' || coalesce(claimed_by, 'nobody'), ', ')"
                    f" FROM tasks WHERE id IN ('{theirs}', '{ours}')") == (
            "queued nobody, queued nobody")
    finally:
        psql(f"DELETE FROM task_transitions WHERE task_id IN ('{theirs}', '{ours}'); "
             f"DELETE FROM tasks WHERE id IN ('{theirs}', '{ours}')")


def test_redis_serves_only_tls_with_the_cluster_cas_certificate(cluster) -> None:
    """Redis' one TCP port speaks TLS (the plain port is closed); the workers verify its
    certificate against the cluster CA, and a client without TLS, or trusting another CA, is
    refused before it sends its password."""
    web_host = cluster.web_host()
    node, core = cluster.nodes[web_host], cluster.nodes["lab-ai-core"]
    env = node.worker_env()
    assert env_value(env, "REDIS_CA_FILE") == node.cluster_ca_file
    user, password = env_value(env, "REDIS_USERNAME"), env_value(env, "REDIS_PASSWORD")
    assert redis_login_from(node, user, password, core.address) == "ok"
    assert redis_login_from(node, user, password, core.address, "-") in (
        f"Error while reading from {core.address}:6379 : (104, 'Connection reset by peer')",
        "Connection closed by server.")
    refused = redis_login_from(node, user, password, core.address, make_other_ca(node))
    assert refused.startswith(f"Error 1 connecting to {core.address}:6379. [SSL: "
                              "CERTIFICATE_VERIFY_FAILED] certificate verify failed"), refused
    # Nothing else listens for Redis: the TLS port on loopback (::1 where the host has it)
    # and the LAN address, and the role's own redis-cli on the Unix socket.
    listening = set(core.sh("sh", "-c", "ss -H -ltnp | grep redis-server | awk '{print $4}'",
                            check=True).stdout.split())
    assert {"127.0.0.1:6379", f"{core.address}:6379"} <= listening
    assert listening <= {"127.0.0.1:6379", "[::1]:6379", f"{core.address}:6379"}
    local = core.sh("redis-cli", "-s", "/run/redis/redis-server.sock", "PING", check=False)
    assert (local.stdout + local.stderr).strip() == "NOAUTH Authentication required."


def test_the_coordinator_serves_only_https_with_the_cluster_cas_certificate(
        cluster, tmp_path) -> None:
    """The API answers over HTTPS with the cluster CA's certificate for its address, which
    the workers verify (COORDINATOR_CA_FILE); a client trusting another CA is refused in the
    handshake, and a plain http:// request gets no answer: no token goes out in clear. The
    status page's login and stylesheet come over it too, from the templates and static files
    the coordinator role shipped (with jinja2 from the wheelhouse)."""
    url = cluster.coordinator.url
    assert url.startswith("https://")
    node = cluster.nodes[cluster.web_host()]
    env = node.worker_env()
    assert (env_value(env, "COORDINATOR_URL"), env_value(env, "COORDINATOR_CA_FILE")) == (
        url, node.cluster_ca_file)
    health = requests.get(f"{url}/health", verify=cluster.coordinator.verify, timeout=10)
    assert health.status_code == 200, health.text
    login = requests.get(f"{url}{PREFIX}/login", verify=cluster.coordinator.verify, timeout=10)
    assert login.status_code == 200 and 'id="login"' in login.text, login.text[:500]
    style = requests.get(f"{url}{STYLESHEET}", verify=cluster.coordinator.verify, timeout=10)
    assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")
    other = throwaway.make_certificates(tmp_path / "other", ca_name="another CA")
    with pytest.raises(requests.exceptions.SSLError, match="CERTIFICATE_VERIFY_FAILED"):
        requests.get(f"{url}/health", verify=str(other.ca), timeout=10)
    with pytest.raises(requests.exceptions.ConnectionError,
                       match="Remote end closed connection without response"):
        requests.get(url.replace("https://", "http://", 1) + "/workers",
                     headers=cluster.coordinator.headers, timeout=10)


def test_rotating_the_worker_keys_and_renewing_certificates_with_site_yml_gives_new_secrets(
        cluster) -> None:
    """The documented rotation (docs/operating.md): new vault_worker_db_key and
    vault_worker_token_key, then site.yml. The old database and Redis passwords and the old
    worker token stop working, the new ones work, and the cluster still serves. The same run
    renews the server certificates (cluster_tls_renew_days longer than they are valid, as if
    they were about to expire): PostgreSQL and Redis serve the new one, without a restart,
    and the workers verify it."""
    web_host = cluster.web_host()
    node = cluster.nodes[web_host]
    db_key_file, token_key_file = (lab.SECRETS_DIR / "worker_db_key",
                                   lab.SECRETS_DIR / "worker_token_key")
    old_db_key, old_token_key = (db_key_file.read_text().split()[0],
                                 token_key_file.read_text().split()[0])
    for path in (db_key_file, token_key_file):
        path.write_text(random_secrets.token_hex(20) + "\n")
    new_db_key = db_key_file.read_text().split()[0]
    core = cluster.nodes["lab-ai-core"]
    old_serial = server_certificate_serial(node, core.address, 5432)
    assert server_certificate_serial(node, core.address, 6379) == old_serial
    redis_pid = core.sh("pidof", "redis-server", check=True).stdout.strip()
    done = cluster.playbooks.run("site.yml", cluster.inventory(web_host),
                                 "-e", "cluster_tls_renew_days=1000")
    assert done.returncode == 0, done.output[-3000:]
    issued = core.sh("openssl", "x509", "-noout", "-serial", "-in",
                     "/etc/coordinator-cluster/tls/server.crt", check=True).stdout.strip()
    assert issued.startswith("serial=") and issued != old_serial
    # The Coordinator restarted to serve it (uvicorn reads it at start).
    coordinator_port = urlsplit(cluster.coordinator.url).port
    assert [server_certificate_serial(node, core.address, port)
            for port in (5432, 6379, coordinator_port)] == [issued, issued, issued]
    assert core.sh("pidof", "redis-server", check=True).stdout.strip() == redis_pid
    env = node.worker_env()
    dsn = next(line.split("=", 1)[1].strip().strip('"') for line in env.splitlines()
               if line.startswith("PG_DSN="))
    new_password = contract.worker_db_password(new_db_key, web_host)
    old_password = contract.worker_db_password(old_db_key, web_host)
    assert new_password in dsn and old_password not in env
    assert login_from(node, dsn) == "ok"
    login = contract.worker_db_role(web_host)
    assert login_from(node, dsn.replace(new_password, old_password)) == (
        f'connection to server at "{cluster.nodes["lab-ai-core"].address}", port 5432 failed: '
        f'FATAL:  password authentication failed for user "{login}"')
    # The host's Redis user has a new password too (same key, another label); the old one
    # is refused by the Redis the role loaded the new users into.
    redis_host = cluster.nodes["lab-ai-core"].address
    user, redis_password = env_value(env, "REDIS_USERNAME"), env_value(env, "REDIS_PASSWORD")
    old_redis_password = contract.worker_redis_password(old_db_key, web_host)
    assert (user, redis_password) == (contract.worker_redis_user(web_host),
                                      contract.worker_redis_password(new_db_key, web_host))
    assert old_redis_password not in env
    assert redis_login_from(node, user, redis_password, redis_host) == "ok"
    assert redis_login_from(node, user, old_redis_password, redis_host) == (
        "invalid username-password pair or user is disabled.")
    # The worker's old token is refused as unknown (401); its new one is its own (403 here).
    worker_id = f"web-worker-{web_host}"
    old_token = contract.worker_token(old_token_key, worker_id)
    assert old_token not in env
    new_token = next(line.split("=", 1)[1].strip().strip('"') for line in env.splitlines()
                     if line.startswith("COORDINATOR_TOKEN="))
    answers = {token: requests.get(f"{cluster.coordinator.url}/workers", timeout=10,
                                   headers={"Authorization": f"Bearer {token}"},
                                   verify=cluster.coordinator.verify)
               for token in (old_token, new_token)}
    assert answers[old_token].status_code == 401, answers[old_token].text
    assert answers[new_token].status_code == 403, answers[new_token].text
    assert answers[new_token].json()["error"].startswith(f"the token of worker {worker_id!r}")
    # The workers restarted with them and serve: a web search done by the web host.
    task = cluster.coordinator.search()
    assert (task["status"], task["worker_host"]) == ("done", node.address), task
    cluster.assert_one_web_worker(web_host)


def secrets_in_use(cluster) -> dict[str, str]:
    """Every secret of the lab, by name: the vault's (.lab/secrets), those derived from it
    that the nodes' environment files hold, and admin's sudo password. Each is checked to be
    really in use, so finding it nowhere means something."""
    core = cluster.nodes["lab-ai-core"]
    env_files = core.sh("cat", "/etc/coordinator-worker/inference-worker.env",
                        "/etc/coordinator/coordinator.env", check=True).stdout
    secrets = {path.name: path.read_text().split()[0]
               for path in sorted(lab.SECRETS_DIR.iterdir())}
    # The worker's own API token, derived from the key, is a secret too.
    secrets["inference worker's token"] = next(
        line.split("=", 1)[1].strip('"') for line in env_files.splitlines()
        if line.startswith("COORDINATOR_TOKEN=worker.") or
        line.startswith('COORDINATOR_TOKEN="worker.'))
    # The worker hosts' database key stays on the controller; the password derived from it
    # for this host is in the worker's environment, and is a secret too.
    db_key = secrets.pop("worker_db_key")
    secrets["lab-ai-core's database password"] = contract.worker_db_password(db_key,
                                                                             "lab-ai-core")
    # So are its Redis password, from the same key, and the Coordinator's, derived from the
    # Redis admin password, which itself is only in the ACL file (as a hash) and the vault.
    secrets["lab-ai-core's Redis password"] = contract.worker_redis_password(db_key,
                                                                             "lab-ai-core")
    redis_admin = secrets.pop("redis_password")
    secrets["the Coordinator's Redis password"] = contract.coordinator_redis_password(
        redis_admin)
    # The CA passphrase is in no environment: it is in use if it opens the CA's key.
    ca_passphrase = secrets.pop("cluster_ca_passphrase")
    opened = subprocess.run(
        ["openssl", "pkey", "-noout", "-in", str(lab.CLUSTER_CA_DIR / "ca.key"),
         "-passin", "env:CA_PASSPHRASE"], env={**os.environ, "CA_PASSPHRASE": ca_passphrase},
        capture_output=True, text=True, check=False)
    assert opened.returncode == 0, opened.stderr
    for name, value in secrets.items():
        assert len(value) >= 16, f"{name} is too short to be a meaningful canary"
        # Each is really in use on the nodes (in the Coordinator's or a worker's
        # environment), so finding it zero times in the output means something.
        assert value in env_files, f"{name} is in neither environment file"
    # admin's sudo password is in use too: sudo asks for it on every node (tests/lab), and
    # every run above became root with it.
    secrets["admin_password"] = lab.ADMIN_PASSWORD.read_text().split()[0]
    secrets["worker_db_key"] = db_key
    secrets["redis_password"] = redis_admin
    secrets["cluster_ca_passphrase"] = ca_passphrase
    return secrets


def assert_no_secret_in(cluster) -> None:
    """No secret in use in the -vvv output of any playbook run on ``cluster`` so far."""
    outputs = cluster.playbooks.outputs
    assert len(outputs) >= 2  # the bring-up's, at least
    for name, value in secrets_in_use(cluster).items():
        leaks = [str(run.log) for run, output in zip(cluster.playbooks.runs, outputs, strict=True)
                 if value in output]
        assert not leaks, f"{name} appears in the -vvv output of the playbook runs {leaks}"


def test_no_secret_in_any_verbose_output(cluster) -> None:
    assert_no_secret_in(cluster)


def test_a_routed_web_task_crosses_the_lab_network_only_encrypted(cluster) -> None:
    """docs/tls.md, "What crosses the LAN": a capture of the lab network (its podman bridge)
    while a web search is routed, taken by the web worker, summarised and read back holds,
    in no TCP payload, the prompt, the task id, the answer or any of the lab's secrets. The
    services' traffic between the nodes is in the capture, and so is a probe sent in clear
    between two nodes, so the capture did see what crossed. SearXNG's port is left out: it is
    plain HTTP on the router, and carries the query (docs/threat-model.md)."""
    canaries = secrets_in_use(cluster)
    standins = yaml.safe_load(
        (lab.INVENTORY / "group_vars" / "all" / "standins.yml").read_text())
    searxng_port = int(re.search(r":(\d+)/?$", standins["worker_searxng_url"]).group(1))
    web_host = cluster.web_host()
    web, core = cluster.nodes[web_host], cluster.nodes["lab-ai-core"]
    other = cluster.nodes[cluster.other(web_host)]
    prompt = f"capture canary {random_secrets.token_hex(8)}"
    probe = f"probe-{random_secrets.token_hex(8)}"
    coordinator_port = urlsplit(cluster.coordinator.url).port
    with capture.Capture(capture.bridge_interface(cluster.the_lab.network),
                         exclude_ports=(searxng_port,)) as captured:
        task = cluster.coordinator.search(prompt)
        # In clear, from one node to another's stand-in Ollama (plain HTTP, every address).
        web.sh("python3", "-c", "import urllib.request; urllib.request.urlopen("
               f"'http://{other.address}:11434/api/tags?{probe}', timeout=10).read()",
               check=True)
    assert (task["status"], task["worker_host"]) == ("done", web.address), task
    streams = captured.streams
    assert [str(s) for s in streams.containing(probe)], (
        f"the probe sent in clear to {other.address}:11434 is not in the capture of "
        f"{len(streams)} streams: it saw nothing between the nodes")
    # The web worker takes the task through Redis and writes its result to PostgreSQL; the
    # Coordinator's API is reached by this test's client (the worker's heartbeats may fall
    # outside the capture).
    for port, client in ((5432, web.address), (6379, web.address), (coordinator_port, None)):
        assert any(s.dst == core.address and client in (None, s.src)
                   for s in streams.to_port(port)), (
            f"no traffic from {client or 'any client'} to {core.address}:{port} in the capture")
    canaries |= {"the prompt": prompt, "the task id": task["task_id"],
                 "the answer": task["result"]}
    assert len(task["result"]) >= 16, task
    for name, value in canaries.items():
        found = [str(s) for s in streams.containing(value)]
        assert not found, f"{name} crossed the lab network in clear: {found}"
