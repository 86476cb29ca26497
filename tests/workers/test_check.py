"""`worker_web.py --check`: the start-up checks alone, which migrate-web.yml runs on the new
host before anything changes."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab import throwaway
from lab.throwaway import ThrowawayRedis
from tests.roles.conftest import HERE as ROLE_TESTS
from tests.roles.conftest import run as run_playbook

from .conftest import FILES, PYTHON
from .test_web import START_LINES, line_index


def _check(env) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, str(FILES / "worker_web.py"), "--check"], env=env,
                          capture_output=True, text=True, timeout=60)


def test_check_runs_the_start_up_checks_and_takes_nothing(web_env, coordinator):
    done = _check(web_env)
    assert done.returncode == 0, done.stderr
    lines = [line.split(" ", 2)[2] for line in done.stderr.splitlines() if line[:2] == "20"]
    positions = [line_index(lines, text) for text in START_LINES[:4]]
    assert positions == sorted(positions)
    assert lines[-1] == ("INFO All start-up checks passed (--check: not registering, "
                         "taking no task).")
    assert coordinator.worker(web_env["WORKER_ID"]) is None


def test_check_fails_with_the_checks_message(web_env, redis_server):
    done = _check({**web_env, "REDIS_PASSWORD": "not-the-password"})
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].endswith(
        f"ERROR Redis check FAILED at 127.0.0.1:{redis_server.port}: user 'default' "
        "refused: invalid username-password pair or user is disabled.; fix: check "
        "REDIS_USERNAME and REDIS_PASSWORD (the worker role derives them for this host, "
        "worker_<host>, from worker_redis_password_key; run site.yml so the redis role has "
        "the same user)")


def _check_json(env, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    done = subprocess.run([PYTHON, str(FILES / "worker_web.py"), "--check", "--json", *extra],
                          env=env, capture_output=True, text=True, timeout=60)
    return done, json.loads(done.stdout)


def test_check_json_reports_every_check_passed(web_env, searxng, ollama, coordinator):
    done, report = _check_json(web_env)
    assert done.returncode == 0, done.stderr
    assert report["error"] == ""
    assert [(check["name"], check["ok"]) for check in report["checks"]] == [
        ("redis", True), ("postgresql", True), ("searxng", True), ("ollama", True)]
    # Each message is the check's own log line.
    passed = [line.split(" INFO ", 1)[1] for line in done.stderr.splitlines() if " OK (" in line]
    assert [check["message"] for check in report["checks"]] == passed
    assert report["checks"][2]["message"] == f"SearXNG OK ({searxng.url}, JSON API)"
    assert coordinator.worker(web_env["WORKER_ID"]) is None


def test_check_json_puts_the_failed_checks_line_first_and_stops_there(web_env, pg):
    done, report = _check_json({**web_env, "PG_DSN": pg.dsn.replace("dbname=", "dbname=no_")})
    assert done.returncode == 1
    assert list(report) == ["error", "checks"]
    assert report["error"].startswith("PostgreSQL check FAILED at ")
    assert "login refused" in report["error"]
    assert report["error"] == done.stderr.splitlines()[-1].split(" ERROR ", 1)[1]
    assert [(check["name"], check["ok"]) for check in report["checks"]] == [
        ("redis", True), ("postgresql", False)]
    assert report["checks"][-1]["message"] == report["error"]
    assert web_env["REDIS_PASSWORD"] not in done.stdout


def test_check_json_reports_a_missing_variable_as_the_configuration_check(web_env):
    done, report = _check_json({k: v for k, v in web_env.items() if k != "WORKER_ID"})
    assert done.returncode == 2
    message = ("missing required environment variable: WORKER_ID (see docs/workers.md)")
    assert report == {"error": message,
                      "checks": [{"name": "configuration", "ok": False, "message": message}]}


def test_json_goes_with_check(web_env):
    done = subprocess.run([PYTHON, str(FILES / "worker_web.py"), "--json"], env=web_env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith("error: --json goes with --check")


def _role_check(tmp_path: Path, env: dict[str, str]) -> dict:
    """What the worker role's check.yml publishes for a web worker with ``env``."""
    report = tmp_path / "published.json"
    values = {"worker__all": [{"name": "web", "kind": "web", "script": "worker_web.py"}],
              "worker__envs": {"web": env}, "worker_venv_dir": str(Path(PYTHON).parents[1]),
              "worker_app_dir": str(FILES), "check_report_path": str(report),
              "ansible_python_interpreter": PYTHON}
    done = run_playbook(["ansible-playbook", "-i", "localhost,",
                         str(ROLE_TESTS / "playbooks" / "worker_check.yml"),
                         "-e", json.dumps(values)])
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(report.read_text())


