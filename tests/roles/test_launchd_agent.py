"""launchd_agent (library/): what it reads, what it plans, check mode and its documentation.

The roles' tests run it against tests/doubles/launchctl on a pretend Mac (test_worker_darwin,
tests/ollama/test_role_darwin); here the pure functions and the module's own contract.
"""

from __future__ import annotations

import json
import plistlib
import sys

import pytest
import yaml

from ..library_kit import load_module, module_doc
from .conftest import REPO, VENV_BIN, run

agent = load_module("launchd_agent")
LABEL = "jp.mapleharp.coordinator-web-worker"
TARGET = f"gui/501/{LABEL}"
PLIST = f"/Users/m/Library/LaunchAgents/{LABEL}.plist"


def status(loaded: bool = True, running: bool = True, enabled: bool = True):
    return agent.Status(loaded, running and loaded, 812 if running and loaded else 0, enabled)


def test_print_and_print_disabled_are_read():
    out = f"{TARGET} = {{\n\tstate = running\n\tpid = 812\n}}\n"
    disabled = f'disabled services = {{\n\t"{LABEL}" => disabled\n}}\n'
    assert agent.parse_status(0, out, "", LABEL) == agent.Status(True, True, 812, True)
    assert agent.parse_status(0, out, disabled, LABEL).enabled is False
    # Older macOS: `"label" => true`.
    assert agent.parse_status(0, out, f'"{LABEL}" => true', LABEL).enabled is False
    assert agent.parse_status(113, "", "", LABEL) == agent.Status(False, False, 0, True)


@pytest.mark.parametrize(("before", "state", "enabled", "commands"), [
    (status(loaded=False), "started", True, [["bootstrap", "gui/501", PLIST]]),
    (status(loaded=False, enabled=False), "started", True,
     [["enable", TARGET], ["bootstrap", "gui/501", PLIST]]),
    (status(), "started", True, []),
    (status(), "reloaded", None, [["bootout", TARGET], ["bootstrap", "gui/501", PLIST]]),
    (status(loaded=False), "reloaded", None, [["bootstrap", "gui/501", PLIST]]),
    (status(), "restarted", None, [["kickstart", "-k", TARGET]]),
    (status(), "stopped", False, [["bootout", TARGET], ["disable", TARGET]]),
    (status(loaded=False, enabled=False), "stopped", False, []),
    (status(), None, None, []),
])
def test_the_plan_is_the_fewest_subcommands(before, state, enabled, commands):
    assert agent.plan(before, state, enabled, TARGET, "gui/501", PLIST) == commands


def test_check_mode_says_what_it_would_do_and_does_nothing(tmp_path):
    plist = tmp_path / f"{LABEL}.plist"
    plist.write_bytes(plistlib.dumps({"Label": LABEL}))
    state = tmp_path / "launchctl.json"
    state.write_text(json.dumps({"loaded": [], "disabled": [LABEL], "calls": []}))
    result = run(["ansible", "localhost", "-c", "local", "-m", "launchd_agent", "--check",
                  "--diff", "-e", f"ansible_python_interpreter={sys.executable}",
                  "-a", json.dumps({"label": LABEL, "plist": str(plist), "domain": "gui/501",
                                    "state": "started", "enabled": True})],
                 PATH=f"{REPO / 'tests' / 'doubles'}:{VENV_BIN}:/usr/bin:/bin",
                 FAKE_LAUNCHCTL_STATE=str(state), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
                 ANSIBLE_LOAD_CALLBACK_PLUGINS="true")
    host = json.loads(result.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert host["changed"] is True
    assert host["commands"] == [["enable", f"gui/501/{LABEL}"],
                                ["bootstrap", "gui/501", str(plist)]]
    assert host["diff"] == {"before": {"loaded": False, "enabled": False},
                            "after": {"loaded": True, "enabled": True}}
    calls = json.loads(state.read_text())["calls"]
    assert {call[0] for call in calls} == {"print", "print-disabled"}


def test_documentation_matches_the_code():
    doc = module_doc("launchd_agent")
    options = doc["doc"]["options"]
    assert sorted(options) == ["domain", "enabled", "label", "plist", "state", "wait"]
    assert options["state"]["choices"] == ["started", "stopped", "restarted", "reloaded"]
    for task in yaml.safe_load(doc["examples"]):
        assert set(task["launchd_agent"]) <= set(options)
    assert set(doc["return"]) == {"status", "commands"}
