"""The Mac-shaped node's /usr/bin/python3 (3.9) sees the OS a Mac's Python sees.

Python imports this module at startup (https://docs.python.org/3.9/library/site.html,
"sitecustomize"), before any program, so what Ansible's modules and fact gathering ask the
OS gets macOS's answers, decided the way Ansible decides them
(ansible/module_utils/facts/system/platform.py, distribution.py, service_mgr.py):

- ``os.uname()`` (hence ``platform.system()``, ``platform.release()``, ``platform.machine()``)
  reports Darwin on arm64, with the Darwin release of the macOS version in
  SystemVersion.plist (macOS 11 and later: Darwin major = macOS major + 9, minor = minor;
  https://en.wikipedia.org/wiki/Darwin_(operating_system)#Release_history).
- ``/proc`` and ``/sys`` do not exist, as on macOS: a module that reads them fails here as
  on a Mac, and Ansible's service_mgr fact cannot read PID 1's name there and asks
  ``ps -p 1 -o comm`` (BSD ps: ``/sbin/launchd``), as it does on a Mac.

What it cannot change: ``sys.platform`` stays ``linux`` and compiled wheels are Linux ones
(docs/lab.md lists what only a real Mac shows).
"""

from __future__ import annotations

import builtins
import io
import os
import plistlib
from collections.abc import Callable
from typing import Any

_SYSTEM_VERSION = "/System/Library/CoreServices/SystemVersion.plist"
# The kernel version string of macOS 15.6 on an M1 (uname -v), with the release put in.
_KERNEL_VERSION = ("Darwin Kernel Version {release}: Mon Jul 14 11:28:17 PDT 2025; "
                   "root:xnu-11417.140.69~1/RELEASE_ARM64_T8103")
_HIDDEN = ("/proc", "/sys")


def _darwin_release() -> str:
    with open(_SYSTEM_VERSION, "rb") as handle:
        major, minor = [*plistlib.load(handle)["ProductVersion"].split("."), "0"][:2]
    return f"{int(major) + 9}.{int(minor)}.0"


_RELEASE = _darwin_release()
_real_uname = os.uname


def _uname() -> os.uname_result:
    node = _real_uname().nodename
    return os.uname_result(("Darwin", node, _RELEASE,
                            _KERNEL_VERSION.format(release=_RELEASE), "arm64"))


def _hidden(path: object) -> bool:
    """Whether ``path`` names something under /proc or /sys. Relative paths are not looked
    at: the working directory can never be there (chdir is hidden too)."""
    if path is None or isinstance(path, int):
        return False
    try:
        name = os.fsdecode(path)
    except TypeError:
        return False
    absolute = os.path.normpath(name)
    return any(absolute == top or absolute.startswith(top + "/") for top in _HIDDEN)


class _Hide:
    """``function`` as if /proc and /sys did not exist (the path is its first argument).
    A callable object, not a function: pathlib keeps ``os.stat`` and others as class
    attributes, where a function would be bound as a method."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.__name__ = function.__name__
        self.__doc__ = function.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        path = args[0] if args else kwargs.get("path", kwargs.get("file"))
        if _hidden(path):
            raise FileNotFoundError(2, "No such file or directory", os.fsdecode(path))
        return self.function(*args, **kwargs)


def _access(path: Any, mode: int, *args: Any, **kwargs: Any) -> bool:
    return False if _hidden(path) else _real_access(path, mode, *args, **kwargs)


_real_access = os.access
os.uname = _uname
os.access = _access
for _name in ("stat", "lstat", "open", "listdir", "scandir", "readlink", "chdir"):
    setattr(os, _name, _Hide(getattr(os, _name)))
builtins.open = io.open = _Hide(io.open)
