#!/usr/bin/python
# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: a per-user launchd agent, with launchctl's bootstrap-era subcommands."""


from __future__ import annotations

DOCUMENTATION = r"""
---
module: launchd_agent
short_description: Load, start, restart, stop and enable a per-user launchd agent on macOS
description:
  - Brings one agent of a launchd domain (by default the connecting user's C(gui/<uid>)) to
    the wanted state with C(launchctl bootstrap), C(bootout), C(kill), C(kickstart),
    C(enable) and C(disable); C(launchctl print) and C(print-disabled) say what it is now.
    The legacy C(load) and C(unload) subcommands are never used.
  - V(started) loads the agent from its plist when launchd does not have it (a KeepAlive
    agent then runs). V(reloaded) unloads it first when launchd has it, since launchd reads a
    plist only at bootstrap. V(stopped) unloads it (an agent with KeepAlive would come back
    after a kill).
  - V(restarted) is graceful, as C(systemctl restart) is. It sends SIGTERM
    (C(launchctl kill SIGTERM)), waits until the old process has exited, then starts the
    agent (C(kickstart)) and waits for a process with another pid (launchd's KeepAlive may
    have started it already). Only a process still there after the agent's exit timeout plus
    a margin is killed (C(kickstart -k), SIGKILL), with a warning. An agent launchd does not
    have is loaded instead.
  - C(bootout) returns before the agent's process has exited. The module waits until
    C(launchctl print) no longer knows the agent, at most the agent's exit timeout plus a
    margin, and fails saying so when it still does; only then does a V(reloaded) load it
    again, so a reload never leaves the agent unloaded while its old process drains.
  - O(enabled=true) enables the agent before any bootstrap (launchd refuses to load a
    disabled one). O(enabled=false) disables it before any bootout, so a login in between
    cannot load it again; the disabled state outlives logins and restarts.
  - A C(gui/<uid>) domain exists only while its user is logged in at the console. When it
    does not, the module fails with one line saying to log in or to enable automatic login,
    never with launchctl's own words. Without O(label), that check is all it does.
  - It waits until launchd reports the agent running after V(started), V(reloaded) and
    V(restarted) (O(wait) seconds), and fails with launchctl's own words when it does not.
  - Run it as the user whose agent it is, without become.
version_added: "0.2.0"
author:
  - Coordinator cluster contributors (@coordinator-cluster)
options:
  label:
    description:
      - The agent's C(Label).
      - Unset, the module only checks that the domain exists.
    type: str
  plist:
    description:
      - The agent's plist file, needed to load it. Its C(ExitTimeOut) bounds the waits for
        the process to exit when launchd does not report the agent's exit timeout.
    type: path
  domain:
    description:
      - The launchd domain. Unset means the connecting user's C(gui/<uid>).
    type: str
  state:
    description:
      - What launchd must do with the agent; unset only reports what it is.
    type: str
    choices: [started, stopped, restarted, reloaded]
  enabled:
    description:
      - Whether the agent starts at login (C(launchctl enable) or C(disable)). Unset leaves it.
    type: bool
  wait:
    description:
      - Seconds to wait for launchd to report the agent running (with a new process after
        V(restarted)).
    type: int
    default: 20
attributes:
  check_mode:
    support: full
    details: In check mode it reads the agent's state and says what it would do.
  diff_mode:
    support: full
    details: The diff shows whether the agent is loaded and enabled, before and after.
notes:
  - The exit timeout is the one C(launchctl print) reports (C(exit timeout)), else the
    plist's C(ExitTimeOut), else 20 seconds; the margin added to it is 10 seconds.
  - Exit codes of launchctl are not read as meanings. After C(bootout), C(bootstrap) and
    C(kill) the module asks C(launchctl print) what launchd has, and fails with launchctl's
    own words only when that is not what was wanted.
seealso:
  - name: launchctl(1)
    description: The subcommands used.
    link: https://keith.github.io/xcode-man-pages/launchctl.1.html
  - name: launchd.plist(5)
    description: C(ExitTimeOut), C(KeepAlive) and the other keys of an agent's plist.
    link: https://keith.github.io/xcode-man-pages/launchd.plist.5.html
extends_documentation_fragment:
  - module_attributes
"""

