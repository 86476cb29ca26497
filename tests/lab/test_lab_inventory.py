"""Fast checks of the lab definition that lab/lab.py and the Molecule inventory rely on."""

from __future__ import annotations

import ipaddress
import itertools
from pathlib import Path

import yaml

from lab.lab import load_lab, second_lab_inventory


def test_lab_nodes_have_fixed_addresses_in_the_lab_subnet():
    lab = load_lab()
    subnet = ipaddress.ip_network(lab.subnet)
    assert set(lab.nodes) == {"lab-ai-core", "lab-worker-slow", "lab-macbookair"}
    assert lab.node_kinds == {"lab-macbookair": "macos"}
    assert lab.nodes["lab-ai-core"] == "10.89.20.40"
    for address in [*lab.nodes.values(), lab.outsider[1]]:
        assert ipaddress.ip_address(address) in subnet
    assert len(set(lab.nodes.values()) | {lab.outsider[1]}) == len(lab.nodes) + 1


def test_a_second_lab_has_the_same_hosts_in_containers_of_its_own_on_its_own_network(tmp_path):
    first = load_lab()
    second = load_lab(second_lab_inventory(2, target=tmp_path / "inventory-lab2"))
    assert list(second.nodes) == list(first.nodes) and second.node_kinds == first.node_kinds
    assert (second.network, second.subnet) == ("coordinator-lab2", "10.89.21.0/24")
    assert second.nodes == {name: address.replace("10.89.20.", "10.89.21.")
                            for name, address in first.nodes.items()}
    assert {name: second.container(name) for name in second.nodes} == {
        "lab-ai-core": "lab2-ai-core", "lab-worker-slow": "lab2-worker-slow",
        "lab-macbookair": "lab2-macbookair"}
    assert second.outsider == ("lab2-outsider", "10.89.21.99")
    assert second.coordinator_url == first.coordinator_url.replace("10.89.20.", "10.89.21.")
    # The first lab's containers are named as its hosts.
    assert [first.container(name) for name in first.nodes] == list(first.nodes)


def test_the_molecule_scenarios_networks_overlap_neither_each_other_nor_the_labs(tmp_path):
    """Each scenario runs beside the labs (tests/conftest.py): a network of its own, in a /24
    no lab and no other scenario uses (podman refuses a second network on a subnet)."""
    repo = Path(__file__).resolve().parents[2]
    labs = [load_lab(), load_lab(second_lab_inventory(2, target=tmp_path / "inventory-lab2"))]
    networks = {f"lab {number}": (lab.network, ipaddress.ip_network(lab.subnet))
                for number, lab in enumerate(labs, start=1)}
    for inventory in sorted(repo.glob("molecule/*/inventory")):
        # Set in the inventory's hosts.yml or in its group_vars/all/.
        settings = yaml.safe_load((inventory / "hosts.yml").read_text())["all"].get("vars", {})
        for group_vars in sorted(inventory.glob("group_vars/all/*.yml")):
            settings.update(yaml.safe_load(group_vars.read_text()))
        networks[inventory.parent.name] = (settings["lab_network"],
                                           ipaddress.ip_network(settings["lab_subnet"]))
    assert len(networks) > 3, networks  # the scenarios were found
    for (one, (name, subnet)), (other, (other_name, other_subnet)) in itertools.combinations(
            networks.items(), 2):
        assert name != other_name and not subnet.overlaps(other_subnet), (one, other)
