#!/usr/bin/env python3
"""Benchmark what our path adds to a real web-search task, beyond SearXNG and Ollama themselves.

Starts a throwaway PostgreSQL (fsync on), Redis, ``python -m coordinator``, the SearXNG and
Ollama stand-ins (lab/standins/, latency 0) and the real ``files/worker_web.py``, run by this
script's ``worker`` mode: it imports worker_web unchanged and only wraps
``requests.Session.request`` to time, from the client side, every call to SearXNG's
``/search`` and Ollama's ``/api/generate``. N ``web_search`` tasks are sent through ``POST
/route`` at a steady rate (low enough that tasks do not queue behind each other), and for
each task:

    overhead = (finished_at - created_at) - (time inside the SearXNG and Ollama calls)

that is the API's commit and push, the queue, the claim and result writes, the worker's own
code and the HTTP client; and apart, dispatch (created → started) and the backend calls.
The figures in docs/benchmarks.md come from:

    .venv/bin/python bench/web_overhead.py --tasks 1000 --rate 10
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import common
import psycopg

from lab.standins.ollama import DEFAULT_MODEL
from lab.throwaway import wait_for_port

STANDIN_MODEL = DEFAULT_MODEL
TIMED_PATHS = ("/search", "/api/generate")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", "-n", type=int, default=1000, help="tasks (quick: 100)")
    p.add_argument("--rate", type=float, default=10, help="tasks/s sent")
    p.add_argument("--warmup", type=int, default=20, help="tasks first, not counted")
    return p.parse_args(argv)


def timed_worker(timings_file: str) -> int:
    """Run worker_web.main() with its SearXNG and Ollama calls timed; write the timings
    (JSON lines: start, end, path, in wall-clock seconds) when it exits."""
    import requests
    import worker_web

    calls: list[tuple[float, float, str]] = []
    request = requests.Session.request

    def timed(self: requests.Session, method: str, url: str, *args: object,
              **kwargs: object) -> requests.Response:
        start = time.time()
        try:
            return request(self, method, url, *args, **kwargs)
        finally:
            path = "/" + url.split("://", 1)[-1].split("/", 1)[-1].split("?", 1)[0]
            if path in TIMED_PATHS:
                calls.append((start, time.time(), path))

    requests.Session.request = timed  # type: ignore[method-assign]
    try:
        return worker_web.main([])
    finally:
        Path(timings_file).write_text("".join(json.dumps(c) + "\n" for c in calls))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    common.stop_on_sigterm()
    print(f"before: {common.uptime()}")
    with common.Lab() as lab:
        lab.start_backends()
        lab.start_coordinator()
        assert lab.pg is not None
        ports = {}
        for name in ("searxng", "ollama"):
            ports[name] = common.free_port()
            lab.spawn(name, [sys.executable, "-m", f"lab.standins.{name}", "--bind",
                             "127.0.0.1", "--port", str(ports[name]), "--latency", "0"],
                      dict(lab.base_env))
            wait_for_port(ports[name], 30, name)
        timings = lab.tmp / "timings.jsonl"
        env = dict(lab.worker_env("bench-web-1"),
                   SEARXNG_URL=f"http://127.0.0.1:{ports['searxng']}",
                   OLLAMA_HOST=f"http://127.0.0.1:{ports['ollama']}", OLLAMA_MODEL=STANDIN_MODEL)
        worker = lab.spawn("worker_web", [sys.executable, __file__, "worker", str(timings)], env,
                           cwd=common.FILES)
        lab.wait_registered(["bench-web-1"], [worker])
        if args.warmup:
            tag = common.new_tag("warmup")
            common.fixed_rate(lab.url, tag, args.warmup, args.rate, connections=4)
            common.wait_finished(lab.pg.dsn, tag, args.warmup, 120)
        tag = common.new_tag("web")
        load_before = common.load_average()
        latencies, statuses, _ = common.fixed_rate(lab.url, tag, args.tasks, args.rate,
                                                   connections=4)
        finished = common.wait_finished(lab.pg.dsn, tag, args.tasks, 120 + args.tasks / 5)
        load_after = common.load_average()
        lab.stop(worker)  # it writes the timings as it exits
        calls = sorted(json.loads(line) for line in timings.read_text().splitlines())
        with psycopg.connect(lab.pg.dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT extract(epoch FROM created_at)::float8, extract(epoch FROM started_at)"
                "::float8, extract(epoch FROM finished_at)::float8, fallback FROM tasks"
                " WHERE prompt = %s AND status = 'done'", (tag,)).fetchall()
    overhead, dispatch, backend, in_worker, total, behind, own = [], [], [], [], [], [], []
    previous_done = 0.0
    for created, started, done, _fallback in sorted(rows, key=lambda r: r[1]):
        inside = sum(end - start for start, end, _ in calls if started <= start <= done)
        # One worker: a task created while it still ran the previous one waits for it.
        waited = max(0.0, min(previous_done, started) - created)
        previous_done = done
        total.append(done - created)
        backend.append(inside)
        overhead.append(done - created - inside)
        behind.append(waited)
        own.append(done - created - inside - waited)
        dispatch.append(started - created)
        in_worker.append(done - started - inside)
    fallbacks = sum(1 for r in rows if r[3])
    print(f"web_search tasks: {args.tasks} sent at {args.rate:g}/s, {len(rows)} done "
          f"({finished} finished, {fallbacks} fallback answers), stand-ins at latency 0")

    def line(name: str, values: list[float]) -> None:
        values = sorted(values)
        print(f"  {name:40} p50 {common.ms(common.percentile(values, 0.5)):>10}   "
              f"p99 {common.ms(common.percentile(values, 0.99)):>10}")

    line("POST /route (client)", latencies)
    line("created → done", total)
    line("inside SearXNG + Ollama calls", backend)
    line("OUR OVERHEAD (created → done - calls)", overhead)
    line("  of which created → started", dispatch)
    line("  of which in the worker, not calls", in_worker)
    line("waiting for the previous task", behind)
    line("OUR OVERHEAD without that wait", own)
    print(f"  statuses {statuses}; load average {load_before} before, {load_after} after")
    print(f"after: {common.uptime()}")
    return 0 if len(rows) == args.tasks else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        sys.exit(timed_worker(sys.argv[2]))
    common.exit_with(main)
