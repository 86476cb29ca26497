# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parses the module_utils every module's payload takes once, in the controller's main
process."""

from __future__ import annotations

DOCUMENTATION = r"""
name: module_utils_preparsed
type: aggregate
short_description: Parse the module_utils in every module's payload once, before any task
description:
  - Ansible builds the payload (AnsiballZ) of each module a run uses in the worker process
    forked for that module's first task. Building it parses the module and every module_utils
    file it imports into syntax trees to find their imports, C(ansible.module_utils.basic)
    and the two dozen files it imports for every module; the worker exits with the trees. A
    run that uses thirty modules parses the same files thirty times.
  - This callback keeps each tree parsed in a process by its file's name and text, and parses
    the files C(ansible.module_utils.basic) needs once, in the main process, as the playbook
    starts; every worker inherits those trees with the fork and parses only the rest. On a
    move (C(migrate-web.yml)) it takes about a tenth of the controller's CPU time away
    (docs/benchmarks.md).
  - It prints nothing and changes no payload, since a tree is reused only for the same name
    and file text. With an ansible-core whose builder has no such step, it does nothing.
requirements:
  - enabled in ansible.cfg (C(callbacks_enabled))
"""

import datetime
import gc
import io
import zipfile
from typing import Any

from ansible.plugins.callback import CallbackBase

try:
    from ansible._internal._ansiballz import _builder
    from ansible.executor import module_common
except ImportError:  # another ansible-core than the one requirements-dev.txt pins
    module_common = None

# What every module imports: its trees are the ones parsed ahead.
_EVERY_MODULE = b"from ansible.module_utils.basic import AnsibleModule\n"


class _KeptTrees:
    """module_common._compile_module_ast, keeping each tree by its file's name and text."""

    def __init__(self, parse: Any) -> None:
        self.parse = parse
        self.trees: dict[tuple[str, bytes | str], Any] = {}

    def __call__(self, module_name: str, source_code: bytes | str) -> Any:
        # The text itself (without Ansible's origin tag) is the key: a changed file is parsed.
        text = bytes(source_code) if isinstance(source_code, bytes) else str(source_code)
        tree = self.trees.get((module_name, text))
        if tree is None:
            tree = self.trees[(module_name, text)] = self.parse(module_name, source_code)
        return tree


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "module_utils_preparsed"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook: object) -> None:
        if module_common is None or not hasattr(module_common, "_compile_module_ast"):
            return
        if not isinstance(module_common._compile_module_ast, _KeptTrees):
            module_common._compile_module_ast = _KeptTrees(module_common._compile_module_ast)
        # The builder's own walk over a module that imports what every module does: the trees
        # it parses stay in this process for the workers.
        with zipfile.ZipFile(io.BytesIO(), "w") as payload:
            module_common.recursive_finder(
                "module_utils_preparsed", "ansible.modules.module_utils_preparsed",
                _EVERY_MODULE, payload, datetime.datetime.now(datetime.UTC),
                _builder.ExtensionManager.create(task_vars={}))
        # Out of reach of the collector: a worker's collections would otherwise walk every
        # node of the trees, and its memory pages shared with this process would be copied.
        gc.freeze()
