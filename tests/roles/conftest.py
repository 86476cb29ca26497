"""Helpers for the role tests: run ansible-playbook from the repository's virtualenv."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from lab import drive
from lab.drive import REPO, VENV_BIN

HERE = Path(__file__).resolve().parent
__all__ = ["HERE", "REPO", "VENV_BIN", "ansible_env", "callback_script", "run"]


def ansible_env(**extra: str) -> dict[str, str]:
    """The lab's environment with the repository's Ansible settings and no fact cache (the
    tests fake facts and must not see a lab run's)."""
    return drive.env(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
                     ANSIBLE_ROLES_PATH=str(REPO / "roles"),
                     ANSIBLE_LIBRARY=str(REPO / "library"),
                     ANSIBLE_ACTION_PLUGINS=str(REPO / "action_plugins"),
                     ANSIBLE_CACHE_PLUGIN="memory", **extra)


def run(argv: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=REPO, env=ansible_env(**extra), capture_output=True, text=True, check=False
    )


def callback_script(script: str) -> Any:
    """What ``script`` prints as JSON, run by the virtualenv's Python with the callback
    plugins importable by their names."""
    done = subprocess.run(
        [str(VENV_BIN / "python"), "-c", script], cwd=REPO, capture_output=True, text=True,
        check=False, env={**os.environ, "PYTHONPATH": str(REPO / "callback_plugins")})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)
