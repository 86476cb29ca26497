"""The playbooks read only what the roles publish: a role's internals (``<role>__name``, its
vars/main.yml and set_fact results) may change with the role, so no playbook, nor a task
file the playbooks include, names one."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = sorted(path.name for path in (REPO / "roles").iterdir() if path.is_dir())
INTERNAL = re.compile(rf"\b(?:{'|'.join(ROLES)})__\w+")


def is_playbook(path: Path) -> bool:
    plays = yaml.safe_load(path.read_text())
    return isinstance(plays, list) and all(
        isinstance(play, dict) and ("hosts" in play or "ansible.builtin.import_playbook" in play)
        for play in plays)


def playbook_files() -> list[Path]:
    """The top-level playbooks and the task files under playbooks/ they include."""
    return ([path for path in sorted(REPO.glob("*.yml")) if is_playbook(path)]
            + sorted((REPO / "playbooks").rglob("*.yml")))


def test_the_pattern_finds_an_internal_name() -> None:
    assert INTERNAL.findall("x: '{{ worker__envs[name] }}' y: '{{ worker_status }}'") == [
        "worker__envs"]


def test_no_playbook_reads_a_roles_internals() -> None:
    files = playbook_files()
    assert {"site.yml", "migrate-web.yml", "drain.yml"} <= {path.name for path in files}
    found = {str(path.relative_to(REPO)): sorted(set(INTERNAL.findall(path.read_text())))
             for path in files}
    assert {name: names for name, names in found.items() if names} == {}
