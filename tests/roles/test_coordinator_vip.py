"""The coordinator role's virtual address (coordinator_vip_address): a value keepalived
could not use stops the preflight, before anything changes, with one line naming it."""

from __future__ import annotations

import json

import pytest

from .conftest import HERE, run

SECRETS = {"coordinator_db_password": "database-secret-value",
           "coordinator_redis_password": "redis-secret-value",
           "coordinator_token": "token-secret-value"}


@pytest.mark.parametrize("settings", [
    {"coordinator_vip_address": "192.168.0.300"},
    {"coordinator_vip_address": "fd00::50"},
    {"coordinator_vip_address": "192.168.0.50", "coordinator_vip_router_id": 256},
    {"coordinator_vip_address": "192.168.0.50", "coordinator_vip_prefix": 33},
], ids=["octet", "ipv6", "router-id", "prefix"])
def test_a_virtual_address_keepalived_cannot_use_stops_the_preflight(settings):
    values = {**SECRETS, "role": "coordinator", "coordinator_vip_priority": 200, **settings}
    result = run(["ansible-playbook", "-i", "localhost,", str(HERE / "playbooks" /
                  "preflight_secrets.yml"), "-e", json.dumps(values)])
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, output
    address = settings["coordinator_vip_address"]
    assert (f"coordinator_vip_address '{address}'/{settings.get('coordinator_vip_prefix', 24)}, "
            f"router id {settings.get('coordinator_vip_router_id', 51)}, priority 200: the "
            "address must be an IPv4 address, its prefix 1-32, the router id 1-255 and the "
            "priority 1-254 (or leave coordinator_vip_address empty: no virtual address)"
            ) in output, output


def test_a_good_virtual_address_passes_the_preflight():
    values = {**SECRETS, "role": "coordinator", "coordinator_vip_address": "192.168.0.50"}
    result = run(["ansible-playbook", "-i", "localhost,", str(HERE / "playbooks" /
                  "preflight_secrets.yml"), "-e", json.dumps(values)])
    assert result.returncode == 0, result.stdout[-3000:]
