# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure logic of the ``coordinator_drain`` module: draining a worker through the Coordinator.

A drained worker finishes what it holds and is sent nothing new; the Coordinator keeps the
state in PostgreSQL (``workers.drain_requested_at``) and lists it in ``GET /workers`` as
``state``: ``draining`` while the worker still holds a task, ``drained`` once it reported
holding none. No I/O here, so every message is unit-tested.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

WANTED = ("drained", "undrained")
#: States in which a drained worker holds no task: it said so, or it no longer runs.
SETTLED = frozenset(("drained", "stopped", "dead"))


class DrainError(Exception):
    """The Coordinator could not be asked, or does not know the worker."""


def find_worker(body: Any, worker_id: str) -> dict[str, Any] | None:
    """The worker's record in a GET /workers answer, or None."""
    if not isinstance(body, Mapping) or not isinstance(body.get("workers"), list):
        raise DrainError("GET /workers did not answer {\"workers\": [...]}: check "
                         "coordinator_url points at the Coordinator API")
    for worker in body["workers"]:
        if isinstance(worker, Mapping) and worker.get("worker_id") == worker_id:
            if "state" not in worker:
                raise DrainError("the Coordinator lists workers without a 'state': it "
                                 "cannot drain; upgrade it (site.yml) first")
            return dict(worker)
    return None


def is_drained(worker: Mapping[str, Any]) -> bool:
    """Whether the worker is drained (or being drained) now."""
    return worker.get("drain_requested_at") is not None


def needs_change(worker: Mapping[str, Any], wanted: str) -> bool:
    return is_drained(worker) != (wanted == "drained")


def settled(worker: Mapping[str, Any], wanted: str) -> bool:
    """Whether the worker is as wanted: drained and holding nothing, or undrained."""
    if wanted == "undrained":
        return not is_drained(worker)
    return is_drained(worker) and worker.get("state") in SETTLED


def describe(worker: Mapping[str, Any]) -> str:
    """``web-worker-x on 10.89.20.42 (drained, 0 in flight)``."""
    return (f"{worker.get('worker_id')} on {worker.get('host')} ({worker.get('state')}, "
            f"{worker.get('in_flight', 0)} in flight)")


def describe_absent(worker_id: str, url: str, wanted: str) -> str:
    return (f"worker {worker_id} is not registered with the Coordinator at {url}: it cannot "
            f"be {wanted}; check worker_id (GET /workers lists the workers), or set "
            "allow_absent")


def describe_timeout(worker: Mapping[str, Any], waited: float) -> str:
    return (f"{describe(worker)} still holds a task after {waited:.0f} s of draining: it stays "
            "drained and finishes it; wait longer (timeout) or undrain it (state=undrained)")


def describe_result(worker: Mapping[str, Any] | None, worker_id: str, changed: bool,
                    wanted: str, check_mode: bool) -> str:
    if worker is None:
        return f"worker {worker_id} is not registered: nothing to do"
    if not changed:
        return f"{describe(worker)}: {wanted} already"
    return f"{describe(worker)}: {'would be ' if check_mode else ''}{wanted} now"
