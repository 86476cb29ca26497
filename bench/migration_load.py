#!/usr/bin/env python3
"""Benchmark moving the web worker with migrate-web.yml while web searches keep arriving.

On the container lab (inventory/lab: web worker on lab-worker-slow), web_search tasks are
routed through the Coordinator at a steady rate before, during and after `migrate-web.yml`
moves the worker to lab-macbookair. Meanwhile the length of `tasks:web` is read every
100 ms: a task that sits in the queue untaken for a long time is a time without a consumer
(an idle worker takes a task within milliseconds; a busy one within one task's time). It
prints:

- tasks routed, done, failed (with reasons) and lost (neither done nor failed 5 min after the
  last was routed);
- the longest time `tasks:web` held a task no worker took, before and during the migration;
- dispatch (created -> started) p50 and max before, during and after the migration: a window
  without a consumer would show here as tasks waiting that long;
- the wall time of the migration, and which hosts did the work.

Both Ollama stand-ins are set to the same latency (--standin-latency), so the two workers can
keep up with --rate and a delay in dispatch comes from the migration alone. The figures in
docs/benchmarks.md come from:

    .venv/bin/python bench/migration_load.py            (about 15 min: builds a fresh lab)
    .venv/bin/python bench/migration_load.py --reuse --to lab-worker-slow
                                         (the lab as ./dev demo leaves it: moves it back)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import redis
import requests
import yaml

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "files"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from coordinator_contract import REDIS_ADMIN_USER, WEB_QUEUE  # noqa: E402

from lab import demo, lab  # noqa: E402

WORKER_NODES = ("lab-worker-slow", "lab-macbookair")
SAMPLE_SECONDS = 0.1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=2.0, help="web searches routed per second")
    p.add_argument("--before", type=float, default=20.0, help="seconds of load before moving")
    p.add_argument("--after", type=float, default=20.0, help="seconds of load after moving")
    p.add_argument("--standin-latency", type=float, default=0.1,
                   help="seconds each Ollama stand-in call takes on both worker nodes")
    p.add_argument("--to", choices=WORKER_NODES, default="lab-macbookair",
                   help="host the web worker moves to (default: lab-macbookair)")
    p.add_argument("--reuse", action="store_true",
                   help="use the running, provisioned lab as it is (default: build a fresh one)")
    p.add_argument("--keep", action="store_true", help="leave the lab running afterwards")
    return p.parse_args(argv)


@dataclass
class Routed:
    task_id: str
    routed_at: float  # time.time()
    outcome: dict = field(default_factory=dict)


@dataclass
class Timeline:
    """The length of tasks:web over time (-1: Redis did not answer)."""

    samples: list[tuple[float, int]] = field(default_factory=list)

    def longest_waiting(self, start: float, end: float) -> float:
        """Longest run of samples in [start, end] with a task waiting in the queue."""
        longest = 0.0
        run_start: float | None = None
        for at, length in self.samples:
            if not start <= at <= end:
                continue
            hit = length != 0
            if hit and run_start is None:
                run_start = at
            elif not hit and run_start is not None:
                longest = max(longest, at - run_start)
                run_start = None
        if run_start is not None and self.samples:
            longest = max(longest, min(end, self.samples[-1][0]) - run_start)
        return longest


def lab_addresses() -> tuple[dict[str, str], str]:
    """Every lab node's address, and the address of the Redis host."""
    hosts = yaml.safe_load((demo.LAB_INVENTORY / "hosts.yml").read_text())["all"]["children"]
    addresses = {name: values["node_address"]
                 for name, values in hosts["lab_nodes"]["hosts"].items()}
    return addresses, addresses[next(iter(hosts["redis"]["hosts"]))]


def set_standin_latency(address: str, seconds: float) -> None:
    answer = requests.post(f"http://{address}:11434/_standin/config",
                           json={"latency": seconds}, timeout=10)
    answer.raise_for_status()


