# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the ``sync_tree`` module reads of a tree on the target: which files are missing or
differ, and whether every file and directory already has its owner, group and mode.

The Python standard library only, and no Ansible: the module imports it, and its action
plugin runs ``in_place_report`` with this file's own source as a plain Python program over
the connection (``python3 -``), which costs a fraction of a module run (no AnsiballZ payload,
no ``ansible.module_utils.basic`` to import), and runs the module only when something
differs.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any

CHUNK = 1 << 20
# The module's defaults for the files' and the directories' modes.
DEFAULT_MODE = "0644"
DEFAULT_DIRECTORY_MODE = "0755"
OCTAL_MODE = re.compile(r"^0?[0-7]{3,4}$")


class TreeError(Exception):
    """A problem the user has to fix, worded for them."""


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def check_relative(relpath: str) -> str:
    """Return relpath when it stays inside the tree; refuse absolute paths and '..'."""
    parts = PurePosixPath(relpath).parts
    if not parts or relpath.startswith("/") or ".." in parts:
        raise TreeError(
            f"{relpath!r} is not a path inside the tree: use a relative path without '..'"
        )
    return relpath


def stale_files(dest: str, manifest: Mapping[str, str]) -> list[str]:
    """Relative paths whose copy under dest is missing, not a regular file, or differs."""
    stale = []
    for relpath, digest in sorted(manifest.items()):
        path = os.path.join(dest, check_relative(relpath))
        if not os.path.isfile(path) or os.path.islink(path) or file_sha256(path) != digest:
            stale.append(relpath)
    return stale


def tree_directories(manifest: Iterable[str]) -> list[str]:
    """Every directory the files need, relative to dest, parents first ('' is dest itself)."""
    found = {""}
    for relpath in manifest:
        parent = PurePosixPath(relpath).parent
        while str(parent) != ".":
            found.add(str(parent))
            parent = parent.parent
    return sorted(found, key=lambda d: (d.count("/") + bool(d), d))


def octal_mode(mode: Any) -> int | None:
    """The permission bits ``mode`` sets, as AnsibleModule reads an octal one (an int, or a
    string of octal digits); None for a symbolic mode (``u=rw,g=r``), which only the module
    applies."""
    if isinstance(mode, int) and not isinstance(mode, bool):
        return mode
    if isinstance(mode, str) and OCTAL_MODE.match(mode):
        return int(mode, 8)
    return None


def account_id(name: str | None, by_name: Any) -> int | None:
    """The uid or gid ``name`` names, as AnsibleModule resolves an owner or a group (a number,
    else a name looked up with ``by_name``: pwd.getpwnam or grp.getgrnam); None when not
    asked for; KeyError for a name the target does not have."""
    if name is None:
        return None
    try:
        return int(name)
    except ValueError:
        return by_name(name)[2]


def has_attributes(path: str, uid: int | None, gid: int | None, mode: int) -> bool:
    """Whether ``path`` (not followed, as AnsibleModule checks it) has this owner, group and
    mode already; None for uid or gid: not asked for."""
    found = os.lstat(path)
    return ((uid is None or found.st_uid == uid) and (gid is None or found.st_gid == gid)
            and stat.S_IMODE(found.st_mode) == mode)


def first_difference(params: Mapping[str, Any], dest: str) -> str | None:
    """What keeps the tree at ``dest`` from being as ``params`` say, or None when it is."""
    manifest = params["manifest"]
    mode = octal_mode(DEFAULT_MODE if params.get("mode") is None else params["mode"])
    directory_mode = octal_mode(DEFAULT_DIRECTORY_MODE if params.get("directory_mode") is None
                                else params["directory_mode"])
    if mode is None or directory_mode is None:
        return "a symbolic mode"
    try:
        uid = account_id(params.get("owner"), pwd.getpwnam)
    except KeyError:
        return f"no user {params['owner']} here"
    try:
        gid = account_id(params.get("group"), grp.getgrnam)
    except KeyError:
        return f"no group {params['group']} here"
    for relative in tree_directories(manifest):
        directory = os.path.join(dest, relative) if relative else dest
        if not os.path.isdir(directory) or os.path.islink(directory):
            return f"{directory} is not a directory"
        if not has_attributes(directory, uid, gid, directory_mode):
            return f"{directory}'s owner or mode"
    stale = stale_files(dest, manifest)
    if stale:
        return f"{len(stale)} files differ"
    return next((f"{relpath}'s owner or mode" for relpath in sorted(manifest)
                 if not has_attributes(os.path.join(dest, relpath), uid, gid, mode)), None)


def in_place_report(params: Mapping[str, Any]) -> dict[str, Any]:
    """Whether the tree the module's parameters describe (dest, manifest, owner, group, mode,
    directory_mode; the modes' defaults where None) is on the target as they say, so that a
    module run would change nothing: ``{"in_place": bool, "dest": the expanded dest, "why":
    what differs, if anything}``."""
    dest = os.path.expanduser(params["dest"])
    why = first_difference(params, dest)
    return {"in_place": True, "dest": dest} if why is None else {
        "in_place": False, "dest": dest, "why": why}
