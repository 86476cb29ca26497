"""Helpers for the lab tests: podman with the lab's containers.conf, skip only without podman."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lab import lab

REPO = Path(__file__).resolve().parents[2]


def lab_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CONTAINERS_CONF"] = str(REPO / "lab" / "containers.conf")
    venv_bin = REPO / ".venv" / "bin"
    env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("ANSIBLE_FORCE_COLOR", "0")
    env["NO_COLOR"] = "1"
    return env


@pytest.fixture(name="lab_env", scope="module")
def lab_env_fixture() -> dict[str, str]:
    """Environment for podman and molecule: the lab's containers.conf, the venv first on PATH."""
    return lab_env()


@pytest.fixture(scope="module")
def podman_ready() -> None:
    problem = lab.podman_problem()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the Molecule scenarios: {problem}")
    pytest.skip(problem)
