"""Run this area's Molecule scenarios end to end (create, converge, idempotence, verify,
destroy): molecule/site (the three-node lab through site.yml), molecule/coordinator and
molecule/worker. Slow (minutes each); skipped only when podman cannot run containers here,
never under CI. One `molecule test` at a time per checkout (same lock as tests/lab).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from lab import lab

from .conftest import REPO, VENV_BIN

SCENARIOS = [name for name in ("site", "coordinator", "worker")
             if (REPO / "molecule" / name / "molecule.yml").exists()]


def molecule_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["CONTAINERS_CONF"] = str(REPO / "lab" / "containers.conf")
    env["NO_COLOR"] = "1"
    env.setdefault("ANSIBLE_FORCE_COLOR", "0")
    return env


def test_site_scenario_exists():
    assert "site" in SCENARIOS


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario, podman_ready):
    with lab.exclusive():
        result = subprocess.run(
            ["molecule", "test", "-s", scenario],
            cwd=REPO, env=molecule_env(), capture_output=True, text=True, check=False,
        )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"molecule test -s {scenario} failed:\n{output[-6000:]}"
    for step in ("create", "converge", "idempotence", "verify", "destroy"):
        assert f"{step}: Executed: Successful" in output, f"{step} did not run:\n{output[-3000:]}"
