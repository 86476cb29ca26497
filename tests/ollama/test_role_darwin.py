"""The whole role on a pretend Mac: localhost with Darwin facts, the launchctl test double on
PATH (tests/doubles/launchctl) and the Ollama stand-in as the running server.

What it shows: the plist lands in ~/Library/LaunchAgents, the agent is loaded with
`bootstrap gui/<uid>` only when needed, a changed plist gives `bootout` then `bootstrap`,
`stopped`/not enabled give `bootout` and `disable`, and the legacy load/unload/setenv are
never used. What launchd itself does with the plist is only seen on a real Mac.
"""

from __future__ import annotations

import json
import plistlib
import sys
from pathlib import Path
from typing import Any

import pytest

from lab.standins.ollama import DEFAULT_MODEL

from .conftest import model_names

DOUBLES = Path(__file__).resolve().parents[1] / "doubles"
HF = DEFAULT_MODEL
UID = 501


@pytest.fixture
def mac(tmp_path: Path, standin, run_playbook):
    home = tmp_path / "Users" / "alice"
    home.mkdir(parents=True)
    state = tmp_path / "launchctl.json"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    launchctl = bin_dir / "launchctl"
    launchctl.write_text(f'#!/bin/sh\nFAKE_LAUNCHCTL_STATE="{state}" exec "{sys.executable}" '
                         f'"{DOUBLES / "launchctl"}" "$@"\n')
    launchctl.chmod(0o755)
    # What listens on the Ollama port: nothing unless a test writes lsof -F output here.
    lsof = bin_dir / "lsof"
    lsof.write_text(f'#!/bin/sh\nFAKE_LSOF="{tmp_path / "lsof.out"}" exec '
                    f'"{Path(__file__).parent / "doubles" / "lsof"}" "$@"\n')
    lsof.chmod(0o755)
    # The installed binary preflight looks for (ollama_install: false); never run here.
    ollama = bin_dir / "ollama"
    ollama.write_text("#!/bin/sh\nexit 0\n")
    ollama.chmod(0o755)
    facts = {
        "os_family": "Darwin",
        "user_dir": str(home),
        "user_uid": UID,
        "user_id": "alice",
        "architecture": "arm64",
    }
    settings = {
        "ollama_install": False,
        "ollama_binary": str(ollama),
        "ollama_host": standin.url.removeprefix("http://"),
        "ollama_models": [HF, "llama3.2:3b"],
    }

    def converge(fails: bool = False, **overrides: Any) -> dict[str, Any]:
        """Run the role: launchctl calls (all, and those changing something), changed tasks
        and the output; ``fails``: the run must fail."""
        before = len(json.loads(state.read_text())["calls"]) if state.exists() else 0
        playbook = [
            {
                "hosts": "localhost",
                "gather_facts": False,
                "vars": {"ansible_facts": facts},
                "roles": [{"role": "ollama"}],
            }
        ]
        rc, results, output = run_playbook(playbook, {**settings, **overrides}, path_prefix=bin_dir)
        assert (rc != 0) is fails, output
        calls = [" ".join(call) for call in json.loads(state.read_text())["calls"][before:]]
        changing = [c for c in calls if not c.startswith(("print ", "print-disabled "))]
        changed = [r for r in results if r.get("changed")]
        return {"calls": changing, "changed": changed, "all_calls": calls, "output": output}

    plist = home / "Library" / "LaunchAgents" / "com.ollama.serve.plist"
    return converge, plist, state, standin


def test_launchd_agent_lifecycle(mac):
    # One test, one sequence of runs: each run of the whole role takes a while.
    converge, plist, state, standin = mac
    label = f"gui/{UID}/com.ollama.serve"

    first = converge()
    assert first["calls"] == [f"bootstrap gui/{UID} {plist}"]
    assert json.loads(state.read_text())["loaded"] == ["com.ollama.serve"]
    agent = plistlib.loads(plist.read_bytes())
    assert agent["EnvironmentVariables"]["OLLAMA_HOST"] == standin.url.removeprefix("http://")
    assert model_names(standin) == sorted([HF, "llama3.2:3b"])

    second = converge()
    assert second["calls"] == []
    assert second["changed"] == []

    # A changed plist is only read at bootstrap: bootout first.
    changed = converge(ollama_environment={"OLLAMA_KEEP_ALIVE": "30m"})
    assert changed["calls"] == [f"bootout {label}", f"bootstrap gui/{UID} {plist}"]
    assert plistlib.loads(plist.read_bytes())["EnvironmentVariables"]["OLLAMA_KEEP_ALIVE"] == "30m"

    stopped = converge(
        ollama_service_state="stopped", ollama_service_enabled=False, ollama_models=[]
    )
    # Disabled before the bootout: a login in between cannot load it again.
    assert stopped["calls"] == [f"disable {label}", f"bootout {label}"]
    launchd = json.loads(state.read_text())
    assert (launchd["loaded"], launchd["disabled"]) == ([], ["com.ollama.serve"])

    started = converge()
    assert started["calls"] == [f"enable {label}", f"bootstrap gui/{UID} {plist}"]

    every_call = first["all_calls"] + changed["all_calls"] + stopped["all_calls"]
    assert not [c for c in every_call if c.split()[0] in ("load", "unload", "setenv", "submit")]


def test_homebrews_own_ollama_service_is_refused_before_anything_changes(mac):
    converge, plist, state, _ = mac
    state.write_text(json.dumps({"loaded": ["homebrew.mxcl.ollama"], "disabled": [],
                                 "calls": []}))
    refused = converge(fails=True)
    assert ("Homebrew's service homebrew.mxcl.ollama is loaded and would compete with the "
            "role's com.ollama.serve for the port: run `brew services stop ollama`"
            ) in " ".join(refused["output"].split())
    assert f"print gui/{UID}/homebrew.mxcl.ollama" in refused["all_calls"]
    assert refused["calls"] == []
    assert not plist.exists()


def test_another_server_on_the_port_is_named_before_anything_changes(mac, tmp_path):
    """Ollama.app's server holds the port (lsof -F output as macOS prints it): the role says
    which process and what to do, and writes nothing."""
    converge, plist, _state, standin = mac
    port = standin.url.rsplit(":", 1)[1]
    (tmp_path / "lsof.out").write_text(f"p812\ncOllama\nf4\nn127.0.0.1:{port}\n")
    refused = converge(fails=True)
    assert (f"Ollama (pid 812, 127.0.0.1:{port}) listens on port {port} on localhost, where "
            "the role's com.ollama.serve must serve (its agent would restart every 10 s beside "
            "it): quit Ollama.app and remove it from System Settings > General > Login Items "
            "(or stop that server), then run again") in " ".join(refused["output"].split())
    assert (tmp_path / "lsof.out.args").read_text() == f"-nP -iTCP:{port} -sTCP:LISTEN -F pcn\n"
    assert refused["calls"] == []
    assert not plist.exists()


def test_the_roles_own_agent_on_the_port_is_no_conflict(mac, tmp_path):
    converge, _plist, state, standin = mac
    port = standin.url.rsplit(":", 1)[1]
    # launchd runs com.ollama.serve as pid 4242, the process lsof finds on the port.
    state.write_text(json.dumps({"loaded": ["com.ollama.serve"], "disabled": [], "calls": []}))
    (tmp_path / "lsof.out").write_text(f"p4242\ncollama\nn*:{port}\n")
    # The run succeeds (converge asserts it), and the port check saw the listener and let it be.
    result = converge()
    assert "Check that no other process holds the Ollama port" in result["output"]
    assert "listens on port" not in result["output"]
