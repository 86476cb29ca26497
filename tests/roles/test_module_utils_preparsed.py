"""callback_plugins/module_utils_preparsed.py: after it ran in the main process, building a
module's payload parses none of the files ansible.module_utils.basic needs again, and the
payload is the one Ansible builds without it; and a playbook with it enabled runs modules."""

from __future__ import annotations

from .conftest import VENV_BIN, callback_script, run

# Builds ansible.builtin.ping's payload (file names and bytes) as a worker does, counting
# the files Ansible's own parser is given, before and after the callback's start.
BUILD = """\
import datetime, io, json, zipfile
from ansible._internal._ansiballz import _builder
from ansible.executor import module_common
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader()  # the collection finder, as the CLI installs it
import ansible.modules.ping as ping
import module_utils_preparsed

parsed = []
own_parse = module_common._compile_module_ast
def counted(name, source):
    parsed.append(name)
    return own_parse(name, source)
module_common._compile_module_ast = counted

def payload():
    del parsed[:]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        module_common.recursive_finder(
            "ping", "ansible.modules.ping", open(ping.__file__, "rb").read(), zf,
            datetime.datetime(2026, 1, 1), _builder.ExtensionManager.create(task_vars={}))
    with zipfile.ZipFile(io.BytesIO(out.getvalue())) as zf:
        return {name: zf.read(name).decode("latin-1") for name in zf.namelist()}, list(parsed)

plain, plain_parsed = payload()
module_utils_preparsed.CallbackModule().v2_playbook_on_start(None)
ahead = list(parsed)
kept, kept_parsed = payload()
print(json.dumps({"same": plain == kept, "plain": plain_parsed, "ahead": ahead,
                  "kept": kept_parsed}))
"""


def test_the_trees_parsed_ahead_are_reused_and_the_payload_is_the_same() -> None:
    result = callback_script(BUILD)
    assert result["same"] is True
    # Without it, the module and every file basic needs are parsed for the one payload.
    assert "ansible.module_utils.basic" in result["plain"] and len(result["plain"]) > 10, result
    # Ahead, in the main process: basic and what it needs.
    assert "ansible.module_utils.basic" in result["ahead"], result
    # Then only ping itself: everything else was parsed ahead.
    assert result["kept"] == ["ping"], result


def test_a_playbook_with_it_enabled_runs_its_modules(tmp_path) -> None:
    play = tmp_path / "play.yml"
    play.write_text("""\
- name: Two modules on the controller
  hosts: localhost
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
    - name: Ping
      ansible.builtin.ping:
      register: pong
    - name: Stat the playbook
      ansible.builtin.stat:
        path: "{{ playbook_dir }}/play.yml"
      register: found
    - name: Both answered
      ansible.builtin.assert:
        that: [pong.ping == 'pong', found.stat.exists]
""")
    done = run([str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(play)],
               ANSIBLE_CALLBACKS_ENABLED="module_utils_preparsed")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ok=3" in done.stdout and "[WARNING]" not in done.stdout + done.stderr, done.stdout
