"""launchd_agent (library/): what it reads, what it plans, how it waits for launchd, check mode
and its documentation.

The module runs here against tests/doubles/launchctl, which copies the macOS behaviours the
module depends on (each cited there): a gui domain that exists only while its user is logged
in, a bootout that returns before the job has exited, SIGTERM and kickstart's pids, SIGKILL
from `kickstart -k`. The roles' tests run it on a pretend Mac too (test_worker_darwin,
tests/ollama/test_role_darwin).
"""

from __future__ import annotations

import json
import os
import plistlib
import pwd
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from ..host_state.test_host_state import read_on_localhost
from ..library_kit import load_module, module_doc
from ..macos.test_launchd_standin import CLIENT as LAB_LAUNCHCTL
from ..macos.test_launchd_standin import Mac as LabMac
from .conftest import REPO, VENV_BIN, run

# A Coordinator whose registry lists the workers a test puts in it (none here).
from .test_worker_darwin import coordinator  # noqa: F401

agent = load_module("launchd_agent")
LABEL = "jp.mapleharp.coordinator-web-worker"
TARGET = f"gui/501/{LABEL}"
PLIST = f"/Users/m/Library/LaunchAgents/{LABEL}.plist"
# The user the module names: the double's domain is gui/<this uid>.
UID = os.getuid()
USER = pwd.getpwuid(UID).pw_name


def status(loaded: bool = True, running: bool = True, enabled: bool = True):
    return agent.Status(loaded, running and loaded, 812 if running and loaded else 0, enabled)


# -- pure functions ---------------------------------------------------------------------------


def test_print_and_print_disabled_are_read():
    out = f"{TARGET} = {{\n\tstate = running\n\tpid = 812\n}}\n"
    disabled = f'disabled services = {{\n\t"{LABEL}" => disabled\n}}\n'
    assert agent.parse_status(0, out, "", LABEL) == agent.Status(True, True, 812, True)
    assert agent.parse_status(0, out, disabled, LABEL).enabled is False
    # Older macOS: `"label" => true`.
    assert agent.parse_status(0, out, f'"{LABEL}" => true', LABEL).enabled is False
    assert agent.parse_status(113, "", "", LABEL) == agent.Status(False, False, 0, True)


def test_only_the_agents_own_state_line_counts():
    # A KeepAlive agent waiting for its respawn; its coalition block says `state = active`
    # and a nested `state = running` must not make it look alive.
    out = (f"{TARGET} = {{\n\tstate = spawn scheduled\n\tlast exit code = 0\n"
           "\tresource coalition = {\n\t\tstate = running\n\t}\n}\n")
    assert agent.parse_status(0, out, "", LABEL) == agent.Status(True, False, 0, True)


@pytest.mark.parametrize(("print_out", "plist_data", "seconds"), [
    ("\texit timeout = 45\n", {"ExitTimeOut": 5}, 45 + agent.STOP_MARGIN),  # launchd's own
    ("", {"ExitTimeOut": 40}, 40 + agent.STOP_MARGIN),
    ("", None, agent.DEFAULT_EXIT_TIMEOUT + agent.STOP_MARGIN),
    # 0: launchd never kills it; the wait still ends.
    ("", {"ExitTimeOut": 0}, agent.DEFAULT_EXIT_TIMEOUT + agent.STOP_MARGIN),
])
def test_the_stop_bound_is_the_exit_timeout_plus_a_margin(print_out, plist_data, seconds):
    assert agent.stop_bound(print_out, plist_data) == seconds


def test_the_plist_is_read_for_its_exit_timeout_and_a_bad_one_is_none(tmp_path):
    plist = tmp_path / "agent.plist"
    plist.write_bytes(plistlib.dumps({"Label": LABEL, "ExitTimeOut": 40}))
    assert agent.read_plist(str(plist)) == {"Label": LABEL, "ExitTimeOut": 40}
    plist.write_text("not a plist")
    assert agent.read_plist(str(plist)) is None
    assert agent.read_plist(str(tmp_path / "missing.plist")) is None
    assert agent.read_plist(None) is None


