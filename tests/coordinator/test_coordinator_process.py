"""The Coordinator as deployments run it (``python -m coordinator`` from files/), start-up
errors, concurrent schema creation, and backends going away."""

from __future__ import annotations

import asyncio
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import psycopg
import pytest
import redis
from coordinator_sql import NAMED

from coordinator.queries import USERS_ONLY
from coordinator.schema import LATEST_VERSION, MIGRATIONS, ensure_schema
from lab import throwaway
from lab.processes import FILES, stop_process
from lab.throwaway import ThrowawayPostgres, ThrowawayRedis, free_port

from .coordkit import Backends, ServerThread, coordinator_process, wait_for


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 60,
                 verify: ssl.SSLContext | bool = True) -> None:
    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"coordinator exited {proc.returncode}: "
                                 f"{proc.stderr.read()[-2000:]}")
        try:
            return httpx.get(url + "/health", timeout=2, verify=verify).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(healthy, timeout, 0.1, "the coordinator process to answer /health")


def stop(proc: subprocess.Popen) -> tuple[int, str]:
    """SIGTERM (SIGKILL after 20 s); its exit status and what it wrote to stderr."""
    return stop_process(proc, grace=20), proc.stderr.read()


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen]]:
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        stop(proc)


def test_python_m_coordinator_serves(backends: Backends, processes: list) -> None:
    port = free_port()
    token = "process-token"
    proc = coordinator_process(backends.env(COORDINATOR_PORT=str(port),
                                            COORDINATOR_TOKEN=token))
    processes.append(proc)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc)
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=10) as client:
        resp = client.post("/route", json={"prompt": "hello", "task_type": "web_search"})
        assert resp.status_code == 201
        task_id = resp.json()["task_id"]
        assert client.get(f"/task/{task_id}").json()["status"] == "queued"
        assert httpx.post(url + "/route", json={}).status_code == 401
    assert backends.redis().lrange("tasks:web", 0, -1) == [task_id]
    code, stderr = stop(proc)
    # uvicorn re-raises the signal after a clean shutdown, as systemd expects
    assert code in (0, -signal.SIGTERM), stderr
    assert "Application shutdown complete" in stderr
    assert "Traceback" not in stderr


def test_it_listens_on_each_address_of_coordinator_bind(backends: Backends,
                                                       processes: list) -> None:
    port = free_port()
    proc = coordinator_process(backends.env(COORDINATOR_PORT=str(port),
                                            COORDINATOR_BIND="127.0.0.1,127.0.0.2"))
    processes.append(proc)
    for address in ("127.0.0.1", "127.0.0.2"):
        wait_healthy(f"http://{address}:{port}", proc)
    # Not on every interface: another loopback address gets no answer.
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.3:{port}/health", timeout=5)
    stop(proc)


def test_a_virtual_address_is_answered_once_the_host_holds_it(backends: Backends,
                                                              processes: list) -> None:
    # TEST-NET-3, on no interface here until the test puts it on loopback, as keepalived puts
    # a virtual address on a host.
    address, port = "203.0.113.77", free_port()
    proc = coordinator_process(backends.env(COORDINATOR_PORT=str(port),
                                            COORDINATOR_VIRTUAL_ADDRESS=address))
    processes.append(proc)
    wait_healthy(f"http://127.0.0.1:{port}", proc)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://{address}:{port}/health", timeout=5)
    subprocess.run(["ip", "address", "add", f"{address}/32", "dev", "lo"], check=True)
    try:
        assert httpx.get(f"http://{address}:{port}/health", timeout=5).status_code == 200
    finally:
        subprocess.run(["ip", "address", "del", f"{address}/32", "dev", "lo"], check=True)
    stop(proc)


