#!/usr/bin/env python3
"""Fault injection: run mixed tasks through a real cluster while killing parts of it, then
check every task like a queue checker (lost, duplicated, failed with a reason, done).

It starts a throwaway PostgreSQL and Redis, the SearXNG and Ollama stand-ins with realistic
latencies, the Coordinator, inference workers and web workers (each under a supervisor that
restarts it after a delay, as systemd's Restart=on-failure would). While the tasks run it
kills a random worker with SIGKILL every few seconds, starts a duplicate of a running worker
id, restarts Redis with its data wiped, restarts PostgreSQL, and makes Ollama and then
SearXNG fail for a while. After a bounded drain it checks the table; docs/faults.md explains
the checks. The figures in docs/faults.md come from:

    .venv/bin/python bench/faults.py --tasks 1000 --duration 60 --seed 1

Exit status 0 on PASS, 1 on FAIL.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg2
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.faults_cluster import (  # noqa: E402
    MODEL,
    WorkerSlot,
    coordinator,
    standin,
)
from lab.processes import Process, Standin  # noqa: E402
from lab.throwaway import ThrowawayPostgres, ThrowawayRedis, wait_until  # noqa: E402

INFERENCE_TYPES = ("generate", "chat", "summarize")
FAULTS = ("kill", "duplicate", "redis", "postgres", "ollama", "searxng")
# When each one-off fault happens, as a fraction of the run.
SCHEDULE = {"duplicate": 0.15, "redis": 0.3, "postgres": 0.45, "ollama": 0.6, "searxng": 0.75}

# Every committed write that ends a task, or changes a task that had ended, leaves one row.
# Two rows for one task are two results; a row whose old status is final is a finished task
# moved on again. The trigger runs in the writer's transaction, so a write that rolled back
# (a worker killed before COMMIT, PostgreSQL restarted under it) leaves nothing.
AUDIT_SQL = """
CREATE TABLE fault_audit (task_id uuid, old_status text, new_status text, claim uuid,
                          worker_id text, at timestamptz DEFAULT clock_timestamp());
GRANT SELECT ON fault_audit TO coordinator;
CREATE FUNCTION fault_audit() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
  INSERT INTO fault_audit (task_id, old_status, new_status, claim, worker_id)
  VALUES (NEW.id, OLD.status, NEW.status, NEW.claim, NEW.worker_id);
  RETURN NULL;
END $$;
CREATE TRIGGER fault_audit AFTER UPDATE ON tasks FOR EACH ROW
  WHEN (OLD.status IN ('done', 'failed') OR NEW.status IN ('done', 'failed'))
  EXECUTE FUNCTION fault_audit();
"""

REAPER_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*?"
                         r"(re-dispatched|failed) task ([0-9a-f-]{36})")


@dataclass
class Options:
    tasks: int = 1000
    duration: float = 60.0
    seed: int = 1
    ttl: float = 3.0
    infer_workers: int = 3
    web_workers: int = 2
    kill_every: float = 4.0
    restart_delay: tuple[float, float] = (1.0, 9.0)  # 1 s to 3 TTLs
    outage: float = 5.0
    drain: float = 120.0
    faults: tuple[str, ...] = FAULTS
    logdir: Path | None = None

    @property
    def latency_limit(self) -> float:
        # Two TTLs, the design's bound, plus one Reaper pass (TTL/3) of margin.
        return 2 * self.ttl + self.ttl / 3


@dataclass
class Kill:
    slot: WorkerSlot
    at: float
    tasks: list[str]  # inference tasks running on or queued for the worker when it died


@dataclass
class Report:
    counts: Counter[str] = field(default_factory=Counter)
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    late: list[str] = field(default_factory=list)
    recovered_by_restart: int = 0
    fallbacks: int = 0
    kill_lines: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    kills: Counter[str] = field(default_factory=Counter)
    executions: Counter[int] = field(default_factory=Counter)

    @property
    def passed(self) -> bool:
        return not (self.lost or self.duplicated or self.unreadable or self.late
                    or self.problems)


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def retry_db(dsn: str, action: Callable[[Any], Any], timeout: float = 30) -> Any:
    """Run `action(cursor)`, retrying while PostgreSQL restarts."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg2.connect(dsn, connect_timeout=3) as conn, conn.cursor() as cur:
                return action(cur)
        except psycopg2.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


