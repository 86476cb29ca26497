# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure logic of the ``coordinator_workers`` module: the Coordinator's registry as a witness.

Ansible sees only the hosts it reaches and the services it manages; the Coordinator sees
every worker that heartbeats, wherever it runs. This compares the two: the workers the
registry lists alive (``GET /workers``) and the ones the service managers of the reached
hosts run (address and pid). A run limited with ``--limit`` reaches only some of the
inventory's hosts: a worker on a host it leaves out is the inventory's to judge, not a copy
nobody runs. No I/O here, so every message is unit-tested.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class RegistryError(Exception):
    """The registry could not be read or does not look like the Coordinator's."""


@dataclass(frozen=True)
class Seen:
    """A worker the registry lists alive."""

    worker_id: str
    host: str
    pid: int | None
    version: str | None
    queues: tuple[str, ...]
    seconds_since_heartbeat: float
    # As it registered them: an inference worker every model its Ollama lists, the web
    # worker the one it summarises with.
    models: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"worker_id": self.worker_id, "host": self.host, "pid": self.pid,
                "version": self.version, "queues": list(self.queues),
                "models": list(self.models),
                "seconds_since_heartbeat": self.seconds_since_heartbeat}


@dataclass(frozen=True)
class Expected:
    """A worker a service manager runs: its address (WORKER_HOST), pid and, when known, its
    worker id and the version it must have registered with."""

    host: str
    pid: int
    version: str | None = None
    worker_id: str | None = None


@dataclass(frozen=True)
class LeftOut:
    """An inventory host this run leaves out (``--limit``), whose service manager was not
    asked: its address, its inventory name and the inventory group that declares workers of
    the kind compared there (None when none does)."""

    host: str
    name: str
    declared_in: str | None = None


def parse_registry(body: Any, kind: str | None) -> tuple[list[Seen], float]:
    """The alive workers (of ``kind`` when given) and the heartbeat TTL, from GET /workers."""
    if not isinstance(body, Mapping) or not isinstance(body.get("workers"), list):
        raise RegistryError("GET /workers did not answer {\"workers\": [...]}: check "
                            "coordinator_url points at the Coordinator API")
    seen = []
    for worker in body["workers"]:
        if not isinstance(worker, Mapping) or not worker.get("alive"):
            continue
        if kind is not None and worker.get("kind") != kind:
            continue
        seen.append(Seen(
            worker_id=str(worker.get("worker_id")), host=str(worker.get("host")),
            pid=worker.get("pid"), version=worker.get("version"),
            queues=tuple(worker.get("queues") or ()),
            seconds_since_heartbeat=float(worker.get("seconds_since_heartbeat") or 0.0),
            models=tuple(worker.get("models") or ())))
    return sorted(seen, key=lambda w: w.worker_id), float(body.get("heartbeat_ttl") or 0.0)


def matches(seen: Seen, expected: Expected) -> bool:
    return (seen.host == expected.host and seen.pid == expected.pid
            and (expected.version is None or seen.version == expected.version)
            and (expected.worker_id is None or seen.worker_id == expected.worker_id))


def declared_left_out(seen: Seen, left_out: Sequence[LeftOut]) -> LeftOut | None:
    """The left-out host ``seen`` runs on when the inventory declares its kind there."""
    return next((h for h in left_out if h.host == seen.host and h.declared_in), None)


def compare(seen: Sequence[Seen], expected: Sequence[Expected],
            left_out: Sequence[LeftOut] = ()) -> tuple[list[Seen], list[Expected]]:
    """(alive workers no expected one accounts for, expected ones the registry lacks). A
    worker on a left-out host that the inventory declares it on is neither: its service
    manager was not asked, and the inventory says it belongs there."""
    unaccounted = [s for s in seen if not any(matches(s, e) for e in expected)
                   and declared_left_out(s, left_out) is None]
    missing = [e for e in expected if not any(matches(s, e) for s in seen)]
    return unaccounted, missing


def _names(hosts: Mapping[str, str], left_out: Sequence[LeftOut]) -> dict[str, str]:
    """Address -> inventory name, of the reached hosts and the left-out ones."""
    return {**{h.host: h.name for h in left_out}, **hosts}


