"""This instance's in-memory view of the workers, for routing without a query per request.

Refreshed from PostgreSQL on every Reaper tick (every instance, lock or not) and updated at
once by registrations and heartbeats this instance handles. Liveness is kept as a monotonic
deadline computed from the database clock, so coordinator and database clocks may differ.
Load (queue depth + running, by queue) is measured at refresh and counted up by each dispatch
in between, so consecutive tasks spread over equally loaded workers.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .routing import Candidate, choose_worker


@dataclass(frozen=True)
class KnownWorker:
    worker_id: str
    host: str
    kind: str
    queue: str | None  # the per-worker queue of an inference worker
    models: tuple[str, ...]
    expires: float  # time.monotonic() after which it counts as dead
    draining: bool = False  # drained by an operator: alive, but given nothing new
    healthy: bool = True  # its last probe did not fail

    def alive(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) < self.expires

    def takes(self, now: float | None = None) -> bool:
        """Whether routing may send it a task: alive and not drained."""
        return self.alive(now) and not self.draining

    def candidate(self, now: float) -> Candidate | None:
        if self.kind != "inference" or self.queue is None:
            return None
        return Candidate(self.worker_id, self.queue, self.models, self.takes(now),
                         self.healthy)


class Registry:
    def __init__(self) -> None:
        self.workers: dict[str, KnownWorker] = {}
        self.load: dict[str, int] = {}

    def replace(self, workers: Iterable[KnownWorker], load: Mapping[str, int]) -> None:
        self.workers = {w.worker_id: w for w in workers}
        self.load = dict(load)

    def put(self, worker: KnownWorker) -> None:
        self.workers[worker.worker_id] = worker

    def get(self, worker_id: str) -> KnownWorker | None:
        return self.workers.get(worker_id)

    def candidates(self, now: float | None = None) -> list[Candidate]:
        now = time.monotonic() if now is None else now
        found = (w.candidate(now) for w in self.workers.values())
        return [c for c in found if c is not None]

    def pick(self, model: str | None) -> Candidate | None:
        """The least loaded alive inference worker serving ``model``; counts the dispatch."""
        chosen = choose_worker(self.candidates(), model, self.load)
        if chosen is not None:
            self.dispatched(chosen.queue)
        return chosen

    def dispatched(self, queue: str, count: int = 1) -> None:
        self.load[queue] = self.load.get(queue, 0) + count
