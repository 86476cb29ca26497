"""The roles' defaults are the programs' defaults.

The coordinator role writes coordinator.env and the worker role each worker's environment
from their defaults; wherever a program has a default of its own for a variable the role
sets, the role must set that same value (a heartbeat TTL of 30 in the role and 15 in the
program was such a drift). Differences on purpose are named in ``ON_PURPOSE`` with why.
Each variable is checked the way the program reads it: its configuration with the role's
value equals its configuration without the variable.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import coordinator_contract
import jinja2
import psycopg2
import pytest
import worker_base
import worker_infer
import worker_web
import yaml

from coordinator.config import ConfigError, load_config

from .conftest import REPO

# What an inventory gives the roles (the node's address, the vault's secrets).
HOST = {"node_address": "192.0.2.40", "inventory_hostname": "ai-core", "ansible_managed": "",
        "role_path": "/roles/any", "ansible_facts": {"os_family": "Debian", "user_dir": "/home/a"},
        "coordinator_db_password": "db-secret", "coordinator_redis_password": "redis-secret",
        "coordinator_token": "api-token", "worker_coordinator_token": "api-token",
        "groups": {"coordinator": ["ai-core"]},
        "hostvars": {"ai-core": {"node_address": "192.0.2.40"}}}

ON_PURPOSE = {
    "COORDINATOR_BIND": "the role also binds the node's LAN address; the program alone binds "
                        "loopback only, so nothing is open on a LAN by accident",
    "COORDINATOR_TOKEN": "a secret from the vault; the program without one serves an open API",
    "REDIS_PASSWORD": "a secret from the vault; the program without one logs in without",
}


def rendered(values: Mapping[str, Any], known: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with their templates rendered against ``known`` and each other, as
    Ansible renders role defaults (lazily, in any order)."""
    env = environment()
    context = {**known, **values}
    for _ in range(10):
        before = dict(context)
        for name, value in values.items():
            if isinstance(value, str) and "{{" in value:
                context[name] = env.from_string(value).render(before)
        if context == before:
            break
    return {name: context[name] for name in values}


def environment() -> jinja2.Environment:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["bool"] = lambda value: str(value).lower() in ("1", "true", "yes", "on")
    # The repository's filter (filter_plugins/cluster.py) that coordinator.env.j2 uses.
    env.filters["pg_dsn"] = coordinator_contract.pg_dsn
    # Ansible's extract: container[item], then [key].
    env.filters["extract"] = lambda item, container, key=None: (
        container[item] if key is None else container[item][key])
    return env


def defaults(role: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())


def coordinator_env(**settings: object) -> dict[str, str]:
    """coordinator.env as the role writes it with its defaults (and ``settings``)."""
    values = {**rendered(defaults("coordinator"), HOST), **settings}
    template = (REPO / "roles" / "coordinator" / "templates" / "coordinator.env.j2").read_text()
    text = environment().from_string(template).render({**HOST, **values})
    pairs = re.findall(r'^([A-Z_]+)="((?:[^"\\]|\\.)*)"$', text, re.M)
    return {name: re.sub(r"\\(.)", r"\1", value) for name, value in pairs}


def worker_env() -> dict[str, str]:
    """A worker's environment as the role writes it with its defaults (worker__base_env),
    with the per-worker variables the role adds (tasks/instances.yml)."""
    known = {**HOST, **rendered(defaults("worker"), HOST)}
    base = yaml.safe_load((REPO / "roles" / "worker" / "vars" / "main.yml").read_text())
    env = {name: str(value) for name, value in
           rendered(base["worker__base_env"], known).items()}
    return {**env, "PG_DSN": "host=192.0.2.40 dbname=coordinator user=worker_ai_core",
            "WORKER_ID": "web-worker-ai-core", "WORKER_HOST": "192.0.2.40"}


def drift(load: Callable[[Mapping[str, str]], Any], env: Mapping[str, str],
          errors: tuple[type[Exception], ...]) -> dict[str, str]:
    """The variables whose role value is not the program's default: name -> the role's
    value. A variable the program requires has no default of its own, so no drift."""
    with_role = load(env)
    found = {}
    for name, value in env.items():
        try:
            without = load({other: v for other, v in env.items() if other != name})
        except errors:
            continue
        if without != with_role:
            found[name] = value
    return found


def test_the_coordinator_roles_defaults_are_the_programs():
    env = coordinator_env()
    assert {"COORDINATOR_PORT", "REDIS_PORT", "COORDINATOR_METRICS_OPEN"} <= set(env)
    assert drift(load_config, env, (ConfigError,)) == {
        name: env[name] for name in ON_PURPOSE if name in env}


def test_the_coordinator_takes_the_database_host_that_accepts_writes_of_several():
    """A primary and its standbys (docs/scaling.md): libpq keeps the first writable one."""
    several = psycopg2.extensions.parse_dsn(
        coordinator_env(coordinator_db_host="10.0.0.1,10.0.0.2")["PG_DSN"])
    assert (several["host"], several["target_session_attrs"]) == ("10.0.0.1,10.0.0.2",
                                                                  "read-write")
    assert "target_session_attrs" not in psycopg2.extensions.parse_dsn(
        coordinator_env()["PG_DSN"])


@pytest.mark.parametrize("config_class", [worker_web.WebConfig, worker_infer.InferConfig],
                         ids=["web", "inference"])
def test_the_worker_roles_defaults_are_the_programs(config_class):
    env = worker_env()
    assert {"REDIS_PORT", "SHUTDOWN_TIMEOUT"} <= set(env)
    assert drift(config_class.from_env, env, (worker_base.ConfigError,)) == {
        name: env[name] for name in ON_PURPOSE if name in env}


def test_a_drifted_default_is_found():
    # The check itself: a role value that is not the program's default is reported.
    env = {**coordinator_env(), "COORDINATOR_HEARTBEAT_TTL": "30"}
    assert drift(load_config, env, (ConfigError,))["COORDINATOR_HEARTBEAT_TTL"] == "30"
