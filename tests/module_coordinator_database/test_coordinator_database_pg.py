"""coordinator_database run by ansible-playbook against the session's throwaway PostgreSQL, as
the postgresql_access role runs it (as the superuser, over the server's Unix socket).

Roles belong to the whole server: each test names its roles and database with a prefix of its
own and drops them afterwards, so it meets no other test's.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import pytest

from lab.throwaway import ThrowawayPostgres, free_port
from module_utils.coordinator_contract import WORKER_GRANTS_TABLE

from ..library_kit import VENV_BIN, module_env
from ..module_coordinator_task.coordinator_task_harness import ProbeRun, finish_probe, start_probe

PASSWORD = "first-pässwort-4f1c"
NEW_PASSWORD = "second-password-9b2e"
WORKER_PASSWORDS = {"a": "worker-a-pw-71d3", "b": "worker-b-pw-08aa"}
SECRETS = (PASSWORD, NEW_PASSWORD, *WORKER_PASSWORDS.values())


@dataclass(frozen=True)
class Names:
    """One test's roles and database on the shared server."""

    pg: ThrowawayPostgres
    prefix: str
    owner: str
    user: str
    group: str
    database: str

    @classmethod
    def of(cls, pg: ThrowawayPostgres, prefix: str) -> Names:
        return cls(pg, prefix, owner=f"{prefix}_owner", user=f"{prefix}_coord",
                   group=f"{prefix}_workers", database=f"{prefix}_db")

    def login(self, host: str) -> str:
        return f"{self.prefix}_worker_{host}"

    def args(self, password: str = PASSWORD, hosts: tuple[str, ...] = ("a",)) -> dict:
        """The module's options as the role passes them, for worker hosts ``hosts``."""
        return {
            "login_unix_socket": str(self.pg.sockdir), "login_port": self.pg.port,
            "owner": self.owner, "user": self.user, "password": password,
            "worker_group": self.group, "database": self.database,
            "worker_logins": [{"host": host, "name": self.login(host),
                               "password": WORKER_PASSWORDS[host]} for host in hosts],
            "grants": [{"login": self.login(host), "host": host,
                        "worker_hosts": [f"192.0.2.{ord(host)}"], "queues": ["tasks:web"],
                        "worker_ids": [f"web-worker-{host}"]} for host in hosts],
        }

    def sql(self, statement: str, db: str = "postgres") -> str:
        return self.pg.psql(statement, db=db)

    def logs_in(self, user: str, password: str) -> bool:
        try:
            psycopg2.connect(host="127.0.0.1", port=self.pg.port, user=user, password=password,
                             dbname=self.database).close()
        except psycopg2.OperationalError as exc:
            assert "password authentication failed" in str(exc)
            return False
        return True

    def roles(self) -> str:
        return self.sql(f"SELECT string_agg(rolname, ' ' ORDER BY rolname) FROM pg_roles "
                        f"WHERE rolname LIKE '{self.prefix}\\_%'")


@pytest.fixture
def names(pg: ThrowawayPostgres, request: pytest.FixtureRequest) -> Iterator[Names]:
    made = Names.of(pg, "cdb_" + request.node.name.removeprefix("test_")[:24])

    def drop() -> None:
        made.sql(f"DROP DATABASE IF EXISTS {made.database} WITH (FORCE)")
        for role in made.roles().split():
            made.sql(f"DROP ROLE {role}")

    drop()
    yield made
    drop()


def run(tmp_path: Path, args: dict, check: bool = False) -> ProbeRun:
    done = finish_probe(start_probe(tmp_path, args, check=check, module="coordinator_database"))
    for secret in SECRETS:
        assert secret not in done.stdout + done.stderr
    assert "SCRAM-SHA-256$" not in done.stdout + done.stderr
    return done