def test_an_address_the_host_lacks_is_one_line(backends: Backends) -> None:
    port = free_port()
    code, stderr = run_failing(backends.env(COORDINATOR_PORT=str(port),
                                            COORDINATOR_BIND="127.0.0.1,192.0.2.1"))
    assert code == 1
    assert stderr.splitlines()[-1] == (
        f"coordinator: cannot listen on 192.0.2.1 port {port} (Cannot assign requested "
        "address): check COORDINATOR_BIND (an address of this host) and COORDINATOR_PORT "
        "(not in use)")


def run_failing(env: dict[str, str]) -> tuple[int, str]:
    proc = coordinator_process(env)
    try:
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, proc.stderr.read().strip()


@pytest.mark.parametrize(("drop", "change", "name"), [
    ("PG_DSN", {}, "PG_DSN"),
    ("REDIS_HOST", {}, "REDIS_HOST"),
    (None, {"COORDINATOR_PORT": "eighty"}, "COORDINATOR_PORT"),
    (None, {"COORDINATOR_HEARTBEAT_TTL": "0"}, "COORDINATOR_HEARTBEAT_TTL"),
    (None, {"PG_DSN": "host=127.0.0.1 port=notaport = x"}, "PG_DSN"),
])
def test_bad_configuration_stops_with_one_line(backends: Backends, drop: str | None,
                                               change: dict, name: str) -> None:
    env = backends.env(COORDINATOR_PORT=str(free_port())) | change
    if drop:
        env.pop(drop)
    code, stderr = run_failing(env)
    assert code == 2
    assert len(stderr.splitlines()) == 1, stderr
    assert name in stderr


def test_refused_postgres_login_is_explained(pg: ThrowawayPostgres, backends: Backends) -> None:
    env = backends.env(COORDINATOR_PORT=str(free_port()))
    env["PG_DSN"] = env["PG_DSN"].replace(pg.password, "not-the-password")
    code, stderr = run_failing(env)
    assert code == 1
    assert len(stderr.splitlines()) == 1, stderr
    assert f"PostgreSQL at 127.0.0.1:{pg.port} refused the login of user 'coordinator'" in stderr
    assert "password" in stderr and "Check" in stderr
    assert "not-the-password" not in stderr


def test_unreachable_postgres_and_wrong_redis_password(backends: Backends) -> None:
    port = free_port()
    env = backends.env(COORDINATOR_PORT=str(free_port()),
                       PG_DSN=f"host=127.0.0.1 port={port} dbname=x user=y connect_timeout=2")
    code, stderr = run_failing(env)
    assert code == 1 and f"127.0.0.1:{port}" in stderr and "running" in stderr
    code, stderr = run_failing(backends.env(COORDINATOR_PORT=str(free_port()),
                                            REDIS_PASSWORD="wrong"))
    assert code == 1 and "REDIS_PASSWORD" in stderr and len(stderr.splitlines()) == 1
    assert "refused the login of user 'default'" in stderr
    code, stderr = run_failing(backends.env(COORDINATOR_PORT=str(free_port()),
                                            REDIS_USERNAME="coordinator"))
    assert code == 1 and len(stderr.splitlines()) == 1
    assert "refused the login of user 'coordinator'" in stderr and "REDIS_USERNAME" in stderr