@pytest.mark.parametrize(("before", "state", "enabled", "commands"), [
    (status(loaded=False), "started", True, [["bootstrap", "gui/501", PLIST]]),
    (status(loaded=False, enabled=False), "started", True,
     [["enable", TARGET], ["bootstrap", "gui/501", PLIST]]),
    (status(), "started", True, []),
    (status(), "reloaded", None, [["bootout", TARGET], ["bootstrap", "gui/501", PLIST]]),
    (status(loaded=False), "reloaded", None, [["bootstrap", "gui/501", PLIST]]),
    # Graceful: SIGTERM, then a start; never kickstart -k.
    (status(), "restarted", None, [["kill", "SIGTERM", TARGET], ["kickstart", TARGET]]),
    (status(running=False), "restarted", None, [["kickstart", TARGET]]),
    (status(loaded=False), "restarted", None, [["bootstrap", "gui/501", PLIST]]),
    # Disabled first: a login between the two cannot load it again.
    (status(), "stopped", False, [["disable", TARGET], ["bootout", TARGET]]),
    (status(loaded=False, enabled=False), "stopped", False, []),
    (status(), None, None, []),
])
def test_the_plan_is_the_fewest_subcommands(before, state, enabled, commands):
    assert agent.plan(before, state, enabled, TARGET, "gui/501", PLIST) == commands


# -- the module against the launchctl double --------------------------------------------------