def first_run_changes(names: Names) -> list[str]:
    return [
        f"role {names.owner}: created, NOLOGIN",
        f"role {names.group}: created, NOLOGIN",
        f"role {names.user}: created, LOGIN NOINHERIT, password set",
        f"role {names.login('a')} (host a): created, LOGIN, password set",
        f"role {names.user}: member of {names.owner}",
        f"role {names.group}: member of pg_read_all_stats",
        f"role {names.login('a')}: member of {names.group}",
        f"database {names.database}: created",
        f"grants: table {WORKER_GRANTS_TABLE} created",
        "grants: 1 row written",
    ]


def test_a_first_run_makes_everything_and_a_second_changes_nothing(names, tmp_path):
    first = run(tmp_path, names.args())
    assert (first.rc, first.result["changed"]) == (0, True)
    assert first.result["changes"] == first_run_changes(names)
    assert names.sql(
        "SELECT string_agg(format('%s %s %s', rolname, rolcanlogin, rolinherit), ', ' "
        f"ORDER BY rolname) FROM pg_roles WHERE rolname LIKE '{names.prefix}\\_%'") == (
        f"{names.user} t f, {names.owner} f t, {names.login('a')} t t, {names.group} f t")
    members = names.sql(
        "SELECT string_agg(g.rolname || ' ' || r.rolname, ', ' ORDER BY g.rolname) FROM"
        " pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid JOIN pg_roles r ON r.oid = m.member"
        f" WHERE r.rolname LIKE '{names.prefix}\\_%'")
    assert members == (f"{names.owner} {names.user}, {names.group} {names.login('a')}, "
                       f"pg_read_all_stats {names.group}")
    assert names.sql(
        "SELECT pg_get_userbyid(datdba), pg_encoding_to_char(encoding), datcollate, datctype "
        f"FROM pg_database WHERE datname = '{names.database}'") == (
        f"{names.owner}|UTF8|C.UTF-8|C.UTF-8")
    assert names.sql(f"SELECT pg_get_userbyid(relowner), login, host, queues FROM "
                     f"{WORKER_GRANTS_TABLE}, pg_class WHERE relname = '{WORKER_GRANTS_TABLE}'",
                     db=names.database) == f"{names.owner}|{names.login('a')}|a|{{tasks:web}}"
    assert names.logs_in(names.user, PASSWORD)
    assert names.logs_in(names.login("a"), WORKER_PASSWORDS["a"])

    second = run(tmp_path, names.args())
    assert (second.rc, second.result["changed"], second.result["changes"]) == (0, False, [])


def test_check_mode_changes_nothing_and_says_what_a_run_would(names, tmp_path):
    checked = run(tmp_path, names.args(), check=True)
    assert (checked.rc, checked.result["changed"]) == (0, True)
    assert checked.result["changes"] == first_run_changes(names)
    assert names.roles() == ""
    assert names.sql(f"SELECT count(*) FROM pg_database WHERE datname = '{names.database}'") == "0"

    run(tmp_path, names.args())
    checked = run(tmp_path, names.args(password=NEW_PASSWORD, hosts=("a", "b")), check=True)
    assert checked.result["changes"] == [
        f"role {names.user}: password set",
        f"role {names.login('b')} (host b): created, LOGIN, password set",
        f"role {names.login('b')}: member of {names.group}",
        "grants: 1 row written",
    ]
    assert names.logs_in(names.user, PASSWORD)
    assert names.login("b") not in names.roles()
    assert names.sql(f"SELECT count(*) FROM {WORKER_GRANTS_TABLE}", db=names.database) == "1"


def test_a_new_password_is_set_and_the_old_one_no_longer_logs_in(names, tmp_path):
    run(tmp_path, names.args())
    changed = run(tmp_path, names.args(password=NEW_PASSWORD))
    assert changed.result["changes"] == [f"role {names.user}: password set"]
    assert names.logs_in(names.user, NEW_PASSWORD)
    assert not names.logs_in(names.user, PASSWORD)
    assert run(tmp_path, names.args(password=NEW_PASSWORD)).result["changed"] is False


