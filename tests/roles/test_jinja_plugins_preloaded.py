"""callback_plugins/jinja_plugins_preloaded.py, as ansible.cfg enables it: a filter plugin is
imported once a run, in the controller's main process, where without it every task of every
host imports it again in its worker."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .conftest import VENV_BIN, ansible_env

PLAYBOOK = """\
- name: Three tasks that use a filter, on two hosts
  hosts: all
  gather_facts: false
  tasks:
    - name: First
      ansible.builtin.debug:
        msg: "{{ 'a' | twice }}"
    - name: Second
      ansible.builtin.debug:
        msg: "{{ 'b' | twice }}"
    - name: Third
      ansible.builtin.debug:
        msg: "{{ 'c' | twice }}"
"""


def importing_processes(tmp_path: Path, **extra: str) -> tuple[list[int], int]:
    """The process ids that imported the filter plugin, in order, and the run's own."""
    plugins = tmp_path / "filter_plugins"
    plugins.mkdir()
    record = tmp_path / "imports"
    (plugins / "recorded.py").write_text(
        "import os\n"
        f"with open({str(record)!r}, 'a') as out:\n"
        "    out.write(f'{os.getpid()}\\n')\n\n\n"
        "class FilterModule:\n"
        "    def filters(self):\n"
        "        return {'twice': lambda value: value * 2}\n")
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "hosts.ini").write_text("one ansible_connection=local\n"
                                        "two ansible_connection=local\n")
    with subprocess.Popen([str(VENV_BIN / "ansible-playbook"), "-i", "hosts.ini", "play.yml"],
                          cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT,
                          env=ansible_env(ANSIBLE_FILTER_PLUGINS=str(plugins), **extra)) as run:
        output = run.communicate()[0]
    assert run.returncode == 0, output
    assert output.count('"msg": "aa"') + output.count("msg: aa") == 2, output
    return [int(pid) for pid in record.read_text().split()], run.pid


@pytest.mark.parametrize("enabled", [True, False], ids=["as configured", "disabled"])
def test_a_filter_plugin_is_imported_once_in_the_main_process(tmp_path: Path,
                                                              enabled: bool) -> None:
    pids, main = importing_processes(
        # The variable replaces the setting's list (empty, Ansible refuses it).
        tmp_path, **({} if enabled else {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.timer"}))
    if enabled:
        assert pids == [main]
    else:
        # Each of the 6 task results' worker imports it: what the callback takes away.
        assert len(pids) == 6 and main not in pids, pids
