"""Prometheus metrics (text format at GET /metrics).

Each app has its own ``CollectorRegistry`` (several apps can live in one test process). Gauges
that describe the cluster (tasks by type and status, the oldest queued task, queue depths,
workers alive, dead, duplicated, failing their probes) are refreshed from PostgreSQL and
Redis when /metrics is scraped, the certificates' expiry from their files; counters and
histograms count what this instance saw (``task_events`` notifications reach every instance).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from coordinator_contract import TASK_TYPES, WORKER_KINDS
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

disable_created_metrics()  # no *_created series: less noise, smaller scrapes

CONTENT_TYPE = CONTENT_TYPE_LATEST

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
                    300, 600, 1800)
_ROUTE_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._declare_snapshots(self.registry)
        self._declare_events(self.registry)

    def _declare_snapshots(self, r: CollectorRegistry) -> None:
        """The gauges set from the backends at each scrape (what is true now)."""
        self.tasks = Gauge(
            "coordinator_tasks", "Unfinished tasks in PostgreSQL by type and status (queued, "
            "running); finished ones: coordinator_tasks_finished_total",
            ["task_type", "status"], registry=r)
        self.tasks_waiting = Gauge(
            "coordinator_tasks_waiting",
            "Queued inference tasks waiting for an alive worker (queue null)", registry=r)
        self.queue_depth = Gauge(
            "coordinator_queue_depth", "Task ids in each Redis queue (LLEN)", ["queue"],
            registry=r)
        self.queue_in_flight = Gauge(
            "coordinator_queue_in_flight", "Running tasks taken from each queue", ["queue"],
            registry=r)
        self.workers_alive = Gauge(
            "coordinator_workers_alive", "Workers with a fresh heartbeat, by kind", ["kind"],
            registry=r)
        self.workers_drained = Gauge(
            "coordinator_workers_drained",
            "Alive workers an operator drained (given no new task), by kind", ["kind"],
            registry=r)
        self.workers_dead = Gauge(
            "coordinator_workers_dead",
            "Registered workers that did not say goodbye and whose heartbeat expired, by kind",
            ["kind"], registry=r)
        self.workers_unhealthy = Gauge(
            "coordinator_workers_unhealthy",
            "Alive workers whose last probe failed or was not done in time "
            "(COORDINATOR_PROBE_TIMEOUT), by kind", ["kind"], registry=r)
        self.oldest_queued = Gauge(
            "coordinator_oldest_queued_task_seconds",
            "Seconds the oldest queued task of each type has waited since it was routed "
            "(0: none queued)", ["task_type"], registry=r)
        self.certificate_expiry = Gauge(
            "coordinator_certificate_expiry_timestamp_seconds",
            "When a certificate the Coordinator uses expires (Unix time): its serving one and "
            "the CA one it trusts, from the files its configuration names",
            ["certificate", "file"], registry=r)
        self.last_backup = Gauge(
            "coordinator_backup_last_success_timestamp_seconds",
            "When the newest dump of the Coordinator's database that the postgresql_access "
            "role's scheduled backup made finished, as it recorded it (Unix time; 0: none yet)",
            registry=r)
        self.workers_duplicate = Gauge(
            "coordinator_workers_duplicate",
            "Worker ids with two live processes (flagged by the Reaper)", registry=r)
        self.backend_up = Gauge(
            "coordinator_backend_up", "1 when the backend answered the last check",
            ["backend"], registry=r)

    def _declare_events(self, r: CollectorRegistry) -> None:
        """The counters and histograms of what happened, since this instance started."""
        self.routed = Counter(
            "coordinator_tasks_routed", "Tasks accepted by POST /route on this instance",
            ["task_type"], registry=r)
        self.route_seconds = Histogram(
            "coordinator_route_seconds", "Time to accept a POST /route (insert + push)",
            buckets=_ROUTE_BUCKETS, registry=r)
        self.finished = Counter(
            "coordinator_tasks_finished",
            "Tasks that reached done or failed (cluster-wide, seen since this instance started)",
            ["task_type", "status"], registry=r)
        self.fallbacks = Counter(
            "coordinator_task_fallbacks",
            "Tasks done with a fallback answer, not the model's (the search results when "
            "summarisation failed, or why there are none when SearXNG's engines failed), "
            "cluster-wide, seen since this instance started", ["task_type"], registry=r)
        # Every task type at 0 from the start: a rate() of fallbacks over finished tasks has
        # a series to read before the first fallback.
        for task_type in TASK_TYPES:
            self.fallbacks.labels(task_type)
        self.dispatch_latency = Histogram(
            "coordinator_dispatch_latency_seconds",
            "From POST /route to a worker's claim of the task (queue wait)", ["task_type"],
            buckets=_LATENCY_BUCKETS, registry=r)
        self.task_seconds = Histogram(
            "coordinator_task_seconds", "From POST /route to done or failed", ["task_type"],
            buckets=_LATENCY_BUCKETS, registry=r)
        self.redispatches = Counter(
            "coordinator_redispatches",
            "Inference tasks moved off a worker by the Reaper (reason: worker_dead, stuck, "
            "queue_gone)", ["reason"], registry=r)
        self.dispatched_waiting = Counter(
            "coordinator_waiting_dispatched",
            "Waiting inference tasks dispatched once a worker was alive", registry=r)
        self.reaper_failed = Counter(
            "coordinator_reaper_failed_tasks",
            "Tasks the Reaper failed (reason: attempts, worker_dead)", ["reason"], registry=r)
        self.repushes = Counter(
            "coordinator_repushes", "Queued task ids pushed again after they went missing "
            "from Redis", registry=r)
        self.duplicates_detected = Counter(
            "coordinator_duplicate_workers_detected",
            "Times the Reaper found two live processes under one worker id", registry=r)
        self.reaper_passes = Counter(
            "coordinator_reaper_passes",
            "Reaper passes (acted=false when another instance held the lock)", ["acted"],
            registry=r)
        self.reaper_errors = Counter(
            "coordinator_reaper_errors", "Reaper passes that failed", registry=r)

    # -- snapshots from the backends ----------------------------------------------------------
    def set_task_counts(self, rows: Iterable[tuple[str, str, int]], waiting: int,
                        oldest: Mapping[str, float]) -> None:
        """Counts by type and status, and the oldest queued task's age by type (every type
        has both, at 0 when it has no task: an alert's comparison has a series to read)."""
        self.tasks.clear()
        for task_type in TASK_TYPES:
            for status in ("queued", "running"):
                self.tasks.labels(task_type, status).set(0)
            self.oldest_queued.labels(task_type).set(oldest.get(task_type, 0.0))
        for task_type, status, count in rows:
            self.tasks.labels(task_type, status).set(count)
        self.tasks_waiting.set(waiting)

    def set_queues(self, depth: Mapping[str, int], in_flight: Mapping[str, int]) -> None:
        """Both gauges for every queue ``depth`` names, 0 in flight where nothing runs (as
        GET /queues reports it)."""
        self.queue_depth.clear()
        self.queue_in_flight.clear()
        for queue, value in depth.items():
            self.queue_depth.labels(queue).set(value)
            self.queue_in_flight.labels(queue).set(in_flight.get(queue, 0))

    def set_workers(self, rows: Iterable[tuple[str, int, int, int, int, int]]) -> None:
        """From SQL.WORKERS_BY_KIND's rows: (kind, alive, drained, duplicate, dead,
        unhealthy)."""
        by_kind = {kind: counts for kind, *counts in rows}
        for kind in WORKER_KINDS:
            alive, drained, _, dead, unhealthy = by_kind.get(kind, (0, 0, 0, 0, 0))
            self.workers_alive.labels(kind).set(alive)
            self.workers_drained.labels(kind).set(drained)
            self.workers_dead.labels(kind).set(dead)
            self.workers_unhealthy.labels(kind).set(unhealthy)
        self.workers_duplicate.set(sum(counts[2] for counts in by_kind.values()))

    def set_certificates(self, expiries: Mapping[tuple[str, str], float]) -> None:
        """(certificate, file) -> its expiry; a certificate not read has no series."""
        self.certificate_expiry.clear()
        for (name, path), expires in expiries.items():
            self.certificate_expiry.labels(name, path).set(expires)

    def observe_event(self, task_type: str, status: str, fallback: bool,
                      dispatch: float | None, total: float | None) -> None:
        self.finished.labels(task_type, status).inc()
        if fallback:
            self.fallbacks.labels(task_type).inc()
        if dispatch is not None and dispatch >= 0:
            self.dispatch_latency.labels(task_type).observe(dispatch)
        if total is not None and total >= 0:
            self.task_seconds.labels(task_type).observe(total)

    def render(self) -> bytes:
        return generate_latest(self.registry)
