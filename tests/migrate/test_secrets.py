"""No secret of the lab appears in the -vvv output of any playbook the lab tests ran.

Runs last (conftest.ORDER): the first converge, every move, every fault case and the README
steps, all at -vvv, the most Ansible ever prints (module arguments, loop items, commands).
"""

from __future__ import annotations

from lab import lab


def test_no_secret_in_any_verbose_output(cluster) -> None:
    outputs = cluster.playbooks.outputs
    assert len(outputs) >= 2  # the bring-up's, at least
    env_file = cluster.nodes["lab-ai-core"].sh(
        "cat", "/etc/coordinator-worker/inference-worker.env", check=True).stdout
    secrets = {path.name: path.read_text().split()[0]
               for path in sorted(lab.SECRETS_DIR.iterdir())}
    for name, value in secrets.items():
        assert len(value) >= 16, f"{name} is too short to be a meaningful canary"
        # Each is really in use on the nodes (the token and the passwords are in a worker's
        # environment), so finding it zero times in the output means something.
        assert value in env_file, f"{name} is not in the worker's env file"
    # admin's sudo password is in use too: sudo asks for it on every node (tests/lab), and
    # every run above became root with it.
    secrets["admin_password"] = lab.ADMIN_PASSWORD.read_text().split()[0]
    for name, value in secrets.items():
        leaks = [index for index, output in enumerate(outputs) if value in output]
        assert not leaks, f"{name} appears in the -vvv output of playbook runs {leaks}"
