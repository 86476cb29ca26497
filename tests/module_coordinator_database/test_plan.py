"""coordinator_database without a server: the password check against verifiers PostgreSQL
made, the plan for each kind of difference, and the documentation against the code."""

from __future__ import annotations

from typing import Any

import pytest

from module_utils.coordinator_contract import (
    WORKER_GRANTS_DDL,
    WORKER_GRANTS_TABLE,
    WORKER_GRANTS_WRITE_SQL,
)

from ..filter_kit import REPO, load
from ..library_kit import documented_as_coded, load_module

cdb = load_module("coordinator_database")
pg_role = load(REPO / "roles" / "postgresql_access" / "filter_plugins" / "pg_hba.py")

# rolpassword of each password, as PostgreSQL 15 stored it (password_encryption scram-sha-256).
VERIFIERS = {
    "pässwörd": "SCRAM-SHA-256$4096:spIsYEVlShN5A8qsB/8SiQ==$9Bia5vV7nEyWttF8EvRzwd/9Ppl6Eya+rtg/"
                "TqrMD/Q=:8kZp8XCiyRDsgionqV8+3xF06lz3q29C08AgN8hW380=",
    # A no-break space (hashed as a space), a soft hyphen (dropped), a fullwidth A (NFKC: A).
    "a\u00a0b\u00adc\uff21": "SCRAM-SHA-256$4096:fJmeWgcOJi95EmvHOURIvw==$t6xS9u3WMwKU+9iamuHN"
                             "59tVZc9HBepKfipz2F6wyoc=:lJauu/bSuKlsgFlij7vomG4aU5IgapV4l49yjj+lvP8=",
    # A left-to-right mark is prohibited: PostgreSQL hashes the password as given.
    "\u200e\u00e9": "SCRAM-SHA-256$4096:SVZlsACYjsYD47hTM7mVPQ==$lIWf+0RU8zmqErNemRVJNVEIY2L7anwg"
                    "WiJephh7yZY=:qjtQzm3ExtaUvIvH7XP/fHcg/bo3fNZesbw66+wktIs=",
    # Right-to-left letters ending in a Latin one break the bidirectional rule: as given too.
    "\u0627\u0628c": "SCRAM-SHA-256$4096:lbmEav4yf+oZ6zNgEJT3bw==$r3pPAdsc+4cNtsifBnrAxwmeEl/ivPU9"
                     "N77e7xQ1iHg=:EFHya/xQ4nD52y9H3cCE4Mibd167EOk8Jgiut/k2PHo=",
}
PASSWORD = "pässwörd"
VERIFIER = VERIFIERS[PASSWORD]
OTHER_VERIFIER = VERIFIERS["a\u00a0b\u00adc\uff21"]

GRANT_A = {"login": "worker_a", "host": "a", "worker_hosts": ["192.0.2.1"],
           "queues": ["tasks:web"], "worker_ids": ["web-worker-a"]}


def desired(**changes: Any) -> Any:
    values = {"owner": "owner", "user": "coord", "password": PASSWORD, "worker_group": "workers",
              "database": "db", "encoding": "UTF-8", "lc_collate": "C.UTF-8",
              "lc_ctype": "C.UTF-8", "logins": (cdb.Login("worker_a", PASSWORD, "a"),),
              "grants": (GRANT_A,)}
    return cdb.Desired(**(values | changes))


def converged(**changes: Any) -> dict[str, Any]:
    """The state a run of ``desired()`` leaves, with ``changes``."""
    state = {
        "members": {"owner": ["coord"], "workers": ["worker_a"],
                    "pg_read_all_stats": ["pg_monitor", "workers"]},
        "roles": {"owner": {"login": False, "inherit": True, "password": None},
                  "workers": {"login": False, "inherit": True, "password": None},
                  "coord": {"login": True, "inherit": False, "password": VERIFIER},
                  "worker_a": {"login": True, "inherit": True, "password": VERIFIER}},
        "encoding": "UTF8",
        "database": {"owner": "owner", "encoding": "UTF8", "lc_collate": "C.UTF-8",
                     "lc_ctype": "C.UTF-8"},
        "owned": 0,
        "grants": {"worker_a": GRANT_A},
    }
    return state | changes


def lines(actions) -> list[str]:
    return [action.line for action in actions]


@pytest.mark.parametrize("password", sorted(VERIFIERS))
def test_a_verifier_postgresql_made_verifies_its_password_only(password):
    assert cdb.scram_verifies(VERIFIERS[password], password)
    assert not cdb.scram_verifies(VERIFIERS[password], password + "x")


@pytest.mark.parametrize("stored", [
    None, "", "md5" + "0" * 32, "SCRAM-SHA-256$4096:!!$x:y",
    VERIFIER.replace("$4096:", "$4097:"),
])
def test_no_verifier_an_md5_hash_or_a_damaged_one_verifies_nothing(stored):
    assert not cdb.scram_verifies(stored, PASSWORD)


def test_a_converged_state_needs_nothing():
    assert cdb.plan(converged(), desired()) == []


