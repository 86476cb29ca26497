"""No secret of the lab appears in the -vvv output of any playbook the lab tests ran.

Runs last (conftest.ORDER): the first converge, every move, every fault case and the README
steps, all at -vvv, the most Ansible ever prints (module arguments, loop items, commands).
"""

from __future__ import annotations

from lab import lab


def test_no_secret_in_any_verbose_output(cluster) -> None:
    outputs = cluster.playbooks.outputs
    assert len(outputs) >= 2  # the bring-up's, at least
    core = cluster.nodes["lab-ai-core"]
    env_files = core.sh("cat", "/etc/coordinator-worker/inference-worker.env",
                        "/etc/coordinator/coordinator.env", check=True).stdout
    secrets = {path.name: path.read_text().split()[0]
               for path in sorted(lab.SECRETS_DIR.iterdir())}
    # The worker's own API token, derived from the key, is a secret too.
    secrets["inference worker's token"] = next(
        line.split("=", 1)[1].strip('"') for line in env_files.splitlines()
        if line.startswith("COORDINATOR_TOKEN=worker.") or
        line.startswith('COORDINATOR_TOKEN="worker.'))
    for name, value in secrets.items():
        assert len(value) >= 16, f"{name} is too short to be a meaningful canary"
        # Each is really in use on the nodes (in the Coordinator's or a worker's
        # environment), so finding it zero times in the output means something.
        assert value in env_files, f"{name} is in neither environment file"
    # admin's sudo password is in use too: sudo asks for it on every node (tests/lab), and
    # every run above became root with it.
    secrets["admin_password"] = lab.ADMIN_PASSWORD.read_text().split()[0]
    for name, value in secrets.items():
        leaks = [index for index, output in enumerate(outputs) if value in output]
        assert not leaks, f"{name} appears in the -vvv output of playbook runs {leaks}"