class Mac:
    """A pretend Mac: the launchctl double's state file and the agent's plist."""

    def __init__(self, tmp_path: Path) -> None:
        self.state_file = tmp_path / "launchctl.json"
        self.plist = tmp_path / f"{LABEL}.plist"
        self.plist.write_bytes(plistlib.dumps({"Label": LABEL, "KeepAlive": True}))
        self.tmp_path = tmp_path
        self.set(loaded=[], disabled=[], calls=[])

    def set(self, **state: object) -> None:
        current = json.loads(self.state_file.read_text()) if self.state_file.exists() else {}
        self.state_file.write_text(json.dumps({**current, **state}))

    @property
    def state(self) -> dict:
        return json.loads(self.state_file.read_text())

    def changing_calls(self) -> list[list[str]]:
        return [c for c in self.state["calls"] if c[0] not in ("print", "print-disabled")]

    def module(self, *extra: str, **args: object) -> dict:
        """Run launchd_agent once through Ansible; its result for localhost."""
        self.set(calls=[])
        result = run(["ansible", "localhost", "-c", "local", "-m", "launchd_agent", *extra,
                      "-e", f"ansible_python_interpreter={sys.executable}",
                      "-a", json.dumps(args)],
                     PATH=f"{REPO / 'tests' / 'doubles'}:{VENV_BIN}:/usr/bin:/bin",
                     FAKE_LAUNCHCTL_STATE=str(self.state_file),
                     ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
                     ANSIBLE_LOAD_CALLBACK_PLUGINS="true")
        return json.loads(result.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


@pytest.fixture
def mac(tmp_path: Path) -> Mac:
    return Mac(tmp_path)


def test_check_mode_says_what_it_would_do_and_does_nothing(mac):
    mac.set(disabled=[LABEL])
    host = mac.module("--check", "--diff", label=LABEL, plist=str(mac.plist),
                      domain=f"gui/{UID}", state="started", enabled=True)
    assert host["changed"] is True
    assert host["commands"] == [["enable", f"gui/{UID}/{LABEL}"],
                                ["bootstrap", f"gui/{UID}", str(mac.plist)]]
    assert host["diff"] == {"before": {"loaded": False, "enabled": False},
                            "after": {"loaded": True, "enabled": True}}
    assert mac.changing_calls() == []


@pytest.mark.parametrize(("state", "enabled", "verbs", "pid_after"), [
    ("stopped", False, ["disable", "bootout"], 0),
    ("restarted", None, ["kill", "kickstart"], 812),
    ("reloaded", None, ["bootout", "bootstrap"], 812),
])
def test_check_mode_predicts_the_stop_restart_or_reload_of_a_running_agent(
        mac, state, enabled, verbs, pid_after):
    mac.set(loaded=[LABEL], pids={LABEL: 812})
    args = {"label": LABEL, "plist": str(mac.plist), "domain": f"gui/{UID}", "state": state}
    host = mac.module("--check", "--diff", **args,
                      **({} if enabled is None else {"enabled": enabled}))
    assert host["changed"] is True
    assert [command[0] for command in host["commands"]] == verbs
    assert host["pids"] == {"before": 812, "after": pid_after}
    assert host["diff"]["before"] == {"loaded": True, "enabled": True}
    assert host["diff"]["after"]["loaded"] is (state != "stopped")
    # Only read: launchd still runs it, with the same pid.
    assert mac.changing_calls() == []
    assert mac.state["loaded"] == [LABEL]


NOT_LOGGED_IN = (f"{USER} is not logged in at the console, so launchd has no gui/{UID} domain "
                 "for its agents (FileVault turns automatic login off, and a restart logs "
                 "everyone out): log in at the console or enable automatic login, then run "
                 "again")


@pytest.mark.parametrize("args", [
    {},  # only the domain
    {"label": LABEL},  # what launchd says of an agent
    {"label": LABEL, "state": "started", "enabled": True},
])
def test_nobody_logged_in_is_one_line_to_act_on(mac, args):
    mac.set(logged_in=False)
    if "state" in args:
        args = {**args, "plist": str(mac.plist)}
    host = mac.module(domain=f"gui/{UID}", **args)
    assert host["failed"] is True
    assert host["msg"] == NOT_LOGGED_IN
    assert mac.changing_calls() == []


def test_the_domain_check_passes_for_a_logged_in_user(mac):
    host = mac.module(domain=f"gui/{UID}")
    assert host.get("failed") is not True, host
    assert host["changed"] is False
    assert host["domain"] == f"gui/{UID}"
    assert mac.state["calls"] == [["print", f"gui/{UID}"]]


def test_a_reload_waits_until_the_old_job_has_exited(mac):
    # bootout returns at once and launchd lists the job for 3 more prints: bootstrap only after.
    mac.set(loaded=[LABEL], pids={LABEL: 812}, lingering={LABEL: 3})
    host = mac.module(label=LABEL, plist=str(mac.plist), domain=f"gui/{UID}",
                      state="reloaded")
    assert host.get("failed") is not True, host
    calls = mac.state["calls"]
    bootout = calls.index(["bootout", f"gui/{UID}/{LABEL}"])
    bootstrap = calls.index(["bootstrap", f"gui/{UID}", str(mac.plist)])
    service_prints = [c for c in calls[bootout:bootstrap] if c == ["print", f"gui/{UID}/{LABEL}"]]
    assert len(service_prints) == 4  # three still listed, the fourth no longer
    assert host["status"]["loaded"] and host["status"]["running"]
    assert host["pids"]["before"] == 812
    assert host["pids"]["after"] not in (0, 812)


def test_a_restart_is_sigterm_and_a_new_pid_never_sigkill(mac):
    mac.set(loaded=[LABEL], pids={LABEL: 812})
    host = mac.module(label=LABEL, plist=str(mac.plist), domain=f"gui/{UID}",
                      state="restarted")
    assert host.get("failed") is not True, host
    target = f"gui/{UID}/{LABEL}"
    assert mac.changing_calls() == [["kill", "SIGTERM", target], ["kickstart", target]]
    assert mac.state["signals"] == [[LABEL, "SIGTERM"]]
    assert host["pids"]["before"] == 812
    assert host["pids"]["after"] not in (0, 812)
    assert host["pids"]["after"] == host["status"]["pid"]
    assert host["commands"] == [["kill", "SIGTERM", target], ["kickstart", target]]


def test_a_process_that_outlives_sigterm_is_killed_saying_so(mac):
    # launchd's exit timeout for it is 1 s: the wait ends 1 + STOP_MARGIN s after SIGTERM.
    mac.set(loaded=[LABEL], pids={LABEL: 812}, ignores_sigterm=[LABEL],
            exit_timeout={LABEL: 1})
    host = mac.module(label=LABEL, plist=str(mac.plist), domain=f"gui/{UID}",
                      state="restarted")
    assert host.get("failed") is not True, host
    target = f"gui/{UID}/{LABEL}"
    bound = 1 + agent.STOP_MARGIN
    assert host["warnings"] == [f"{target} (pid 812) did not exit {bound} s after SIGTERM: "
                                "launchctl kickstart -k kills it (SIGKILL)"]
    assert mac.changing_calls() == [["kill", "SIGTERM", target], ["kickstart", "-k", target],
                                    ["kickstart", target]]
    assert mac.state["signals"] == [[LABEL, "SIGTERM"], [LABEL, "SIGKILL"]]
    assert host["pids"]["after"] not in (0, 812)


def test_a_job_that_does_not_exit_after_bootout_fails_the_reload_before_any_bootstrap(mac):
    mac.set(loaded=[LABEL], pids={LABEL: 812}, lingering={LABEL: 1000},
            exit_timeout={LABEL: 1})
    host = mac.module(label=LABEL, plist=str(mac.plist), domain=f"gui/{UID}",
                      state="reloaded")
    assert host["failed"] is True
    assert host["msg"] == (f"launchd still has gui/{UID}/{LABEL} {1 + agent.STOP_MARGIN} s "
                           "after launchctl bootout: its process did not exit within its exit "
                           "timeout; see its log")
    assert not [c for c in mac.state["calls"] if c[0] == "bootstrap"]


def test_stopped_and_disabled_disables_before_the_bootout(mac):
    mac.set(loaded=[LABEL])
    host = mac.module(label=LABEL, domain=f"gui/{UID}", state="stopped", enabled=False)
    target = f"gui/{UID}/{LABEL}"
    assert host.get("failed") is not True, host
    assert mac.changing_calls() == [["disable", target], ["bootout", target]]
    assert host["status"] == {"loaded": False, "running": False, "pid": 0, "enabled": False,
                              "installed": False}
    assert host["pids"] == {"before": 4242, "after": 0}
    assert mac.state["disabled"] == [LABEL]


def test_documentation_matches_the_code():
    doc = module_doc("launchd_agent")
    options = doc["doc"]["options"]
    assert sorted(options) == ["domain", "enabled", "label", "plist", "state", "wait"]
    assert options["state"]["choices"] == ["started", "stopped", "restarted", "reloaded"]
    for task in yaml.safe_load(doc["examples"]):
        assert set(task["launchd_agent"]) <= set(options)
    assert set(doc["return"]) == {"status", "pids", "commands", "domain"}


# -- the first play of every playbook: nobody logged in is named before any change -------------

def play_as_mac(mac: Mac, tasks: list[dict], bin_dir: Path | None = None,
                **extra_vars: object) -> tuple[int, str]:
    """One play of ``tasks`` on localhost posing as the Mac `macbookair`: its facts say Darwin
    (an extra variable, over what setup reads here) and launchctl is the double, unless
    ``bin_dir`` has another."""
    playbook = mac.tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False,
                                         "any_errors_fatal": True, "tasks": tasks}]))
    inventory = mac.tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"coordinator": {"hosts": {
        "macbookair": {"ansible_connection": "local",
                       "ansible_python_interpreter": sys.executable}}}}}}))
    mac.set(calls=[])
    result = run(["ansible-playbook", "-i", str(inventory), str(playbook), "-e", json.dumps({
                      "ansible_facts": {"os_family": "Darwin", "user_uid": UID}, **extra_vars})],
                 PATH=f"{bin_dir or ''}:{REPO / 'tests' / 'doubles'}:{VENV_BIN}:/usr/bin:/bin",
                 FAKE_LAUNCHCTL_STATE=str(mac.state_file))
    return result.returncode, " ".join((result.stdout + result.stderr).split())


