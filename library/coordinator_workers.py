#!/usr/bin/python
# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: the Coordinator's registry of alive workers, compared with what runs."""


from __future__ import annotations

DOCUMENTATION = r"""
---
module: coordinator_workers
short_description: Compare the Coordinator's alive workers with the ones the service managers run
description:
  - Reads C(GET /workers) of the Coordinator API and returns the workers it lists alive
    (optionally of one O(kind)).
  - Given O(expected), the workers the service managers of the reached hosts run (their
    address and pid), it compares the two as O(require) says and fails with one line naming
    each difference, with the worker id, host, pid and last heartbeat, and how to stop a
    worker nobody manages.
  - It is the second witness of a web worker move. Ansible sees the hosts it reaches and the
    services it manages; the registry sees every worker that heartbeats, wherever it runs. A
    copy started by hand or a host outside the inventory would otherwise go unseen while it
    takes tasks from a shared queue.
  - A run limited with C(--limit) asks only some hosts' service managers. A worker on a host
    of O(left_out) that the inventory declares there is neither expected nor unaccounted,
    and RV(serving) says it was left out; on a left-out host that declares none it is
    unaccounted.
  - A worker that stops cleanly deregisters at once; one that was killed stays listed alive
    until the heartbeat TTL runs out. O(wait_for_heartbeats) waits that long for such entries
    to go, and for new workers to register, before judging; a worker nobody accounts for
    that heartbeats again meanwhile fails it at once.
  - It only reads, never changes anything, and always reports C(changed=false).
version_added: "0.2.0"
author:
  - Coordinator cluster contributors (@coordinator-cluster)
options:
  kind:
    description:
      - Only workers of this kind. Unset means every kind.
    type: str
    choices: [web, inference, rag]
  expected:
    description:
      - The workers the service managers run, one entry each.
    type: list
    elements: dict
    default: []
    suboptions:
      host:
        description: The address the worker registers with (its C(WORKER_HOST)).
        type: str
        required: true
      pid:
        description: The process id its service manager reports.
        type: int
        required: true
      version:
        description: The version it must have registered with; unset accepts any.
        type: str
      worker_id:
        description: Its worker id; unset accepts any.
        type: str
  hosts:
    description:
      - Inventory host name of each address, to name hosts in messages; an address missing
        here is reported as a host outside the inventory.
    type: dict
    default: {}
  left_out:
    description:
      - The inventory's hosts this run leaves out (C(--limit)), whose service managers were
        not asked.
    type: list
    elements: dict
    default: []
    suboptions:
      host:
        description: Its address, as its workers register (their C(WORKER_HOST)).
        type: str
        required: true
      name:
        description: Its inventory host name, for messages.
        type: str
        required: true
      declared_in:
        description:
          - The inventory group that declares workers of O(kind) on it (C(web_workers)).
            Unset when none does.
        type: str
  require:
    description:
      - V(none) only reports.
      - V(accounted) fails when an alive worker is not one of O(expected) (nor on a host of
        O(left_out) that declares it).
      - V(exactly) also fails when one of O(expected) is not alive in the registry.
    type: str
    default: none
    choices: [none, accounted, exactly]
  wait_for_heartbeats:
    description:
      - Wait up to the registry's heartbeat TTL (plus 2 s) for the registry to become as
        O(require) wants it, reading it every second, before failing.
      - Each read also waits up to O(timeout) seconds for a Coordinator that is restarting
        (it refuses the connection or answers 503), asking every second.
    type: bool
    default: false
  timeout:
    description:
      - Seconds each HTTP request may take.
    type: int
    default: 10
attributes:
  check_mode:
    support: full
    details: It only reads, so it runs in check mode too.
  diff_mode:
    support: none
extends_documentation_fragment:
  - coordinator_api
  - module_attributes
"""

EXAMPLES = r"""
- name: No web worker runs that systemd or launchd of a reached host does not account for
  coordinator_workers:
    coordinator_url: https://192.168.0.40:8000
    coordinator_token: "{{ vault_coordinator_token }}"
    ca_path: /etc/coordinator-cluster/tls/ca.crt
    kind: web
    expected:
      - host: 192.168.0.43
        pid: 812
    hosts:
      192.168.0.40: ai-core
      192.168.0.43: macbookair
    require: accounted
    wait_for_heartbeats: true

- name: Under --limit, a web worker on a host left out that the inventory declares is no rogue
  coordinator_workers:
    coordinator_url: https://192.168.0.40:8000
    coordinator_token: "{{ vault_coordinator_token }}"
    kind: web
    expected: []
    left_out:
      - host: 192.168.0.43
        name: macbookair
        declared_in: web_workers
    require: accounted

- name: After the move, exactly the new web worker, with the shipped version
  coordinator_workers:
    coordinator_url: "{{ coordinator_url }}"
    coordinator_token: "{{ coordinator_token }}"
    kind: web
    expected: [{host: 192.168.0.43, pid: 812, version: "2.1"}]
    require: exactly
    wait_for_heartbeats: true
  register: registry

- name: Say what serves tasks:web
  ansible.builtin.debug:
    msg: "{{ registry.serving }}"
"""

