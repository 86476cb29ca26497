# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# Ansible's plugin convention puts DOCUMENTATION before the imports, hence the E402 waiver.
# ruff: noqa: E402
"""The lab's connection: ``podman exec`` into a running container, with pipelining.

containers.podman.podman cannot pipeline (it never passes stdin to ``podman exec``), so each
module costs a temporary directory, a file copy, a chmod, a run and a cleanup, all separate
``podman exec`` calls, plus a ``podman mount`` per task. Here a module goes to the stdin of
one ``podman exec --interactive``, as it would over SSH with ``pipelining = true``, which is
how a real cluster runs; files travel on stdin too, so nothing is mounted.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: lab_podman
short_description: Run tasks in a running podman container, with pipelining
description:
  - C(podman exec) into an existing container. Modules and files are sent on the standard
    input of C(podman exec --interactive), so a module costs one C(podman exec), like SSH
    with pipelining.
  - For the container lab of this repository (inventory/lab, molecule); a real cluster uses SSH.
options:
  remote_addr:
    description:
      - Name or id of the container; the inventory name by default.
      - The delegated host's under C(delegate_to).
    vars:
      - name: inventory_hostname
      - name: ansible_host
      - name: ansible_podman_host
      - name: delegated_vars['ansible_host']
      - name: delegated_vars['ansible_podman_host']
  remote_user:
    description: User inside the container (C(podman exec --user)); the image's by default.
    vars:
      - name: ansible_user
  podman_executable:
    description: The podman program on the controller.
    default: podman
    vars:
      - name: ansible_podman_executable
    env:
      - name: ANSIBLE_PODMAN_EXECUTABLE
"""

import shlex
import shutil
import subprocess

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.connection import ConnectionBase
from ansible.utils.display import Display

display = Display()


class Connection(ConnectionBase):
    transport = "lab_podman"
    has_pipelining = True

    def _connect(self) -> Connection:
        if not self._connected:
            if shutil.which(self.get_option("podman_executable")) is None:
                raise AnsibleConnectionFailure(
                    f"{self.get_option('podman_executable')} is not on PATH: install podman "
                    "or set ansible_podman_executable"
                )
            self._connected = True
        return self

    def _exec(self, argv: list[str], in_data: bytes | None) -> tuple[int, bytes, bytes]:
        container = self.get_option("remote_addr")
        command = [self.get_option("podman_executable"), "exec"]
        if in_data is not None:
            command.append("--interactive")
        if self.get_option("remote_user"):
            command += ["--user", self.get_option("remote_user")]
        command += [container, *argv]
        display.vvv(f"EXEC {shlex.join(command)}", host=container)
        run = subprocess.run(command, input=in_data, capture_output=True, check=False)
        return run.returncode, run.stdout, run.stderr

    def exec_command(
        self, cmd: str, in_data: bytes | None = None, sudoable: bool = True
    ) -> tuple[int, bytes, bytes]:
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        return self._exec(shlex.split(to_text(cmd, errors="surrogate_or_strict")), in_data)

    def put_file(self, in_path: str, out_path: str) -> None:
        super().put_file(in_path, out_path)
        with open(to_bytes(in_path, errors="surrogate_or_strict"), "rb") as source:
            data = source.read()
        rc, _, stderr = self._exec(["sh", "-c", 'cat > "$1"', "sh", out_path], data)
        if rc != 0:
            raise AnsibleError(f"cannot write {out_path} in {self.get_option('remote_addr')}: "
                               f"{to_text(stderr).strip()}")

    def fetch_file(self, in_path: str, out_path: str) -> None:
        super().fetch_file(in_path, out_path)
        rc, stdout, stderr = self._exec(["cat", in_path], None)
        if rc != 0:
            raise AnsibleError(f"cannot read {in_path} in {self.get_option('remote_addr')}: "
                               f"{to_text(stderr).strip()}")
        with open(to_bytes(out_path, errors="surrogate_or_strict"), "wb") as target:
            target.write(stdout)

    def close(self) -> None:
        self._connected = False