def test_a_worker_login_left_out_is_dropped_with_its_grant(names, tmp_path):
    run(tmp_path, names.args(hosts=("a", "b")))
    assert names.logs_in(names.login("b"), WORKER_PASSWORDS["b"])
    dropped = run(tmp_path, names.args(hosts=("a",)))
    assert dropped.result["changes"] == [f"login {names.login('b')}: dropped",
                                         "grants: 1 row written"]
    assert names.login("b") not in names.roles()
    assert names.sql(f"SELECT string_agg(login, ' ') FROM {WORKER_GRANTS_TABLE}",
                     db=names.database) == names.login("a")
    assert not names.logs_in(names.login("b"), WORKER_PASSWORDS["b"])


def test_a_table_the_coordinators_login_owns_is_given_to_the_owner(names, tmp_path):
    run(tmp_path, names.args())
    names.sql(f"CREATE TABLE legacy (id int); ALTER TABLE legacy OWNER TO {names.user}",
              db=names.database)
    reassigned = run(tmp_path, names.args())
    assert reassigned.result["changes"] == [
        f"database {names.database}: relations of {names.user} given to {names.owner} (1)"]
    assert names.sql("SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = 'legacy'",
                     db=names.database) == names.owner


def test_a_database_with_another_encoding_fails_and_nothing_changes(names, tmp_path):
    names.sql(f"CREATE DATABASE {names.database} ENCODING 'SQL_ASCII' LC_COLLATE 'C' "
              "LC_CTYPE 'C' TEMPLATE template0")
    failed = run(tmp_path, names.args())
    assert failed.rc != 0
    assert (failed.result["failed"], failed.result["changed"]) == (True, False)
    assert failed.msg == (
        f"database {names.database} has encoding SQL_ASCII, lc_collate C, lc_ctype C; wanted "
        "are encoding UTF8, lc_collate C.UTF-8, lc_ctype C.UTF-8, which PostgreSQL cannot "
        "change in place. Nothing was changed: dump the database, drop it, run again to "
        "create it and restore the dump into it")
    assert names.roles() == ""


def test_no_password_reaches_the_output_at_vvv_with_diff(names, tmp_path):
    run(tmp_path, names.args())
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "database", "coordinator_database": names.args(password=NEW_PASSWORD)}]}]
    (tmp_path / "verbose.yml").write_text(json.dumps(play))
    shown = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e",
         f"ansible_python_interpreter={VENV_BIN / 'python'}", "-vvv", "--diff", "verbose.yml"],
        cwd=tmp_path, env=module_env(tmp_path, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default"),
        capture_output=True, text=True, timeout=180, check=False)
    output = shown.stdout + shown.stderr
    assert shown.returncode == 0, output
    # The task ran, changed the password and showed its diff, and named no secret.
    assert f"role {names.user}: password set" in output
    assert f"+role {names.user}: LOGIN NOINHERIT, the given password" in output
    for secret in SECRETS:
        assert secret not in output
    assert "SCRAM-SHA-256$" not in output


def test_a_statement_postgresql_refuses_stops_the_run_saying_which(names, tmp_path):
    run(tmp_path, names.args(hosts=("a", "b")))
    # A login that owns something cannot be dropped; what ran before it is reported.
    names.sql(f"CREATE TABLE kept (id int); ALTER TABLE kept OWNER TO {names.login('b')}",
              db=names.database)
    failed = run(tmp_path, names.args(password=NEW_PASSWORD, hosts=("a",)))
    assert failed.rc != 0
    assert failed.msg == (
        f"login {names.login('b')}: dropped: PostgreSQL refused it: role "
        f'"{names.login("b")}" cannot be dropped because some objects depend on it')
    assert (failed.result["changed"], failed.result["changes"]) == (
        True, [f"role {names.user}: password set"])
    assert names.login("b") in names.roles().split()


def test_a_server_not_there_fails_naming_where_it_was_looked_for(names, tmp_path):
    port = free_port()
    failed = run(tmp_path, names.args() | {"login_port": port})
    assert failed.msg == (
        f"cannot connect to PostgreSQL as postgres (socket directory {names.pg.sockdir}, port "
        f'{port}, database postgres): connection to server on socket "{names.pg.sockdir}/'
        f'.s.PGSQL.{port}" failed: No such file or directory')
