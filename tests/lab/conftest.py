"""Helpers for the lab tests: podman with the lab's containers.conf, skip only without podman."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def lab_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CONTAINERS_CONF"] = str(REPO / "lab" / "containers.conf")
    venv_bin = REPO / ".venv" / "bin"
    env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("ANSIBLE_FORCE_COLOR", "0")
    env["NO_COLOR"] = "1"
    return env


def podman_problem() -> str | None:
    """Why podman cannot run containers here, or None when it can."""
    if shutil.which("podman") is None:
        return "podman is not installed (apt-get install podman runc debootstrap)"
    result = subprocess.run(
        ["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"],
        env=lab_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        return f"podman cannot run here: {result.stderr.strip()[:300]}"
    return None


@pytest.fixture(name="lab_env")
def lab_env_fixture() -> dict[str, str]:
    """Environment for podman and molecule: the lab's containers.conf, the venv first on PATH."""
    return lab_env()


@pytest.fixture(scope="module")
def podman_ready() -> None:
    problem = podman_problem()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the Molecule scenarios: {problem}")
    pytest.skip(problem)
