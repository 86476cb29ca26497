"""Helpers for the role tests: run ansible-playbook from the repository's virtualenv."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lab import lab

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
VENV_BIN = REPO / ".venv" / "bin"


def ansible_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["CONTAINERS_CONF"] = str(REPO / "lab" / "containers.conf")
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    env["ANSIBLE_ROLES_PATH"] = str(REPO / "roles")
    env["ANSIBLE_LIBRARY"] = str(REPO / "library")  # test modules sit beside their playbooks
    env["ANSIBLE_ACTION_PLUGINS"] = str(REPO / "action_plugins")
    env["ANSIBLE_NOCOLOR"] = "1"
    env["NO_COLOR"] = "1"
    # No fact cache: the tests fake facts and must not see a lab run's.
    env["ANSIBLE_CACHE_PLUGIN"] = "memory"
    env.update(extra)
    return env


def run(argv: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=REPO, env=ansible_env(**extra), capture_output=True, text=True, check=False
    )


@pytest.fixture(scope="module")
def podman_ready() -> None:
    problem = lab.podman_problem()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the Molecule scenarios: {problem}")
    pytest.skip(problem)
