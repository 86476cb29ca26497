"""Run each Molecule scenario (create, converge, idempotence, verify, destroy) in podman.

Each scenario starts systemd containers from the lab image (lab/image/build.sh builds it on
first use, ~90 s), installs PostgreSQL or Redis through apt inside them, and checks behaviour
over the network. They take one to a few minutes each. They are skipped only when podman
cannot run containers on this machine, and never when the CI variable is set.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lab import lab

REPO = Path(__file__).resolve().parents[2]

# This area's scenarios; other roles' scenarios have their own tests (tests/roles, tests/ollama).
SCENARIOS = ["postgresql_access", "redis"]


def test_scenarios_exist():
    for scenario in SCENARIOS:
        assert (REPO / "molecule" / scenario / "molecule.yml").is_file()


@pytest.mark.timeout(1800)  # includes waiting for another scenario holding the lock
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario, podman_ready, lab_env):
    with lab.exclusive():
        result = subprocess.run(
            ["molecule", "test", "-s", scenario],
            cwd=REPO,
            env=lab_env,
            capture_output=True,
            text=True,
            check=False,
        )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"molecule test -s {scenario} failed:\n{output[-6000:]}"
    # Every step of the sequence ran and none was skipped for a missing playbook.
    for step in ("create", "converge", "idempotence", "verify", "destroy"):
        assert f"{step}: Executed: Successful" in output, f"{step} did not run:\n{output[-3000:]}"