class Run:
    def __init__(self, opts: Options, pg: ThrowawayPostgres, rds: ThrowawayRedis,
                 logdir: Path) -> None:
        self.opts = opts
        self.pg = pg
        self.rds = rds
        self.logdir = logdir
        self.rng = random.Random(opts.seed)
        self.acked: dict[str, str] = {}
        self.acked_lock = threading.Lock()
        self.kills: list[Kill] = []
        self.timers: list[threading.Timer] = []  # the ends of the stand-in outages
        self.report = Report()
        self.searxng = standin("lab.standins.searxng", logdir, latency=0.05,
                               json_enabled=True)
        self.ollama = standin("lab.standins.ollama", logdir, latency=0.15, models=[MODEL],
                              fail_generate_only=True)
        self.coordinator = coordinator(pg, rds, logdir, opts.ttl, web_deadline=4 * opts.ttl)
        pg.psql(AUDIT_SQL)
        self.slots = [self.slot(f"infer-{i}", "worker_infer.py")
                      for i in range(1, opts.infer_workers + 1)]
        self.slots += [self.slot(f"web-{i}", "worker_web.py")
                       for i in range(1, opts.web_workers + 1)]

    def slot(self, worker_id: str, script: str) -> WorkerSlot:
        env = {
            "PATH": os.environ["PATH"], "REDIS_HOST": "127.0.0.1",
            "REDIS_PORT": str(self.rds.port), "REDIS_PASSWORD": self.rds.password,
            "PG_DSN": self.pg.dsn, "COORDINATOR_URL": self.coordinator.url,
            "OLLAMA_HOST": self.ollama.url, "OLLAMA_MODEL": MODEL,
            "SEARXNG_URL": self.searxng.url, "WORKER_ID": worker_id,
            "WORKER_HOST": "127.0.0.1", "SHUTDOWN_TIMEOUT": "10",
            "OLLAMA_TIMEOUT": "20", "SEARXNG_TIMEOUT": "10",
        }
        if script == "worker_infer.py":
            del env["SEARXNG_URL"]
        return WorkerSlot(worker_id, script, env, self.logdir, self.opts.restart_delay,
                          random.Random(self.rng.random()))

    # -- load ------------------------------------------------------------------------------
    def submit(self, index: int, task_type: str, start: float) -> None:
        # An even rate over the first 80 % of the run, so faults also hit a busy cluster.
        time.sleep(max(0.0, start + index * 0.8 * self.opts.duration / self.opts.tasks
                       - time.time()))
        body = {"prompt": f"fault run {self.opts.seed} task {index}: what is new in "
                          f"{['rust', 'postgres', 'redis', 'python'][index % 4]}?",
                "task_type": task_type}
        deadline = time.monotonic() + 120
        while True:
            try:
                response = requests.post(f"{self.coordinator.url}/route", json=body,
                                         timeout=10)
                if response.status_code == 201:
                    with self.acked_lock:
                        self.acked[response.json()["task_id"]] = task_type
                    return
            except requests.RequestException:
                pass
            # A 503 (PostgreSQL restarting) or no answer: a client would try again.
            if time.monotonic() > deadline:
                self.report.problems.append(f"task {index} was never accepted by /route")
                return
            time.sleep(0.3)

    # -- faults ----------------------------------------------------------------------------
    def note(self, text: str) -> None:
        self.report.faults.append(f"{time.strftime('%H:%M:%S')} {text}")
        log(text)

    def kill_one(self) -> None:
        slot = self.rng.choice(self.slots)
        at = slot.kill()
        if at is None:
            return
        self.report.kills[slot.kind] += 1
        tasks: list[str] = []
        if slot.kind == "inference":
            queue = f"tasks:cpu:{slot.worker_id}"
            tasks = retry_db(self.pg.dsn, lambda cur: (cur.execute(
                "SELECT id::text FROM tasks WHERE (status = 'running' AND worker_id = %s) "
                "OR (status = 'queued' AND queue = %s)", (slot.worker_id, queue)),
                [r[0] for r in cur.fetchall()])[1])
        self.kills.append(Kill(slot, at, tasks))
        self.note(f"kill -9 {slot.worker_id} ({len(tasks)} inference task(s) on it)")

    def duplicate(self) -> None:
        slot = next((s for s in self.slots if (c := s.current()) and c.process.alive()
                     and "Waiting on queues" in c.process.output()), None)
        if slot is None:
            self.report.problems.append("duplicate: no running worker to copy")
            return
        slot.protected = True
        try:
            original = slot.current()
            assert original is not None
            copy: Process = slot.spawn("-duplicate")
            try:
                code = copy.proc.wait(60)
            except Exception:
                copy.proc.kill()
                code = None
            text = copy.output()
            refusal = next((line for line in text.splitlines() if "already running" in line),
                           None)
            self.note(f"duplicate of {slot.worker_id}: exit {code}, "
                      f"{refusal.split(' ', 3)[-1] if refusal else 'no refusal logged'}")
            if code != 1 or refusal is None:
                self.report.problems.append(f"duplicate of {slot.worker_id} was not refused "
                                            f"(exit {code}):\n{text[-2000:]}")
            entry = self.worker_entry(slot.worker_id)
            if entry is None or entry["pid"] != original.process.pid or entry["duplicate"]:
                self.report.problems.append(
                    f"after the duplicate, /workers shows {entry} for {slot.worker_id}; "
                    f"expected pid {original.process.pid}, not duplicate")
        finally:
            slot.protected = False

    def worker_entry(self, worker_id: str) -> dict[str, Any] | None:
        workers = requests.get(f"{self.coordinator.url}/workers", timeout=10).json()["workers"]
        return next((w for w in workers if w["worker_id"] == worker_id), None)

    def outage(self, standin: Standin, name: str) -> None:
        standin.config(fail="error")
        self.note(f"{name} fails (500) for {self.opts.outage:g}s")
        timer = threading.Timer(self.opts.outage, self.recover, (standin, name))
        timer.start()
        self.timers.append(timer)

    def recover(self, standin: Standin, name: str) -> None:
        standin.config(fail=None)
        self.note(f"{name} works again")

    def one_off(self, fault: str) -> None:
        if fault == "duplicate":
            threading.Thread(target=self.duplicate, name="duplicate").start()
        elif fault == "redis":
            self.rds.restart_wiped()
            self.note("Redis restarted with its data wiped")
        elif fault == "postgres":
            self.note("PostgreSQL restarting")
            self.pg.restart()
            self.note("PostgreSQL restarted")
        elif fault == "ollama":
            self.outage(self.ollama, "Ollama")
        elif fault == "searxng":
            self.outage(self.searxng, "SearXNG")

    # -- the run ---------------------------------------------------------------------------
    def run(self) -> Report:
        opts = self.opts
        supervisors = [threading.Thread(target=s.supervise, name=s.worker_id, daemon=True)
                       for s in self.slots]
        for thread in supervisors:
            thread.start()
        for slot in self.slots:
            wait_until(lambda s=slot: "Waiting on queues" in s.current().process.output(),
                       60, f"worker {slot.worker_id} to start")
        types = [self.rng.choice(("web_search", "web_search", *INFERENCE_TYPES))
                 for _ in range(opts.tasks)]
        start = time.time()
        log(f"{len(self.slots)} workers up; {opts.tasks} tasks over {opts.duration:g}s, "
            f"faults {', '.join(opts.faults)}")
        pool = ThreadPoolExecutor(8)
        futures = [pool.submit(self.submit, i, t, start) for i, t in enumerate(types)]
        pending = {f: start + share * opts.duration for f, share in SCHEDULE.items()
                   if f in opts.faults}
        next_kill = start + opts.kill_every
        while time.time() < start + opts.duration:
            now = time.time()
            for fault, due in list(pending.items()):
                if now >= due:
                    del pending[fault]
                    self.one_off(fault)
            if "kill" in opts.faults and now >= next_kill:
                self.kill_one()
                next_kill = now + self.rng.uniform(0.5, 1.5) * opts.kill_every
            time.sleep(0.1)
        for future in futures:
            future.result()
        pool.shutdown()
        for timer in self.timers:
            timer.join()
        for thread in [t for t in threading.enumerate() if t.name == "duplicate"]:
            thread.join()
        log(f"faults over; {len(self.acked)} tasks accepted; draining "
            f"(at most {opts.drain:g}s)")
        self.drain()
        for slot in self.slots:
            slot.stop()
        self.check()
        return self.report

    def open_tasks(self) -> int:
        return retry_db(self.pg.dsn, lambda cur: (cur.execute(
            "SELECT count(*) FROM tasks WHERE status IN ('queued', 'running')"),
            cur.fetchone()[0])[1])

    def drain(self) -> None:
        deadline = time.monotonic() + self.opts.drain
        while (left := self.open_tasks()) and time.monotonic() < deadline:
            time.sleep(1)
        log(f"drained: {left} task(s) still open")

    # -- the checker -----------------------------------------------------------------------
    def check(self) -> None:
        r = self.report
        rows = retry_db(self.pg.dsn, lambda cur: (cur.execute(
            "SELECT id::text, task_type, status, error, result, attempts, fallback FROM tasks"),
            cur.fetchall())[1])
        audit = retry_db(self.pg.dsn, lambda cur: (cur.execute(
            "SELECT task_id::text, old_status, new_status, claim::text FROM fault_audit"),
            cur.fetchall())[1])
        statuses = {row[0]: row[2] for row in rows}
        r.lost = sorted(set(self.acked) - set(statuses))  # accepted, then not in the table
        for task_id, _type, status, error, result, attempts, fallback in rows:
            r.counts[status] += 1
            r.executions[attempts] += 1
            r.fallbacks += bool(fallback)
            if status in ("queued", "running"):
                r.lost.append(task_id)
            elif status == "failed":
                if not error or "Traceback" in error or "\n" in error.strip():
                    r.unreadable.append(f"{task_id}: {error!r}")
                r.reasons[re.sub(r"[0-9a-f-]{36}|\d+(\.\d+)?", "#", error or "")[:110]] += 1
            elif not result:
                r.unreadable.append(f"{task_id}: done without a result")
        writes: dict[str, list[tuple[str, str, str]]] = {}
        for task_id, old, new, claim in audit:
            writes.setdefault(task_id, []).append((old, new, claim))
        r.duplicated = sorted(
            f"{task_id}: {w}" for task_id, w in writes.items()
            if len(w) > 1 or w[0][0] in ("done", "failed"))
        unaudited = [t for t, s in statuses.items() if s in ("done", "failed") and t not in writes]
        if unaudited:
            r.problems.append(f"{len(unaudited)} finished task(s) have no audited result "
                              f"write (the audit trigger missed them): {unaudited[:3]}")
        self.check_reaper()

    def reaper_lines(self) -> dict[str, list[float]]:
        """When the Reaper re-dispatched or failed each task, from the Coordinator's log."""
        times: dict[str, list[float]] = {}
        for line in (self.logdir / "coordinator.log").read_text(errors="replace").splitlines():
            match = REAPER_LINE.match(line)
            if match:
                at = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                times.setdefault(match[3], []).append(at)
        return times

    def check_reaper(self) -> None:
        r = self.report
        lines = self.reaper_lines()
        for kill in self.kills:
            back = kill.slot.next_start_after(kill.at)
            stayed_down = back is None or back > kill.at + 2 * self.opts.ttl
            seen = len(r.latencies)
            for task_id in kill.tasks:
                after = [at for at in lines.get(task_id, []) if at >= kill.at]
                if after:
                    latency = min(after) - kill.at
                    r.latencies.append(latency)
                    if stayed_down and latency > self.opts.latency_limit:
                        r.late.append(f"{task_id} of {kill.slot.worker_id}: {latency:.2f}s")
                elif stayed_down:
                    r.late.append(f"{task_id} of {kill.slot.worker_id}: never re-dispatched")
                else:
                    r.recovered_by_restart += 1
            mine = r.latencies[seen:]
            down = "not back" if back is None else f"back after {back - kill.at:.1f}s"
            moved = f", re-dispatched in {min(mine):.2f}-{max(mine):.2f}s" if mine else ""
            r.kill_lines.append(f"{time.strftime('%H:%M:%S', time.localtime(kill.at))} "
                                f"{kill.slot.worker_id} ({down}): {len(kill.tasks)} "
                                f"inference task(s){moved}")


