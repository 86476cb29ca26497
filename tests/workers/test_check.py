"""`worker_web.py --check`: the start-up checks alone, which migrate-web.yml runs on the new
host before anything changes."""

from __future__ import annotations

import subprocess

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
