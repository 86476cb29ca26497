"""callback_plugins/jinja_compiled_once.py: a process of the run that meets a template or an
expression another one compiled loads its code instead of compiling it, and every template
renders as it does without the callback (the settings Jinja compiles with are part of the
key); and a playbook with it enabled renders its tasks' templates and conditionals."""

from __future__ import annotations

from .conftest import VENV_BIN, callback_script, run

# Renders the same templates and conditionals in three forked workers: one before the
# callback started, then two after it, counting what each gave Jinja's own compile.
RENDER = """\
import json, os, tempfile
os.environ["ANSIBLE_LOCAL_TEMP"] = tempfile.mkdtemp()
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader()
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible._internal._templating._jinja_bits import AnsibleEnvironment
import jinja_compiled_once

CASES = [
    ("template", "{{ x + 1 }}", {}),
    # The same text once its header is stripped; another environment compiles it.
    ("template", "#jinja2: trim_blocks: False\\n{% if x %}\\nA\\n{% endif %}", {}),
    ("template", "{% if x %}\\nA\\n{% endif %}", {}),
    ("template", "{{ 'a\\\\\\\\nb' }}", {"escape_backslashes": True}),
    ("template", "{{ 'a\\\\\\\\nb' }}", {"escape_backslashes": False}),
    ("conditional", "x == 1", {}),
    ("conditional", "y is undefined", {}),
]

def render():
    templar = Templar(loader=DataLoader(), variables={"x": 1})
    return [templar.template(trust_as_template(text), **options) if kind == "template"
            else templar.evaluate_conditional(trust_as_template(text))
            for kind, text, options in CASES]

def in_worker(started):
    read, write = os.pipe()
    if os.fork() == 0:
        compiled = []
        if started:
            own = AnsibleEnvironment.compile.compile
            def counted(env, source, *args):
                compiled.append(source if isinstance(source, str) else "an expression")
                return own(env, source, *args)
            AnsibleEnvironment.compile.compile = counted
        os.write(write, json.dumps({"rendered": render(), "compiled": compiled}).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        return json.loads(answer.read())

plain = in_worker(False)
jinja_compiled_once.CallbackModule().v2_playbook_on_start(None)
print(json.dumps({"plain": plain, "first": in_worker(True), "second": in_worker(True)}))
"""


def test_code_compiled_in_one_worker_is_loaded_by_the_next_and_renders_the_same() -> None:
    result = callback_script(RENDER)
    # Each setting gives its own rendering, with the callback as without it.
    assert result["plain"]["rendered"] == [2, "\nA\n", "A\n", "a\\\\nb", "a\\nb", True, True]
    assert result["first"]["rendered"] == result["plain"]["rendered"]
    assert result["second"]["rendered"] == result["plain"]["rendered"]
    # The first worker compiles each template under each setting, and both expressions...
    assert result["first"]["compiled"] == [
        "{{ x + 1 }}", "{% if x %}\nA\n{% endif %}", "{% if x %}\nA\n{% endif %}",
        "{{ 'a\\\\nb' }}", "{{ 'a\\\\nb' }}", "an expression", "an expression"]
    # ...the next one compiles none of them.
    assert result["second"]["compiled"] == []


def test_a_playbook_with_it_enabled_renders_templates_and_conditionals(tmp_path) -> None:
    play = tmp_path / "play.yml"
    play.write_text("""\
- name: Templates and conditionals, the same ones on every item
  hosts: localhost
  gather_facts: false
  vars:
    numbers: [1, 2, 3, 4]
  tasks:
    - name: Double the even numbers
      ansible.builtin.set_fact:
        doubled: "{{ doubled | default([]) + [item * 2] }}"
      loop: "{{ numbers }}"
      when: item is even
    - name: Each item and what it doubled to
      ansible.builtin.assert:
        that: doubled == [4, 8]
""")
    done = run([str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(play)],
               ANSIBLE_CALLBACKS_ENABLED="jinja_compiled_once")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ok=2" in done.stdout and "[WARNING]" not in done.stdout + done.stderr, done.stdout


def test_with_templating_it_does_not_know_it_changes_nothing() -> None:
    # An ansible-core whose templating lacks what the key is made of: left as it is.
    changed = callback_script("""\
import json
from ansible._internal._templating._jinja_bits import AnsibleEnvironment
import jinja_compiled_once
own = AnsibleEnvironment.compile
jinja_compiled_once._NEEDED += ("_SomethingThisVersionLacks",)
jinja_compiled_once.CallbackModule().v2_playbook_on_start(None)
print(json.dumps(AnsibleEnvironment.compile is not own))
""")
    assert changed is False
