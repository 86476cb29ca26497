# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the ``host_state`` module reads of a host: accounts and files, in one pass.

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
from collections.abc import Iterable, Mapping
from typing import Any

CHUNK = 1 << 20


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


def file_entry(path: str) -> dict[str, Any] | None:
    """A path as ansible.builtin.stat reports the parts roles compare (not followed): its
    type, owner, group, mode (octal string), and a regular file's SHA-1 (stat's checksum);
    None when nothing is there, or when it cannot be read."""
    try:
        found = os.lstat(path)
    except OSError:
        return None
    kind = ("file" if stat.S_ISREG(found.st_mode) else "directory" if stat.S_ISDIR(found.st_mode)
            else "link" if stat.S_ISLNK(found.st_mode) else "other")
    entry: dict[str, Any] = {"type": kind, "uid": found.st_uid, "gid": found.st_gid,
                             "mode": f"{stat.S_IMODE(found.st_mode):04o}"}
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


def read_state(params: Mapping[str, Iterable[str] | None]) -> dict[str, Any]:
    """Each of ``params``' users, groups and files (lists of names and absolute paths) as the
    host has it: ``{"users": {name: entry or None}, "groups": ..., "files": ...}``."""
    return {
        "users": {name: user_entry(name) for name in params.get("users") or ()},
        "groups": {name: group_entry(name) for name in params.get("groups") or ()},
        "files": {path: file_entry(path) for path in params.get("files") or ()},
    }
