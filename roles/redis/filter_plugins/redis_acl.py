# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the redis role: the Redis ACL users, derived from the inventory.

``redis_worker_grants`` is the shared contract's ``worker_grants``: from the worker records
each worker host published (the worker role's ``tasks_from: status``, which site.yml and
migrate-web.yml run on every host first), one grant per worker host, the queues of its workers
and their ids; the postgresql_access role grants the same in PostgreSQL.
``redis_acl_lines`` turns the grants into the lines of the ACL file (templates/users.acl.j2):
``default`` off, the role's admin user, the Coordinator's user and one user per worker host,
each with a SHA-256 of its password only. Names, passwords and the commands each program
sends come from the shared contract (files/coordinator_contract.py).
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

_CONTRACT = Path(__file__).resolve().parents[3] / "files" / "coordinator_contract.py"
_spec = importlib.util.spec_from_file_location("coordinator_contract_for_redis_role",
                                               _CONTRACT)
contract = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(contract)

# A user name or key in an ACL line: no whitespace, no control characters.
_TOKEN = re.compile(r"^[^\s\x00-\x1f\x7f]+$")
# Characters a Redis key pattern treats as glob syntax.
_GLOB = re.compile(r"([*?\[\]\\])")


class RedisAclError(ValueError):
    """An inventory the ACL cannot be derived from; the message names the host and the fix."""


def _token(value: str, what: str) -> str:
    if not _TOKEN.match(value or ""):
        raise RedisAclError(f"{what} {value!r} cannot be written to the Redis ACL file: "
                            "use no spaces or control characters")
    return value


def key_pattern(key: str, read_only: bool = False) -> str:
    """An ACL key pattern that matches exactly ``key``: ``~...``, or ``%R~...`` where the
    user may only read it."""
    return ("%R~" if read_only else "~") + _GLOB.sub(r"\\\1", _token(key, "key"))


#: One grant per worker host, {host, queues, worker_ids, worker_hosts}: the derivation the
#: postgresql_access role's grants share.
redis_worker_grants = contract.worker_grants


def _sha(password: str) -> str:
    return "#" + hashlib.sha256(password.encode()).hexdigest()


def _commands(commands: Iterable[str]) -> str:
    return "-@all " + " ".join(f"+{c}" for c in commands)


def redis_acl_lines(workers: Sequence[Mapping[str, Any]], *, admin_user: str,
                    admin_password: str, coordinator_user: str,
                    worker_password_key: str) -> list[str]:
    """The ACL file's ``user`` lines: default off; ``admin_user`` with every command (the role's
    ACL LOAD and health checks); ``coordinator_user`` with the Coordinator's commands on
    every queue, processing list and drain hint, its password derived from
    ``admin_password``; one user per grant of ``workers`` ({host, queues, worker_ids}) with
    the workers' commands on its own keys (its workers' drain hints read only), its password
    derived from ``worker_password_key``."""
    names = {"default", _token(admin_user, "redis_admin_user"),
             _token(coordinator_user, "redis_coordinator_user")}
    if len(names) != 3:
        raise RedisAclError(f"redis_admin_user ({admin_user}) and redis_coordinator_user "
                            f"({coordinator_user}) must differ from each other and from "
                            "'default'")
    if workers and len(worker_password_key or "") < 16:
        raise RedisAclError("redis_worker_password_key is empty or shorter than 16 "
                            "characters: set it from the vault (the worker role's "
                            "worker_redis_password_key)")
    lines = [
        "user default off resetkeys resetchannels -@all",
        f"user {admin_user} on {_sha(admin_password)} ~* &* +@all",
        f"user {coordinator_user} on {_sha(contract.coordinator_redis_password(admin_password))}"
        " resetchannels "
        + " ".join(f"~{pattern}" for pattern in contract.COORDINATOR_REDIS_KEYS)
        + " " + _commands(contract.COORDINATOR_REDIS_COMMANDS),
    ]
    for grant in sorted(workers, key=lambda g: g["host"]):
        user = _token(contract.worker_redis_user(grant["host"]), "worker user")
        if user in names:
            raise RedisAclError(f"the Redis user of worker host {grant['host']} would be "
                                f"{user}, which another user has: rename the host or the user")
        names.add(user)
        keys = contract.worker_redis_keys(grant.get("queues") or (),
                                          grant.get("worker_ids") or ())
        password = contract.worker_redis_password(worker_password_key, grant["host"])
        read_keys = contract.worker_redis_read_keys(grant.get("worker_ids") or ())
        lines.append(" ".join([f"user {user} on {_sha(password)} resetchannels",
                               *(key_pattern(k) for k in keys),
                               *(key_pattern(k, read_only=True) for k in read_keys),
                               _commands(contract.WORKER_REDIS_COMMANDS)]))
    return lines


def redis_cli_quote(value: str) -> str:
    """``value`` as one argument of a line redis-cli reads on standard input: double-quoted,
    every byte as ``\\xHH``, so that no quote, backslash or space in a password can end it."""
    return '"' + "".join(f"\\x{byte:02x}" for byte in str(value).encode()) + '"'


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "redis_worker_grants": redis_worker_grants,
            "redis_acl_lines": redis_acl_lines,
            "redis_cli_quote": redis_cli_quote,
        }
