#!/usr/bin/python
# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: drain or undrain a worker through the Coordinator API."""


from __future__ import annotations

DOCUMENTATION = r"""
---
module: coordinator_drain
short_description: Drain a worker of the Coordinator (it finishes its task, gets no new one)
description:
  - Drains a worker with C(POST /workers/{id}/drain) of the Coordinator API, or undrains it
    with C(.../undrain). A drained worker finishes the task it holds and takes no new one
    within a heartbeat interval; routing sends it nothing, and the tasks waiting in its own
    queue go to another worker serving the model. The state is kept in PostgreSQL, so it
    survives restarts of the Coordinator and of the worker.
  - With O(wait), a drain returns once the worker holds no task (C(GET /workers) lists it
    C(drained), or it stopped), or fails after O(timeout) seconds saying what it still holds;
    the worker stays drained either way.
  - A worker already in the wanted state is left as it is (C(changed=false)), so running it
    again changes nothing.
version_added: "0.3.0"
author:
  - Coordinator cluster contributors (@coordinator-cluster)
options:
  worker_id:
    description:
      - The worker id, as C(GET /workers) lists it (the worker's C(WORKER_ID)).
    type: str
    required: true
  state:
    description:
      - V(drained) drains the worker; V(undrained) lets it take tasks again.
    type: str
    default: drained
    choices: [drained, undrained]
  wait:
    description:
      - For V(drained), wait until the worker holds no task.
    type: bool
    default: true
  timeout:
    description:
      - Seconds to wait for a drain (O(wait)), and seconds each HTTP request may take.
      - A Coordinator that restarts during the wait (it refuses the connection or answers
        503) is asked again every second within it.
    type: int
    default: 60
  allow_absent:
    description:
      - Report a worker the Coordinator does not know as RV(state=absent) instead of failing.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: It reads the worker's state and reports whether it would change it.
  diff_mode:
    support: full
notes:
  - Each request carries a fresh C(Idempotency-Key), so a request retried after a lost answer
    has one effect.
extends_documentation_fragment:
  - coordinator_api
  - module_attributes
"""

EXAMPLES = r"""
- name: Drain the worker of a host before its maintenance
  coordinator_drain:
    coordinator_url: https://192.168.0.40:8000
    coordinator_token: "{{ vault_coordinator_token }}"
    ca_path: /etc/coordinator-cluster/tls/ca.crt
    worker_id: infer-macbookair
    timeout: 300

- name: Let it take tasks again
  coordinator_drain:
    coordinator_url: https://192.168.0.40:8000
    coordinator_token: "{{ vault_coordinator_token }}"
    ca_path: /etc/coordinator-cluster/tls/ca.crt
    worker_id: infer-macbookair
    state: undrained
"""

RETURN = r"""
msg:
  description: One line saying what was done, or the failure.
  returned: always
  type: str
  sample: "infer-macbookair on 192.168.0.43 (drained, 0 in flight): drained now"
state:
  description: The worker's state as C(GET /workers) lists it at the end (C(alive), C(draining),
    C(drained), C(dead), C(stopped), C(duplicate)), or C(absent).
  returned: always
  type: str
  sample: drained
worker:
  description: The worker's record from C(GET /workers) at the end.
  returned: when the worker is registered
  type: dict
waited:
  description: Seconds spent waiting for the worker to hold no task.
  returned: always
  type: float
  sample: 3.1
timed_out:
  description: The drain failed only because the worker still held a task after O(timeout)
    (it stays drained); a play may go on, e.g. to stop the worker within its own bound.
  returned: always
  type: bool
  sample: false
"""

import time
from typing import Any
from urllib.parse import quote

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.coordinator_api import (
    READ_INTERVAL,
    api_argument_spec,
    call,
    coordinator_urls,
)
from ansible.module_utils.coordinator_drain import (
    WANTED,
    DrainError,
    describe_absent,
    describe_result,
    describe_timeout,
    find_worker,
    is_drained,
    needs_change,
    settled,
)


def argument_spec() -> dict[str, Any]:
    return {
        **api_argument_spec(),
        "worker_id": {"type": "str", "required": True},
        "state": {"type": "str", "default": "drained", "choices": list(WANTED)},
        "wait": {"type": "bool", "default": True},
        "timeout": {"type": "int", "default": 60},
        "allow_absent": {"type": "bool", "default": False},
    }


def request(params: dict[str, Any], method: str, path: str,
            restart_deadline: float | None = None) -> Any:
    # timeout bounds the wait; each request gets at most 30 s of it.
    return call(params, method, path, DrainError, timeout=min(params["timeout"], 30),
                restart_deadline=restart_deadline)


def read(params: dict[str, Any], restart_deadline: float | None = None) -> dict[str, Any] | None:
    return find_worker(request(params, "GET", "/workers", restart_deadline),
                       params["worker_id"])


def run(params: dict[str, Any], check_mode: bool) -> tuple[str | None, dict[str, Any]]:
    """(the failure or None, the results)."""
    wanted, worker_id = params["state"], params["worker_id"]
    worker = read(params)
    if worker is None:
        if not params["allow_absent"]:
            return describe_absent(worker_id, ", ".join(coordinator_urls(params)), wanted), {
                "state": "absent", "waited": 0.0, "changed": False, "timed_out": False}
        return None, {"state": "absent", "waited": 0.0, "changed": False, "timed_out": False,
                      "msg": describe_result(None, worker_id, False, wanted, check_mode)}
    changed = needs_change(worker, wanted)
    diff = {"before": {"drained": is_drained(worker)},
            "after": {"drained": wanted == "drained"}}
    if changed and not check_mode:
        action = "drain" if wanted == "drained" else "undrain"
        request(params, "POST", f"/workers/{quote(worker_id, safe='')}/{action}")
        worker = read(params) or worker
    started = time.monotonic()
    if wanted == "drained" and params["wait"] and not check_mode:
        while not settled(worker, wanted):
            if time.monotonic() - started >= params["timeout"]:
                return describe_timeout(worker, time.monotonic() - started), {
                    "state": worker.get("state"), "worker": worker, "changed": changed,
                    "waited": round(time.monotonic() - started, 1), "diff": diff,
                    "timed_out": True}
            time.sleep(READ_INTERVAL)
            # A Coordinator restarting while the worker drains is read again within timeout.
            worker = read(params, started + params["timeout"]) or worker
    return None, {"state": worker.get("state"), "worker": worker, "changed": changed,
                  "waited": round(time.monotonic() - started, 1), "diff": diff,
                  "timed_out": False,
                  "msg": describe_result(worker, worker_id, changed, wanted, check_mode)}


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    if module.params["timeout"] < 1:
        module.fail_json(msg=f"timeout={module.params['timeout']}: use at least 1 second")
    try:
        failure, result = run(module.params, module.check_mode)
    except DrainError as exc:
        module.fail_json(msg=str(exc), changed=False, timed_out=False)
    if not module._diff:
        result.pop("diff", None)
    if failure is not None:
        module.fail_json(msg=failure, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
