#!/usr/bin/env python3
"""Benchmark POST /route: throughput and latency of accepting tasks through the HTTP API.

By default it starts everything itself: a throwaway PostgreSQL with durable settings
(``fast=False``: fsync and synchronous_commit on), a throwaway Redis, and ``python -m
coordinator`` from ``files/``. With ``--url`` it points at a running coordinator instead.

C concurrent clients, each on one keep-alive HTTP/1.1 connection (a minimal asyncio client,
so the load generator spends little CPU), send N requests in total and time each one. A full
run:

    .venv/bin/python bench/route_bench.py --tasks 20000 --concurrency 64

The figures in docs/benchmarks.md come from bench/regressions.py --runs 3, which runs it with
--tasks 5000 --concurrency 64.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", "-n", type=int, default=20000, help="requests to send")
    p.add_argument("--concurrency", "-c", type=int, default=64, help="concurrent clients")
    p.add_argument("--warmup", type=int, default=1000, help="requests sent first, not timed")
    p.add_argument("--task-type", default="web_search")
    p.add_argument("--prompt-bytes", type=int, default=64, help="size of each prompt")
    p.add_argument("--url", help="a running coordinator (default: start one)")
    p.add_argument("--token", default=os.environ.get("COORDINATOR_TOKEN"),
                   help="bearer token (default: $COORDINATOR_TOKEN)")
    p.add_argument("--fast-pg", action="store_true",
                   help="throwaway PostgreSQL without fsync (not for published figures)")
    p.add_argument("--pool-size", type=int, default=10,
                   help="COORDINATOR_PG_POOL_SIZE of the coordinator started")
    return p.parse_args(argv)


class Client:
    """One keep-alive connection sending the same POST /route again and again."""

    def __init__(self, host: str, port: int, request: bytes) -> None:
        self.host, self.port, self.request = host, port, request
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def send(self) -> int:
        assert self.reader is not None and self.writer is not None
        self.writer.write(self.request)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("the coordinator closed the connection")
        length = 0
        close = False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        await self.reader.readexactly(length)
        if close:
            self.writer.close()
            await self.connect()
        return int(status_line.split()[1])

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def run_load(host: str, port: int, request: bytes, total: int, concurrency: int
                   ) -> tuple[list[float], dict[int, int], float]:
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    remaining = total
    clients = [Client(host, port, request) for _ in range(min(concurrency, max(total, 1)))]
    await asyncio.gather(*(c.connect() for c in clients))

    async def loop(client: Client) -> None:
        nonlocal remaining
        perf = time.perf_counter
        while remaining > 0:
            remaining -= 1
            t0 = perf()
            status = await client.send()
            latencies.append(perf() - t0)
            statuses[status] = statuses.get(status, 0) + 1

    started = time.perf_counter()
    await asyncio.gather(*(loop(c) for c in clients))
    elapsed = time.perf_counter() - started
    for c in clients:
        c.close()
    return latencies, statuses, elapsed


def build_request(host: str, port: int, args: argparse.Namespace) -> bytes:
    prompt = ("benchmark prompt " * (args.prompt_bytes // 17 + 1))[: args.prompt_bytes]
    body = json.dumps({"prompt": prompt, "task_type": args.task_type}).encode()
    head = (f"POST /route HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n")
    if args.token:
        head += f"Authorization: Bearer {args.token}\r\n"
    return head.encode() + b"\r\n" + body


def wait_healthy(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"coordinator at {url} did not become healthy within {timeout:.0f}s")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stack: list = []
    proc = None
    pg = None
    try:
        if args.url:
            url = args.url.rstrip("/")
        else:
            from lab.processes import stop_process
            from lab.throwaway import ThrowawayPostgres, ThrowawayRedis, free_port

            print("starting throwaway PostgreSQL (fsync %s) and Redis ..."
                  % ("off" if args.fast_pg else "on"), file=sys.stderr)
            pg = ThrowawayPostgres(fast=args.fast_pg).start()
            stack.append(pg.destroy)
            redis = ThrowawayRedis().start()
            stack.append(redis.destroy)
            port = free_port()
            env = dict(
                os.environ, PG_DSN=pg.dsn, REDIS_HOST="127.0.0.1", REDIS_PORT=str(redis.port),
                REDIS_PASSWORD=redis.password, COORDINATOR_PORT=str(port),
                COORDINATOR_PG_POOL_SIZE=str(args.pool_size), COORDINATOR_LOG_LEVEL="WARNING",
            )
            if args.token:
                env["COORDINATOR_TOKEN"] = args.token
            proc = subprocess.Popen([sys.executable, "-m", "coordinator"],
                                    cwd=ROOT / "files", env=env)
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url)
            settings = pg.psql("SELECT current_setting('fsync') || ' / '"
                               " || current_setting('synchronous_commit')")
            print(f"PostgreSQL fsync / synchronous_commit: {settings}", file=sys.stderr)
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        request = build_request(host, port, args)

        try:
            import uvloop
            uvloop.install()
        except ImportError:
            pass
        if args.warmup:
            asyncio.run(run_load(host, port, request, args.warmup, args.concurrency))
        cpu_before = cpu_seconds(proc.pid) if proc is not None else None
        load_before = load_average()
        latencies, statuses, elapsed = asyncio.run(
            run_load(host, port, request, args.tasks, args.concurrency))
        cpu = cpu_seconds(proc.pid) - cpu_before if proc is not None else None
        latencies.sort()
        ok = statuses.get(201, 0)
        print(f"POST /route  tasks={args.tasks} concurrency={args.concurrency} "
              f"task_type={args.task_type} prompt={args.prompt_bytes}B cpus={os.cpu_count()}")
        print(f"  throughput  {args.tasks / elapsed:8.0f} requests/s  ({elapsed:.2f} s)")
        print(f"  latency     p50 {percentile(latencies, 0.50) * 1000:.2f} ms   "
              f"p99 {percentile(latencies, 0.99) * 1000:.2f} ms   "
              f"max {latencies[-1] * 1000:.2f} ms   "
              f"mean {statistics.fmean(latencies) * 1000:.2f} ms")
        print(f"  statuses    {dict(sorted(statuses.items()))}")
        if cpu is not None:
            print(f"  coordinator {cpu / args.tasks * 1e6:.0f} us CPU per request "
                  f"({cpu / elapsed * 100:.0f}% of one core)")
        print(f"  machine     load average {load_before} before, {load_average()} after")
        if pg is not None:
            rows = int(pg.psql("SELECT count(*) FROM tasks"))
            expected = args.tasks + args.warmup
            print(f"  check       {rows} task rows in PostgreSQL (expected {expected})")
        return 0 if ok == args.tasks else 1
    finally:
        if proc is not None:
            stop_process(proc, 15, signal.SIGINT)
        for cleanup in reversed(stack):
            cleanup()


if __name__ == "__main__":
    sys.exit(main())
