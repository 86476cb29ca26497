# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Loads the Jinja filter and test plugins once, in the controller's main process."""

from __future__ import annotations

DOCUMENTATION = r"""
name: jinja_plugins_preloaded
type: aggregate
short_description: Load the Jinja filter and test plugins once, before the first task
description:
  - Ansible runs every task of every host in a worker process forked from the controller's
    main process. The first filter or test a worker's templating looks up makes it import
    every filter and test plugin file that is not in a collection (ansible-core's own and
    the playbook-adjacent C(filter_plugins/)), and the worker exits with them after its one
    task; the main process never loads them, so each task of each host pays the imports again.
  - This callback loads them in the main process as the playbook starts; every worker then
    inherits them with the fork. On a no-op C(site.yml) of three hosts it takes about a fifth
    of the controller's CPU time away (docs/benchmarks.md).
  - It prints nothing and changes no task or result.
requirements:
  - enabled in ansible.cfg (C(callbacks_enabled))
"""

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "jinja_plugins_preloaded"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook: object) -> None:
        # Looking one plugin up loads them all (each loader does it once per process).
        filter_loader.get("ansible.builtin.bool")
        test_loader.get("ansible.builtin.match")
