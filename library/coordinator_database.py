#!/usr/bin/python
# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: the Coordinator's roles, database and workers' grants, in one session."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: coordinator_database
short_description: The Coordinator's PostgreSQL roles, database and workers' grants in one run
description:
  - Makes a PostgreSQL server hold what the Coordinator and its workers need (docs/design.md,
    "Privileges"), in one module run over one connection (and one more to the Coordinator's
    database), where M(community.postgresql.postgresql_user),
    M(community.postgresql.postgresql_membership), M(community.postgresql.postgresql_db),
    M(community.postgresql.postgresql_owner) and M(community.postgresql.postgresql_query)
    would take a module run each, a role or a statement at a time.
  - It reads the whole state first, decides what differs, and changes only that, each change
    one statement; a second run with the same options reports C(changed=false).
  - "What it makes true: the owner role O(owner) and the workers' group role O(worker_group)
    exist and cannot log in; the Coordinator's login O(user) can log in, does not inherit,
    and has O(password); each login of O(worker_logins) can log in with its password; every
    other member of O(worker_group) is dropped, so a host's password stops working when it
    leaves the worker groups; O(user) is a member of O(owner), O(worker_group) of
    C(pg_read_all_stats) and each worker login of O(worker_group)."
  - "In the database O(database) (created from C(template0) with O(encoding), O(lc_collate)
    and O(lc_ctype), else given to O(owner)): the relations O(user) still owns are given to
    O(owner) (C(REASSIGN OWNED)), and, as O(owner) (C(SET ROLE)), the grants table
    C(worker_grants) is made if missing and made to hold exactly O(grants), with the
    statements of C(coordinator_contract) (C(WORKER_GRANTS_DDL), C(WORKER_GRANTS_WRITE_SQL))
    that the Coordinator's schema shares."
  - A password is set only when the role's stored SCRAM verifier (C(pg_authid.rolpassword))
    does not verify it (RFC 5802, RFC 7677, after SASLprep as PostgreSQL does it) or is no
    SCRAM verifier; the session then hashes it with O(password_encryption).
  - An existing database with another encoding or collation fails the task before anything
    is changed, with what it has and what is wanted; PostgreSQL cannot change those in place.
version_added: "0.6.0"
author:
  - Coordinator cluster contributors (@coordinator-cluster)
