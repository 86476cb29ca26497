# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""preflight: a role's checks, in order, in one task on the controller.

The module's documentation is in library/preflight.py.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

CHECK_KEYS = frozenset({"that", "when", "msg"})


class Check(NamedTuple):
    that: list[str | bool]
    when: list[str | bool]
    msg: str


def conditions(value: Any, where: str) -> list[str | bool]:
    """A condition or a list of them, as a list (a string is never split at its commas, as
    ``ansible.builtin.assert`` does not split its ``that``)."""
    if isinstance(value, (str, bool)):
        return [value]
    if isinstance(value, list) and value and all(isinstance(item, (str, bool)) for item in value):
        return list(value)
    raise AnsibleActionFail(f"{where} must be a condition or a list of conditions")


def parsed_checks(value: Any) -> list[Check]:
    """``checks`` as Check tuples, or AnsibleActionFail naming what is wrong."""
    if not isinstance(value, list) or not value:
        raise AnsibleActionFail("checks must be a non-empty list of checks")
    parsed = []
    for number, check in enumerate(value, 1):
        where = f"check {number}"
        if not isinstance(check, dict):
            raise AnsibleActionFail(f"{where} must be a dict with that and msg")
        unknown = sorted(set(check) - CHECK_KEYS)
        if unknown:
            raise AnsibleActionFail(f"{where} has unknown keys {', '.join(unknown)}; it takes "
                                    "that, when and msg")
        if not isinstance(check.get("msg"), str) or not check["msg"]:
            raise AnsibleActionFail(f"{where} needs a msg")
        when = conditions(check["when"], f"{where}'s when") if "when" in check else []
        parsed.append(Check(conditions(check.get("that"), f"{where}'s that"), when,
                            check["msg"]))
    return parsed


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset({"checks"})
    _requires_connection = False

    @classmethod
    def finalize_task_arg(cls, name: str, value: Any, templar: Any, context: Any) -> Any:
        # The checks reach run() as written: each condition is evaluated, and each message
        # templated, only when its turn comes (as a run of assert tasks would).
        if name == "checks":
            return value
        return super().finalize_task_arg(name, value, templar, context)

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        checked = 0
        for check in parsed_checks(self._task.args.get("checks")):
            if not all(self._templar.evaluate_conditional(conditional=c) for c in check.when):
                continue
            checked += 1
            failed = next((condition for condition in check.that
                           if not self._templar.evaluate_conditional(conditional=condition)),
                          None)
            if failed is not None:
                result.update(failed=True, changed=False, checked=checked, assertion=failed,
                              msg=self._templar.template(check.msg))
                return result
        result.update(changed=False, checked=checked,
                      msg=f"{checked} check{'' if checked == 1 else 's'} held")
        return result