def test_an_empty_server_gets_everything_in_order():
    state = {"members": {}, "roles": {}, "encoding": "UTF8", "database": None,
             **cdb.NEW_DATABASE}
    actions = cdb.plan(state, desired())
    assert lines(actions) == [
        "role owner: created, NOLOGIN",
        "role workers: created, NOLOGIN",
        "role coord: created, LOGIN NOINHERIT, password set",
        "role worker_a (host a): created, LOGIN, password set",
        "role coord: member of owner",
        "role workers: member of pg_read_all_stats",
        "role worker_a: member of workers",
        "database db: created",
        f"grants: table {WORKER_GRANTS_TABLE} created",
        "grants: 1 row written",
    ]
    assert [action.sql for action in actions[:4]] == [
        'CREATE ROLE "owner" NOLOGIN',
        'CREATE ROLE "workers" NOLOGIN',
        'CREATE ROLE "coord" LOGIN NOINHERIT PASSWORD %(password)s',
        'CREATE ROLE "worker_a" LOGIN PASSWORD %(password)s',
    ]
    create = actions[7]
    assert create.sql == ('CREATE DATABASE "db" OWNER "owner" ENCODING %(encoding)s '
                          "LC_COLLATE %(lc_collate)s LC_CTYPE %(lc_ctype)s TEMPLATE template0")
    assert create.args == {"encoding": "UTF-8", "lc_collate": "C.UTF-8", "lc_ctype": "C.UTF-8"}
    table, write = actions[8:]
    assert (table.sql, table.role, table.in_database) == (WORKER_GRANTS_DDL, "owner", True)
    assert (write.sql, write.role, write.in_database) == (WORKER_GRANTS_WRITE_SQL, "owner", True)
    assert write.args == {"grants": '[{"login": "worker_a", "host": "a", "worker_hosts": '
                                    '["192.0.2.1"], "queues": ["tasks:web"], "worker_ids": '
                                    '["web-worker-a"]}]'}
    assert [action.in_database for action in actions].count(True) == 2
    # The passwords travel as parameters only; no line, statement or repr holds one.
    text = repr(actions) + repr(desired()) + "".join(a.sql + a.line for a in actions)
    assert PASSWORD not in text


def test_another_password_or_none_is_set_and_attributes_are_put_right():
    state = converged()
    state["roles"] = {**state["roles"],
                      "owner": {"login": True, "inherit": True, "password": None},
                      "coord": {"login": True, "inherit": True, "password": OTHER_VERIFIER},
                      "worker_a": {"login": False, "inherit": True, "password": None}}
    actions = cdb.plan(state, desired())
    assert [(action.line, action.sql) for action in actions] == [
        ("role owner: NOLOGIN", 'ALTER ROLE "owner" NOLOGIN'),
        ("role coord: NOINHERIT, password set",
         'ALTER ROLE "coord" NOINHERIT PASSWORD %(password)s'),
        ("role worker_a (host a): LOGIN, password set",
         'ALTER ROLE "worker_a" LOGIN PASSWORD %(password)s'),
    ]
    assert [action.args for action in actions] == [{}, {"password": PASSWORD},
                                                    {"password": PASSWORD}]


def test_an_md5_hash_is_replaced_by_a_scram_verifier():
    state = converged()
    state["roles"] = {**state["roles"],
                      "coord": {"login": True, "inherit": False, "password": "md5" + "0" * 32}}
    assert lines(cdb.plan(state, desired())) == ["role coord: password set"]


def test_a_member_of_the_workers_group_left_out_is_dropped_and_its_grant_deleted():
    state = converged(members={**converged()["members"], "workers": ["worker_a", "worker_old"]},
                      grants={"worker_a": GRANT_A, "worker_old": GRANT_A | {"login": "old"}})
    actions = cdb.plan(state, desired())
    assert [(action.line, action.sql) for action in actions] == [
        ("login worker_old: dropped", 'DROP ROLE "worker_old"'),
        ("grants: 1 row written", WORKER_GRANTS_WRITE_SQL),
    ]


def test_without_worker_logins_every_member_is_dropped_and_the_grants_emptied():
    actions = cdb.plan(converged(), desired(logins=(), grants=()))
    assert lines(actions) == ["login worker_a: dropped", "grants: 1 row written"]
    assert actions[-1].args == {"grants": "[]"}


def test_missing_memberships_are_granted():
    state = converged(members={"workers": ["worker_a"]})
    actions = cdb.plan(state, desired())
    assert [(action.line, action.sql) for action in actions] == [
        ("role coord: member of owner", 'GRANT "owner" TO "coord"'),
        ("role workers: member of pg_read_all_stats", 'GRANT "pg_read_all_stats" TO "workers"'),
    ]


def test_a_database_of_another_owner_is_given_and_the_logins_relations_reassigned():
    state = converged(database={**converged()["database"], "owner": "coord"}, owned=3)
    actions = cdb.plan(state, desired())
    assert [(action.line, action.sql, action.in_database) for action in actions] == [
        ("database db: owner owner (was coord)", 'ALTER DATABASE "db" OWNER TO "owner"', False),
        ("database db: relations of coord given to owner (3)",
         'REASSIGN OWNED BY "coord" TO "owner"', True),
    ]