@pytest.mark.parametrize("launchctl", ["double", "lab"])
def test_the_reach_step_names_a_mac_nobody_is_logged_in_to_and_changes_nothing(
        mac, coordinator, launchctl):  # noqa: F811
    """playbooks/tasks/reach.yml as site.yml, migrate-web.yml and upgrade-model.yml run it
    first; the task after it, a change, must never run. Nobody is logged in: the double's
    switch, or the lab Mac's launchctl with no session listening."""
    url, _ = coordinator
    mac.set(logged_in=False)
    bin_dir = mac.tmp_path / "bin"
    bin_dir.mkdir()
    if launchctl == "lab":
        (bin_dir / "launchctl").write_text(
            f'#!/bin/sh\nLAB_LAUNCHD_SOCKET_DIR="{mac.tmp_path}" exec "{sys.executable}" '
            f'"{LAB_LAUNCHCTL}" "$@"\n')
        (bin_dir / "launchctl").chmod(0o755)
    changed = mac.tmp_path / "changed"
    rc, flat = play_as_mac(mac, [
        {"name": "Reach every host",
         "ansible.builtin.include_tasks": str(REPO / "playbooks" / "tasks" / "reach.yml")},
        {"name": "A change", "ansible.builtin.file": {"path": str(changed), "state": "touch"}},
    ], bin_dir=bin_dir, worker_coordinator_url=url, worker_coordinator_token="token-9f3c")
    assert rc != 0
    assert (f"macbookair: {NOT_LOGGED_IN}. Nothing was changed, and the Coordinator's "
            "registry lists no alive web worker. Fix that and run again.") in flat, flat[-3000:]
    assert not changed.exists()
    assert mac.changing_calls() == []
    # The launchctl asked was the one meant: the double records its calls, the lab's does not.
    assert bool(mac.state["calls"]) is (launchctl == "double")