def test_with_redis_ca_file_the_coordinator_speaks_tls_and_refuses_another_ca(
        backends: Backends, processes: list, tmp_path) -> None:
    """REDIS_CA_FILE: the routed id reaches a Redis that serves TLS only, through a
    certificate verified against that CA; a certificate from another CA stops the start with
    one line saying what to fix."""
    certificates = throwaway.make_certificates(tmp_path / "cluster")
    other = throwaway.make_certificates(tmp_path / "other", ca_name="another CA")
    with ThrowawayRedis(tls=certificates) as server:
        env = backends.env(REDIS_PORT=str(server.port), REDIS_PASSWORD=server.password)
        code, stderr = run_failing({**env, "COORDINATOR_PORT": str(free_port()),
                                    "REDIS_CA_FILE": str(other.ca)})
        assert code == 1 and len(stderr.splitlines()) == 1, stderr
        assert stderr.startswith(
            f"coordinator: cannot connect to Redis at 127.0.0.1:{server.port}: ")
        assert "certificate verify failed" in stderr
        assert stderr.endswith(
            f"the server's certificate is not from the CA in REDIS_CA_FILE ({other.ca}) or "
            "does not name REDIS_HOST: use the cluster CA's ca.crt, and as REDIS_HOST the "
            "address site.yml gave the Redis host's certificate (docs/tls.md)")
        port, token = free_port(), "tls-token"
        proc = coordinator_process({**env, "COORDINATOR_PORT": str(port),
                                    "COORDINATOR_TOKEN": token,
                                    "REDIS_CA_FILE": str(certificates.ca)})
        processes.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc)
        routed = httpx.post(url + "/route", json={"prompt": "over TLS", "task_type": "web_search"},
                            headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert routed.status_code == 201, routed.text
        queue = redis.Redis(host="127.0.0.1", port=server.port, password=server.password,
                            decode_responses=True, ssl=True, ssl_ca_certs=str(certificates.ca))
        assert routed.json()["task_id"] in queue.lrange("tasks:web", 0, -1)


def test_with_a_certificate_it_serves_https_only(backends: Backends, processes: list,
                                                 tmp_path) -> None:
    """COORDINATOR_TLS_CERT/KEY: the API answers over HTTPS with that certificate, which
    verifies against its CA; a plain http:// request gets no answer (no token or prompt in
    clear), and the status command says what to use instead."""
    certificates = throwaway.make_certificates(tmp_path / "cluster")
    port, token = free_port(), "https-token"
    proc = coordinator_process(backends.env(
        COORDINATOR_PORT=str(port), COORDINATOR_TOKEN=token,
        COORDINATOR_TLS_CERT=str(certificates.cert), COORDINATOR_TLS_KEY=str(certificates.key)))
    processes.append(proc)
    url = f"https://127.0.0.1:{port}"
    cluster_ca = ssl.create_default_context(cafile=certificates.ca)
    wait_healthy(url, proc, verify=cluster_ca)
    headers = {"Authorization": f"Bearer {token}"}
    answer = httpx.get(url + "/workers", headers=headers, verify=cluster_ca, timeout=5)
    assert answer.status_code == 200, answer.text
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(url + "/health", timeout=5)  # the system's CAs do not know the cluster's
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.get(f"http://127.0.0.1:{port}/workers", headers=headers, timeout=5)
    plain = subprocess.run(
        [sys.executable, "-m", "coordinator", "status", "--url", f"http://127.0.0.1:{port}"],
        cwd=FILES, capture_output=True, text=True, timeout=30,
        env={"PATH": "/usr/bin:/bin", "COORDINATOR_TOKEN": token})
    assert plain.returncode == 1
    assert plain.stderr.strip() == (
        f"coordinator status: coordinator not reachable at http://127.0.0.1:{port} (Remote end "
        f"closed connection without response): the Coordinator at http://127.0.0.1:{port} "
        "closed the connection without an answer, as one that serves HTTPS only does: use "
        "https:// and the cluster CA's certificate (COORDINATOR_CA_FILE, docs/tls.md)")
    verified = subprocess.run(
        [sys.executable, "-m", "coordinator", "status", "--ca-file", str(certificates.ca)],
        cwd=FILES, capture_output=True, text=True, timeout=30,
        env={"PATH": "/usr/bin:/bin", "COORDINATOR_TOKEN": token, "COORDINATOR_PORT": str(port)})
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith(f"Coordinator at {url}: 0 worker(s)")
    code, stderr = stop(proc)
    assert code in (0, -signal.SIGTERM), stderr
    assert f"listening on 127.0.0.1:{port}, HTTPS" in stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("fault", ["key missing", "key alone", "key of another certificate"])
def test_a_bad_https_certificate_or_key_stops_the_start_with_one_line(
        backends: Backends, tmp_path, fault: str) -> None:
    certificates = throwaway.make_certificates(tmp_path / "cluster")
    other = throwaway.make_certificates(tmp_path / "other")
    tls = {"COORDINATOR_TLS_CERT": str(certificates.cert),
           "COORDINATOR_TLS_KEY": str(certificates.key)}
    if fault == "key missing":
        tls["COORDINATOR_TLS_KEY"] = str(tmp_path / "absent.key")
    elif fault == "key alone":
        del tls["COORDINATOR_TLS_CERT"]
    else:
        tls["COORDINATOR_TLS_KEY"] = str(other.key)
    code, stderr = run_failing(backends.env(COORDINATOR_PORT=str(free_port()), **tls))
    expected = {
        "key missing": (1, f"coordinator: COORDINATOR_TLS_KEY {tmp_path}/absent.key: cannot read "
                           "it (No such file or directory): run site.yml, which puts the "
                           "cluster's certificate and key there, and check that the service's "
                           "user is in the group ssl-cert"),
        "key alone": (2, "coordinator: COORDINATOR_TLS_KEY is set without COORDINATOR_TLS_CERT: "
                         "HTTPS needs both the certificate and its key; set both, or neither "
                         "for plain HTTP"),
        "key of another certificate": (
            1, f"coordinator: COORDINATOR_TLS_CERT {certificates.cert} and COORDINATOR_TLS_KEY "
               f"{other.key} do not load together (KEY_VALUES_MISMATCH): they must be one "
               "certificate and its own key"),
    }[fault]
    assert (code, stderr) == expected


def test_schema_created_once_by_concurrent_starts(pg: ThrowawayPostgres) -> None:
    dsn = pg.database("coordinator_schema_race")

    async def race() -> list[list[int]]:
        conns = [await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(4)]
        try:
            return list(await asyncio.gather(*(ensure_schema(c) for c in conns)))
        finally:
            for c in conns:
                await c.close()

    applied = asyncio.run(race())
    assert sorted(applied) == [[], [], [], [m[0] for m in MIGRATIONS]]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT max(version), count(*) FROM coordinator_schema").fetchone() \
            == (LATEST_VERSION, len(MIGRATIONS))


def test_unfinished_task_queries_read_the_active_index(pg: ThrowawayPostgres) -> None:
    """Keyed by (status, queue, id) since schema version 6, the partial index still serves
    every reader of unfinished tasks by queue, and the scrape's oldest queued task by type,
    among many finished ones."""
    dsn = pg.database("coordinator_active_index")

    async def create() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await ensure_schema(conn)

    asyncio.run(create())
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tasks (id, task_type, prompt, status, queue)"
            " SELECT gen_random_uuid(), 'web_search', 'p',"
            "  CASE WHEN n % 100 = 0 THEN 'queued' WHEN n % 100 = 1 THEN 'running'"
            "  ELSE 'done' END, 'tasks:web'"
            " FROM generate_series(1, 20000) AS n")
        conn.execute("ANALYZE tasks")
        plans = {name: "\n".join(row[0] for row in conn.execute(
                     "EXPLAIN " + NAMED[name], {"queues": ["tasks:web"], **USERS_ONLY}))
                 for name in ("OLDEST_WAITING", "OLDEST_QUEUED_BY_TYPE", "ACTIVE_BY_QUEUE",
                              "LOAD_BY_QUEUE")}
    assert {name: "Index Scan on tasks_active_idx" in plan for name, plan in plans.items()} \
        == dict.fromkeys(plans, True), plans
    assert "Index Cond: ((status = 'queued'::text) AND (queue IS NOT NULL))" \
        in plans["OLDEST_WAITING"], plans["OLDEST_WAITING"]