@pytest.mark.parametrize(("current", "count"), [
    ({}, 1),
    ({"worker_a": GRANT_A | {"queues": ["tasks:web", "tasks:cpu:a"]}}, 1),
    ({"worker_a": GRANT_A | {"worker_hosts": []}, "worker_b": GRANT_A}, 2),
])
def test_grants_count_the_rows_the_statement_writes(current, count):
    actions = cdb.plan(converged(grants=current), desired())
    assert lines(actions) == [cdb.grants_line(count)]
    assert actions[0].counted is cdb.grants_line


def test_a_missing_table_is_made_even_with_no_grant_to_write():
    assert lines(cdb.plan(converged(grants=None), desired(grants=()))) == [
        f"grants: table {WORKER_GRANTS_TABLE} created"]


def test_a_database_with_another_encoding_stops_the_plan_with_what_it_has():
    state = converged(database={"owner": "coord", "encoding": "SQL_ASCII", "lc_collate": "C",
                                "lc_ctype": "C"}, members={})
    with pytest.raises(cdb.CannotRun) as stopped:
        cdb.plan(state, desired())
    assert str(stopped.value) == (
        "database db has encoding SQL_ASCII, lc_collate C, lc_ctype C; wanted are encoding "
        "UTF8, lc_collate C.UTF-8, lc_ctype C.UTF-8, which PostgreSQL cannot change in place. "
        "Nothing was changed: dump the database, drop it, run again to create it and restore "
        "the dump into it")


def test_an_encoding_postgresql_does_not_know_stops_the_plan():
    with pytest.raises(cdb.CannotRun, match="encoding 'UTF-9' is not one PostgreSQL knows"):
        cdb.plan(converged(encoding=""), desired(encoding="UTF-9"))


def test_identifiers_are_quoted_for_sql_and_for_psycopg2_parameters():
    assert cdb.ident('we"ird%name') == '"we""ird%%name"'


def test_an_empty_password_is_refused_before_connecting():
    assert cdb.desired_problem(desired(password="")) == (
        "password is empty: give coord the password the Coordinator logs in with")
    assert cdb.desired_problem(desired(logins=(cdb.Login("worker_a", ""),))) == (
        "worker_logins: the password of worker_a is empty")
    assert cdb.desired_problem(desired()) is None


def test_the_diff_shows_what_changes_and_no_secret():
    state = converged(members={**converged()["members"], "workers": ["worker_a", "worker_old"]})
    state["roles"] = {**state["roles"],
                      "coord": {"login": True, "inherit": False, "password": OTHER_VERIFIER},
                      "worker_old": {"login": True, "inherit": True, "password": VERIFIER}}
    shown = cdb.diff(state, desired())
    before, after = shown["before"].splitlines(), shown["after"].splitlines()
    assert sorted(set(before) - set(after)) == [
        "members of workers: worker_a, worker_old",
        "role coord: LOGIN NOINHERIT, another password",
        "role worker_old: LOGIN",
    ]
    assert sorted(set(after) - set(before)) == [
        "members of workers: worker_a",
        "role coord: LOGIN NOINHERIT, the given password",
    ]
    assert ("grant worker_a: host a, queues tasks:web, worker_ids web-worker-a, worker_hosts "
            "192.0.2.1") in after
    for secret in (PASSWORD, VERIFIER, OTHER_VERIFIER, "SCRAM"):
        assert secret not in shown["before"] + shown["after"]


def test_documentation_matches_the_code():
    doc = documented_as_coded("coordinator_database")
    spec = cdb.argument_spec()
    options = doc["doc"]["options"]
    for name in ("worker_logins", "grants"):
        documented, coded = options[name]["suboptions"], spec[name]["options"]
        assert sorted(documented) == sorted(coded)
        for sub, option in coded.items():
            assert documented[sub]["type"] == option["type"], (name, sub)
            assert documented[sub].get("required", False) == option.get("required", False)
    secret = {name for name, option in spec.items() if option.get("no_log")}
    secret |= {f"worker_logins.{name}" for name, option in spec["worker_logins"]["options"].items()
               if option.get("no_log")}
    assert secret == {"password", "worker_logins.password"}
    assert sorted(doc["return"]) == ["changes"]


def test_the_roles_logins_and_grants_are_what_the_module_takes():
    # Ansible refuses a key the suboptions do not name: the role's filters give exactly those.
    spec = cdb.argument_spec()
    (login,) = pg_role.worker_db_logins(["lab-a"], "key")
    assert sorted(login) == sorted(spec["worker_logins"]["options"])
    grant = {"host": "lab-a", "queues": ["tasks:web"], "worker_ids": ["web-worker-lab-a"],
             "worker_hosts": ["192.0.2.1"]}
    (row,) = pg_role.worker_db_grants([grant], ["lab-a"])
    assert sorted(row) == sorted(spec["grants"]["options"])
