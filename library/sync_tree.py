#!/usr/bin/python
# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sync_tree
short_description: Copy a directory tree from the controller, no module run when in place
description:
  - Makes a directory on the target hold the same files, with the same content, as a directory
    on the controller, like M(ansible.builtin.copy) with a directory as O(src), but without a
    module run when nothing differs, however many files the tree has.
    M(ansible.builtin.copy) checks each file in a module run of its own.
  - The action plugin of the same name hashes every file on the controller (SHA-256) and asks
    the target, with a short Python program passed over the connection (the standard library
    only, run by the interpreter the host's modules run on, as the task's become user),
    whether every file has that hash and every file and directory its owner, group and mode.
    When they all do, the task is done. That costs a fraction of a module run, which starts
    Ansible's module code on the target.
  - Otherwise, or where the program cannot run (no interpreter known yet in the run, a
    connection that cannot pass it), the module hashes the target's copies and answers with
    the files that are missing or differ. Only those are sent, in one tar archive, and each is
    written to a temporary file in its directory, checked against its hash and renamed into
    place, so a reader never sees a half-written file.
  - Owner, group and mode of every file and directory are set as given, on each run.
  - Files on the target that are not in the tree are left alone.
version_added: "0.1.0"
options:
  src:
    description:
      - Directory on the controller. A relative path is looked up like M(ansible.builtin.copy)'s
        O(src) (the role's C(files/), then the playbook's directory).
      - One of O(src) and O(content) is required.
    type: path
  content:
    description:
      - Instead of O(src), the files' texts, by path relative to O(dest) (each written as
        UTF-8), for example templates rendered with P(ansible.builtin.template#lookup).
      - The texts stay on the controller; only their hashes are module arguments, and the
        files that differ travel in the archive. Name the secrets they hold in O(secrets),
        so that C(--diff) shows them masked; C(no_log) on the task hides the whole result,
        the diff too.
    type: dict
  secrets:
    description:
      - Strings shown as C(********) in the diff, in the file as it is on the target and as
        it will be (passwords and tokens the files hold, as they are spelled there).
      - Never printed; like any C(no_log) option they are masked wherever the module's
        result shows them.
    type: list
    elements: str
    default: []
    version_added: "0.5.0"
  dest:
    description:
      - Directory on the target; it is created with its parents when missing.
    type: path
    required: true
  files:
    description:
      - Only these paths, relative to O(src). Without it, every file under O(src).
    type: list
    elements: str
  exclude:
    description:
      - Shell patterns; a file is skipped when any component of its relative path matches one.
      - The default keeps Python's bytecode caches of the controller off the target.
    type: list
    elements: str
    default: ['__pycache__', '*.pyc']
  owner:
    description: Owner of the files and directories made or checked.
    type: str
  group:
    description: Group of the files and directories made or checked.
    type: str
  mode:
    description: Mode of every file, in octal, quoted.
    type: raw
    default: '0644'
  directory_mode:
    description: Mode of O(dest) and of every directory in the tree, in octal, quoted.
    type: raw
    default: '0755'
  manifest:
    description:
      - Set by the action plugin, not by users. Relative path to SHA-256 of each file.
    type: dict
  archive:
    description:
      - Set by the action plugin, not by users. A tar archive on the target with the files
        to write.
    type: path
  max_diff_size:
    description:
      - Set by the action plugin, not by users. Ansible's C(MAX_FILE_SIZE_FOR_DIFF), the
        size above which a file on the target is not read for the diff.
    type: int
    version_added: "0.5.0"
author:
  - Coordinator cluster contributors (@coordinator-cluster)
attributes:
  check_mode:
    support: full
    details: Reports the files that would be written; nothing is sent or changed.
  diff_mode:
    support: full
    details: >-
      Each file written (in check mode, that would be written) is shown as it is on the
      target and as it will be, with O(secrets) masked; binary files and files larger than
      Ansible's C(MAX_FILE_SIZE_FOR_DIFF) are named only, as M(ansible.builtin.copy) does.
notes:
  - Nothing is deleted; a file removed from O(src) stays on the target.
  - Needs only the Python standard library on the target (Linux or macOS).
seealso:
  - module: ansible.builtin.copy
  - module: ansible.posix.synchronize
extends_documentation_fragment:
  - module_attributes
"""

EXAMPLES = r"""
- name: Ship the wheelhouse for an offline install
  sync_tree:
    src: "{{ coordinator_pip_wheelhouse }}"
    dest: /opt/coordinator/wheels
    owner: root
    group: root

- name: Write a service's environment file, its password masked in --diff
  sync_tree:
    content:
      app.env: "PASSWORD={{ app_password }}\n"
    secrets: ["{{ app_password }}"]
    dest: /etc/app
    mode: "0600"

- name: Ship two programs out of a larger directory
  sync_tree:
    src: "{{ playbook_dir }}/files"
    dest: /opt/workers/app
    files:
      - worker_base.py
      - worker_web.py
    owner: worker
  register: shipped
  notify: Restart workers
"""

RETURN = r"""
dest:
  description: The directory on the target.
  returned: always
  type: str
  sample: /opt/coordinator/wheels
files:
  description: How many files the tree has.
  returned: always
  type: int
  sample: 22
updated:
  description:
    - Relative paths of the files written (in check mode, that would be written) because they
      were missing or their content differed. Changes of owner, group or mode alone are not
      listed, but they do set C(changed).
  returned: always
  type: list
  elements: str
  sample: [coordinator/api.py]
"""

import hashlib
import os
import tarfile
import tempfile
from collections.abc import Mapping
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sync_tree_state import (
    CHUNK,
    DEFAULT_DIRECTORY_MODE,
    DEFAULT_MODE,
    TreeError,
    check_relative,
    stale_files,
    tree_directories,
)


def write_from_archive(archive: str, dest: str, manifest: Mapping[str, str]) -> list[str]:
    """Write the archive's members into dest, each checked against its manifest hash first."""
    written = []
    with tarfile.open(archive) as tar:
        for member in tar:
            relpath = check_relative(member.name)
            if not member.isfile() or relpath not in manifest:
                raise TreeError(f"the archive holds {relpath!r}, which is not a file of the tree")
            source = tar.extractfile(member)
            if source is None:
                raise TreeError(f"cannot read {relpath!r} from the archive")
            target = os.path.join(dest, relpath)
            handle, temporary = tempfile.mkstemp(prefix=".sync_tree.", dir=os.path.dirname(target))
            try:
                digest = hashlib.sha256()
                with os.fdopen(handle, "wb") as out:
                    for block in iter(lambda stream=source: stream.read(CHUNK), b""):
                        digest.update(block)
                        out.write(block)
                if digest.hexdigest() != manifest[relpath]:
                    raise TreeError(f"{relpath!r} arrived damaged (SHA-256 mismatch); run again")
                os.replace(temporary, target)
            except BaseException:
                if os.path.exists(temporary):
                    os.unlink(temporary)
                raise
            written.append(relpath)
    return written


def peek(path: str, limit: int) -> dict[str, Any]:
    """The file at ``path`` as the diff shows it before it is written: ``text`` (empty when
    there is no regular file), or why not, ``binary`` (a NUL byte, as Ansible's own peek
    decides) or ``larger`` than ``limit`` bytes (0: no limit)."""
    if not os.path.isfile(path) or os.path.islink(path):
        return {"text": ""}
    if 0 < limit < os.path.getsize(path):
        return {"larger": limit}
    with open(path, "rb") as stream:
        data = stream.read()
    if b"\0" in data:
        return {"binary": True}
    return {"text": data.decode("utf-8", "replace")}


def set_attributes(module: AnsibleModule, path: str, mode: Any, changed: bool) -> bool:
    owner, group = module.params["owner"], module.params["group"]
    if owner is not None:
        changed = module.set_owner_if_different(path, owner, changed)
    if group is not None:
        changed = module.set_group_if_different(path, group, changed)
    return module.set_mode_if_different(path, mode, changed)


def run(module: AnsibleModule) -> dict[str, Any]:
    dest = module.params["dest"]
    manifest = module.params["manifest"]
    if manifest is None:
        raise TreeError("sync_tree runs through its action plugin; keep the task's name sync_tree")
    archive = module.params["archive"]
    changed = False
    for relative in tree_directories(manifest):
        directory = os.path.join(dest, relative) if relative else dest
        if not os.path.isdir(directory):
            changed = True
            if module.check_mode:
                continue
            os.makedirs(directory)
        if os.path.isdir(directory):
            changed = set_attributes(module, directory, module.params["directory_mode"], changed)
    if archive is None:
        updated = stale_files(dest, manifest) if os.path.isdir(dest) else sorted(manifest)
    else:
        updated = write_from_archive(archive, dest, manifest)
    if updated and archive is None:
        # The action plugin sends these and calls again; nothing is set on them before that.
        # With --diff it is told what they hold now (secrets masked: they are no_log values);
        # not for a no_log task, whose diff Ansible would not show anyway.
        result = {"changed": True, "dest": dest, "files": len(manifest), "updated": updated}
        if module._diff and not module.no_log:
            result["diff_before"] = {
                relpath: peek(os.path.join(dest, relpath), module.params["max_diff_size"] or 0)
                for relpath in updated}
        return result
    for relpath in sorted(manifest):
        changed = set_attributes(
            module, os.path.join(dest, relpath), module.params["mode"], changed
        )
    return {
        "changed": changed or bool(updated),
        "dest": dest,
        "files": len(manifest),
        "updated": updated,
    }


ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "src": {"type": "path"},
    "content": {"type": "dict"},
    "dest": {"type": "path", "required": True},
    "files": {"type": "list", "elements": "str"},
    "exclude": {"type": "list", "elements": "str", "default": ["__pycache__", "*.pyc"]},
    "owner": {"type": "str"},
    "group": {"type": "str"},
    "mode": {"type": "raw", "default": DEFAULT_MODE},
    "directory_mode": {"type": "raw", "default": DEFAULT_DIRECTORY_MODE},
    "manifest": {"type": "dict"},
    "archive": {"type": "path"},
    "secrets": {"type": "list", "elements": "str", "no_log": True, "default": []},
    "max_diff_size": {"type": "int"},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        module.exit_json(**run(module))
    except (TreeError, OSError, tarfile.TarError) as error:
        module.fail_json(msg=f"sync_tree to {module.params['dest']}: {error}")


if __name__ == "__main__":
    main()