def test_two_processes_start_on_an_empty_database(pg: ThrowawayPostgres, backends: Backends,
                                                  processes: list) -> None:
    dsn = pg.database("coordinator_two_starts")
    ports = [free_port(), free_port()]
    for port in ports:
        processes.append(coordinator_process(backends.env(COORDINATOR_PORT=str(port),
                                                          PG_DSN=dsn)))
    for port, proc in zip(ports, processes, strict=True):
        wait_healthy(f"http://127.0.0.1:{port}", proc)
    for port in ports:
        resp = httpx.post(f"http://127.0.0.1:{port}/route",
                          json={"prompt": "p", "task_type": "rag"})
        assert resp.status_code == 201
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM coordinator_schema").fetchone()[0] == \
            len(MIGRATIONS)
        assert conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 2


def test_redis_down(backends: Backends, start_server) -> None:
    with ThrowawayRedis() as redis:
        own = Backends(backends.dsn, backends.admin_dsn, redis.port, redis.password)
        server: ServerThread = start_server(own, COORDINATOR_HEARTBEAT_TTL="1",
                                            COORDINATOR_REPUSH_GRACE="0.5")
        with server.client() as client:
            assert client.get("/health").status_code == 200
            redis.stop()
            resp = client.get("/health")
            assert resp.status_code == 503
            body = resp.json()
            assert body["redis"] == "failed" and body["postgresql"] == "ok"
            assert f"Redis at 127.0.0.1:{redis.port}" in body["error"]
            # the task is still accepted: PostgreSQL is the record
            resp = client.post("/route", json={"prompt": "p", "task_type": "web_search"})
            assert resp.status_code == 201 and "Redis" in resp.json()["warning"]
            task_id = resp.json()["task_id"]
            resp = client.get("/queues")
            assert resp.status_code == 503 and "Redis at" in resp.json()["error"]
            assert client.get("/metrics").status_code == 200
            redis.start()  # empty: the Reaper pushes the id again
            wait_for(lambda: client.get("/health").status_code == 200, 10)
            with own.redis() as r:
                wait_for(lambda: r.lrange("tasks:web", 0, -1) == [task_id], 10,
                         what="the id to be pushed again")


