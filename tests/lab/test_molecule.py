"""Every Molecule scenario end to end: create, converge, idempotence, verify, destroy.

Each scenario starts systemd containers from the lab image (lab/image/build.sh builds it on
first use, ~90 s) and reaches them over SSH as the lab's admin user; see docs/lab.md. One
`molecule test` runs at a time across pytest processes (.lab/molecule.lock), beside the lab
suites: each scenario has its own network, container names and addresses. Skipped only where
podman cannot run containers, never under CI.
"""

from __future__ import annotations

import subprocess

import pytest

from lab import drive, lab

REPO = lab.REPO
# Every scenario directory is a test: one removed by mistake fails the test below.
SCENARIOS = sorted(path.parent.name for path in (REPO / "molecule").glob("*/molecule.yml"))


# Roles without a scenario of their own, because other suites already prove each of their
# behaviours, and where; a scenario would repeat them at minutes of the suite's time.
PROVEN_ELSEWHERE = {
    "cluster_tls": (
        "tests/migrate/test_secrets.py: the CA and the certificates made on the first converge "
        "and verified by PostgreSQL's and Redis' clients, renewed in the rotation run; "
        "tests/migrate/test_readme.py::test_the_readme_steps_on_the_lab: a second run "
        "changes nothing"),
    "coordinator": (
        "molecule/worker: converged over plain HTTP on molwk-core, idempotence, workers "
        "registered through it, its unit's hardening, its process' user, its 0600 env file, "
        "and a Coordinator that cannot start failing the play with its journal; "
        "tests/migrate: converged over HTTPS on the lab (health check over TLS), a second run "
        "changes nothing (test_readme.py), the unit's systemd-analyze "
        "exposure (test_hardening.py), a second Coordinator and its virtual address deployed, "
        "then taken down when its host leaves the group (test_two_coordinators.py)"),
    "python_service": (
        "internal to the coordinator and worker roles: molecule/worker installs through it on "
        "both nodes (the Coordinator's and the workers' virtualenv, code and user, a second "
        "run not changed, the hardening both units take); tests/roles/test_worker_venv.py: "
        "pip only when the requirements change; tests/roles/test_worker_darwin.py: its Mac "
        "path, no root owner asked for; tests/migrate: the lab's converges"),
}


def test_every_role_has_a_scenario():
    # site.yml as a whole runs on the lab the migration suites share (tests/migrate/).
    roles = sorted(path.name for path in (REPO / "roles").iterdir() if path.is_dir())
    assert [role for role in roles
            if role not in SCENARIOS and role not in PROVEN_ELSEWHERE] == []
    # An exemption ends when the role gets a scenario, or leaves.
    assert [role for role in PROVEN_ELSEWHERE if role in SCENARIOS or role not in roles] == []


def molecule_env() -> dict[str, str]:
    """The lab's environment without a developer's ANSIBLE_* settings."""
    env = {key: value for key, value in drive.env().items() if not key.startswith("ANSIBLE_")}
    env["ANSIBLE_NOCOLOR"] = "1"
    return env


def first_failure(output: str) -> str:
    """The first failed task with what led to it, and the end of the run (destroy, recap)."""
    at = output.find("fatal:")
    start = at - 1500 if at >= 0 else len(output) - 6000
    return output[max(start, 0):][:4500] + "\n...\n" + output[-1500:]


# Creating the containers, two converges and verify take minutes on a busy 2-core machine;
# the time includes waiting for another run that holds the Molecule lock.
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario, podman_ready):
    with lab.exclusive(lab.MOLECULE_LOCK):
        result = subprocess.run([str(drive.VENV_BIN / "molecule"), "test", "-s", scenario],
                                cwd=REPO, env=molecule_env(), capture_output=True, text=True,
                                check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, (f"molecule test -s {scenario} failed:\n"
                                    f"{first_failure(output)}")
    # Every step of the sequence ran and none was skipped for a missing playbook.
    for step in ("create", "converge", "idempotence", "verify", "destroy"):
        assert f"{step}: Executed: Successful" in output, f"{step} did not run:\n{output[-3000:]}"
    # A deprecated option or alias warns on every run a user makes.
    deprecations = [line for line in output.splitlines() if "DEPRECATION WARNING" in line]
    assert deprecations == [], deprecations
