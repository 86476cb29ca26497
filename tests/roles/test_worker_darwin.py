"""The worker role's macOS path: the rendered launchd plist and the launchctl calls.

No Mac here: the play poses as one (faked facts) and a fake launchctl records every call
(tests/roles/fakebin/launchctl). What only a real Mac shows is listed in docs/roles.md.
"""

from __future__ import annotations

import json
import plistlib
import re
import stat
import sys
from pathlib import Path

import pytest
from conftest import HERE, run

PLAYBOOK = HERE / "playbooks" / "darwin.yml"
WEB_LABEL = "jp.mapleharp.coordinator-web-worker"
INFER_LABEL = "jp.mapleharp.coordinator-inference-worker"
BOTH = [{"name": "web-worker", "kind": "web"}, {"name": "inference-worker", "kind": "inference"}]


def play(home: Path, instances: list[dict], entry: str = "darwin", **extra: object) -> str:
    extra_vars = {"test_home": str(home), "test_instances": instances, "test_entry": entry,
                  "ansible_python_interpreter": sys.executable, **extra}
    result = run(["ansible-playbook", str(PLAYBOOK), "-i", "localhost,",
                  "-e", json.dumps(extra_vars)])
    output = result.stdout + result.stderr
    if entry == "darwin":
        assert result.returncode == 0, output[-4000:]
    return output


def changed(output: str) -> int:
    match = re.search(r"localhost\s*:\s*ok=\d+\s+changed=(\d+)", output)
    assert match, output[-2000:]
    return int(match.group(1))


def calls(home: Path) -> list[list[str]]:
    return json.loads((home / "launchctl.json").read_text())["calls"]


def plist(home: Path, label: str) -> Path:
    return home / "Library" / "LaunchAgents" / f"{label}.plist"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path


def test_plist_has_every_key_and_the_environment(home):
    play(home, BOTH)
    path = plist(home, WEB_LABEL)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it holds secrets
    data = plistlib.loads(path.read_bytes())
    base = f"{home}/coordinator-worker"
    assert data["Label"] == WEB_LABEL
    assert data["ProgramArguments"] == [f"{base}/venv/bin/python", f"{base}/app/worker_web.py"]
    assert data["WorkingDirectory"] == f"{base}/app"
    assert data["RunAtLoad"] is True
    assert data["KeepAlive"] is True
    log = f"{home}/Library/Logs/coordinator/web-worker.log"
    assert data["StandardOutPath"] == log
    assert data["StandardErrorPath"] == log
    assert data["EnvironmentVariables"] == {
        "PYTHONUNBUFFERED": "1",
        "REDIS_HOST": "10.89.20.40",
        "REDIS_PORT": "6379",
        "REDIS_PASSWORD": "redis-secret",
        "PG_DSN": "host=10.89.20.40 port=5432 dbname=coordinator user=coordinator "
                  "password='pg pass with \\'quote\\' & <xml>'",
        "SEARXNG_URL": "http://10.89.20.1:8888",
        "OLLAMA_HOST": "http://localhost:11434",
        "OLLAMA_MODEL": "hf.co/LiquidAI/LFM2.5-1.2B-JP-GGUF:Q4_K_M",
        "COORDINATOR_URL": "http://10.89.20.40:8000",
        "COORDINATOR_TOKEN": "token-secret",
        "WORKER_ID": "web-worker-macbookair",
        "WORKER_HOST": "10.89.20.43",
    }


def test_inference_agent_shares_the_python_but_not_the_log(home):
    play(home, BOTH)
    web = plistlib.loads(plist(home, WEB_LABEL).read_bytes())
    infer = plistlib.loads(plist(home, INFER_LABEL).read_bytes())
    # One venv python for both: macOS's Local Network permission is granted per binary.
    assert infer["ProgramArguments"][0] == web["ProgramArguments"][0]
    assert infer["ProgramArguments"][1].endswith("/app/worker_infer.py")
    assert infer["StandardOutPath"].endswith("/inference-worker.log")
    assert infer["StandardOutPath"] != web["StandardOutPath"]
    assert infer["EnvironmentVariables"]["WORKER_ID"] == "macbookair"
    assert infer["EnvironmentVariables"]["WORKER_DEVICE"] == "cpu"
    assert "WORKER_DEVICE" not in web["EnvironmentVariables"]


