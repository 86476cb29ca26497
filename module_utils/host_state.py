# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the ``host_state`` module reads of a host: accounts, files and systemd units, in one
pass.

The Python standard library only, and no Ansible: the module imports it, and its action
plugin runs ``read_state`` with this file's own source as a plain Python program over the
connection (``python3 -``), a fraction of a module run's cost, so that a role reads what it
needs once and runs a module only where something must change.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import stat
import subprocess
from collections.abc import Iterable, Mapping
from typing import Any

CHUNK = 1 << 20
# What systemd says of a unit, as ansible.builtin.systemd_service's status names it.
UNIT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "UnitFileState", "MainPID")


def user_entry(name: str) -> dict[str, Any] | None:
    """A user as ansible.builtin.user compares one: uid, primary group (its name, or its gid
    where no group has it), home, shell and supplementary groups; None when there is none."""
    try:
        found = pwd.getpwnam(name)
    except KeyError:
        return None
    try:
        primary = grp.getgrgid(found.pw_gid).gr_name
    except KeyError:
        primary = str(found.pw_gid)
    return {"uid": found.pw_uid, "group": primary, "home": found.pw_dir,
            "shell": found.pw_shell,
            "groups": sorted(g.gr_name for g in grp.getgrall() if name in g.gr_mem)}


def group_entry(name: str) -> dict[str, Any] | None:
    try:
        return {"gid": grp.getgrnam(name).gr_gid}
    except KeyError:
        return None


def name_of(table: Any, number: int) -> str:
    """The user (pwd) or group (grp) name of a number, or the number where none has it."""
    try:
        return table(number)[0]
    except KeyError:
        return str(number)


def file_entry(path: str) -> dict[str, Any] | None:
    """A path as ansible.builtin.stat reports the parts roles compare (not followed): its
    type, owner and group (ids and names), mode (octal string), whether the connecting user
    may execute it, and a regular file's SHA-1 (stat's checksum); None when nothing is there,
    or when it cannot be read."""
    path = os.path.expanduser(path)  # ~ is the connecting (or become) user's, as for a module
    try:
        found = os.lstat(path)
    except OSError:
        return None
    kind = ("file" if stat.S_ISREG(found.st_mode) else "directory" if stat.S_ISDIR(found.st_mode)
            else "link" if stat.S_ISLNK(found.st_mode) else "other")
    entry: dict[str, Any] = {"type": kind, "uid": found.st_uid, "gid": found.st_gid,
                             "owner": name_of(pwd.getpwuid, found.st_uid),
                             "group": name_of(grp.getgrgid, found.st_gid),
                             "mode": f"{stat.S_IMODE(found.st_mode):04o}",
                             "executable": os.access(path, os.X_OK)}
    if kind == "file":
        digest = hashlib.sha1()  # what ansible.builtin.stat reports as checksum
        try:
            with open(path, "rb") as stream:
                for block in iter(lambda: stream.read(CHUNK), b""):
                    digest.update(block)
        except OSError:
            return None
        entry["checksum"] = digest.hexdigest()
    return entry


def parse_units(names: list[str], shown: str) -> dict[str, dict[str, Any] | None]:
    """``systemctl show`` of ``names`` (one block of KEY=value lines a unit, in their order,
    blank lines between) -> each unit's UNIT_PROPERTIES; a unit systemd does not know has
    LoadState not-found. None for all when the blocks do not match the names."""
    blocks = [block for block in shown.strip().split("\n\n") if block.strip()]
    if len(blocks) != len(names):
        return dict.fromkeys(names)
    units: dict[str, dict[str, Any] | None] = {}
    for index, name in enumerate(names):  # the same length; zip(strict=) is Python 3.10+
        found = dict(line.split("=", 1) for line in blocks[index].splitlines() if "=" in line)
        entry: dict[str, Any] = {key: found.get(key, "") for key in UNIT_PROPERTIES}
        entry["MainPID"] = int(entry["MainPID"] or 0)
        units[name] = entry
    return units


def unit_entries(names: list[str]) -> dict[str, dict[str, Any] | None]:
    """Each systemd unit's state, read in one ``systemctl show``; None for each where systemd
    cannot answer (a Mac, a container without it)."""
    if not names:
        return {}
    try:
        shown = subprocess.run(
            ["systemctl", "show", "--property=" + ",".join(UNIT_PROPERTIES), "--", *names],
            capture_output=True, text=True, check=False,
            env={**os.environ, "LC_ALL": "C", "SYSTEMD_PAGER": ""})
    except OSError:
        return dict.fromkeys(names)
    return parse_units(names, shown.stdout) if shown.returncode == 0 else dict.fromkeys(names)


def read_state(params: Mapping[str, Iterable[str] | None]) -> dict[str, Any]:
    """Each of ``params``' users, groups, files and units (lists of names and absolute paths)
    as the host has it: ``{"users": {name: entry or None}, "groups": ..., "files": ...,
    "units": ...}``."""
    return {
        "users": {name: user_entry(name) for name in params.get("users") or ()},
        "groups": {name: group_entry(name) for name in params.get("groups") or ()},
        "files": {path: file_entry(path) for path in params.get("files") or ()},
        "units": unit_entries(list(params.get("units") or ())),
    }