def print_report(r: Report, opts: Options, elapsed: float) -> None:
    print("\n== faults ==")
    for line in r.faults:
        print(f"  {line}")
    total = sum(r.counts.values())
    print(f"\n== tasks: {total} in the table ==")
    print(f"  done {r.counts['done']} ({r.fallbacks} with the fallback answer), "
          f"failed {r.counts['failed']}, lost {len(r.lost)}, "
          f"duplicated {len(r.duplicated)}, failures without a readable reason "
          f"{len(r.unreadable)}")
    print(f"  claims per task: {dict(sorted(r.executions.items()))}")
    for reason, count in r.reasons.most_common(8):
        print(f"  failed x{count}: {reason}")
    print(f"\n== kills: {dict(r.kills)} ==")
    for line in r.kill_lines:
        print(f"  {line}")
    if r.latencies:
        ordered = sorted(r.latencies)
        print(f"  kill -> Reaper re-dispatch: n={len(ordered)}, "
              f"p50 {statistics.median(ordered):.2f}s, max {ordered[-1]:.2f}s "
              f"(limit {opts.latency_limit:.2f}s = 2 x TTL {opts.ttl:g}s + one Reaper pass)")
    print(f"  inference tasks recovered by the restarted worker itself: "
          f"{r.recovered_by_restart}")
    load = os.getloadavg()
    print(f"\nelapsed {elapsed:.0f}s, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
          f"{os.cpu_count()} CPUs")
    for title, items in (("LOST", r.lost), ("DUPLICATED", r.duplicated),
                         ("UNREADABLE FAILURE", r.unreadable), ("LATE RE-DISPATCH", r.late),
                         ("PROBLEM", r.problems)):
        for item in items[:10]:
            print(f"{title}: {item}")
    print("\nPASS" if r.passed else "\nFAIL")


