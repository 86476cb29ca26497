"""The postgresql_access role's backup script (templates/coordinator-backup.sh.j2) as its
service runs it, against a real PostgreSQL: a dump pg_restore reads, the newest KEEP kept; a
dump that fails says pg_dump's error, exits non-zero (the service is then `failed`) and
removes no older dump and leaves no half-written one. The lab runs it under its timer
(tests/migrate/test_backup.py)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from lab.drive import REPO
from lab.throwaway import DB_NAME
from tests.conftest import create_schema

TEMPLATE = REPO / "roles/postgresql_access/templates/coordinator-backup.sh.j2"
DATABASE = "backup_script"
OLD = [f"{DATABASE}-20200101T033000Z.dump", f"{DATABASE}-20200102T033000Z.dump"]


@pytest.fixture(scope="module")
def database(pg) -> str:
    """A database of the session's server with the Coordinator's schema and a task."""
    pg.psql(f"DROP DATABASE IF EXISTS {DATABASE}", db="postgres")
    pg.psql(f"CREATE DATABASE {DATABASE}", db="postgres")
    create_schema(pg.admin_dsn.replace(f"dbname={DB_NAME}", f"dbname={DATABASE}"))
    pg.psql("INSERT INTO tasks (id, task_type, prompt) VALUES (gen_random_uuid(), 'chat', 'p')",
            db=DATABASE)
    return DATABASE


def recorded(pg, database: str) -> list[str]:
    return pg.psql("SELECT file || ' ' || bytes FROM backups ORDER BY finished_at",
                   db=database).splitlines()


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "coordinator-backup"
    path.write_text(TEMPLATE.read_text().replace("{{ ansible_managed }}", "managed"))
    path.chmod(0o755)
    return path


def run(script: Path, pg, directory: Path, database: str, keep: int
        ) -> subprocess.CompletedProcess[str]:
    # As the unit gives it: the server's socket and port, pg_dump on PATH; the superuser by
    # name, as peer authentication makes postgres the unit's user.
    env = {**os.environ, "PGHOST": str(pg.sockdir), "PGPORT": str(pg.port), "PGUSER": "postgres",
           "PATH": f"{pg.bindir}:{os.environ['PATH']}"}
    return subprocess.run([str(script), str(directory), database, str(keep)], env=env,
                          capture_output=True, text=True, check=False)


def dumps(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def test_a_dump_is_written_whole_and_the_newest_are_kept(script, pg, database,
                                                          tmp_path) -> None:
    directory = tmp_path / "backups"
    directory.mkdir()
    for name in [*OLD, f"{database}-20191231T033000Z.dump.partial"]:
        (directory / name).write_bytes(b"")
    done = run(script, pg, directory, database, 2)
    assert done.returncode == 0, done.stderr
    made = re.fullmatch(rf"dumped {database} to (\S+) \((\d+) bytes\)\nremoved (\S+) \(the "
                        r"newest 2 are kept\)\n", done.stdout)
    assert made, done.stdout
    assert dumps(directory) == [OLD[1], Path(made[1]).name]
    assert made[3] == OLD[0]
    dump = Path(made[1])
    assert dump.stat().st_size == int(made[2]) and oct(dump.stat().st_mode & 0o777) == "0o600"
    listed = subprocess.run([str(pg.bindir / "pg_restore"), "--list", str(dump)],
                            capture_output=True, text=True, check=True).stdout
    assert re.search(r"TABLE DATA public tasks ", listed), listed
    assert recorded(pg, database)[-1] == f"{dump} {made[2]}"


def test_a_failed_dump_says_why_and_removes_nothing(script, pg, tmp_path) -> None:
    directory = tmp_path / "backups"
    directory.mkdir()
    for name in OLD:
        (directory / name).write_bytes(b"")
    failed = run(script, pg, directory, "no_such_database", 1)
    assert failed.returncode != 0
    assert 'database "no_such_database" does not exist' in failed.stderr, failed.stderr
    assert failed.stdout == ""
    assert dumps(directory) == OLD  # none removed, no .partial left


def test_a_dump_it_cannot_record_fails_the_run_and_is_kept(script, pg, tmp_path) -> None:
    """A database without the Coordinator's schema (no table backups): the dump is whole and
    stays, the run fails with psql's error (the service shows failed now, not only in the
    stale-backup alert a day later), and no older dump is removed."""
    bare = f"{DATABASE}_bare"
    pg.psql(f"DROP DATABASE IF EXISTS {bare}", db="postgres")
    pg.psql(f"CREATE DATABASE {bare}", db="postgres")
    directory = tmp_path / "backups"
    directory.mkdir()
    old = [name.replace(DATABASE, bare) for name in OLD]
    for name in old:
        (directory / name).write_bytes(b"")
    failed = run(script, pg, directory, bare, 1)
    assert failed.returncode != 0
    assert 'relation "backups" does not exist' in failed.stderr, failed.stderr
    made = sorted(set(dumps(directory)) - set(old))
    assert len(made) == 1 and made[0].endswith(".dump"), dumps(directory)
    assert f"dumped {bare} to {directory / made[0]} (" in failed.stdout