def test_first_run_bootstraps_each_agent_then_a_second_run_changes_nothing(home):
    first = play(home, BOTH)
    assert changed(first) > 0
    made = calls(home)
    for label in (WEB_LABEL, INFER_LABEL):
        assert ["bootstrap", "gui/501", str(plist(home, label))] in made
        assert ["print", f"gui/501/{label}"] in made  # checked: state = running
    assert not [c for c in made if c[0] in ("load", "unload")]  # legacy subcommands never used
    assert not [c for c in made if c[0] == "bootout"]

    second = play(home, BOTH)
    assert changed(second) == 0, second[-3000:]
    again = calls(home)[len(made):]
    assert not [c for c in again if c[0] in ("bootstrap", "bootout", "kickstart")], again


def test_changed_plist_is_reloaded_with_bootout_then_bootstrap(home):
    play(home, BOTH)
    before = len(calls(home))
    play(home, BOTH, worker_env={"OLLAMA_TIMEOUT": "120"})
    after = calls(home)[before:]
    for label in (WEB_LABEL, INFER_LABEL):
        bootout = after.index(["bootout", f"gui/501/{label}"])
        bootstrap = after.index(["bootstrap", "gui/501", str(plist(home, label))])
        assert bootout < bootstrap
    env = plistlib.loads(plist(home, WEB_LABEL).read_bytes())["EnvironmentVariables"]
    assert env["OLLAMA_TIMEOUT"] == "120"


def test_changed_code_restarts_with_kickstart(home):
    play(home, BOTH)
    before = len(calls(home))
    play(home, BOTH, test_code_changed=True)
    after = calls(home)[before:]
    assert ["kickstart", "-k", f"gui/501/{WEB_LABEL}"] in after
    assert ["kickstart", "-k", f"gui/501/{INFER_LABEL}"] in after
    assert not [c for c in after if c[0] in ("bootstrap", "bootout")]


def test_absent_worker_is_booted_out_and_removed_once(home):
    play(home, BOTH)
    gone = [{"name": "web-worker", "kind": "web", "state": "absent"},
            {"name": "inference-worker", "kind": "inference"}]
    before = len(calls(home))
    output = play(home, gone)
    assert changed(output) > 0
    assert ["bootout", f"gui/501/{WEB_LABEL}"] in calls(home)[before:]
    assert not plist(home, WEB_LABEL).exists()
    assert plist(home, INFER_LABEL).exists()
    state = json.loads((home / "launchctl.json").read_text())
    assert state["loaded"] == [INFER_LABEL]

    before = len(calls(home))
    again = play(home, gone)
    assert changed(again) == 0, again[-3000:]
    assert not [c for c in calls(home)[before:] if c[0] == "bootout"]


def test_disabled_agent_is_enabled_before_bootstrap(home):
    state = {"loaded": [], "disabled": [WEB_LABEL], "calls": []}
    (home / "launchctl.json").write_text(json.dumps(state))
    play(home, BOTH)
    made = calls(home)
    enable = made.index(["enable", f"gui/501/{WEB_LABEL}"])
    bootstrap = made.index(["bootstrap", "gui/501", str(plist(home, WEB_LABEL))])
    assert enable < bootstrap


def test_missing_vault_secret_names_the_variable_and_the_fix(home):
    output = play(home, BOTH, entry="main", worker_db_password="")
    assert ("worker_db_password is not set: add it to inventory/<name>/group_vars/all/vault.yml "
            "(copy vault.yml.example, fill it in, then ansible-vault encrypt it)") in output
    assert not plist(home, WEB_LABEL).exists()


def test_macos_as_root_is_refused(home):
    output = play(home, BOTH, entry="main", test_uid=0)
    assert ("localhost is macOS and Ansible runs as root there: launchd agents belong to the "
            "login user, set ansible_become: false for localhost in host_vars") in output
    assert not plist(home, WEB_LABEL).exists()


def test_secrets_never_reach_the_output(home):
    output = play(home, BOTH)
    for secret in ("redis-secret", "token-secret", "pg pass"):
        assert secret not in output
