"""block_in_place (filter_plugins/cluster.py), held to ansible.builtin.blockinfile itself: for
each file, the filter says the block is in place exactly when blockinfile, asked in check
mode with the postgresql_access role's marker, would change nothing."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.filter_kit import cluster

from .conftest import REPO, VENV_BIN, run

ROLE_VARS = yaml.safe_load((REPO / "roles/postgresql_access/vars/main.yml").read_text())
MARKER, ATTRIBUTES = (ROLE_VARS[f"postgresql_access__hba_{name}"] for name in ("marker",
                                                                             "attributes"))
BLOCK = "hostssl coordinator worker_a 10.0.0.2/32 scram-sha-256\nhost all all ::1/128 trust"
BEGIN, END = (MARKER.replace("{mark}", word) for word in ("BEGIN", "END"))
WHOLE = f"{BEGIN}\n{BLOCK}\n{END}\n"
CASES = {
    "at the end": "local all postgres peer\n" + WHOLE,
    "in the middle": "local all postgres peer\n" + WHOLE + "host all all 10.1.0.0/16 reject\n",
    "alone": WHOLE,
    "another host's line": WHOLE.replace("10.0.0.2", "10.0.0.3"),
    "a line more": WHOLE.replace(END, "host x y 10.0.0.9/32 md5\n" + END),
    "no markers": "local all postgres peer\n" + BLOCK + "\n",
    "the end marker missing its line end": WHOLE[:-1],
    "markers swapped": f"{END}\n{BLOCK}\n{BEGIN}\n",
    "an older block first": f"{BEGIN}\nold\n{END}\n" + WHOLE,
    "empty": "",
}


def test_in_place_exactly_when_blockinfile_would_change_nothing(tmp_path: Path) -> None:
    for number, text in enumerate(CASES.values()):
        (tmp_path / f"{number}.conf").write_text(text)
    playbook = tmp_path / "check.yml"
    playbook.write_text(json.dumps([{
        "hosts": "localhost", "gather_facts": False, "tasks": [{
            "ansible.builtin.blockinfile": {
                "path": f"{tmp_path}/{{{{ item }}}}.conf", "marker": MARKER, "block": BLOCK,
                "insertafter": "EOF"},
            "loop": list(range(len(CASES))), "register": "checked"}, {
            "ansible.builtin.copy": {"content": "{{ checked.results | map(attribute='changed')"
                                                " | list | to_json }}",
                                     "dest": f"{tmp_path}/changed.json"},
            "check_mode": False}]}]))
    done = run(["ansible-playbook", "--check", "-i", "localhost,", "-c", "local",
                "-e", f"ansible_python_interpreter={VENV_BIN / 'python'}", str(playbook)])
    assert done.returncode == 0, done.stdout[-3000:]
    changed = json.loads((tmp_path / "changed.json").read_text())
    said = {name: cluster.block_in_place(text, MARKER, BLOCK) for name, text in CASES.items()}
    assert said == {name: not change for name, change in zip(CASES, changed, strict=True)}
    assert said["at the end"] and said["in the middle"] and not said["another host's line"]
    assert cluster.block_in_place(None, MARKER, BLOCK) is False  # not read
    # With the file's attributes: in place only with the role's owner, group and mode.
    found = {"type": "file", **ATTRIBUTES}
    assert cluster.block_in_place(WHOLE, MARKER, BLOCK, found, ATTRIBUTES)
    assert not cluster.block_in_place(WHOLE, MARKER, BLOCK, {**found, "mode": "0644"}, ATTRIBUTES)
    assert not cluster.block_in_place(WHOLE, MARKER, BLOCK, None, ATTRIBUTES)
