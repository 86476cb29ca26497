"""preflight: a role's checks in one task, failing as a run of assert tasks would.

Real playbook runs on localhost (the JSON callback) for what Ansible does with the task (the
conditions evaluated unsplit, each message templated only when its check fails, the result a
user reads); the argument checks and the documentation directly."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleActionFail

from action_plugins import preflight

from ..library_kit import VENV_BIN, module_doc, module_env

PLAYBOOK = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    port: 8000
    token: a-secret-value-0123456789
  tasks:
    - name: The checks
      preflight:
        checks: {checks}
"""


def run_checks(tmp_path: Path, checks: list[dict]) -> tuple[int, dict]:
    """The task with ``checks`` (written as YAML, as a role's tasks file holds them): the
    return code and the task's result."""
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK.format(checks=json.dumps(checks)))
    run = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", "localhost,",
                          str(playbook)], capture_output=True, text=True, cwd=tmp_path,
                         env=module_env(tmp_path), timeout=120, check=False)
    report = json.loads(run.stdout)
    return run.returncode, report["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_the_first_check_that_fails_gives_its_message_and_no_value(tmp_path: Path) -> None:
    rc, result = run_checks(tmp_path, [
        {"that": "port | int > 0", "msg": "not reached"},
        {"that": ["port | int > 0", "token | length > 64"],
         "msg": "token is shorter than 64 characters (port {{ port }})"},
        {"that": "false", "msg": "a later check is not evaluated"},
    ])
    assert rc != 0
    assert result["failed"] is True
    assert result["msg"] == "token is shorter than 64 characters (port 8000)"
    assert result["assertion"] == "token | length > 64"
    assert result["checked"] == 2
    assert "a-secret-value" not in json.dumps(result)


def test_checks_that_hold_template_no_message_and_say_how_many_held(tmp_path: Path) -> None:
    # A message may use what only its failing case defines; a condition with commas is one
    # condition; a check whose when is false is not evaluated.
    rc, result = run_checks(tmp_path, [
        {"that": "port in [80, 8000]", "msg": "{{ only_defined_when_failing.name }}"},
        {"that": "port == 1", "when": "port != 8000", "msg": "skipped"},
        {"that": [True, "token is string"], "msg": "a string token"},
    ])
    assert rc == 0, result
    assert (result.get("failed", False), result["changed"]) == (False, False)
    assert (result["msg"], result["checked"]) == ("2 checks held", 2)


@pytest.mark.parametrize(("checks", "message"), [
    ([], "checks must be a non-empty list of checks"),
    ([{"that": "true"}], "check 1 needs a msg"),
    ([{"that": "true", "msg": "m"}, {"that": "true", "msg": "m", "fail_msg": "x"}],
     "check 2 has unknown keys fail_msg; it takes that, when and msg"),
    ([{"that": [], "msg": "m"}], "check 1's that must be a condition or a list of conditions"),
    ([{"that": "true", "when": {"a": 1}, "msg": "m"}],
     "check 1's when must be a condition or a list of conditions"),
])
def test_a_malformed_check_is_named(checks: list, message: str) -> None:
    with pytest.raises(AnsibleActionFail, match=f"^{message}$"):
        preflight.parsed_checks(checks)


def test_documented_options_are_the_checks_keys() -> None:
    doc = module_doc("preflight")
    assert list(doc["doc"]["options"]) == ["checks"]
    assert set(doc["doc"]["options"]["checks"]["suboptions"]) == preflight.CHECK_KEYS
    for task in yaml.safe_load(doc["examples"]):
        for check in task["preflight"]["checks"]:
            assert set(check) <= preflight.CHECK_KEYS