EXAMPLES = r"""
- name: Load the web worker's agent, read again from its changed plist
  launchd_agent:
    label: jp.mapleharp.coordinator-web-worker
    plist: ~/Library/LaunchAgents/jp.mapleharp.coordinator-web-worker.plist
    state: reloaded
    enabled: true

- name: Restart it gracefully (SIGTERM, then a new process)
  launchd_agent:
    label: jp.mapleharp.coordinator-web-worker
    plist: ~/Library/LaunchAgents/jp.mapleharp.coordinator-web-worker.plist
    state: restarted
  register: restart

- name: Stop it for good, disabled first so that a login cannot bring it back
  launchd_agent:
    label: jp.mapleharp.coordinator-web-worker
    state: stopped
    enabled: false

- name: What launchd says of it
  launchd_agent:
    label: jp.mapleharp.coordinator-web-worker
  register: agent

- name: Fail unless the user is logged in at the console (the gui domain exists)
  launchd_agent:
    domain: gui/501
"""

RETURN = r"""
status:
  description: The agent as launchd reports it after the module ran; in check mode, as it
    would be (loaded and enabled as planned, a process only where one runs now).
  returned: when O(label) is set
  type: dict
  contains:
    loaded:
      description: Whether launchd has the agent (C(launchctl print) knows it).
      type: bool
    running:
      description: Whether its process runs (C(state = running)).
      type: bool
    pid:
      description: Its process id, 0 when it does not run.
      type: int
    enabled:
      description: Whether it is not in C(launchctl print-disabled).
      type: bool
    installed:
      description: Whether O(plist) exists (false when O(plist) is unset).
      type: bool
  sample: {loaded: true, running: true, pid: 812, enabled: true, installed: true}
pids:
  description:
    - The agent's process id before and after the module ran (0 when none ran), so that a
      caller can prove a restart happened (they differ).
  returned: when O(label) is set
  type: dict
  contains:
    before:
      description: The pid launchd reported before any change.
      type: int
    after:
      description: The pid launchd reports at the end (in check mode, 0 for an agent it
        would unload, else the one before).
      type: int
  sample: {before: 812, after: 1207}
commands:
  description:
    - The launchctl subcommands run (in check mode, the ones it would run), with a
      C(kickstart -k) added when a process outlived SIGTERM.
  returned: always
  type: list
  elements: list
  sample: [[enable, gui/501/jp.mapleharp.coordinator-web-worker]]
domain:
  description: The launchd domain the module worked in.
  returned: always
  type: str
  sample: gui/501
"""

import os
import plistlib
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_state import (
    NOT_LOADED,
    agent_entry,
    domain_problem,
    launchctl_failure,
)

# launchd.plist(5): ExitTimeOut's default is "system-defined"; 20 s is launchd's documented
# default since Leopard. The margin covers launchd's own cleanup after the kill (it schedules
# it seconds after the signal: https://github.com/Layr-Labs/d-inference/issues/1102).
DEFAULT_EXIT_TIMEOUT = 20
STOP_MARGIN = 10
_EXIT_TIMEOUT = re.compile(r"^\s*exit timeout = (\d+)\s*$", re.M)


@dataclass(frozen=True)
class Status:
    loaded: bool
    running: bool
    pid: int
    enabled: bool


# -- pure functions ---------------------------------------------------------------------------


def parse_status(print_rc: int, print_out: str, disabled_out: str, label: str) -> Status:
    """The agent's status from `launchctl print <domain>/<label>` and `print-disabled`, read
    as host_state reads it (module_utils/host_state.py)."""
    return Status(**agent_entry(print_rc, print_out, disabled_out, label))


def stop_bound(print_out: str, plist_data: dict | None) -> int:
    """Seconds to wait for an agent's process to exit after SIGTERM or bootout: launchd's
    exit timeout for it (as `print` reports it, else the plist's ExitTimeOut, else launchd's
    default) plus a margin. ExitTimeOut 0 means launchd never kills it: the default bounds
    the wait then."""
    live = _EXIT_TIMEOUT.search(print_out)
    seconds = int(live.group(1)) if live else (plist_data or {}).get("ExitTimeOut")
    if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds <= 0:
        seconds = DEFAULT_EXIT_TIMEOUT
    return seconds + STOP_MARGIN