@pytest.mark.parametrize(("action", "loaded", "calls"), [
    ("stop", True, [["bootout", "{target}"]]),
    # The move's disable of the old worker: disabled before it is unloaded.
    ("disable", True, [["disable", "{target}"], ["bootout", "{target}"]]),
    ("disable", False, [["disable", "{target}"]]),
    ("start", False, [["enable", "{target}"], ["bootstrap", "gui/{uid}", "{plist}"]]),
])
def test_migrate_web_drives_the_web_workers_agent_through_launchd_agent(mac, action, loaded,
                                                                       calls):
    """playbooks/tasks/web_worker_service.yml's launchd branch, as migrate-web.yml includes it."""
    mac.set(loaded=[LABEL] if loaded else [], disabled=[] if action != "start" else [LABEL])
    rc, flat = play_as_mac(mac, [{
        "name": "The web worker's service step",
        "ansible.builtin.include_tasks": str(REPO / "playbooks" / "tasks"
                                             / "web_worker_service.yml"),
        "vars": {"migrate_web_host": "macbookair", "migrate_web_action": action}}],
        worker_web={"label": LABEL, "plist": str(mac.plist)})
    assert rc == 0, flat[-3000:]
    values = {"target": f"gui/{UID}/{LABEL}", "uid": UID, "plist": mac.plist}
    assert mac.changing_calls() == [[part.format(**values) for part in call] for call in calls]
    assert (LABEL in mac.state["loaded"]) is (action == "start")


# -- the module against the lab Mac's launchd (lab/macos/), a real daemon on this host ---------

# A job that drains for a moment after SIGTERM, as a worker finishes its task, and logs it.
DRAINING_JOB = """
import os, signal, sys, time
log = sys.argv[1]
def stop(number, frame):
    with open(log, "a") as out:
        out.write(f"SIGTERM {os.getpid()}\\n")
    time.sleep(float(sys.argv[2]))
    with open(log, "a") as out:
        out.write(f"drained {os.getpid()}\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
with open(log, "a") as out:
    out.write(f"started {os.getpid()}\\n")
while True:
    time.sleep(0.2)
"""


@pytest.fixture
def lab_mac(tmp_path: Path) -> Iterator[tuple[LabMac, Callable[..., dict]]]:
    """The lab Mac's launchd logged in as this user, and launchd_agent run against it through
    the lab's launchctl."""
    lab = LabMac(tmp_path / "mac")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    launchctl = bin_dir / "launchctl"
    launchctl.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{LAB_LAUNCHCTL}" "$@"\n')
    launchctl.chmod(0o755)
    lab.login()

    def module(*extra: str, **args: object) -> dict:
        result = run(["ansible", "localhost", "-c", "local", "-m", "launchd_agent", *extra,
                      "-e", f"ansible_python_interpreter={sys.executable}",
                      "-a", json.dumps({"domain": f"gui/{UID}", **args})],
                     PATH=f"{bin_dir}:{VENV_BIN}:/usr/bin:/bin",
                     LAB_LAUNCHD_SOCKET_DIR=str(lab.sockets),
                     ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
                     ANSIBLE_LOAD_CALLBACK_PLUGINS="true")
        return json.loads(result.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]

    yield lab, module
    if lab.daemon is not None:
        lab.logout()


def draining_agent(lab: LabMac, drain: float) -> tuple[Path, Path]:
    """The agent's plist in ~/Library/LaunchAgents (a login loads it) and its log."""
    log = lab.root / "job.log"
    plist = lab.agent(LABEL, DRAINING_JOB, where=lab.agents, KeepAlive=True, ExitTimeOut=20)
    spec = plistlib.loads(plist.read_bytes())
    spec["ProgramArguments"] += [str(log), str(drain)]
    plist.write_bytes(plistlib.dumps(spec))
    return plist, log


