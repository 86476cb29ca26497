"""The lab's connection plugin (lab/connection_plugins/lab_podman.py) against a real container:
one `podman exec` per module, files both ways byte for byte, become, delegate_to reaching the
delegated container, and the messages a user sees when the container or podman is missing."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from lab import lab

REPO = Path(__file__).resolve().parents[2]
CONTAINER = "labpodman-test"
PEER = "labpodman-peer"
IMAGE = "localhost/coordinator-lab-node:bookworm"

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Send a file
      ansible.builtin.copy: {src: "{{ blob }}", dest: /tmp/blob.bin, mode: "0600"}
      register: sent
    - name: Send it again
      ansible.builtin.copy: {src: "{{ blob }}", dest: /tmp/blob.bin, mode: "0600"}
      register: again
    - name: Hash it in the container
      ansible.builtin.command: sha256sum /tmp/blob.bin
      register: remote_hash
      changed_when: false
    - name: Fetch it back
      ansible.builtin.fetch: {src: /tmp/blob.bin, dest: "{{ fetched }}", flat: true}
    - name: Become
      ansible.builtin.command: id -un
      become: true
      register: who
      changed_when: false
    - name: Report
      ansible.builtin.debug:
        msg: "REPORT {{ {'sent': sent.changed, 'again': again.changed,
          'hash': remote_hash.stdout.split()[0], 'who': who.stdout} | to_json }}"
"""


@pytest.fixture(scope="module")
def container(podman_ready: None, lab_env: dict[str, str]) -> str:
    """CONTAINER and PEER, each with its own name as its host name."""
    subprocess.run([str(REPO / "lab" / "image" / "build.sh")], check=True, env=lab_env)
    for name in (CONTAINER, PEER):
        lab.podman("rm", "--force", "--ignore", name, capture=True)
        lab.podman("run", "--detach", "--name", name, "--hostname", name, "--network", "none",
                   IMAGE, "sleep", "infinity", capture=True)
    yield CONTAINER
    lab.podman("rm", "--force", "--time", "0", CONTAINER, PEER, capture=True)


def ansible(env: dict[str, str], *args: str, podman_log: Path | None = None,
            json_output: bool = False):
    run_env = {k: v for k, v in env.items() if not k.startswith("ANSIBLE_")}
    run_env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    if json_output:
        run_env["ANSIBLE_STDOUT_CALLBACK"] = "json"
    if podman_log is not None:
        wrapper = podman_log.with_suffix(".sh")
        wrapper.write_text(f'#!/bin/sh\necho "$*" >> {podman_log}\nexec podman "$@"\n')
        wrapper.chmod(0o755)
        run_env["ANSIBLE_PODMAN_EXECUTABLE"] = str(wrapper)
    return subprocess.run([str(REPO / ".venv" / "bin" / args[0]), *args[1:]], env=run_env,
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def test_one_podman_exec_per_module(container: str, lab_env: dict[str, str], tmp_path: Path):
    log = tmp_path / "podman.log"
    run = ansible(lab_env, "ansible", "-i", f"{container},", "-c", "lab_podman",
                  "-e", "ansible_python_interpreter=/usr/bin/python3", "-m", "ansible.builtin.ping",
                  container, podman_log=log)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ping: pong" in run.stdout
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and calls[0].startswith(f"exec --interactive {container} ")


def test_files_travel_intact_and_become_works(container: str, lab_env: dict[str, str],
                                              tmp_path: Path):
    blob = tmp_path / "blob.bin"
    blob.write_bytes(bytes(range(256)) * 8192 + b"\x00tail")  # 2 MB, every byte value
    fetched = tmp_path / "fetched.bin"
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK)
    run = ansible(lab_env, "ansible-playbook",
                  "-i", f"{container},", "-c", "lab_podman",
                  "-e", "ansible_python_interpreter=/usr/bin/python3",
                  "-e", json.dumps({"blob": str(blob), "fetched": str(fetched)}), str(playbook),
                  json_output=True)
    assert run.returncode == 0, run.stdout + run.stderr
    last_task = json.loads(run.stdout)["plays"][0]["tasks"][-1]
    report = json.loads(last_task["hosts"][container]["msg"].removeprefix("REPORT "))
    assert report == {"sent": True, "again": False,
                      "hash": hashlib.sha256(blob.read_bytes()).hexdigest(), "who": "root"}
    assert fetched.read_bytes() == blob.read_bytes()


DELEGATION = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Here
      ansible.builtin.command: hostname
      register: here
      changed_when: false
    - name: There
      ansible.builtin.command: hostname
      delegate_to: "{{ peer }}"
      register: there
      changed_when: false
    - name: Report
      ansible.builtin.debug:
        msg: "{{ here.stdout }} {{ there.stdout }}"
"""


def test_delegate_to_runs_in_the_delegated_container(container: str, lab_env: dict[str, str],
                                                     tmp_path: Path):
    playbook = tmp_path / "delegate.yml"
    playbook.write_text(DELEGATION)
    run = ansible(lab_env, "ansible-playbook",
                  "-i", f"{container},{PEER},", "--limit", container, "-c", "lab_podman",
                  "-e", "ansible_python_interpreter=/usr/bin/python3", "-e", f"peer={PEER}",
                  str(playbook), json_output=True)
    assert run.returncode == 0, run.stdout + run.stderr
    last_task = json.loads(run.stdout)["plays"][0]["tasks"][-1]
    assert last_task["hosts"][container]["msg"] == f"{container} {PEER}"


def test_a_missing_container_is_named(podman_ready: None, lab_env: dict[str, str]):
    run = ansible(lab_env, "ansible", "-i", "labpodman-nowhere,", "-c", "lab_podman",
                  "-m", "ansible.builtin.ping", "labpodman-nowhere")
    assert run.returncode != 0
    assert "no container with name or ID" in run.stdout + run.stderr


def test_a_missing_podman_says_what_to_do(lab_env: dict[str, str]):
    run = ansible(lab_env, "ansible", "-i", "somewhere,", "-c", "lab_podman",
                  "-e", "ansible_podman_executable=podman-not-installed",
                  "-m", "ansible.builtin.ping", "somewhere")
    assert run.returncode != 0
    assert ("podman-not-installed is not on PATH: install podman or set "
            "ansible_podman_executable") in run.stdout