def plan(status: Status, state: str | None, enabled: bool | None, target: str,
         domain: str, plist: str | None) -> list[list[str]]:
    """The launchctl subcommands that bring the agent from ``status`` to what is wanted.
    A disable comes before a bootout (a login in between cannot load it again), an enable
    before a bootstrap (launchd refuses to load a disabled agent)."""
    commands: list[list[str]] = []
    if enabled is True and not status.enabled:
        commands.append(["enable", target])
    if enabled is False and status.enabled:
        commands.append(["disable", target])
    load = ["bootstrap", domain, plist or ""]
    if state == "started" and not status.loaded:
        commands.append(load)
    elif state == "reloaded":
        commands += [["bootout", target]] if status.loaded else []
        commands.append(load)
    elif state == "restarted" and not status.loaded:
        commands.append(load)
    elif state == "restarted":
        commands += [["kill", "SIGTERM", target]] if status.running else []
        commands.append(["kickstart", target])
    elif state == "stopped" and status.loaded:
        commands.append(["bootout", target])
    return commands


def expected_after(status: Status, commands: list[list[str]]) -> Status:
    """What the status will be once ``commands`` ran (for check mode and the diff)."""
    loaded, enabled = status.loaded, status.enabled
    for command in commands:
        if command[0] in ("bootstrap", "kickstart"):
            loaded = True
        elif command[0] == "bootout":
            loaded = False
        elif command[0] in ("enable", "disable"):
            enabled = command[0] == "enable"
    return Status(loaded, loaded and status.running, status.pid if loaded else 0, enabled)


# -- the module -------------------------------------------------------------------------------


class Launchctl:
    def __init__(self, module: AnsibleModule, label: str | None, domain: str) -> None:
        self.module = module
        self.label = label
        self.domain = domain
        self.target = f"{domain}/{label}"
        self.binary = module.get_bin_path("launchctl", required=True)
        self.commands: list[list[str]] = []
        self.print_out = ""

    def run(self, *args: str) -> tuple[int, str, str]:
        return self.module.run_command([self.binary, *args])

    def fail(self, command: list[str], rc: int, out: str, err: str, **extra: object) -> None:
        self.module.fail_json(msg=launchctl_failure(command, rc, out, err), **extra)

    def check_domain(self) -> None:
        """Fail with the one line a user can act on when the domain does not exist."""
        problem = domain_problem(self.domain, self.run)
        if problem is not None:
            self.module.fail_json(msg=problem, domain=self.domain, commands=[])

    def status(self) -> Status:
        rc, out, err = self.run("print", self.target)
        if rc not in (0, NOT_LOADED):
            # A domain that is gone fails every subcommand: say why, not launchctl's code.
            self.check_domain()
            self.fail(["print", self.target], rc, out, err)
        self.print_out = out
        drc, dout, derr = self.run("print-disabled", self.domain)
        if drc != 0:
            self.fail(["print-disabled", self.domain], drc, dout, derr)
        return parse_status(rc, out, dout, self.label or "")

    def wait_for(self, seconds: float, done: Callable[[Status], bool]) -> Status:
        """Read the status every second until ``done(status)`` or ``seconds`` passed."""
        deadline = time.monotonic() + seconds
        while True:
            status = self.status()
            if done(status) or time.monotonic() > deadline:
                return status
            time.sleep(1)

    def execute(self, command: list[str], bound: int, old_pid: int) -> None:
        """Run one subcommand and wait until launchd did what it asks. What launchd has is
        read back with `print`; launchctl's exit code alone decides nothing."""
        self.commands.append(command)
        rc, out, err = self.run(*command)
        verb = command[0]
        if verb == "bootout":
            # It returns before the process has exited (at once, or 36 EINPROGRESS when the
            # job was exiting already); the label stays listed until it has.
            after = self.wait_for(bound, lambda s: not s.loaded)
            if after.loaded:
                self.module.fail_json(
                    msg=f"launchd still has {self.target} {bound} s after launchctl bootout: "
                        "its process did not exit within its exit timeout; see its log",
                    status=asdict(after), commands=self.commands, rc=rc,
                    stderr=err)
        elif verb == "bootstrap" and rc != 0:
            # Right after a bootout, launchd may refuse the label a moment longer (5,
            # https://github.com/headroomlabs-ai/headroom/issues/1289): try again until the
            # bound. Otherwise a bootstrap that failed because the agent is loaded did its job.
            after_bootout = self.commands[-2:-1] == [["bootout", self.target]]
            deadline = time.monotonic() + (bound if after_bootout else 0)
            while not self.status().loaded:
                if time.monotonic() > deadline:
                    self.fail(command, rc, out, err, commands=self.commands)
                time.sleep(1)
                rc, out, err = self.run(*command)
        elif verb == "kill":
            after = self.wait_for(bound, lambda s: s.pid != old_pid)
            if after.pid == old_pid:
                self.module.warn(f"{self.target} (pid {old_pid}) did not exit {bound} s after "
                                 "SIGTERM: launchctl kickstart -k kills it (SIGKILL)")
                self.execute(["kickstart", "-k", self.target], bound, old_pid)
        elif rc != 0:
            self.fail(command, rc, out, err, commands=self.commands)