RETURN = r"""
msg:
  description: The failure, or the same line as RV(serving).
  returned: always
  type: str
serving:
  description: One line naming every alive worker (of O(kind)) and the queues they serve.
  returned: when the registry was read
  type: str
  sample: >-
    the Coordinator's registry lists 1 alive web worker serving tasks:web:
    web-worker-macbookair on macbookair (192.168.0.43), pid 812, v2.1, heartbeat 1.9 s ago
workers:
  description:
    - The alive workers (of O(kind)).
    - C(models) are the models each registered with (an inference worker every model its
      Ollama lists, a web worker the one it summarises with).
  returned: when the registry was read
  type: list
  elements: dict
  sample:
    - worker_id: web-worker-macbookair
      host: 192.168.0.43
      pid: 812
      version: "2.1"
      queues: [tasks:web]
      models: [hf.co/LiquidAI/LFM2.5-1.2B-JP-GGUF:Q4_K_M]
      seconds_since_heartbeat: 1.9
unaccounted:
  description: Alive workers that none of O(expected) accounts for.
  returned: when the registry was read
  type: list
  elements: dict
left_out:
  description: Alive workers on a host of O(left_out) that the inventory declares them on.
  returned: when the registry was read
  type: list
  elements: dict
missing:
  description: Entries of O(expected) the registry does not list alive.
  returned: when the registry was read
  type: list
  elements: dict
heartbeat_ttl:
  description: Seconds without a heartbeat after which the Coordinator counts a worker dead.
  returned: when the registry was read
  type: float
  sample: 30.0
"""

import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.coordinator_api import READ_INTERVAL, api_argument_spec, call
from ansible.module_utils.coordinator_contract import WORKER_KINDS
from ansible.module_utils.coordinator_registry import (
    Expected,
    LeftOut,
    RegistryError,
    Seen,
    compare,
    declared_left_out,
    describe_serving,
    heard_since,
    parse_registry,
    verdict,
)


def argument_spec() -> dict[str, Any]:
    return {
        **api_argument_spec(),
        "kind": {"type": "str", "choices": list(WORKER_KINDS)},
        "expected": {
            "type": "list", "elements": "dict", "default": [],
            "options": {
                "host": {"type": "str", "required": True},
                "pid": {"type": "int", "required": True},
                "version": {"type": "str"},
                "worker_id": {"type": "str"},
            },
        },
        "hosts": {"type": "dict", "default": {}},
        "left_out": {
            "type": "list", "elements": "dict", "default": [],
            "options": {
                "host": {"type": "str", "required": True},
                "name": {"type": "str", "required": True},
                "declared_in": {"type": "str"},
            },
        },
        "require": {"type": "str", "default": "none",
                    "choices": ["none", "accounted", "exactly"]},
        "wait_for_heartbeats": {"type": "bool", "default": False},
        "timeout": {"type": "int", "default": 10},
    }


def read_registry(params: dict[str, Any]) -> tuple[list[Seen], float]:
    # A wait outlasts a Coordinator restart (an operator's, or systemd's after a crash).
    restart_deadline = (time.monotonic() + params["timeout"]
                        if params["wait_for_heartbeats"] else None)
    return parse_registry(call(params, "GET", "/workers", RegistryError,
                               restart_deadline=restart_deadline), params["kind"])


def run(params: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """(the failure or None, the results), reading until the registry is as required."""
    expected = [Expected(e["host"], e["pid"], e.get("version"), e.get("worker_id"))
                for e in params["expected"]]
    left_out = [LeftOut(h["host"], h["name"], h.get("declared_in"))
                for h in params["left_out"]]
    kind, hosts, require = params["kind"], params["hosts"], params["require"]
    started = time.monotonic()
    seen, ttl = read_registry(params)
    deadline = started + (ttl + 2 if params["wait_for_heartbeats"] else 0)
    while True:
        failure = verdict(seen, expected, require, kind, hosts, left_out)
        unaccounted, _missing = compare(seen, expected, left_out)
        # A worker nobody runs that heartbeats again is no stale entry: waiting changes nothing.
        certain = heard_since(unaccounted, time.monotonic() - started)
        if failure is None or time.monotonic() >= deadline or certain:
            break
        time.sleep(READ_INTERVAL)
        seen, ttl = read_registry(params)
    unaccounted, missing = compare(seen, expected, left_out)
    serving = describe_serving(seen, kind, hosts, left_out)
    return failure, {
        "serving": serving,
        "workers": [s.as_dict() for s in seen],
        "unaccounted": [s.as_dict() for s in unaccounted],
        "left_out": [s.as_dict() for s in seen if declared_left_out(s, left_out)],
        "missing": [{"host": e.host, "pid": e.pid, "version": e.version,
                     "worker_id": e.worker_id} for e in missing],
        "heartbeat_ttl": ttl,
    }


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    try:
        failure, result = run(module.params)
    except RegistryError as exc:
        module.fail_json(msg=str(exc), changed=False)
    if failure is not None:
        module.fail_json(msg=failure, changed=False, **result)
    module.exit_json(changed=False, msg=result["serving"], **result)


if __name__ == "__main__":
    main()
