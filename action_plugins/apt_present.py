# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""apt_present: Debian packages installed, asking apt only when the package facts lack one.

The module's documentation is in library/apt_present.py.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

# A bare package name (Debian Policy 5.6.1); anything else (a version, a release, an
# architecture, a glob) only apt can check.
PLAIN_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")


# dpkg's own view of each package (dpkg-query expands the \t and \n): name, version,
# architecture, then its state in three letters (wanted, current, error flag); a current
# state "i" is installed and configured.
DPKG_FORMAT = r"${Package}\t${Version}\t${Architecture}\t${db:Status-Abbrev}\n"


def installed_packages(dpkg_output: str) -> dict[str, list[dict[str, str]]]:
    """``dpkg-query`` lines (DPKG_FORMAT) -> package name -> its installed versions, in the
    shape of ``ansible.builtin.package_facts``. A package removed with its configuration
    kept, half-installed or failed is not installed: apt is asked about it."""
    packages: dict[str, list[dict[str, str]]] = {}
    for line in dpkg_output.splitlines():
        fields = line.split("\t")
        if len(fields) != 4 or fields[3][1:2] != "i":
            continue
        name, version, arch = fields[:3]
        packages.setdefault(name, []).append(
            {"name": name, "version": version, "arch": arch, "source": "apt"})
    return packages


def missing_packages(names: Iterable[str], installed: Mapping[str, Any]) -> list[str]:
    """The names of ``names`` that ``installed`` (``ansible_facts.packages``) does not list,
    with every name that is not a bare package name."""
    return [name for name in names if not PLAIN_NAME.match(name) or name not in installed]


ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "name": {"type": "list", "elements": "str", "required": True},
    "install_recommends": {"type": "bool"},
    "update_cache": {"type": "bool", "default": True},
    "cache_valid_time": {"type": "int", "default": 3600},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def _read_packages(self) -> dict[str, list[dict[str, str]]]:
        # One dpkg-query over the connection, no module and no privileges: a third of what
        # package_facts costs, which loads apt's whole cache in Python.
        read = self._low_level_execute_command(
            f"LC_ALL=C dpkg-query --show --showformat={shlex.quote(DPKG_FORMAT)}",
            sudoable=False)
        if read["rc"] != 0:
            said = (read.get("stderr") or read.get("stdout") or "").strip()
            raise AnsibleActionFail(
                f"apt_present: cannot read the installed packages with dpkg-query "
                f"(rc {read['rc']}): {said or 'no output'}; the module needs a Debian host")
        return installed_packages(read["stdout"])

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        names = args["name"]
        if not names or not all(names):
            raise AnsibleActionFail("apt_present: name must list the packages to install")
        installed = (task_vars.get("ansible_facts") or {}).get("packages")
        facts: dict[str, Any] = {}
        if not isinstance(installed, Mapping):
            installed = facts["packages"] = self._read_packages()
        missing = missing_packages(names, installed)
        result.update(changed=False, missing=missing)
        if missing:
            apt_args = {"name": missing, "state": "present", "update_cache": args["update_cache"],
                        "cache_valid_time": args["cache_valid_time"]}
            if args["install_recommends"] is not None:
                apt_args["install_recommends"] = args["install_recommends"]
            installing = self._execute_module("ansible.builtin.apt", module_args=apt_args,
                                              task_vars=task_vars)
            result.update({key: value for key, value in installing.items()
                           if key not in ("invocation", "ansible_facts")})
            if installing.get("changed") and not self._task.check_mode:
                facts["packages"] = self._read_packages()
        if facts:
            result["ansible_facts"] = facts
        return result
