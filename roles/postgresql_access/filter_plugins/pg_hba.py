# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the postgresql_access role: the worker hosts' addresses for pg_hba.conf, their
own logins, and what each login may write (its grant, the same derivation as the host's Redis
user: the shared contract's ``worker_grants``)."""

from __future__ import annotations

import importlib.util
import ipaddress
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# The programs' shared contract (files/, beside roles/): the workers' group role and the
# derivation of each host's login, which the worker role uses for the same hosts.
_CONTRACT = Path(__file__).resolve().parents[3] / "files" / "coordinator_contract.py"
_spec = importlib.util.spec_from_file_location("coordinator_contract_for_pg_role", _CONTRACT)
contract = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(contract)


def hba_address(value: Any) -> str | None:
    """``value`` as PostgreSQL takes it in a pg_hba.conf line (an IPv4 or IPv6 address, no
    zone index, no prefix length, nothing around it), or None when it is none."""
    text = "" if value is None else str(value)
    if not text or text != text.strip() or "%" in text or "/" in text:
        return None
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return None
    return text


def hba_addresses(hosts: Iterable[str], hostvars: Mapping[str, Any],
                  variable: str) -> dict[str, str]:
    """host -> the address its pg_hba.conf line allows: its ``variable`` (node_address), else
    its ansible_host (for an inventory without ``variable``: defaults/main.yml says why); as
    given (the preflight refuses what hba_address does not take)."""
    addresses = {}
    for host in hosts:
        values = hostvars[host]
        chosen = values.get(variable)
        if chosen is None:
            chosen = values.get("ansible_host", "")
        addresses[host] = "" if chosen is None else str(chosen)
    return addresses


def worker_db_logins(hosts: Iterable[str], key: str) -> list[dict[str, str]]:
    """{host, name, password} of each worker host's own login: its name from the host's
    inventory name, its password derived from ``key`` (coordinator_contract)."""
    return [{"host": host, "name": contract.worker_db_role(host),
             "password": contract.worker_db_password(key, host)} for host in hosts]


def worker_db_grants(grants: Iterable[Mapping[str, Any]],
                     hosts: Iterable[str]) -> list[dict[str, Any]]:
    """The rows of the grants table (coordinator_contract WORKER_GRANTS_DDL) for the hosts
    that get a login: each grant of ``grants`` ({host, queues, worker_ids, worker_hosts},
    filter ``worker_grants``) under its host's login."""
    wanted = set(hosts)
    return [{"login": contract.worker_db_role(grant["host"]), "host": grant["host"],
             "worker_hosts": list(grant.get("worker_hosts") or ()),
             "queues": list(grant.get("queues") or ()),
             "worker_ids": list(grant.get("worker_ids") or ())}
            for grant in grants if grant["host"] in wanted]


def worker_db_group(_: Any = None) -> str:
    """The group role every worker login is a member of, which the schema grants to."""
    return contract.WORKER_DB_GROUP


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"hba_address": hba_address, "hba_addresses": hba_addresses,
                "worker_db_logins": worker_db_logins, "worker_db_group": worker_db_group,
                "worker_db_role": contract.worker_db_role,
                "worker_grants": contract.worker_grants, "worker_db_grants": worker_db_grants}
