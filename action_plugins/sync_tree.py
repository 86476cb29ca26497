# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of sync_tree: hash the tree, ask the target what differs, send only that.

The module's documentation is in library/sync_tree.py. A converged tree costs no module run:
the target is first asked with module_utils/sync_tree_state.py's ``in_place_report`` run as a
plain Python program (host_state's ``run_program``), and the module runs only when that says
something differs, or cannot say.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import tarfile
import tempfile
from pathlib import PurePosixPath
from typing import Any

from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.parameters import remove_values
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.hashing import secure_hash

DEFAULT_EXCLUDE = ("__pycache__", "*.pyc")
# What in_place_report reads of the module's arguments.
IN_PLACE_PARAMS = ("dest", "manifest", "owner", "group", "mode", "directory_mode")

display = Display()


def excluded(relpath: str, patterns: list[str] | tuple[str, ...]) -> bool:
    return any(
        fnmatch.fnmatch(part, pattern)
        for part in PurePosixPath(relpath).parts
        for pattern in patterns
    )


def build_manifest(
    src: str, files: list[str] | None, exclude: list[str] | tuple[str, ...]
) -> dict[str, str]:
    """Relative path → SHA-256 of each file to ship. Raises AnsibleActionFail on bad input."""
    if not os.path.isdir(src):
        raise AnsibleActionFail(
            f"sync_tree: src {src} is not a directory on the controller; fix src"
        )
    if files is None:
        found = []
        for root, dirs, names in os.walk(src):
            dirs[:] = sorted(d for d in dirs if not excluded(d, exclude))
            found += [
                os.path.relpath(os.path.join(root, name), src).replace(os.sep, "/")
                for name in names
            ]
        files = found
    manifest = {}
    for relpath in files:
        parts = PurePosixPath(relpath).parts
        if not parts or relpath.startswith("/") or ".." in parts:
            raise AnsibleActionFail(
                f"sync_tree: files entry {relpath!r} must be a path relative to src, without '..'"
            )
        if excluded(relpath, exclude):
            continue
        path = os.path.join(src, relpath)
        if not os.path.isfile(path):
            raise AnsibleActionFail(
                f"sync_tree: {relpath!r} is not a file in {src}; fix files or src"
            )
        manifest[relpath] = secure_hash(path, hashlib.sha256)
    if not manifest:
        raise AnsibleActionFail(
            f"sync_tree: no file to ship from {src}; check src, files and exclude"
        )
    return manifest


def content_manifest(content: Any) -> dict[str, str]:
    """Relative path → SHA-256 of each text of ``content`` (relative path → text, UTF-8)."""
    if not isinstance(content, dict) or not content:
        raise AnsibleActionFail("sync_tree: content must map relative paths to their texts")
    manifest = {}
    for relpath, text in content.items():
        parts = PurePosixPath(str(relpath)).parts
        if not parts or str(relpath).startswith("/") or ".." in parts:
            raise AnsibleActionFail(
                f"sync_tree: content key {relpath!r} must be a path relative to dest, without '..'"
            )
        manifest[str(relpath)] = hashlib.sha256(str(text).encode()).hexdigest()
    return manifest


def write_archive(src: str | None, relpaths: list[str], archive: str,
                  content: dict[str, str] | None = None) -> None:
    """An uncompressed tar of relpaths (wheels do not compress); names only, no owners or times.
    Each member is the file under ``src``, or its text in ``content``."""
    with tarfile.open(archive, "w") as tar:
        for relpath in relpaths:
            if content is not None:
                data = str(content[relpath]).encode()
                info = tarfile.TarInfo(relpath)
                info.size, info.mode = len(data), 0o600
                tar.addfile(info, io.BytesIO(data))
                continue
            info = tar.gettarinfo(os.path.join(src, relpath), arcname=relpath)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(os.path.join(src, relpath), "rb") as stream:
                tar.addfile(info, stream)


def diff_entry(path: str, before: dict[str, Any], after: bytes, limit: int,
               secrets: list[str]) -> dict[str, Any]:
    """One file's entry of the task's diff, as Ansible's callbacks print it: the text on the
    target (``before``, what the module's peek found) and the text it gets (``after``),
    ``secrets`` masked in both; a binary file, or one larger than ``limit`` bytes (0: no
    limit), only named, as ansible.builtin.copy does."""
    entry: dict[str, Any] = {"before_header": path, "after_header": path}
    if "larger" in before:
        entry["dst_larger"] = limit
    elif before.get("binary"):
        entry["dst_binary"] = 1
    else:
        entry["before"] = remove_values(str(before.get("text", "")), secrets)
    if 0 < limit < len(after):
        entry["src_larger"] = limit
    elif b"\0" in after:
        entry["src_binary"] = 1
    else:
        entry["after"] = remove_values(after.decode("utf-8", "replace"), secrets)
    return entry


def new_bytes(src: str | None, relpath: str, content: dict[str, Any] | None) -> bytes:
    """What the file ``relpath`` of the tree holds: its text in ``content``, else the file
    under ``src`` on the controller."""
    if content is not None:
        return str(content[relpath]).encode()
    with open(os.path.join(str(src), relpath), "rb") as stream:
        return stream.read()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False  # a remote temporary directory is made only when files must be sent
    _VALID_ARGS = frozenset(
        ("src", "content", "dest", "files", "exclude", "owner", "group", "mode",
         "directory_mode", "secrets")
    )

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        # The texts stay on the controller: only their hashes reach the module's arguments.
        content = args.pop("content", None)
        if not args.get("dest") or (content is None) == (not args.get("src")):
            raise AnsibleActionFail("sync_tree: dest is required, and one of src or content")
        exclude = args.get("exclude", list(DEFAULT_EXCLUDE))
        if content is not None:
            src = None
            manifest = content_manifest(content)
        else:
            src = self._find_needle(
                "files", os.path.expanduser(str(args["src"]).rstrip("/") or "/"))
            manifest = build_manifest(src, args.get("files"), exclude)
        module_args = {**args, "src": src, "exclude": exclude, "manifest": manifest,
                       "max_diff_size": C.MAX_FILE_SIZE_FOR_DIFF}
        report = self._in_place_report(module_args, task_vars or {})
        if report is not None and report["in_place"]:
            result.update(changed=False, dest=report["dest"], files=len(manifest), updated=[])
            return result
        result.update(
            self._execute_module("sync_tree", module_args=module_args, task_vars=task_vars)
        )
        stale = result.get("updated") or []
        # With --diff the module peeked at the stale files as they are now.
        before = result.pop("diff_before", None)
        if before is not None and not result.get("failed"):
            secrets = [str(secret) for secret in args.get("secrets") or []]
            result["diff"] = [
                diff_entry(os.path.join(str(result.get("dest") or args["dest"]), relpath),
                           before[relpath],
                           new_bytes(src, relpath, content), C.MAX_FILE_SIZE_FOR_DIFF, secrets)
                for relpath in stale]
        if result.get("failed") or not stale or self._task.check_mode:
            return result
        with tempfile.TemporaryDirectory(prefix="sync_tree.") as local_dir:
            local_archive = os.path.join(local_dir, "files.tar")
            write_archive(src, stale, local_archive, content)
            try:
                if self._connection._shell.tmpdir is None:
                    self._make_tmp_path()
                remote_archive = self._connection._shell.join_path(
                    self._connection._shell.tmpdir, "files.tar"
                )
                self._transfer_file(local_archive, remote_archive)
                self._fixup_perms2((self._connection._shell.tmpdir, remote_archive))
                sent = {**module_args, "archive": remote_archive}
                second = self._execute_module("sync_tree", module_args=sent, task_vars=task_vars)
            finally:
                self._remove_tmp_path(self._connection._shell.tmpdir)
        # The second run writes the stale files and sets owner, group and mode of every file.
        result.update(second)
        return result

    def _in_place_report(self, module_args: dict[str, Any],
                         task_vars: dict[str, Any]) -> dict[str, Any] | None:
        """in_place_report of the target; None where it cannot be read (the module decides)."""
        reader = self._shared_loader_obj.action_loader.get(
            "host_state", task=self._task, connection=self._connection,
            play_context=self._play_context, loader=self._loader, templar=self._templar,
            shared_loader_obj=self._shared_loader_obj)
        report = reader.run_program(
            "sync_tree_state", "in_place_report",
            {key: module_args.get(key) for key in IN_PLACE_PARAMS}, task_vars)
        if not isinstance(report, dict) or "in_place" not in report:
            return None
        if not report["in_place"]:
            display.vvv(f"sync_tree: {report['dest']} is not in place: {report.get('why')}",
                        host=self._play_context.remote_addr)
        return report
