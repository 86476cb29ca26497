#!/usr/bin/env python3
"""Benchmark dispatch: no-op tasks routed and processed end to end by real worker processes.

Starts a throwaway PostgreSQL (fsync and synchronous_commit on), a throwaway Redis, ``python
-m coordinator`` and no-op workers (``bench/common.py``: files/worker_base.py's worker whose
work returns at once, each a real subprocess on the shared queue ``tasks:web``). For 1, 2
and 4 workers it sends N ``web_search`` tasks through ``POST /route`` as fast as C clients
get answers, waits until every task is done, and reports tasks/s, p50/p99 of ``POST
/route`` (client side), p50/p99 of created→started (dispatch) and created→done from the
tasks table's own timestamps, and the CPU time per task of each part (Coordinator, workers,
PostgreSQL with its backends, Redis, this load generator; from /proc). Then a fixed-rate
run (``--rate``, open loop) gives the dispatch latency at a steady load. A full run:

    .venv/bin/python bench/dispatch.py --tasks 5000 --rate 200 --rate-tasks 3000

The figures in docs/benchmarks.md come from bench/regressions.py --runs 3 (which runs it with
--workers 4 --tasks 2000 --warmup 300 --rate 200 --rate-tasks 1000) and from:

    .venv/bin/python bench/dispatch.py --workers 4 --tasks 5000 --rate 0
"""

from __future__ import annotations

import argparse

import common


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", "-n", type=int, default=10000,
                   help="tasks per closed-loop run (quick: 200)")
    p.add_argument("--workers", default="1,2,4",
                   help="worker counts to measure, comma-separated, increasing")
    p.add_argument("--concurrency", "-c", type=int, default=32,
                   help="concurrent POST /route clients in the closed-loop runs")
    p.add_argument("--rate", type=float, default=200,
                   help="tasks/s of the fixed-rate run, with the most workers (0: skip it)")
    p.add_argument("--rate-tasks", type=int, default=4000,
                   help="tasks of the fixed-rate run (quick: 400)")
    p.add_argument("--warmup", type=int, default=500, help="tasks sent first, not counted")
    return p.parse_args(argv)


def report(label: str, lab: common.Lab, tag: str, n: int,
           load: tuple[list[float], dict[int, int], float], load_before: str,
           cpu_before: dict[str, float]) -> bool:
    latencies, statuses, _elapsed = load
    assert lab.pg is not None
    finished = common.wait_finished(lab.pg.dsn, tag, n, timeout=max(60.0, n / 50))
    cpu_after = common.cpu_by_part(lab.cpu_parts())
    f = common.task_figures(lab.pg.dsn, tag)
    latencies.sort()
    print(f"{label}: {n} tasks, {f['done']} done ({finished} finished)")
    print(f"  end to end   {f['throughput']:8.0f} tasks/s (first created → last done "
          f"{f['span']:.2f} s)")
    print(f"  POST /route  p50 {common.ms(common.percentile(latencies, 0.5))}   "
          f"p99 {common.ms(common.percentile(latencies, 0.99))}   statuses {statuses}")
    print(f"  dispatch     p50 {common.ms(f['dispatch_p50'])}   p99 {common.ms(f['dispatch_p99'])}"
          "   (created → started)")
    print(f"  end to end   p50 {common.ms(f['total_p50'])}   p99 {common.ms(f['total_p99'])}"
          "   (created → done)")
    spent = {part: (cpu_after[part] - cpu_before.get(part, 0.0)) * 1000 / n for part in cpu_after}
    print(f"  CPU per task {sum(spent.values()):.2f} ms: "
          + ", ".join(f"{part} {ms:.2f}" for part, ms in spent.items()))
    print(f"  load average {load_before} before, {common.load_average()} after")
    return f["done"] == n and statuses.get(201, 0) == n


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    counts = [int(c) for c in args.workers.split(",")]
    common.stop_on_sigterm()
    ok = True
    print(f"before: {common.uptime()}")
    with common.Lab() as lab:
        lab.start_backends()
        lab.start_coordinator()
        running = 0
        for count in counts:
            lab.start_noop_workers(running + 1, count - running)
            running = count
            if args.warmup:
                tag = common.new_tag("warmup")
                common.closed_loop(lab.url, tag, args.warmup, args.concurrency)
                assert lab.pg is not None
                common.wait_finished(lab.pg.dsn, tag, args.warmup, timeout=120)
            tag = common.new_tag(f"closed{count}")
            before, cpu = common.load_average(), common.cpu_by_part(lab.cpu_parts())
            load = common.closed_loop(lab.url, tag, args.tasks, args.concurrency)
            ok &= report(f"closed loop, {count} worker(s), {args.concurrency} clients", lab,
                         tag, args.tasks, load, before, cpu)
        if args.rate > 0:
            tag = common.new_tag("rate")
            before, cpu = common.load_average(), common.cpu_by_part(lab.cpu_parts())
            load = common.fixed_rate(lab.url, tag, args.rate_tasks, args.rate)
            ok &= report(f"fixed rate {args.rate:g} tasks/s ({load[2]:.1f} s), {running} "
                         "worker(s)", lab, tag, args.rate_tasks, load, before, cpu)
    print(f"after: {common.uptime()}")
    return 0 if ok else 1


if __name__ == "__main__":
    common.exit_with(main)
