"""Both inventories parse, describe the cluster of the design, and site.yml accepts them.

Nothing here connects to any host: `ansible-inventory --list` and `--syntax-check` only.
"""

from __future__ import annotations

import json
import re
import runpy

import pytest
import yaml

from lab.standins.ollama import DEFAULT_MODEL

from .conftest import REPO, run

HOME = REPO / "inventory" / "home"


def inventory(name: str) -> dict:
    result = run(["ansible-inventory", "-i", f"inventory/{name}", "--list"])
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def hosts(data: dict, group: str) -> set[str]:
    return set(data.get(group, {}).get("hosts", []))


def test_home_inventory_is_the_cluster_of_the_design():
    data = inventory("home")
    hostvars = data["_meta"]["hostvars"]
    assert hostvars["ai-core"]["node_address"] == "192.168.0.40"
    assert hostvars["macbookair"]["node_address"] == "192.168.0.43"
    for group in ("coordinator", "database", "redis"):
        assert hosts(data, group) == {"ai-core"}, group
    assert hosts(data, "inference_workers") == {"ai-core", "macbookair"}
    assert hosts(data, "web_workers") == {"ai-core"}  # the web worker starts on AI-Core
    mac = hostvars["macbookair"]
    assert mac["ansible_become"] is False  # launchd agents of the login user
    assert mac["ansible_user"] not in ("root", "")
    assert mac["worker_searxng_url"] == "http://192.168.0.1:8888"
    assert mac["worker_ollama_model"] == "{{ cluster_model }}"
    # the model the lab's stand-in Ollama has by default, so the lab runs what home runs
    assert mac["cluster_model"] == DEFAULT_MODEL


def test_the_molecule_worker_scenario_asks_for_the_model_its_stand_in_has():
    # molecule/worker keeps its own cluster.yml (its comment says why): its model must be the
    # one lab/prepare.yml's stand-in Ollama has, or its inference worker does not start.
    wiring = yaml.safe_load(
        (REPO / "molecule" / "worker" / "inventory" / "group_vars" / "all" / "cluster.yml")
        .read_text())
    assert wiring["molwk_model"] == DEFAULT_MODEL
    assert wiring["worker_ollama_model"] == "{{ molwk_model }}"


def test_lab_inventory_has_the_same_shape_on_containers():
    data = inventory("lab")
    hostvars = data["_meta"]["hostvars"]
    assert hosts(data, "coordinator") == {"lab-ai-core"}
    assert hosts(data, "web_workers") == {"lab-worker-slow"}
    assert hostvars["lab-ai-core"]["lab_searxng_standin"] is True
    # The Mac's Ollama is the image's Homebrew bottle of the stand-in, at its own latency.
    launcher = runpy.run_path(str(REPO / "lab" / "macos" / "image" / "files"
                                  / "ollama_launcher.py"))
    slow = float(hostvars["lab-worker-slow"]["lab_ollama_latency"])
    # The speed difference is what shows which node did the work.
    assert slow > launcher["DEFAULT_LATENCY"]
    for host, values in hostvars.items():
        mac = values.get("lab_node_kind") == "macos"
        assert values.get("lab_ollama_standin", False) is not mac, host
        assert values["node_address"].startswith("10.89.20."), host


def lab_value(host: str, expression: str) -> object:
    """What ``expression`` (Jinja) is for ``host`` of inventory/lab, templated by Ansible."""
    result = run(["ansible", "-i", "inventory/lab", host, "-m", "ansible.builtin.debug",
                  "-a", f"msg={{{{ {expression} }}}}"],
                 ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json")
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)["plays"][0]["tasks"][0]["hosts"][host]["msg"]


def test_the_lab_coordinator_notifies_the_lab_ntfy_stand_in_over_the_network():
    data = inventory("lab")
    hostvars = data["_meta"]["hostvars"]
    receivers = [host for host, values in hostvars.items() if values.get("lab_ntfy_standin")]
    assert receivers == ["lab-worker-slow"]
    [coordinator] = hosts(data, "coordinator")
    assert coordinator not in receivers  # the notifications cross the lab network
    plays = yaml.safe_load((REPO / "lab" / "prepare.yml").read_text())
    units = next(task for play in plays for task in play.get("tasks", [])
                 if task["name"] == "Install the stand-ins' units")
    port = next(item["port"] for item in units["loop"] if item["name"] == "ntfy")

    url, fmt = lab_value(coordinator, "[coordinator_notify_url, coordinator_notify_format]")

    assert fmt == "ntfy"
    assert url == f"http://{hostvars['lab-worker-slow']['node_address']}:{port}/lab-cluster"


@pytest.mark.parametrize("name", ["home", "lab"])
def test_site_playbook_syntax(name):
    result = run(["ansible-playbook", "-i", f"inventory/{name}", "site.yml", "--syntax-check"])
    assert result.returncode == 0, result.stdout + result.stderr


def test_lab_prepare_syntax():
    result = run(["ansible-playbook", "-i", "inventory/lab", "lab/prepare.yml", "--syntax-check"])
    assert result.returncode == 0, result.stdout + result.stderr


def test_vault_example_holds_every_secret_as_a_placeholder():
    example_path = HOME / "group_vars" / "all" / "vault.yml.example"
    example = yaml.safe_load(example_path.read_text())
    used = set()
    for path in HOME.rglob("*.yml"):
        used |= set(re.findall(r"\b(vault_[a-z_]+)\b", path.read_text()))
    assert used, "the home inventory uses no vault variable"
    assert set(example) == used
    # Every secret is to be filled in, but the notifications' URL: empty turns them off.
    assert {name for name, value in example.items() if value != "CHANGE_ME"} \
        == {"vault_coordinator_notify_url"}
    assert example["vault_coordinator_notify_url"] == ""
    text = example_path.read_text()
    assert "ansible-vault encrypt" in text
    assert not (HOME / "group_vars" / "all" / "vault.yml").exists()  # never committed in clear