def read_plist(path: str | None) -> dict | None:
    """The agent's plist, or None when there is none to read (bootstrap then says why)."""
    try:
        with open(path or "", "rb") as handle:
            data = plistlib.load(handle)
    except (OSError, ValueError, plistlib.InvalidFileException):
        return None
    return data if isinstance(data, dict) else None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "label": {"type": "str"},
            "plist": {"type": "path"},
            "domain": {"type": "str"},
            "state": {"type": "str", "choices": ["started", "stopped", "restarted", "reloaded"]},
            "enabled": {"type": "bool"},
            "wait": {"type": "int", "default": 20},
        },
        required_if=[("state", "started", ("plist",)), ("state", "reloaded", ("plist",)),
                     ("state", "restarted", ("plist",))],
        required_by={"state": ("label",), "enabled": ("label",), "plist": ("label",)},
        supports_check_mode=True,
    )
    params = module.params
    domain = params["domain"] or f"gui/{os.getuid()}"
    launchctl = Launchctl(module, params["label"], domain)
    if not params["label"]:
        launchctl.check_domain()
        module.exit_json(changed=False, domain=domain, commands=[])
    before = launchctl.status()
    commands = plan(before, params["state"], params["enabled"], launchctl.target, domain,
                    params["plist"])
    after = expected_after(before, commands)
    if not module.check_mode and commands:
        bound = stop_bound(launchctl.print_out, read_plist(params["plist"]))
        for command in commands:
            launchctl.execute(command, bound, before.pid)
        commands = launchctl.commands
    if not module.check_mode and params["state"] in ("started", "reloaded", "restarted"):
        # After a restart only a process other than the old one counts.
        fresh = params["state"] == "restarted" and before.running
        after = launchctl.wait_for(params["wait"], lambda s: s.running
                                   and not (fresh and s.pid == before.pid))
        if not after.running or (fresh and after.pid == before.pid):
            module.fail_json(msg=f"launchd does not run {launchctl.target} "
                                 f"{params['wait']} s after it was "
                                 f"{'restarted' if fresh else 'loaded'}; see its log",
                             status=asdict(after), commands=commands)
    elif not module.check_mode and commands:
        after = launchctl.status()
    diff = {"before": {k: v for k, v in asdict(before).items() if k in ("loaded", "enabled")},
            "after": {k: v for k, v in asdict(after).items() if k in ("loaded", "enabled")}}
    installed = bool(params["plist"]) and os.path.exists(params["plist"])
    module.exit_json(changed=bool(commands), status={**asdict(after), "installed": installed},
                     pids={"before": before.pid, "after": after.pid}, commands=commands,
                     domain=domain, diff=diff)


if __name__ == "__main__":
    main()
