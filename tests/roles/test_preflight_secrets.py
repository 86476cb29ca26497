"""A secret left as the vault example's placeholder (or empty) stops each role's preflight
with a message naming the variable and the fix, and no secret's value in the output."""

from __future__ import annotations

import json

import pytest

from .conftest import HERE, run

SECRETS = {
    "coordinator": ("coordinator_db_password", "coordinator_redis_password", "coordinator_token"),
    "worker": ("worker_db_password", "worker_redis_password", "worker_coordinator_token"),
}


@pytest.mark.parametrize("placeholder", ["CHANGE_ME", "", None],
                         ids=["placeholder", "empty", "missing"])
@pytest.mark.parametrize("role", sorted(SECRETS))
def test_a_secret_not_filled_in_stops_the_preflight_naming_it(role, placeholder):
    first, missing, last = SECRETS[role]
    values = {first: "first-secret-value", last: "last-secret-value",
              "role": role, "worker_instances": [{"name": "web", "kind": "web"}]}
    if placeholder is not None:
        values[missing] = placeholder
    result = run(["ansible-playbook", "-i", "localhost,", str(HERE / "playbooks" /
                  "preflight_secrets.yml"), "-e", json.dumps(values)])
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert (f"{missing} is not set (missing, empty or still CHANGE_ME): add it to "
            "inventory/<name>/group_vars/all/vault.yml (copy vault.yml.example, fill it in, then "
            "ansible-vault encrypt it)") in " ".join(output.split())
    assert "first-secret-value" not in output and "last-secret-value" not in output
    # A secret is read by its name through the vars lookup: ansible-core 2.20 deprecated the
    # `vars` dictionary (gone in 2.24), and warns about each read of it.
    assert "DEPRECATION" not in output, output


@pytest.mark.parametrize("role", sorted(SECRETS))
def test_every_secret_not_filled_in_is_named_in_one_line(role):
    first, missing, last = SECRETS[role]
    values = {first: "first-secret-value", missing: "CHANGE_ME", "role": role,
              "worker_instances": [{"name": "web", "kind": "web"}]}
    result = run(["ansible-playbook", "-i", "localhost,", str(HERE / "playbooks" /
                  "preflight_secrets.yml"), "-e", json.dumps(values)])
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert (f"{missing}, {last} are not set (missing, empty or still CHANGE_ME): add them to "
            "inventory/<name>/group_vars/all/vault.yml") in " ".join(output.split())
    assert "first-secret-value" not in output


@pytest.mark.parametrize(("role", "values", "message"), [
    ("redis", {"redis_password": "short-secret"},
     "redis_password is empty or shorter than 16 characters. Set it from a vault variable, "
     'e.g. redis_password: "{{ vault_redis_password }}".'),
    ("postgresql_access", {"postgresql_access_password": "",
                           "postgresql_access_worker_password_key": "a-key-of-its-own"},
     "postgresql_access_password is empty. Set it from a vault variable, e.g. "
     'postgresql_access_password: "{{ vault_coordinator_db_password }}".'),
    ("postgresql_access", {"postgresql_access_password": "database-secret-value",
                           "postgresql_access_worker_password_key": "CHANGE_ME"},
     "postgresql_access_worker_password_key is still CHANGE_ME: set vault_worker_db_key in "
     "inventory/<name>/group_vars/all/vault.yml"),
])
def test_a_weak_or_placeholder_password_is_named_in_the_message_a_user_reads(role, values,
                                                                            message):
    # The message names the variable, never its value: the result is shown whole, not
    # censored as under no_log.
    result = run(["ansible-playbook", "-i", "localhost,", str(HERE / "playbooks" /
                  "preflight_secrets.yml"), "-e", json.dumps({**values, "role": role})])
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert message in " ".join(output.split()), output
    assert "censored" not in output
    assert "short-secret" not in output and "database-secret-value" not in output