def _host(address: str, hosts: Mapping[str, str]) -> str:
    name = hosts.get(address)
    return f"{name} ({address})" if name and name != address else address


def describe(seen: Seen, hosts: Mapping[str, str]) -> str:
    """``web-worker-x on lab-worker-slow (10.89.20.42), pid 812, v2.1, heartbeat 2.0 s ago``."""
    version = f", v{seen.version}" if seen.version else ""
    return (f"{seen.worker_id} on {_host(seen.host, hosts)}, pid {seen.pid}{version}, "
            f"heartbeat {seen.seconds_since_heartbeat:.1f} s ago")


def describe_serving(seen: Sequence[Seen], kind: str | None, hosts: Mapping[str, str],
                     left_out: Sequence[LeftOut] = ()) -> str:
    """What serves the queues now, by the registry: one line. A worker on a left-out host
    the inventory declares it on says so."""
    what = f"{kind} worker" if kind else "worker"
    if not seen:
        return f"the Coordinator's registry lists no alive {what}"
    queues = sorted({q for s in seen for q in s.queues})
    serves = f" serving {', '.join(queues)}" if queues else ""
    names = _names(hosts, left_out)

    def one(worker: Seen) -> str:
        declared = declared_left_out(worker, left_out)
        note = (f" (declared in {declared.declared_in}, left out of this run by --limit)"
                if declared else "")
        return describe(worker, names) + note

    return (f"the Coordinator's registry lists {len(seen)} alive {what}"
            f"{'s' if len(seen) > 1 else ''}{serves}: " + "; ".join(one(s) for s in seen))


def describe_unaccounted(seen: Seen, hosts: Mapping[str, str],
                         left_out: Sequence[LeftOut] = (), kind: str | None = None) -> str:
    """Why this alive worker is unexpected, and how to stop it."""
    names = _names(hosts, left_out)
    undeclared = next((h for h in left_out if h.host == seen.host), None)
    if seen.host in hosts:
        where = ("no service manager runs it there (a copy started by hand, outside "
                 "systemd/launchd, or one its service manager lost)")
    elif undeclared is not None:
        # Its service manager was not asked: a worker the inventory moved away from there
        # looks the same, and only a run that reaches the host can tell.
        where = (f"{undeclared.name} is left out of this run by --limit and the inventory "
                 f"declares no {kind + ' ' if kind else ''}worker there (if the inventory "
                 "moved it away from there, run without --limit)")
    else:
        where = "a host outside the inventory"
    return (f"{describe(seen, names)}: {where}; stop it: `kill {seen.pid}` on "
            f"{_host(seen.host, names)}")


def describe_missing(expected: Expected, hosts: Mapping[str, str], kind: str | None) -> str:
    name = f" {expected.worker_id}" if expected.worker_id else ""
    version = f" with version {expected.version}" if expected.version else ""
    return (f"the {kind + ' ' if kind else ''}worker{name} pid {expected.pid} on "
            f"{_host(expected.host, hosts)} is not registered alive{version}")


def verdict(seen: Sequence[Seen], expected: Sequence[Expected], require: str,
            kind: str | None, hosts: Mapping[str, str],
            left_out: Sequence[LeftOut] = ()) -> str | None:
    """None when the registry is as ``require`` wants it, else the one-line failure.

    ``accounted``: every alive worker is one of ``expected`` (or on a left-out host the
    inventory declares it on); ``exactly``: and every expected one is alive too; ``none``:
    anything goes."""
    unaccounted, missing = compare(seen, expected, left_out)
    problems = [describe_unaccounted(s, hosts, left_out, kind) for s in unaccounted]
    if require == "exactly":
        problems += [describe_missing(e, hosts, kind) for e in missing]
    if require == "none" or not problems:
        return None
    return "; ".join(problems)


def heard_since(seen: Iterable[Seen], waited: float) -> list[Seen]:
    """The workers whose last heartbeat came after the first read, ``waited`` seconds ago:
    alive for certain, not a stale entry of a process that was killed."""
    return [s for s in seen if s.seconds_since_heartbeat < waited]
