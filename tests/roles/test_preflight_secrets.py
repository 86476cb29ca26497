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