def test_the_role_publishes_the_checks_passed_and_no_error(tmp_path, web_env, searxng):
    published = _role_check(tmp_path, web_env)
    assert published["error"] == ""
    assert [line.split(" (")[0] for line in published["passed"]] == [
        "Redis OK", "PostgreSQL OK", "SearXNG OK", "Ollama OK"]
    assert f"SearXNG OK ({searxng.url}, JSON API)" in published["passed"]


def test_the_role_publishes_the_failed_checks_line(tmp_path, web_env, redis_server):
    published = _role_check(tmp_path, {**web_env, "REDIS_PASSWORD": "not-the-password"})
    assert published == {"passed": [], "error": (
        f"Redis check FAILED at 127.0.0.1:{redis_server.port}: user 'default' refused: "
        "invalid username-password pair or user is disabled.; fix: check REDIS_USERNAME and "
        "REDIS_PASSWORD (the worker role derives them for this host, worker_<host>, from "
        "worker_redis_password_key; run site.yml so the redis role has the same user)")}


def test_check_reads_the_environment_from_stdin(web_env, coordinator):
    secret_names = ("PG_DSN", "REDIS_PASSWORD")
    on_command_line = {k: v for k, v in web_env.items() if k not in secret_names}
    lines = "".join(f"{name}={web_env[name]}\n" for name in secret_names)
    done = subprocess.run([PYTHON, str(FILES / "worker_web.py"), "--check", "--env-stdin"],
                          env=on_command_line, input=f"# from the role\n\n{lines}",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "PostgreSQL OK" in done.stderr
    assert web_env["REDIS_PASSWORD"] not in done.stderr


# -- Redis over TLS (the redis role with the cluster's certificate) ---------------------------


@pytest.fixture(scope="module")
def tls_redis(
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ThrowawayRedis, Path, Path]]:
    """A Redis serving TLS only with a certificate for 127.0.0.1 from its own CA, and the
    certificate of another CA."""
    root = tmp_path_factory.mktemp("redis-tls")
    certificates = throwaway.make_certificates(root / "cluster")
    other = throwaway.make_certificates(root / "other", ca_name="another CA")
    with ThrowawayRedis(tls=certificates) as server:
        yield server, certificates.ca, other.ca


def _tls_env(web_env: dict[str, str], server: ThrowawayRedis, **changes: str) -> dict[str, str]:
    return {**web_env, "REDIS_PORT": str(server.port), "REDIS_PASSWORD": server.password,
            **changes}


def _redis_failure(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done.stderr
    return done.stderr.splitlines()[-1].split(" ERROR ", 1)[1]


def test_check_speaks_tls_to_redis_and_verifies_its_certificate(web_env, tls_redis):
    server, ca, _ = tls_redis
    done = _check(_tls_env(web_env, server, REDIS_CA_FILE=str(ca)))
    assert done.returncode == 0, done.stderr
    assert f"Redis OK (127.0.0.1:{server.port}, TLS, certificate from {ca})" in done.stderr


def test_a_redis_certificate_from_another_ca_is_refused_with_the_fix(web_env, tls_redis):
    server, _, other_ca = tls_redis
    line = _redis_failure(_check(_tls_env(web_env, server, REDIS_CA_FILE=str(other_ca))))
    assert line.startswith(f"Redis check FAILED at 127.0.0.1:{server.port}: ")
    assert "certificate verify failed" in line
    assert line.endswith(
        f"; fix: the server's certificate is not from the CA in REDIS_CA_FILE ({other_ca}) or "
        "does not name REDIS_HOST: use the cluster CA's ca.crt, and as REDIS_HOST the address "
        "site.yml gave the Redis host's certificate (docs/tls.md)")


def test_a_missing_redis_ca_file_says_to_run_site_yml(web_env, tls_redis):
    server, ca, _ = tls_redis
    missing = ca.parent / "no-such-ca.crt"
    line = _redis_failure(_check(_tls_env(web_env, server, REDIS_CA_FILE=str(missing))))
    assert line.endswith(
        f"; fix: REDIS_CA_FILE {missing} does not exist: run site.yml, which puts the cluster "
        "CA's certificate there (docs/tls.md)")


def test_a_plain_client_of_a_tls_redis_is_told_to_set_the_ca(web_env, tls_redis):
    server, _, _ = tls_redis
    line = _redis_failure(_check(_tls_env(web_env, server)))
    assert line.endswith(
        "; fix: this Redis may serve TLS only: set REDIS_CA_FILE to the cluster CA's "
        "certificate (docs/tls.md)")


def test_a_tls_client_of_a_plain_redis_is_told_it_may_serve_no_tls(web_env, tls_redis):
    _, ca, _ = tls_redis
    line = _redis_failure(_check({**web_env, "REDIS_CA_FILE": str(ca)}))
    assert line.endswith(
        "Timeout connecting to server; fix: REDIS_CA_FILE is set, and a Redis without TLS "
        "never answers the TLS handshake: run site.yml so the redis role gives it the "
        "cluster's certificate, or unset REDIS_CA_FILE; else check REDIS_HOST/REDIS_PORT and "
        "the firewall")