def test_postgres_down(backends: Backends, start_server) -> None:
    with ThrowawayPostgres() as pg:
        own = Backends(pg.dsn, pg.admin_dsn, backends.redis_port, backends.redis_password)
        server: ServerThread = start_server(own)
        with server.client() as client:
            assert client.post("/route", json={"prompt": "p", "task_type": "rag"}
                               ).status_code == 201
            pg.stop()
            resp = client.get("/health")
            assert resp.status_code == 503
            assert resp.json()["postgresql"] == "failed"
            assert f"PostgreSQL at 127.0.0.1:{pg.port}" in resp.json()["error"]
            for method, path, body in [("POST", "/route", {"prompt": "p", "task_type": "rag"}),
                                       ("GET", "/workers", None), ("GET", "/queues", None)]:
                resp = client.request(method, path, json=body)
                assert resp.status_code == 503, (path, resp.text)
                assert "PostgreSQL at" in resp.json()["error"]
            assert client.get("/metrics").status_code == 200
            pg.start()
            wait_for(lambda: client.get("/health").status_code == 200, 20)
            resp = wait_for(lambda: (r := client.post("/route", json={
                "prompt": "p", "task_type": "rag"})).status_code == 201 and r, 20)
            task_id = resp.json()["task_id"]
            assert client.get(f"/task/{task_id}").json()["status"] == "queued"
            # long-polls work again: the listener reconnected
            start = time.monotonic()
            assert client.get(f"/task/{task_id}", params={"wait": 1}).status_code == 200
            assert time.monotonic() - start < 5


def test_route_bench_runs_against_a_coordinator(server: ServerThread, backends: Backends
                                                ) -> None:
    from .coordkit import ROOT

    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "route_bench.py"), "--url", server.url,
         "--tasks", "200", "--concurrency", "8", "--warmup", "20"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "requests/s" in out.stdout and "p99" in out.stdout
    assert backends.sql("SELECT count(*) FROM tasks")[0][0] == 220
