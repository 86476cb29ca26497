"""coordinator_task run by ansible-playbook against real PostgreSQL, failing before routing.

These paths need no Coordinator: PostgreSQL is checked before a task is routed, and a
Coordinator that does not answer is one of the failures under test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.throwaway import ThrowawayPostgres, free_port
from module_utils.coordinator_pg import NO_DRIVER_MESSAGE

from .coordinator_task_harness import PYTHON, TasksDb, pg_args

NOBODY = "http://127.0.0.1:{port}"


def coordinator_nowhere() -> str:
    return NOBODY.format(port=free_port())


def test_wrong_pg_password_fails_before_routing(tasks_db, run_probe, sql_worker):
    before = sql_worker.count()
    url = coordinator_nowhere()
    run = run_probe({"coordinator_url": url, "prompt": "x",
                     **pg_args(tasks_db, login_password="wrong-password")})
    assert run.failed
    assert run.result["changed"] is False
    assert run.msg == (
        f"PostgreSQL refused login for user coordinator at 127.0.0.1:{tasks_db.port}, database "
        f'{tasks_db.name}: connection to server at "127.0.0.1", port {tasks_db.port} failed: '
        'FATAL:  password authentication failed for user "coordinator"; check '
        "login_user/login_password (or pg_dsn), and that a pg_hba.conf line allows this host"
    )
    assert "wrong-password" not in run.stdout + run.stderr
    assert sql_worker.count() == before


def test_pg_unreachable(run_probe):
    port = free_port()
    run = run_probe({"coordinator_url": coordinator_nowhere(), "prompt": "x",
                     "login_host": "127.0.0.1", "login_port": port, "login_password": "pw"})
    assert run.failed
    assert run.msg == (
        f"PostgreSQL unreachable for user coordinator at 127.0.0.1:{port}, database "
        f'coordinator: connection to server at "127.0.0.1", port {port} failed: Connection '
        "refused; check login_host/login_port (or pg_dsn) and that the server listens on that "
        "address"
    )


def test_database_without_tasks_table(tasks_db, run_probe):
    empty = TasksDb(tasks_db.server, "coordinator_task_empty").create()
    run = run_probe({"coordinator_url": coordinator_nowhere(), "prompt": "x", **pg_args(empty)})
    assert run.failed
    assert run.msg == (
        f"no tasks table for user coordinator at 127.0.0.1:{tasks_db.port}, database "
        f'{empty.name} (relation "tasks" does not exist): the Coordinator writes to another '
        "database; point login_host/login_db (or pg_dsn) at the Coordinator's PG_DSN"
    )


def test_coordinator_unreachable_with_pg_dsn(tasks_db, run_probe, sql_worker):
    before = sql_worker.count()
    url = coordinator_nowhere()
    # A refused connection is retried until the timeout (a restarting Coordinator): keep it short.
    run = run_probe({"coordinator_url": url + "/", "prompt": "x", "pg_dsn": tasks_db.dsn,
                     "timeout": 2})
    assert run.failed
    assert run.msg == (
        f"Coordinator unreachable at {url} ([Errno 111] Connection refused): "
        "check coordinator_url"
    )
    assert tasks_db.password not in run.stdout + run.stderr
    assert sql_worker.count() == before


def test_pg_dsn_excludes_login_options(tasks_db, run_probe):
    run = run_probe({"coordinator_url": coordinator_nowhere(), "prompt": "x",
                     "pg_dsn": tasks_db.dsn, "login_host": "127.0.0.1"})
    assert run.failed
    assert run.msg == "parameters are mutually exclusive: pg_dsn|login_host"


def test_bad_pg_dsn_does_not_show_it(run_probe):
    run = run_probe({"coordinator_url": coordinator_nowhere(), "prompt": "x",
                     "pg_dsn": "host=127.0.0.1 password='unterminated-s3cret"})
    assert run.failed
    assert run.msg == "pg_dsn is not a valid libpq connection string or URI; check its syntax"
    assert "unterminated-s3cret" not in run.stdout + run.stderr


def _shadow(tmp_path: Path, *packages: str) -> dict[str, str]:
    """PYTHONPATH where importing ``packages`` fails, as on a host without them."""
    shadow = tmp_path / "shadow"
    for name in packages:
        (shadow / name).mkdir(parents=True)
        (shadow / name / "__init__.py").write_text(f"raise ImportError('no {name} here')\n")
    return {"PYTHONPATH": str(shadow)}


def test_falls_back_to_psycopg3(tasks_db, run_probe, tmp_path):
    # Past the PostgreSQL checks with psycopg2 hidden: the failure is the Coordinator's.
    url = coordinator_nowhere()
    run = run_probe({"coordinator_url": url, "prompt": "x", "timeout": 2, **pg_args(tasks_db)},
                    env=_shadow(tmp_path, "psycopg2"))
    assert run.msg.startswith(f"Coordinator unreachable at {url} ")


def test_no_driver_says_what_to_install(tasks_db, run_probe, tmp_path):
    run = run_probe({"coordinator_url": coordinator_nowhere(), "prompt": "x",
                     **pg_args(tasks_db)},
                    env=_shadow(tmp_path, "psycopg2", "psycopg"))
    assert run.failed
    assert run.msg == NO_DRIVER_MESSAGE.format(python=PYTHON)


@pytest.fixture(scope="module")
def pg_without_hba_line() -> Iterator[ThrowawayPostgres]:
    """Its own server, whose pg_hba.conf lets no one but ``postgres`` in over TCP."""
    with ThrowawayPostgres() as server:
        server.write_hba(["host all postgres 127.0.0.1/32 scram-sha-256"])
        server.reload()
        yield server


def test_missing_pg_hba_line(pg_without_hba_line, run_probe):
    server = pg_without_hba_line
    run = run_probe({"coordinator_url": coordinator_nowhere(), "prompt": "x",
                     **pg_args(TasksDb(server, "coordinator"))})
    assert run.failed
    assert run.msg == (
        f"PostgreSQL refused login for user coordinator at 127.0.0.1:{server.port}, database "
        f'coordinator: connection to server at "127.0.0.1", port {server.port} failed: '
        'FATAL:  no pg_hba.conf entry for host "127.0.0.1", user "coordinator", database '
        '"coordinator", no encryption; a pg_hba.conf line allowing this host is missing on '
        "the database server"
    )


def test_bad_url_fails_even_in_check_mode(tasks_db, run_probe):
    run = run_probe({"coordinator_url": "127.0.0.1:8000", "prompt": "x", **pg_args(tasks_db)},
                    check=True)
    assert run.failed
    assert run.msg == (
        "coordinator_url='127.0.0.1:8000' is not an http(s) URL: use e.g. http://ai-core:8000"
    )


def test_check_mode_checks_postgresql_routes_nothing_and_says_what_a_run_would_do(
        tasks_db, run_probe, sql_worker):
    before = sql_worker.count()
    url = coordinator_nowhere()
    run = run_probe({"coordinator_url": url + "/", "prompt": "x", "worker_host": "192.168.0.43",
                     "claimed_by_host": "macbookair", "timeout": 90, **pg_args(tasks_db)},
                    check=True)
    assert run.rc == 0, run.stdout + run.stderr
    assert run.result["changed"] is False and "task_id" not in run.result
    assert run.msg == (
        f"check mode: would route a web_search task through {url} and require it done in "
        f"PostgreSQL (user coordinator at 127.0.0.1:{tasks_db.port}, database {tasks_db.name}) "
        "within 90s, on 192.168.0.43, claimed by macbookair's own login worker_macbookair, "
        "without a fallback answer; nothing was routed")
    assert sql_worker.count() == before


def test_check_mode_fails_on_a_refused_login_as_a_run_does(tasks_db, run_probe):
    run = run_probe({"coordinator_url": coordinator_nowhere(), "prompt": "x",
                     "task_type": "chat", "target_worker": "macbookair",
                     "answered_model": "llama3.2:3b", "allow_fallback": True,
                     **pg_args(tasks_db, login_password="wrong-password")}, check=True)
    assert run.failed
    assert run.msg.startswith(f"PostgreSQL refused login for user coordinator at "
                              f"127.0.0.1:{tasks_db.port}, database {tasks_db.name}: ")
