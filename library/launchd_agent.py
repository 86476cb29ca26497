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
    the wanted state with C(launchctl bootstrap), C(bootout), C(kickstart), C(enable) and
    C(disable); C(launchctl print) and C(print-disabled) say what it is now. The legacy
    C(load) and C(unload) subcommands are never used.
  - V(started) loads the agent from its plist when launchd does not have it (a KeepAlive
    agent then runs); V(reloaded) unloads it first when launchd has it, since launchd reads a
    plist only at bootstrap; V(restarted) restarts a loaded agent's process
    (C(kickstart -k)) and loads one that is not; V(stopped) unloads it (an agent with
    KeepAlive would come back after a kill).
  - A disabled agent cannot be loaded, so O(enabled=true) enables it before any bootstrap.
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
    type: str
    required: true
  plist:
    description:
      - The agent's plist file, needed to load it.
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
      - Seconds to wait for launchd to report the agent running.
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
  - Exit codes of launchctl that mean the agent is already in the wanted state (a
    C(bootout) of an agent not loaded, a C(bootstrap) of one already loaded) are not errors.
seealso:
  - name: launchctl(1)
    description: The subcommands used.
    link: https://keith.github.io/xcode-man-pages/launchctl.1.html
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

- name: Stop it for good
  launchd_agent:
    label: jp.mapleharp.coordinator-web-worker
    state: stopped
    enabled: false

- name: What launchd says of it
  launchd_agent:
    label: jp.mapleharp.coordinator-web-worker
  register: agent
"""

RETURN = r"""
status:
  description: The agent as launchd reports it after the module ran.
  returned: always
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
commands:
  description: The launchctl subcommands run (in check mode, the ones it would run).
  returned: always
  type: list
  elements: list
  sample: [[enable, gui/501/jp.mapleharp.coordinator-web-worker]]
"""

import os
import re
import time
from dataclasses import asdict, dataclass

from ansible.module_utils.basic import AnsibleModule

# launchctl print of an agent launchd does not know.
NOT_LOADED = 113
# Exit codes that mean "already so": bootout of an agent not loaded (3, 5, 113), bootstrap
# of one already loaded (5, 37).
ALREADY = {"bootout": (3, 5, NOT_LOADED), "bootstrap": (5, 37)}
_PID = re.compile(r"^\s*pid = (\d+)\s*$", re.M)


@dataclass(frozen=True)
class Status:
    loaded: bool
    running: bool
    pid: int
    enabled: bool


# -- pure functions ---------------------------------------------------------------------------


def parse_status(print_rc: int, print_out: str, disabled_out: str, label: str) -> Status:
    """The agent's status from `launchctl print <domain>/<label>` and `print-disabled`."""
    loaded = print_rc == 0
    running = loaded and "state = running" in print_out
    pid = _PID.search(print_out) if running else None
    # Recent macOS prints `"label" => disabled`, older ones `"label" => true`.
    disabled = re.search(r'"' + re.escape(label) + r'" => (?:disabled|true)', disabled_out)
    return Status(loaded, running, int(pid.group(1)) if pid else 0, disabled is None)


def plan(status: Status, state: str | None, enabled: bool | None, target: str,
         domain: str, plist: str | None) -> list[list[str]]:
    """The launchctl subcommands that bring the agent from ``status`` to what is wanted."""
    commands: list[list[str]] = []
    if enabled is True and not status.enabled:
        commands.append(["enable", target])
    load = ["bootstrap", domain, plist or ""]
    if state == "started" and not status.loaded:
        commands.append(load)
    elif state == "reloaded":
        commands += [["bootout", target]] if status.loaded else []
        commands.append(load)
    elif state == "restarted":
        commands.append(["kickstart", "-k", target] if status.loaded else load)
    elif state == "stopped" and status.loaded:
        commands.append(["bootout", target])
    if enabled is False and status.enabled:
        commands.append(["disable", target])
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
    def __init__(self, module: AnsibleModule, label: str, domain: str) -> None:
        self.module = module
        self.label = label
        self.domain = domain
        self.target = f"{domain}/{label}"
        self.binary = module.get_bin_path("launchctl", required=True)

    def run(self, *args: str) -> tuple[int, str, str]:
        return self.module.run_command([self.binary, *args])

    def status(self) -> Status:
        rc, out, err = self.run("print", self.target)
        if rc not in (0, NOT_LOADED):
            self.module.fail_json(msg=f"launchctl print {self.target} failed ({rc}): "
                                      f"{(err or out).strip()}")
        drc, dout, derr = self.run("print-disabled", self.domain)
        if drc != 0:
            self.module.fail_json(msg=f"launchctl print-disabled {self.domain} failed ({drc}): "
                                      f"{(derr or dout).strip()}")
        return parse_status(rc, out, dout, self.label)

    def execute(self, command: list[str], after_bootout: bool) -> None:
        """Run one subcommand. bootout returns before the old job is gone, so a bootstrap
        right after it fails for a moment (5) and is tried again; otherwise an exit code that
        means "already so" is success."""
        for attempt in range(5):
            rc, out, err = self.run(*command)
            if rc == 0 or (rc in ALREADY.get(command[0], ()) and not after_bootout):
                return
            if not after_bootout or attempt == 4:
                self.module.fail_json(msg=f"launchctl {' '.join(command)} failed ({rc}): "
                                          f"{(err or out).strip()}")
            time.sleep(1)

    def wait_running(self, seconds: int) -> Status:
        deadline = time.monotonic() + seconds
        while True:
            status = self.status()
            if status.running or time.monotonic() > deadline:
                return status
            time.sleep(1)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "label": {"type": "str", "required": True},
            "plist": {"type": "path"},
            "domain": {"type": "str"},
            "state": {"type": "str", "choices": ["started", "stopped", "restarted", "reloaded"]},
            "enabled": {"type": "bool"},
            "wait": {"type": "int", "default": 20},
        },
        required_if=[("state", "started", ("plist",)), ("state", "reloaded", ("plist",)),
                     ("state", "restarted", ("plist",))],
        supports_check_mode=True,
    )
    params = module.params
    domain = params["domain"] or f"gui/{os.getuid()}"
    launchctl = Launchctl(module, params["label"], domain)
    before = launchctl.status()
    commands = plan(before, params["state"], params["enabled"], launchctl.target, domain,
                    params["plist"])
    after = expected_after(before, commands)
    if not module.check_mode:
        for index, command in enumerate(commands):
            launchctl.execute(command, after_bootout=index > 0
                              and commands[index - 1][0] == "bootout")
        if params["state"] in ("started", "reloaded", "restarted"):
            after = launchctl.wait_running(params["wait"])
            if not after.running:
                module.fail_json(msg=f"launchd does not run {launchctl.target} "
                                     f"{params['wait']} s after it was loaded; see its log",
                                 status=asdict(after), commands=commands)
        elif commands:
            after = launchctl.status()
    diff = {"before": {k: v for k, v in asdict(before).items() if k in ("loaded", "enabled")},
            "after": {k: v for k, v in asdict(after).items() if k in ("loaded", "enabled")}}
    installed = bool(params["plist"]) and os.path.exists(params["plist"])
    module.exit_json(changed=bool(commands), status={**asdict(after), "installed": installed},
                     commands=commands, diff=diff)


if __name__ == "__main__":
    main()
