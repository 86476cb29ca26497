# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the postgresql_access role: the worker hosts' addresses for pg_hba.conf."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any


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
    its ansible_host; as given (the preflight refuses what hba_address does not take)."""
    addresses = {}
    for host in hosts:
        values = hostvars[host]
        chosen = values.get(variable)
        if chosen is None:
            chosen = values.get("ansible_host", "")
        addresses[host] = "" if chosen is None else str(chosen)
    return addresses


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"hba_address": hba_address, "hba_addresses": hba_addresses}