def test_lab_launchd_a_restart_is_sigterm_and_a_new_process(lab_mac):
    lab, module = lab_mac
    plist, log = draining_agent(lab, drain=1)
    started = module(label=LABEL, plist=str(plist), state="started")
    assert started.get("failed") is not True, started
    old = started["status"]["pid"]
    restarted = module(label=LABEL, plist=str(plist), state="restarted")
    assert restarted.get("failed") is not True, restarted
    assert restarted["pids"]["before"] == old
    new = restarted["pids"]["after"]
    assert new not in (0, old)
    # The old process ran its SIGTERM handler to the end: no SIGKILL.
    assert log.read_text().splitlines() == [f"started {old}", f"SIGTERM {old}",
                                            f"drained {old}", f"started {new}"]
    assert "warnings" not in restarted


def test_lab_launchd_a_reload_waits_for_a_draining_job_and_leaves_the_agent_loaded(lab_mac):
    lab, module = lab_mac
    plist, log = draining_agent(lab, drain=4)
    old = module(label=LABEL, plist=str(plist), state="started")["status"]["pid"]
    reloaded = module(label=LABEL, plist=str(plist), state="reloaded")
    assert reloaded.get("failed") is not True, reloaded
    assert reloaded["commands"] == [["bootout", f"gui/{UID}/{LABEL}"],
                                    ["bootstrap", f"gui/{UID}", str(plist)]]
    new = reloaded["status"]["pid"]
    assert reloaded["status"]["loaded"] and reloaded["status"]["running"]
    # The new process started only once the old one had finished draining.
    assert log.read_text().splitlines() == [f"started {old}", f"SIGTERM {old}",
                                            f"drained {old}", f"started {new}"]


def test_lab_launchd_stopped_and_disabled_stays_so_across_a_login(lab_mac):
    lab, module = lab_mac
    plist, _log = draining_agent(lab, drain=0)
    module(label=LABEL, plist=str(plist), state="started")
    stopped = module(label=LABEL, state="stopped", enabled=False)
    assert stopped.get("failed") is not True, stopped
    assert stopped["commands"] == [["disable", f"gui/{UID}/{LABEL}"],
                                   ["bootout", f"gui/{UID}/{LABEL}"]]
    lab.logout()
    lab.login()  # loads every agent of ~/Library/LaunchAgents that is not disabled
    after = module(label=LABEL)
    assert after["status"] == {"loaded": False, "running": False, "pid": 0, "enabled": False,
                               "installed": False}


def test_lab_launchd_nobody_logged_in_is_the_one_line(lab_mac):
    lab, module = lab_mac
    lab.logout()
    for args in ({}, {"label": LABEL}):
        host = module(**args)
        assert host["failed"] is True
        assert host["msg"] == NOT_LOGGED_IN


@pytest.mark.parametrize(("interpreter", "module_runs"), [
    (sys.executable, 0),  # host_state's program, over the connection
    ("python3", 1),  # no interpreter path to give a program: its module reads
])
def test_lab_launchd_host_state_reads_the_agents_as_launchd_agent_reports_them(
        lab_mac, tmp_path, interpreter, module_runs):
    lab, module = lab_mac
    plist, _log = draining_agent(lab, drain=0)
    module(label=LABEL, plist=str(plist), state="started")
    module(label="jp.mapleharp.idle", enabled=False)

    def read(**args: object) -> tuple[dict, int]:
        return read_on_localhost(tmp_path, args, interpreter, path=str(tmp_path / "bin"),
                                 LAB_LAUNCHD_SOCKET_DIR=str(lab.sockets))

    labels = [LABEL, "jp.mapleharp.idle"]
    found, runs = read(agents=labels, launchd_domain=f"gui/{UID}")
    assert runs == module_runs
    assert found.get("failed") is not True, found
    reported = {label: module(label=label)["status"] for label in labels}
    assert found["agents"] == {label: {k: v for k, v in status.items() if k != "installed"}
                               for label, status in reported.items()}
    assert found["agents"][LABEL]["running"] and found["agents"][LABEL]["pid"] > 0
    assert found["agents"]["jp.mapleharp.idle"] == {"loaded": False, "running": False,
                                                    "pid": 0, "enabled": False}
    assert found["launchd_domain"] == f"gui/{UID}"

    lab.logout()
    for args in ({"launchd_domain": f"gui/{UID}"}, {"agents": labels}):
        gone, _runs = read(**args)
        assert gone["failed"] is True
        assert gone["msg"] == NOT_LOGGED_IN
