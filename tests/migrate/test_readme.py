"""The README's "Using it on your own cluster", followed literally on the lab.

A copy of inventory/home gets only what a user changes: the hosts and their addresses, the
login user and key, the vault filled in (the sudo password in it too) and encrypted with a
password file, and what the lab has in place of the real SearXNG and Ollama (the stand-in
endpoints, the wheels the nodes install offline: inventory/lab's standins.yml). Then
site.yml, web_workers edited, migrate-web.yml, and both again: nothing changes. A wrong vault
password gets Ansible's one line, before anything is touched. The curl commands of
docs/operating.md, run as written beside that inventory, show the task done by the web host.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from lab import drive, lab

MINE = lab.STATE_DIR / "inventory-mine"
VAULT_PASSWORD = lab.STATE_DIR / "vault-password"
WRONG_PASSWORD = lab.STATE_DIR / "vault-password-wrong"
MAC = "lab-macbookair"

def secret(name: str) -> str:
    return (lab.SECRETS_DIR / name).read_text().split()[0]


def make_mine(cluster, web_host: str) -> None:
    """cp -r inventory/home inventory/mine, then the user's edits."""
    shutil.rmtree(MINE, ignore_errors=True)
    shutil.copytree(drive.REPO / "inventory" / "home", MINE)
    # Hosts and addresses: the lab's nodes instead of AI-Core and the MacBook, which keeps its
    # host_vars (the login user, no become) under the lab's name.
    hosts_file = MINE / "hosts.yml"
    hosts = yaml.safe_load(hosts_file.read_text())
    groups = hosts["all"]["children"]
    for group in ("coordinator", "database", "redis"):
        groups[group]["hosts"] = {"lab-ai-core": None}
    groups["inference_workers"]["hosts"] = {"lab-ai-core": None, MAC: None}
    groups["web_workers"]["hosts"] = {web_host: None}
    hosts["all"]["hosts"] = {name: {"ansible_host": node.address, "node_address": node.address}
                             for name, node in cluster.nodes.items()}
    hosts_file.write_text(yaml.safe_dump(hosts, sort_keys=False))
    (MINE / "host_vars" / "ai-core.yml").unlink()
    (MINE / "host_vars" / "macbookair").rename(MINE / "host_vars" / MAC)
    # The login user and key, as for any SSH host.
    for name, node in cluster.nodes.items():
        if node.kind != "macos":
            (MINE / "host_vars" / f"{name}.yml").write_text("---\nansible_user: admin\n")
    (MINE / "group_vars" / "all" / "ssh.yml").write_text(yaml.safe_dump({
        "ansible_ssh_private_key_file": str(lab.SSH_KEY),
        "ansible_ssh_common_args": f"-o UserKnownHostsFile={lab.KNOWN_HOSTS}"}))
    # The lab Mac's Ollama and wheels (its Homebrew bottle, wheels for its Python).
    shutil.copy(lab.INVENTORY / "host_vars" / MAC / "standins.yml",
                MINE / "host_vars" / MAC / "standins.yml")
    # What the lab has instead of SearXNG, Ollama and PyPI: the stand-in endpoints, and wheels.
    shutil.copy(lab.INVENTORY / "group_vars" / "all" / "standins.yml",
                MINE / "group_vars" / "all" / "standins.yml")
    # The cluster's CA stays the one it has (beside the inventory it was made from): the
    # lab's, with the lab's passphrase below, so the servers keep their certificates.
    shutil.copytree(lab.CLUSTER_CA_DIR, MINE / "cluster-ca")
    # cp vault.yml.example vault.yml, replace every CHANGE_ME, ansible-vault encrypt.
    core = cluster.nodes["lab-ai-core"]
    example = (MINE / "group_vars" / "all" / "vault.yml.example").read_text()
    filled = (example
              .replace("vault_coordinator_db_password: CHANGE_ME",
                       f"vault_coordinator_db_password: {secret('coordinator_db_password')}")
              .replace("vault_redis_password: CHANGE_ME",
                       f"vault_redis_password: {secret('redis_password')}")
              .replace("vault_cluster_ca_passphrase: CHANGE_ME",
                       f"vault_cluster_ca_passphrase: {secret('cluster_ca_passphrase')}")
              .replace("vault_coordinator_token: CHANGE_ME",
                       f"vault_coordinator_token: {secret('coordinator_token')}")
              .replace("vault_worker_db_key: CHANGE_ME",
                       f"vault_worker_db_key: {secret('worker_db_key')}")
              .replace("vault_worker_token_key: CHANGE_ME",
                       f"vault_worker_token_key: {secret('worker_token_key')}")
              .replace("vault_coordinator_metrics_token: CHANGE_ME",
                       f"vault_coordinator_metrics_token: {secret('coordinator_metrics_token')}")
              .replace("# ansible_become_password: CHANGE_ME",
                       f"ansible_become_password: {lab.ADMIN_PASSWORD.read_text().split()[0]}")
              # The user's ntfy topic: the lab's receiver, which its Coordinator notifies now.
              .replace('vault_coordinator_notify_url: ""',
                       f"vault_coordinator_notify_url: {drive.notify_url(core)}"))
    assert not re.search(r":\s*CHANGE_ME\s*$", filled, re.M), filled
    (MINE / "group_vars" / "all" / "vault.yml").write_text(filled)
    VAULT_PASSWORD.write_text("the user's vault password\n")
    VAULT_PASSWORD.chmod(0o600)
    encrypt = subprocess.run(["ansible-vault", "encrypt", "--vault-password-file",
                              str(VAULT_PASSWORD), str(MINE / "group_vars" / "all" / "vault.yml")],
                             cwd=drive.REPO, env=drive.env(), capture_output=True, text=True,
                             check=False)
    assert encrypt.returncode == 0, encrypt.stderr
    assert (MINE / "group_vars" / "all" / "vault.yml").read_text().startswith("$ANSIBLE_VAULT;")


