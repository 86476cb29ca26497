"""lab/lab.py creates a lab from an inventory (static addresses, systemd up, reached over SSH
as admin with sudo) and removes it.

Uses its own small inventory (network coordinator-labtest, 10.89.22.0/24), never the lab's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lab import lab as lab_module

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


def ssh(address: str, *command: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["ssh", "-i", str(lab_module.SSH_KEY), "-o", "BatchMode=yes",
         "-o", f"UserKnownHostsFile={lab_module.KNOWN_HOSTS}", "-o", "StrictHostKeyChecking=yes",
         f"admin@{address}", *command],
        input=stdin, capture_output=True, text=True, check=False, timeout=120)


def assert_reached_like_a_host(address: str) -> None:
    """ssh as admin with the lab's key, the node's own host key checked, sudo asking for
    admin's password and accepting it; root cannot log in."""
    assert ssh(address, "id", "-un").stdout.strip() == "admin"
    no_password = ssh(address, "sudo", "-n", "true")
    assert no_password.returncode != 0 and "password is required" in no_password.stderr
    password = lab_module.ADMIN_PASSWORD.read_text().split()[0]
    with_password = ssh(address, "sudo -S -p '' id -u", stdin=password + "\n")
    assert with_password.stdout.strip() == "0", with_password.stderr
    root = subprocess.run(
        ["ssh", "-i", str(lab_module.SSH_KEY), "-o", "BatchMode=yes",
         "-o", f"UserKnownHostsFile={lab_module.KNOWN_HOSTS}", f"root@{address}", "true"],
        capture_output=True, text=True, check=False, timeout=120)
    assert root.returncode != 0 and "Permission denied" in root.stderr


def ansible_as_admin(address: str, *args: str, password: str | None = None
                     ) -> subprocess.CompletedProcess:
    """An ad-hoc ``ansible`` run against the node as a user runs it: SSH as admin, become
    root with sudo. Its own session, so -K reads the password from standard input (no
    terminal), as getpass does under CI."""
    return subprocess.run(
        [str(REPO / ".venv" / "bin" / "ansible"), "all", "-i", f"{address},", "-u", "admin",
         "--private-key", str(lab_module.SSH_KEY),
         f"--ssh-common-args=-o UserKnownHostsFile={lab_module.KNOWN_HOSTS}",
         "-b", "-m", "ansible.builtin.command", "-a", "id -un", *args],
        cwd=REPO, input=password, capture_output=True, text=True, check=False, timeout=300,
        start_new_session=True)


def assert_sudo_password_from_k(address: str) -> None:
    """-K (--ask-become-pass) gives sudo its password; without it, Ansible says so."""
    password = lab_module.ADMIN_PASSWORD.read_text().split()[0]
    asked = ansible_as_admin(address, "-K", password=password + "\n")
    assert asked.returncode == 0, asked.stdout + asked.stderr
    assert f"{address} | CHANGED | rc=0 >>\nroot" in asked.stdout
    not_asked = ansible_as_admin(address)
    assert not_asked.returncode != 0
    assert "Missing sudo password" in not_asked.stdout + not_asked.stderr


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
            assert_reached_like_a_host(address)
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
        # Each node has its own host key.
        keys = [line.split()[2] for line in lab_module.KNOWN_HOSTS.read_text().splitlines()
                if line.split()[0] in ("10.89.22.40", "10.89.22.42")]
        assert len(keys) == len(set(keys)) == 2
        assert_sudo_password_from_k("10.89.22.40")
        # A second create changes nothing and succeeds.
        again = lab(lab_env, tmp_path, "create")
        assert again.returncode == 0, again.stdout + again.stderr
        assert_reached_like_a_host("10.89.22.40")
    finally:
        destroyed = lab(lab_env, tmp_path, "destroy")
    assert destroyed.returncode == 0, destroyed.stdout + destroyed.stderr
    for name in ("labtest-a", "labtest-b", "labtest-outsider"):
        assert podman(lab_env, "container", "exists", name).returncode == 1
    assert podman(lab_env, "network", "exists", "coordinator-labtest").returncode == 1
