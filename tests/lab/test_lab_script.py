"""lab/lab.py creates a lab from an inventory (static addresses, systemd up) and removes it.

Uses its own small inventory (network coordinator-labtest, 10.89.22.0/24), never the lab's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

INVENTORY = """\
all:
  children:
    lab_nodes:
      hosts:
        labtest-a:
          node_address: 10.89.22.40
        labtest-b:
          node_address: 10.89.22.42
"""
SETTINGS = """\
lab_network: coordinator-labtest
lab_subnet: 10.89.22.0/24
lab_image: localhost/coordinator-lab-node:bookworm
lab_outsider_name: labtest-outsider
lab_outsider_address: 10.89.22.99
"""


def lab(env, inventory, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lab.lab", "--inventory", str(inventory), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def podman(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], env=env, capture_output=True, text=True, check=False)


@pytest.mark.timeout(900)
def test_create_then_destroy(tmp_path, podman_ready, lab_env):
    (tmp_path / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / "hosts.yml").write_text(INVENTORY)
    (tmp_path / "group_vars" / "all" / "lab.yml").write_text(SETTINGS)
    try:
        created = lab(lab_env, tmp_path, "create", "--outsider")
        assert created.returncode == 0, created.stdout + created.stderr
        for name, address in [
            ("labtest-a", "10.89.22.40"),
            ("labtest-b", "10.89.22.42"),
            ("labtest-outsider", "10.89.22.99"),
        ]:
            state = podman(lab_env, "exec", name, "systemctl", "is-system-running")
            assert state.stdout.strip() in ("running", "degraded"), state
            addresses = podman(
                lab_env, "exec", name, "ip", "-4", "-o", "addr", "show", "eth0"
            ).stdout
            assert f"inet {address}/24" in addresses
            assert podman(lab_env, "exec", name, "hostname").stdout.strip() == name
        # The nodes reach each other over the lab network (a refused TCP connect = reached).
        probe = podman(
            lab_env,
            "exec",
            "labtest-b",
            "python3",
            "-c",
            "import socket; s = socket.socket(); s.settimeout(5)\n"
            "try:\n s.connect(('10.89.22.40', 9))\n"
            "except ConnectionRefusedError:\n print('refused')",
        )
        assert probe.stdout.strip() == "refused", probe
        # A second create changes nothing and succeeds.
        again = lab(lab_env, tmp_path, "create")
        assert again.returncode == 0, again.stdout + again.stderr
    finally:
        destroyed = lab(lab_env, tmp_path, "destroy")
    assert destroyed.returncode == 0, destroyed.stdout + destroyed.stderr
    for name in ("labtest-a", "labtest-b", "labtest-outsider"):
        assert podman(lab_env, "container", "exists", name).returncode == 1
    assert podman(lab_env, "network", "exists", "coordinator-labtest").returncode == 1