def move_web_workers(web_host: str) -> None:
    """The user's edit for a move: web_workers names the new host."""
    hosts_file = MINE / "hosts.yml"
    hosts = yaml.safe_load(hosts_file.read_text())
    hosts["all"]["children"]["web_workers"]["hosts"] = {web_host: None}
    hosts_file.write_text(yaml.safe_dump(hosts, sort_keys=False))


@pytest.mark.timeout(3600)
def test_the_readme_steps_on_the_lab(cluster) -> None:
    old = cluster.web_host()
    new = cluster.other(old)
    make_mine(cluster, old)
    vault = ("--vault-password-file", str(VAULT_PASSWORD))
    with cluster.traffic() as traffic:
        WRONG_PASSWORD.write_text("not the vault password\n")
        wrong = cluster.playbooks.run("site.yml", MINE, "--vault-password-file",
                                      str(WRONG_PASSWORD))
        assert wrong.returncode != 0
        assert "Decryption failed (no vault secrets were found that could decrypt)" in (
            wrong.output)
        assert "TASK [" not in wrong.output  # nothing ran

        site = cluster.playbooks.run("site.yml", MINE, *vault)
        assert site.returncode == 0, site.output[-6000:]
        move_web_workers(new)
        moved = cluster.playbooks.run("migrate-web.yml", MINE, *vault)
        assert moved.returncode == 0, moved.output[-6000:]
        cluster.assert_proven(moved, new)

        # A second run of each changes nothing on any host; the move still proves itself.
        for playbook in ("migrate-web.yml", "site.yml"):
            again = cluster.playbooks.run(playbook, MINE, *vault)
            assert again.returncode == 0, again.output[-6000:]
            assert again.changed() == dict.fromkeys(cluster.nodes, 0), (playbook, again.changed())
            if playbook == "migrate-web.yml":
                cluster.assert_proven(again, new)
    cluster.assert_settled(traffic.outcome(), new)


def documented_shell(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A script of documented commands in bash, as a user types them, stopping at the first
    that fails; ansible-vault reads the vault password from the file a user would type."""
    return subprocess.run(["bash", "-c", "set -eo pipefail\n" + script], cwd=cwd,
                          env=drive.env(ANSIBLE_VAULT_PASSWORD_FILE=str(VAULT_PASSWORD)),
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_documented_curl_commands_show_the_task_done_by_the_web_host(cluster,
                                                                        tmp_path) -> None:
    """docs/operating.md, "A task by hand, with curl": its lines run verbatim in a directory
    where inventory/mine is the user's inventory (the cluster CA in its cluster-ca/, the token
    in its encrypted vault), with the lab Coordinator's address for inventory/home's and the
    id the route answered for <task_id>. The task is done by the web host, without a fallback;
    without the CA curl stops, and another token gets 401, in the words the doc quotes."""
    web_host = cluster.web_host()
    make_mine(cluster, web_host)
    (tmp_path / "inventory").mkdir()
    (tmp_path / "inventory" / "mine").symlink_to(MINE)
    route, read = drive.curl_proof(urlsplit(cluster.coordinator.url).hostname)

    routed = documented_shell(route, tmp_path)
    assert routed.returncode == 0, routed.stderr
    task_id = json.loads(routed.stdout)["task_id"]
    shown = documented_shell(read.replace(drive.TASK_ID_PLACEHOLDER, task_id), tmp_path)
    assert shown.returncode == 0, shown.stderr
    task = json.loads(shown.stdout)
    assert (task["task_id"], task["status"], task["worker_host"], task["fallback"]) == (
        task_id, "done", cluster.nodes[web_host].address, False), task

    no_ca = documented_shell(route.replace('--cacert "$CA" ', "", 1), tmp_path)
    assert (no_ca.returncode, no_ca.stderr.splitlines()[0]) == (
        60, "curl: (60) SSL certificate problem: unable to get local issuer certificate"), (
        no_ca.stderr)
    other_token = documented_shell(route.replace("\ncurl ", "\nTOKEN=another\ncurl ", 1),
                                   tmp_path)
    assert json.loads(other_token.stdout)["error"].startswith(
        "wrong bearer token: send 'Authorization: Bearer <token>' "), other_token.stdout
