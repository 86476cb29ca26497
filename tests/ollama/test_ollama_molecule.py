"""The role's Linux path in a systemd container: `molecule test -s ollama` (molecule/ollama).

Skipped where podman cannot run containers, except under CI, where that is a failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab import lab

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


# Creating the container, two converges and verify take minutes on a busy 2-core machine.
@pytest.mark.timeout(1500)
def test_molecule_scenario_ollama():
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["CONTAINERS_CONF"] = str(REPO / "lab" / "containers.conf")
    env["NO_COLOR"] = "1"
    problem = lab.podman_problem()
    if problem is not None:
        if env.get("CI"):
            pytest.fail(f"CI must run the Molecule scenario ollama: {problem}")
        pytest.skip(problem)
    result = subprocess.run(
        [str(VENV_BIN / "molecule"), "test", "-s", "ollama"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    output = result.stdout + result.stderr
    # On failure show the first failed task (destroy's output follows it) and the recap.
    first_failure = output.find("fatal:")
    excerpt = output[max(first_failure - 1500, 0) : first_failure + 3000] + output[-1500:]
    assert result.returncode == 0, excerpt
    for step in ("converge", "idempotence", "verify"):
        assert f"{step}: Executed: Successful" in output, excerpt