options:
  login_user:
    description:
      - PostgreSQL role to connect as; it must be a superuser (it reads C(pg_authid) and
        creates roles and databases). The default is the server's own, as the user that
        C(become_user=postgres) makes the module run as.
    type: str
    default: postgres
  login_unix_socket:
    description:
      - Directory of the server's Unix domain socket.
      - Empty means libpq's default.
    type: str
    default: ''
  login_port:
    description:
      - Port of the server (also the name of its socket file).
    type: int
    default: 5432
  login_db:
    description:
      - Database to connect to for the roles and O(database) itself.
    type: str
    default: postgres
  owner:
    description:
      - The role that owns O(database) and its schema. It cannot log in.
    type: str
    required: true
  user:
    description:
      - The Coordinator's login role. It can log in, does not inherit (it acts as O(owner)
        only through C(SET ROLE)), and is a member of O(owner).
    type: str
    required: true
  password:
    description:
      - Password of O(user). Never logged nor returned.
    type: str
    required: true
  password_encryption:
    description:
      - How the session hashes a password it sets (PostgreSQL's C(password_encryption)). Only
        SCRAM is supported, because the module decides whether a password differs by
        verifying it against the stored SCRAM verifier.
    type: str
    default: scram-sha-256
    choices: [scram-sha-256]
  worker_group:
    description:
      - The group role the schema grants the workers' rights to
        (C(coordinator_contract.WORKER_DB_GROUP)). It cannot log in; it is made a member of
        C(pg_read_all_stats), whose addresses in C(pg_stat_activity) let a worker name the
        session that holds its lock.
    type: str
    required: true
  worker_logins:
    description:
      - The worker hosts' own logins, each a member of O(worker_group). A member of
        O(worker_group) not in this list is dropped.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The login role (C(coordinator_contract.worker_db_role)).
        type: str
        required: true
      password:
        description: Its password. Never logged nor returned.
        type: str
        required: true
      host:
        description: The worker host it belongs to; named with the login in RV(changes).
        type: str
  database:
    description:
      - The Coordinator's database, owned by O(owner).
    type: str
    required: true
  encoding:
    description:
      - Encoding O(database) is created with, and must have.
    type: str
    default: UTF-8
  lc_collate:
    description:
      - Collation O(database) is created with, and must have.
    type: str
    default: C.UTF-8
  lc_ctype:
    description:
      - Character classification O(database) is created with, and must have.
    type: str
    default: C.UTF-8
  grants:
    description:
      - The rows the table C(worker_grants) of O(database) must hold, exactly, one a worker
        login (the C(postgresql_access) role's C(worker_db_grants) filter). Rows of other
        logins are deleted.
    type: list
    elements: dict
    default: []
    suboptions:
      login:
        description: The worker login the row holds.
        type: str
        required: true
      host:
        description: Its host's inventory name.
        type: str
        required: true
      worker_hosts:
        description: The C(WORKER_HOST) values its workers may write.
        type: list
        elements: str
        required: true
      queues:
        description: The queues its workers may take tasks from.
        type: list
        elements: str
        required: true
      worker_ids:
        description: The worker ids its workers may write.
        type: list
        elements: str
        required: true
attributes:
  check_mode:
    support: full
    details: Reads everything and changes nothing; RV(changes) lists what a run would change.
  diff_mode:
    support: full
    details: >-
      Shows the roles (attributes, and whether the password is the given one), the
      memberships, the database, the relations O(user) owns and the rows of C(worker_grants),
      as they are and as they will be; never a password nor a verifier.
notes:
  - Needs C(psycopg2) importable by the Python that runs the module on the database host
    (Debian's C(python3-psycopg2), which the C(postgresql_access) role installs).
  - Statements run one at a time with autocommit (C(CREATE DATABASE) needs it); a failed one
    stops the run, and RV(changes) lists the ones done before it.
requirements:
  - psycopg2
seealso:
  - module: community.postgresql.postgresql_user
  - module: community.postgresql.postgresql_membership
  - module: community.postgresql.postgresql_db
  - name: SCRAM secrets in pg_authid
    description: The format of the stored verifier the module checks a password against.
    link: https://www.postgresql.org/docs/current/catalog-pg-authid.html
extends_documentation_fragment:
  - module_attributes
"""

EXAMPLES = r"""
- name: The Coordinator's roles, database and the workers' grants
  coordinator_database:
    login_unix_socket: /var/run/postgresql
    owner: coordinator_owner
    user: coordinator
    password: "{{ vault_coordinator_db_password }}"
    worker_group: coordinator_workers
    worker_logins:
      - host: macbookair
        name: worker_macbookair
        password: "{{ macbookair_db_password }}"
    database: coordinator
    grants:
      - login: worker_macbookair
        host: macbookair
        worker_hosts: [192.168.0.43]
        queues: [tasks:web]
        worker_ids: [web-worker-macbookair]
  become: true
  become_user: postgres
  register: database

- name: Say what changed
  ansible.builtin.debug:
    var: database.changes
"""

RETURN = r"""
changes:
  description:
    - One line per change made (in check mode, that a run would make), in the order made;
      empty when nothing differed. Never a password.
  returned: always
  type: list
  elements: str
  sample:
    - "role worker_lab_x (host lab-x): password set"
    - "login worker_old: dropped"
    - "database coordinator: created"
    - "grants: 2 rows written"
"""

import base64
import hashlib
import hmac
import json
import re
import stringprep
import traceback
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.coordinator_contract import (
    WORKER_GRANTS_DDL,
    WORKER_GRANTS_TABLE,
    WORKER_GRANTS_WRITE_SQL,
)

try:
    import psycopg2
except ImportError:
    PSYCOPG2_ERROR: str | None = traceback.format_exc()
else:
    PSYCOPG2_ERROR = None

APPLICATION_NAME = "coordinator_database"
# Workers name the process holding a worker's lock (another host's session) from
# pg_stat_activity, whose addresses only this predefined role shows.
STATS_ROLE = "pg_read_all_stats"
# The shape of a SCRAM verifier in pg_authid.rolpassword (RFC 5803): the mechanism's name,
# then the iteration count and salt, then the stored key and server key, base64.
SCRAM_VERIFIER = re.compile(
    r"^SCRAM-SHA-256\$(\d+):([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+):([A-Za-z0-9+/=]+)$")


class CannotRun(Exception):
    """Why the module stops before changing anything, worded for the user."""


class ApplyError(Exception):
    """A statement PostgreSQL refused; ``done`` holds the lines of those run before it."""

    def __init__(self, message: str, done: list[str]) -> None:
        super().__init__(message)
        self.done = done


# -- what is wanted ------------------------------------------------------------------------


@dataclass(frozen=True)
class Login:
    name: str
    password: str = field(repr=False)
    host: str | None = None

    @property
    def label(self) -> str:
        return f"{self.name} (host {self.host})" if self.host else self.name


@dataclass(frozen=True)
class Desired:
    owner: str
    user: str
    password: str = field(repr=False)
    worker_group: str
    database: str
    encoding: str
    lc_collate: str
    lc_ctype: str
    logins: tuple[Login, ...] = ()
    grants: tuple[Mapping[str, Any], ...] = ()


def desired_from(params: Mapping[str, Any]) -> Desired:
    return Desired(
        owner=params["owner"], user=params["user"], password=params["password"],
        worker_group=params["worker_group"], database=params["database"],
        logins=tuple(Login(login["name"], login["password"], login.get("host"))
                     for login in params["worker_logins"]),
        grants=tuple(params["grants"]), encoding=params["encoding"],
        lc_collate=params["lc_collate"], lc_ctype=params["lc_ctype"])


def desired_problem(desired: Desired) -> str | None:
    """Why the options cannot be made true, or None."""
    if not desired.password:
        return f"password is empty: give {desired.user} the password the Coordinator logs in with"
    for login in desired.logins:
        if not login.password:
            return f"worker_logins: the password of {login.name} is empty"
    return None


# -- passwords -------------------------------------------------------------------------------


def saslprep(password: str) -> str:
    """``password`` as PostgreSQL hashes it (pg_saslprep in src/common/saslprep.c, RFC 4013):
    an ASCII one as it is; otherwise non-ASCII spaces made spaces, what RFC 3454 maps to
    nothing dropped, then NFKC. When what is left is empty, holds a prohibited or unassigned
    character or breaks the rule of bidirectional strings, PostgreSQL hashes the password as
    given, and so does this (it checks the mapped characters, as PostgreSQL does)."""
    if password.isascii():
        return password
    mapped = [" " if stringprep.in_table_c12(char) else char for char in password
              if stringprep.in_table_c12(char) or not stringprep.in_table_b1(char)]
    prohibited = (stringprep.in_table_c21_c22, stringprep.in_table_c3, stringprep.in_table_c4,
                  stringprep.in_table_c5, stringprep.in_table_c6, stringprep.in_table_c7,
                  stringprep.in_table_c8, stringprep.in_table_c9, stringprep.in_table_a1)
    if not mapped or any(check(char) for char in mapped for check in prohibited):
        return password
    if any(stringprep.in_table_d1(char) for char in mapped) and (
            any(stringprep.in_table_d2(char) for char in mapped)
            or not stringprep.in_table_d1(mapped[0]) or not stringprep.in_table_d1(mapped[-1])):
        return password
    return unicodedata.normalize("NFKC", "".join(mapped))


def scram_verifies(verifier: str | None, password: str) -> bool:
    """Whether the stored SCRAM-SHA-256 ``verifier`` is one of ``password``: its StoredKey and
    ServerKey are those the password gives with the verifier's salt and iterations (RFC 5802
    section 3, RFC 7677). False for no verifier, an MD5 hash or anything unreadable."""
    match = SCRAM_VERIFIER.match(verifier or "")
    if match is None:
        return False
    try:
        salt, stored_key, server_key = (base64.b64decode(part, validate=True)
                                        for part in match.groups()[1:])
    except ValueError:
        return False
    salted = hashlib.pbkdf2_hmac("sha256", saslprep(password).encode(), salt, int(match[1]))
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    return (hmac.compare_digest(hashlib.sha256(client_key).digest(), stored_key)
            and hmac.compare_digest(hmac.new(salted, b"Server Key", hashlib.sha256).digest(),
                                    server_key))


# -- reading the state -----------------------------------------------------------------------

MEMBERS_SQL = """SELECT DISTINCT g.rolname, r.rolname
  FROM pg_auth_members AS m
  JOIN pg_roles AS g ON g.oid = m.roleid
  JOIN pg_roles AS r ON r.oid = m.member
 WHERE g.rolname = ANY(%(groups)s)
 ORDER BY 1, 2"""
ROLES_SQL = """SELECT rolname, rolcanlogin, rolinherit, rolpassword
  FROM pg_authid WHERE rolname = ANY(%(names)s)"""
DATABASE_SQL = """SELECT pg_encoding_to_char(pg_char_to_encoding(%(encoding)s)),
       d.datname IS NOT NULL, pg_get_userbyid(d.datdba), pg_encoding_to_char(d.encoding),
       d.datcollate, d.datctype
  FROM (SELECT) AS one LEFT JOIN pg_database AS d ON d.datname = %(database)s"""
# As the superuser, before any SET ROLE: the relations the login owns (an install older than
# the owner role has its schema owned by the login), and whether the grants table exists.
IN_DATABASE_SQL = """SELECT (SELECT count(*) FROM pg_class AS c JOIN pg_roles AS r
                             ON r.oid = c.relowner WHERE r.rolname = %(user)s),
       to_regclass(%(table)s) IS NOT NULL"""
GRANT_ROWS_SQL = f"SELECT to_jsonb(g) FROM {WORKER_GRANTS_TABLE} AS g"
#: What a database about to be created holds.
NEW_DATABASE: dict[str, Any] = {"owned": 0, "grants": None}


def read_state(cursor: Any, desired: Desired) -> dict[str, Any]:
    """The roles, memberships and database ``plan`` decides on, as a plain dict:
    ``members`` (group -> its members), ``roles`` (name -> login, inherit, password: the
    stored verifier), ``encoding`` (the wanted one as PostgreSQL names it, "" when it knows
    none), ``database`` (owner, encoding, lc_collate, lc_ctype; None when missing)."""
    cursor.execute(MEMBERS_SQL, {"groups": [desired.owner, desired.worker_group, STATS_ROLE]})
    members: dict[str, list[str]] = {}
    for group, member in cursor.fetchall():
        members.setdefault(group, []).append(member)
    names = {desired.owner, desired.worker_group, desired.user,
             *(login.name for login in desired.logins), *members.get(desired.worker_group, ())}
    cursor.execute(ROLES_SQL, {"names": sorted(names)})
    roles = {name: {"login": login, "inherit": inherit, "password": password}
             for name, login, inherit, password in cursor.fetchall()}
    cursor.execute(DATABASE_SQL, {"encoding": desired.encoding, "database": desired.database})
    encoding, exists, owner, has_encoding, collate, ctype = cursor.fetchone()
    database = ({"owner": owner, "encoding": has_encoding, "lc_collate": collate,
                 "lc_ctype": ctype} if exists else None)
    return {"members": members, "roles": roles, "encoding": encoding, "database": database}


def read_database_state(cursor: Any, desired: Desired) -> dict[str, Any]:
    """What ``plan`` decides on in the Coordinator's database: ``owned`` (how many relations
    ``desired.user`` owns) and ``grants`` (login -> its row of the grants table; None when
    there is no table)."""
    cursor.execute(IN_DATABASE_SQL, {"user": desired.user, "table": WORKER_GRANTS_TABLE})
    owned, has_table = cursor.fetchone()
    grants = None
    if has_table:
        cursor.execute(GRANT_ROWS_SQL)
        grants = {row["login"]: row for (row,) in cursor.fetchall()}
    return {"owned": owned, "grants": grants}


# -- deciding --------------------------------------------------------------------------------


def ident(name: str) -> str:
    """``name`` as a quoted SQL identifier, its ``%`` doubled: every statement is sent with
    its parameters, and psycopg2 reads a single ``%`` as a parameter's start."""
    return '"' + name.replace('"', '""').replace("%", "%%") + '"'


def grants_line(count: int) -> str:
    return f"grants: {count} {'row' if count == 1 else 'rows'} written"


@dataclass(frozen=True)
class Action:
    """One statement of the plan and the line ``changes`` says for it (never a secret)."""

    line: str
    sql: str
    args: Mapping[str, Any] = field(default_factory=dict, repr=False)
    #: Run in the Coordinator's database (else in login_db).
    in_database: bool = False
    #: Run as this role (SET ROLE), as the owner of what it makes.
    role: str | None = None
    #: The statement answers how many rows it changed; the line for that many, none for 0.
    counted: Callable[[int], str] | None = None


def role_actions(state: Mapping[str, Any], name: str, *, login: bool,
                 inherit: bool | None = None, password: str | None = None,
                 label: str | None = None) -> list[Action]:
    """The role ``name`` made to exist with LOGIN as ``login``, INHERIT as ``inherit`` (None:
    left as it is) and ``password`` (None: none is managed)."""
    current = state["roles"].get(name)
    args = {} if password is None else {"password": password}
    said = f"role {label or name}"
    if current is None:
        attributes = describe_role(login, inherit, None)
        sql = f"CREATE ROLE {ident(name)} {attributes}"
        if password is not None:
            return [Action(f"{said}: created, {attributes}, password set",
                           sql + " PASSWORD %(password)s", args)]
        return [Action(f"{said}: created, {attributes}", sql)]
    changes = []
    if current["login"] != login:
        changes.append("LOGIN" if login else "NOLOGIN")
    if inherit is not None and current["inherit"] != inherit:
        changes.append("INHERIT" if inherit else "NOINHERIT")
    sets_password = password is not None and not scram_verifies(current["password"], password)
    if not changes and not sets_password:
        return []
    sql = f"ALTER ROLE {ident(name)}" + "".join(f" {change}" for change in changes)
    if sets_password:
        return [Action(f"{said}: {', '.join([*changes, 'password set'])}",
                       sql + " PASSWORD %(password)s", args)]
    return [Action(f"{said}: {', '.join(changes)}", sql)]


def wanted_memberships(desired: Desired) -> list[tuple[str, str]]:
    """(group, member): the Coordinator may act as the owner (SET ROLE) to create or upgrade
    the schema; the workers' group sees other sessions' addresses; each worker login has the
    workers' rights."""
    return [(desired.owner, desired.user), (STATS_ROLE, desired.worker_group),
            *((desired.worker_group, login.name) for login in desired.logins)]


def check_database(state: Mapping[str, Any], desired: Desired) -> None:
    """Raise CannotRun when the database cannot be made what is wanted."""
    if not state["encoding"]:
        raise CannotRun(f"encoding {desired.encoding!r} is not one PostgreSQL knows: give one "
                        "of its names, such as UTF-8")
    current = state["database"]
    if current is None:
        return
    has = (current["encoding"], current["lc_collate"], current["lc_ctype"])
    if has != (state["encoding"], desired.lc_collate, desired.lc_ctype):
        raise CannotRun(
            f"database {desired.database} has encoding {has[0]}, lc_collate {has[1]}, lc_ctype "
            f"{has[2]}; wanted are encoding {state['encoding']}, lc_collate "
            f"{desired.lc_collate}, lc_ctype {desired.lc_ctype}, which PostgreSQL cannot change "
            "in place. Nothing was changed: dump the database, drop it, run again to create it "
            "and restore the dump into it")


def grant_changes(current: Mapping[str, Mapping[str, Any]],
                  wanted: Sequence[Mapping[str, Any]]) -> int:
    """How many rows writing ``wanted`` inserts, changes or deletes in a table holding
    ``current`` (login -> row), as WORKER_GRANTS_WRITE_SQL counts them."""
    logins = {row["login"] for row in wanted}
    written = sum(1 for row in wanted
                  if row["login"] not in current
                  or any(current[row["login"]].get(key) != value for key, value in row.items()))
    return written + sum(1 for login in current if login not in logins)


def database_actions(state: Mapping[str, Any], desired: Desired) -> list[Action]:
    name, owner = ident(desired.database), ident(desired.owner)
    current = state["database"]
    actions = []
    if current is None:
        actions.append(Action(
            f"database {desired.database}: created",
            f"CREATE DATABASE {name} OWNER {owner} ENCODING %(encoding)s "
            "LC_COLLATE %(lc_collate)s LC_CTYPE %(lc_ctype)s TEMPLATE template0",
            {"encoding": desired.encoding, "lc_collate": desired.lc_collate,
             "lc_ctype": desired.lc_ctype}))
    elif current["owner"] != desired.owner:
        actions.append(Action(
            f"database {desired.database}: owner {desired.owner} (was {current['owner']})",
            f"ALTER DATABASE {name} OWNER TO {owner}"))
    if state["owned"]:
        actions.append(Action(
            f"database {desired.database}: relations of {desired.user} given to "
            f"{desired.owner} ({state['owned']})",
            f"REASSIGN OWNED BY {ident(desired.user)} TO {owner}", in_database=True))
    grants = state["grants"]
    if grants is None:
        # On a first install this runs before the Coordinator makes its schema, and its
        # workers must be able to claim once they start.
        actions.append(Action(f"grants: table {WORKER_GRANTS_TABLE} created", WORKER_GRANTS_DDL,
                              in_database=True, role=desired.owner))
    count = grant_changes(grants or {}, desired.grants)
    if count:
        actions.append(Action(grants_line(count), WORKER_GRANTS_WRITE_SQL,
                              {"grants": json.dumps(list(desired.grants))},
                              in_database=True, role=desired.owner, counted=grants_line))
    return actions


def plan(state: Mapping[str, Any], desired: Desired) -> list[Action]:
    """The statements that make ``state`` (read_state and read_database_state, or
    NEW_DATABASE) what ``desired`` says, in the order to run them; none when nothing differs.
    Raises CannotRun, before anything is run, for a database that cannot be made so."""
    check_database(state, desired)
    actions = [
        *role_actions(state, desired.owner, login=False),
        *role_actions(state, desired.worker_group, login=False),
        *role_actions(state, desired.user, login=True, inherit=False, password=desired.password),
    ]
    for login in desired.logins:
        actions += role_actions(state, login.name, login=True, password=login.password,
                                label=login.label)
    keep = {login.name for login in desired.logins}
    actions += [Action(f"login {name}: dropped", f"DROP ROLE {ident(name)}")
                for name in state["members"].get(desired.worker_group, ()) if name not in keep]
    actions += [Action(f"role {member}: member of {group}",
                       f"GRANT {ident(group)} TO {ident(member)}")
                for group, member in wanted_memberships(desired)
                if member not in state["members"].get(group, ())]
    return actions + database_actions(state, desired)


# -- the diff --------------------------------------------------------------------------------


def password_word(verifier: str | None, password: str) -> str:
    if verifier is None:
        return "no password"
    return "the given password" if scram_verifies(verifier, password) else "another password"


def managed_roles(desired: Desired) -> list[tuple[str, bool, str | None]]:
    """(name, whether its INHERIT is managed, its password or None) of each role kept."""
    return [(desired.owner, False, None), (desired.worker_group, False, None),
            (desired.user, True, desired.password),
            *((login.name, False, login.password) for login in desired.logins)]


def describe_role(login: bool, inherit: bool | None, password: str | None) -> str:
    words = ["LOGIN" if login else "NOLOGIN"]
    if inherit is not None:
        words.append("INHERIT" if inherit else "NOINHERIT")
    return " ".join(words) + (f", {password}" if password else "")


def render(roles: Mapping[str, str], members: Mapping[str, Iterable[str]],
           database: Mapping[str, Any] | None, desired: Desired, owned: int,
           grants: Mapping[str, Mapping[str, Any]] | None) -> str:
    lines = [f"role {name}: {text}" for name, text in roles.items()]
    lines += [f"members of {group}: {', '.join(sorted(names)) or 'none'}"
              for group, names in members.items()]
    lines.append(f"database {desired.database}: " + (
        "absent" if database is None else
        f"owner {database['owner']}, encoding {database['encoding']}, lc_collate "
        f"{database['lc_collate']}, lc_ctype {database['lc_ctype']}"))
    lines.append(f"relations owned by {desired.user}: {owned}")
    if grants is None:
        lines.append(f"table {WORKER_GRANTS_TABLE}: absent")
    else:
        lines += [f"grant {login}: host {row.get('host')}"
                  + "".join(f", {key} {' '.join(row.get(key) or ()) or 'none'}"
                            for key in ("queues", "worker_ids", "worker_hosts"))
                  for login, row in sorted(grants.items())]
    return "".join(line + "\n" for line in lines)


def diff(state: Mapping[str, Any], desired: Desired) -> dict[str, str]:
    """The managed objects as they are and as they will be; no password, no verifier."""
    groups = (desired.owner, desired.worker_group, STATS_ROLE)
    members = {group: state["members"].get(group, []) for group in groups}
    roles = {}
    for name, inherit, password in managed_roles(desired):
        current = state["roles"].get(name)
        if current is not None:
            roles[name] = describe_role(current["login"], current["inherit"] if inherit else None,
                                        password and password_word(current["password"], password))
    for name in members[desired.worker_group]:
        current = state["roles"].get(name)
        if name not in roles and current is not None:
            roles[name] = describe_role(current["login"], None, None)
    # The roles with a password are the logins.
    after_roles = {name: describe_role(password is not None, False if inherit else None,
                                       password and "the given password")
                   for name, inherit, password in managed_roles(desired)}
    after_members = {group: set(members[group]) for group in groups}
    after_members[desired.worker_group] = set()
    for group, member in wanted_memberships(desired):
        after_members[group].add(member)
    wanted_database = {"owner": desired.owner, "encoding": state["encoding"],
                       "lc_collate": desired.lc_collate, "lc_ctype": desired.lc_ctype}
    return {
        "before": render(roles, members, state["database"], desired, state["owned"],
                         state["grants"]),
        "after": render(after_roles, after_members, wanted_database, desired, 0,
                        {row["login"]: row for row in desired.grants}),
    }


# -- the glue --------------------------------------------------------------------------------


def refusal(exc: Exception) -> str:
    """PostgreSQL's primary message for ``exc``, else the first line of the driver's; never
    the statement, which can hold a password."""
    primary = getattr(getattr(exc, "diag", None), "message_primary", None)
    return primary or next((line.strip() for line in str(exc).splitlines() if line.strip()),
                           "(no message)")


def apply(cursor: Any, actions: Sequence[Action], password_encryption: str,
          done: list[str]) -> None:
    """Run ``actions`` in order, adding the line of each that changed something to ``done``.
    Raises ApplyError with PostgreSQL's own primary message (never the statement, which can
    hold a password)."""
    if any("password" in action.args for action in actions):
        cursor.execute("SELECT set_config('password_encryption', %(value)s, false)",
                       {"value": password_encryption})
    for action in actions:
        try:
            if action.role:
                cursor.execute(f"SET ROLE {ident(action.role)}", {})
            cursor.execute(action.sql, action.args)
            line: str | None = action.line
            if action.counted is not None:
                (count,) = cursor.fetchone()
                line = action.counted(count) if count else None
            if action.role:
                cursor.execute("RESET ROLE", {})
        except psycopg2.Error as exc:
            raise ApplyError(f"{action.line}: PostgreSQL refused it: {refusal(exc)}",
                             done) from None
        if line:
            done.append(line)


def connect(params: Mapping[str, Any], dbname: str) -> Any:
    socket = params["login_unix_socket"]
    try:
        conn = psycopg2.connect(host=socket or None, port=params["login_port"],
                                user=params["login_user"], dbname=dbname,
                                application_name=APPLICATION_NAME)
    except psycopg2.Error as exc:
        where = f"socket directory {socket}" if socket else "libpq's default socket"
        raise CannotRun(f"cannot connect to PostgreSQL as {params['login_user']} ({where}, port "
                        f"{params['login_port']}, database {dbname}): {refusal(exc)}") from None
    conn.autocommit = True
    return conn


def run(module: AnsibleModule) -> dict[str, Any]:
    params = module.params
    desired = desired_from(params)
    problem = desired_problem(desired)
    if problem:
        raise CannotRun(problem)
    server = connect(params, params["login_db"])
    database = None
    try:
        cursor = server.cursor()
        try:
            state = read_state(cursor, desired)
            if state["database"] is None:
                state.update(NEW_DATABASE)
            else:
                database = connect(params, desired.database)
                state.update(read_database_state(database.cursor(), desired))
        except psycopg2.Error as exc:
            raise CannotRun(f"reading the roles and the database as {params['login_user']} "
                            f"failed: {refusal(exc)}") from None
        actions = plan(state, desired)
        result: dict[str, Any] = {"changed": bool(actions),
                                  "changes": [action.line for action in actions]}
        if module._diff:
            result["diff"] = diff(state, desired)
        if module.check_mode or not actions:
            return result
        done: list[str] = []
        apply(cursor, [a for a in actions if not a.in_database], params["password_encryption"],
              done)
        in_database = [action for action in actions if action.in_database]
        if in_database:
            try:
                database = database or connect(params, desired.database)
            except CannotRun as exc:
                raise ApplyError(str(exc), done) from None
            apply(database.cursor(), in_database, params["password_encryption"], done)
        return {**result, "changed": bool(done), "changes": done}
    finally:
        for conn in (database, server):
            if conn is not None:
                conn.close()


def argument_spec() -> dict[str, Any]:
    return {
        "login_user": {"type": "str", "default": "postgres"},
        "login_unix_socket": {"type": "str", "default": ""},
        "login_port": {"type": "int", "default": 5432},
        "login_db": {"type": "str", "default": "postgres"},
        "owner": {"type": "str", "required": True},
        "user": {"type": "str", "required": True},
        "password": {"type": "str", "required": True, "no_log": True},
        # A setting's name, no secret.
        "password_encryption": {"type": "str", "default": "scram-sha-256",
                                "choices": ["scram-sha-256"], "no_log": False},
        "worker_group": {"type": "str", "required": True},
        "worker_logins": {"type": "list", "elements": "dict", "default": [], "options": {
            "name": {"type": "str", "required": True},
            "password": {"type": "str", "required": True, "no_log": True},
            "host": {"type": "str"},
        }},
        "database": {"type": "str", "required": True},
        "encoding": {"type": "str", "default": "UTF-8"},
        "lc_collate": {"type": "str", "default": "C.UTF-8"},
        "lc_ctype": {"type": "str", "default": "C.UTF-8"},
        "grants": {"type": "list", "elements": "dict", "default": [], "options": {
            "login": {"type": "str", "required": True},
            "host": {"type": "str", "required": True},
            "worker_hosts": {"type": "list", "elements": "str", "required": True},
            "queues": {"type": "list", "elements": "str", "required": True},
            "worker_ids": {"type": "list", "elements": "str", "required": True},
        }},
    }


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    if PSYCOPG2_ERROR is not None:
        module.fail_json(msg=missing_required_lib("psycopg2"), exception=PSYCOPG2_ERROR)
    try:
        module.exit_json(**run(module))
    except CannotRun as exc:
        module.fail_json(msg=str(exc), changed=False, changes=[])
    except ApplyError as exc:
        module.fail_json(msg=str(exc), changed=bool(exc.done), changes=exc.done)


if __name__ == "__main__":
    main()