def sample_queue(client: redis.Redis, timeline: Timeline, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            length = int(client.llen(WEB_QUEUE))
        except redis.RedisError:
            length = -1
        timeline.samples.append((time.time(), length))
        stop.wait(SAMPLE_SECONDS)


def keep_routing(url: str, token: str, rate: float, routed: list[Routed],
                 stop: threading.Event) -> None:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    session.verify = lab.verify_for(url)
    next_at = time.monotonic()
    while not stop.is_set():
        answer = session.post(f"{url}/route", timeout=10, json={
            "prompt": f"{demo.PROMPT} #{len(routed)}", "task_type": "web_search"})
        answer.raise_for_status()
        routed.append(Routed(answer.json()["task_id"], time.time()))
        next_at += 1 / rate
        stop.wait(max(0.0, next_at - time.monotonic()))


def collect(url: str, token: str, routed: list[Routed], deadline: float) -> None:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    session.verify = lab.verify_for(url)
    for task in routed:
        while time.monotonic() < deadline:
            answer = session.get(f"{url}/task/{task.task_id}", params={"wait": 20}, timeout=30)
            answer.raise_for_status()
            task.outcome = answer.json()
            if task.outcome["status"] in ("done", "failed"):
                break


def seconds_between(task: dict, start: str, end: str) -> float | None:
    if not task.get(start) or not task.get(end):
        return None
    return (datetime.fromisoformat(task[end]) - datetime.fromisoformat(task[start])).total_seconds()


def dispatch_line(name: str, tasks: list[Routed]) -> str:
    waits = sorted(w for t in tasks
                   if (w := seconds_between(t.outcome, "created_at", "started_at")) is not None)
    if not waits:
        return f"  {name:8} {len(tasks):5} tasks, none started"
    return (f"  {name:8} {len(tasks):5} tasks, dispatch p50 {statistics.median(waits) * 1000:7.0f}"
            f" ms, max {waits[-1] * 1000:7.0f} ms")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    the_lab = lab.load_lab()
    addresses, redis_address = lab_addresses()
    with lab.exclusive():
        try:
            return run(args, the_lab, addresses, redis_address)
        finally:
            if not args.keep:
                lab.destroy(the_lab)


def run(args: argparse.Namespace, the_lab: lab.Lab, addresses: dict[str, str],
        redis_address: str) -> int:
    if not args.reuse:
        lab.destroy(the_lab)
        lab.create(the_lab)
        demo.run_playbook("lab/prepare.yml", demo.LAB_INVENTORY, "bench-1-prepare")
        demo.run_playbook("site.yml", demo.LAB_INVENTORY, "bench-2-site")
    for host in WORKER_NODES:
        set_standin_latency(addresses[host], args.standin_latency)
    url, token = the_lab.coordinator_url, demo.read_token()
    redis_password = (lab.SECRETS_DIR / "redis_password").read_text().split()[0]
    # The redis role's admin user (`default` is off), over TLS with the lab's CA.
    queue = redis.Redis(host=redis_address, port=6379, username=REDIS_ADMIN_USER,
                        ssl=True, ssl_ca_certs=str(lab.CLUSTER_CA_CERT),
                        password=redis_password, decode_responses=True, socket_timeout=5)

    timeline, stop = Timeline(), threading.Event()
    routed: list[Routed] = []
    threads = [threading.Thread(target=sample_queue, args=(queue, timeline, stop)),
               threading.Thread(target=keep_routing,
                                args=(url, token, args.rate, routed, stop))]
    for thread in threads:
        thread.start()
    try:
        time.sleep(args.before)
        demo.write_moved_inventory(args.to)
        move_start = time.time()
        demo.run_playbook("migrate-web.yml", demo.MOVED_INVENTORY, "bench-3-migrate-web")
        move_end = time.time()
        time.sleep(args.after)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    collect(url, token, routed, time.monotonic() + 300)

    done = [t for t in routed if t.outcome.get("status") == "done"]
    failed = [t for t in routed if t.outcome.get("status") == "failed"]
    lost = [t for t in routed if t.outcome.get("status") not in ("done", "failed")]
    by_host: dict[str, int] = {}
    for task in done:
        by_host[task.outcome["worker_host"]] = by_host.get(task.outcome["worker_host"], 0) + 1
    unknown = sum(1 for _, length in timeline.samples if length < 0)
    first = timeline.samples[0][0] if timeline.samples else move_start

    print(f"\nmigration under load: {args.rate}/s web searches, stand-in latency "
          f"{args.standin_latency}s, web worker moved to {args.to}")
    print(f"  load average: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print(f"  migrate-web.yml wall time: {move_end - move_start:.1f} s")
    print(f"  routed {len(routed)}, done {len(done)}, failed {len(failed)}, lost {len(lost)}")
    for task in failed:
        print(f"    failed {task.task_id}: {task.outcome.get('error')}")
    for task in lost:
        print(f"    lost {task.task_id}: {task.outcome.get('status')}")
    print(f"  done by host: {by_host}")
    print(f"  longest time a task sat untaken in {WEB_QUEUE}: before the migration "
          f"{timeline.longest_waiting(first, move_start):.1f} s, during it "
          f"{timeline.longest_waiting(move_start, move_end):.1f} s "
          f"({len(timeline.samples)} samples every {SAMPLE_SECONDS}s, {unknown} unanswered)")
    print(dispatch_line("before", [t for t in routed if t.routed_at < move_start]))
    print(dispatch_line("during", [t for t in routed if move_start <= t.routed_at <= move_end]))
    print(dispatch_line("after", [t for t in routed if t.routed_at > move_end]))
    return 0 if not failed and not lost else 1


if __name__ == "__main__":
    raise SystemExit(main())