def run(opts: Options) -> Report:
    logdir = opts.logdir or Path(tempfile.mkdtemp(prefix="faults-"))
    logdir.mkdir(parents=True, exist_ok=True)
    log(f"logs in {logdir}")
    pg = ThrowawayPostgres(fast=True).start()
    rds = ThrowawayRedis().start()
    run_: Run | None = None
    started = time.time()
    try:
        run_ = Run(opts, pg, rds, logdir)
        report = run_.run()
    finally:
        if run_ is not None:
            for slot in run_.slots:
                slot.stop()
            for process in (run_.coordinator.process, run_.searxng.process,
                            run_.ollama.process):
                process.stop()
        rds.destroy()
        pg.destroy()
    print_report(report, opts, time.time() - started)
    return report


def parse_args(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=1000, help="tasks to send (default 1000)")
    p.add_argument("--duration", type=float, default=60, help="seconds of load and faults")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ttl", type=float, default=3, help="the Coordinator's heartbeat TTL")
    p.add_argument("--infer-workers", type=int, default=3)
    p.add_argument("--web-workers", type=int, default=2)
    p.add_argument("--kill-every", type=float, default=4, help="mean seconds between kills")
    p.add_argument("--drain", type=float, default=120, help="longest wait for open tasks")
    p.add_argument("--faults", default=",".join(FAULTS),
                   help=f"comma-separated subset of {','.join(FAULTS)}")
    p.add_argument("--logdir", type=Path, help="keep the logs here (default: a temp dir)")
    a = p.parse_args(argv)
    faults = tuple(f for f in a.faults.split(",") if f)
    unknown = set(faults) - set(FAULTS)
    if unknown:
        p.error(f"unknown fault(s) {', '.join(sorted(unknown))}; choose from {', '.join(FAULTS)}")
    return Options(tasks=a.tasks, duration=a.duration, seed=a.seed, ttl=a.ttl,
                   infer_workers=a.infer_workers, web_workers=a.web_workers,
                   kill_every=a.kill_every, restart_delay=(1.0, 3 * a.ttl), drain=a.drain,
                   faults=faults, logdir=a.logdir)


def main(argv: list[str] | None = None) -> int:
    return 0 if run(parse_args(argv)).passed else 1


if __name__ == "__main__":
    sys.exit(main())
