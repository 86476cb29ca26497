# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""host_state: a host's accounts, files, systemd units and launchd agents, read with a plain
Python program over the connection instead of a module run.

The module's documentation is in library/host_state.py. ``run_program`` is also how
sync_tree's plugin asks whether a tree is in place (action_plugins/sync_tree.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

# This repository's module_utils/, beside the plugins in its layout and in a collection's
# (plugins/action, plugins/module_utils).
MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "module_utils")


# module_utils/host_state.py imported here on the controller (the standard library only), for
# the argument spec the module validates with.
_spec = importlib.util.spec_from_file_location("host_state_utils",
                                               os.path.join(MODULE_UTILS, "host_state.py"))
_utils = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_utils)
ARGUMENT_SPEC: dict[str, dict[str, Any]] = _utils.ARGUMENT_SPEC
# What a read returns, whichever way it ran.
RETURNED = ("users", "groups", "files", "units", "agents", "launchd_domain", "urls", "texts")

display = Display()


def program(source: str, function: str, params: dict[str, Any]) -> str:
    """A Python program: a module_utils file's ``source`` and a call of its ``function`` with
    ``params``, printing what it returns as JSON on its last line."""
    return (f"{source}\n\nimport json as _json\n"
            f"print(_json.dumps({function}(_json.loads({json.dumps(params)!r}))))\n")


def last_json(output: str) -> Any:
    """The JSON value on the last line of ``output``; None when there is none."""
    lines = output.strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        return None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        relative = [path for path in args["files"] if not str(path).startswith(("/", "~"))]
        if relative:
            raise AnsibleActionFail(
                f"host_state: files must be absolute paths (or start with ~), got {relative[0]}")
        state = self.run_program("host_state", "read_state", args, task_vars or {})
        if not isinstance(state, dict):
            # The module reads the same, where a program cannot be passed.
            state = self._execute_module("host_state", module_args=args, task_vars=task_vars)
        if state.get("failed"):
            # Nobody logged in at the Mac's console, launchctl refusing: the module's words.
            result.update(failed=True, msg=state.get("msg"))
            return result
        result.update(changed=False, **{key: state[key] for key in RETURNED})
        return result

    def run_program(self, utils: str, function: str, params: dict[str, Any],
                    task_vars: dict[str, Any]) -> Any:
        """``function`` of module_utils/<utils>.py (the standard library only) called with
        ``params`` on the target, by the interpreter its modules run on, as the task's become
        user, in the task's environment: what it returns, or None where it cannot run (no
        interpreter known yet in the run, a connection that cannot pass a program on stdin, a
        failure)."""
        interpreter = task_vars.get("ansible_python_interpreter") or (
            task_vars.get("ansible_facts") or {}).get("discovered_interpreter_python")
        if interpreter is not None:
            interpreter = str(self._templar.template(interpreter))
        source = os.path.join(MODULE_UTILS, f"{utils}.py")
        if (not interpreter or not interpreter.startswith("/")
                or not getattr(self._connection, "has_pipelining", False)
                or not os.path.isfile(source)):
            return None
        with open(source, encoding="utf-8") as stream:
            text = program(stream.read(), function, params)
        # The task's environment (a play's PATH, say) as a module gets it.
        command = self._connection._shell.build_module_command(
            self._compute_environment_string(), f"#!{interpreter}", "-")
        read = self._low_level_execute_command(command, sudoable=True, in_data=text.encode())
        answer = last_json(read.get("stdout") or "") if read["rc"] == 0 else None
        if answer is None:
            display.vvv(f"{utils}.{function} did not run on the target (rc {read['rc']}: "
                        f"{(read.get('stderr') or '').strip()[:300]}); a module run instead",
                        host=self._play_context.remote_addr)
        return answer
