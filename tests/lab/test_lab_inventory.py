"""Fast checks of the lab definition that lab/lab.py and the Molecule inventory rely on."""

from __future__ import annotations

import ipaddress

from lab.lab import load_lab


def test_lab_nodes_have_fixed_addresses_in_the_lab_subnet():
    lab = load_lab()
    subnet = ipaddress.ip_network(lab.subnet)
    assert set(lab.nodes) == {"lab-ai-core", "lab-worker-slow", "lab-macbookair"}
    assert lab.node_kinds == {"lab-macbookair": "macos"}
    assert lab.nodes["lab-ai-core"] == "10.89.20.40"
    for address in [*lab.nodes.values(), lab.outsider[1]]:
        assert ipaddress.ip_address(address) in subnet
    assert len(set(lab.nodes.values()) | {lab.outsider[1]}) == len(lab.nodes) + 1
