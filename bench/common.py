#!/usr/bin/env python3
"""Shared parts of bench/dispatch.py, bench/compare.py and bench/web_overhead.py.

``Lab`` starts what a benchmark needs (throwaway PostgreSQL with durable settings, throwaway
Redis, ``python -m coordinator``, worker processes) and stops every process and deletes
every temporary directory it made, also on Ctrl-C or SIGTERM. ``NoopWorker`` is the
Coordinator's real worker (files/worker_base.py) whose work returns at once; run it as
``python bench/common.py noop-worker`` with the usual worker environment.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
FILES = ROOT / "files"
for _path in (ROOT, FILES, BENCH):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import psycopg  # noqa: E402
import route_bench  # noqa: E402  (its keep-alive HTTP client and helpers)
import worker_base  # noqa: E402
from coordinator_contract import WEB_QUEUE  # noqa: E402

from lab.processes import stop_process  # noqa: E402
from lab.throwaway import ThrowawayPostgres, ThrowawayRedis, free_port  # noqa: E402

percentile = route_bench.percentile
load_average = route_bench.load_average


class NoopWorker(worker_base.Worker):
    """A web worker whose work is nothing: what is left is the dispatch path itself (take,
    guarded claim, result write, LREM), exactly as every real worker runs it."""

    program = "bench_noop"
    title = "Benchmark no-op worker"
    kind = "web"
    version = "bench"

    @property
    def queues(self) -> list[str]:
        return [WEB_QUEUE]

    def execute(self, task: worker_base.Task) -> worker_base.Outcome:
        return worker_base.Outcome("done", result="ok")


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def exit_with(main: Callable[[], int]) -> NoReturn:
    """A benchmark's entry point: exit with ``main()``'s status, or 130 on Ctrl-C (as a
    shell reports an interrupted program), without a traceback."""
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)


def stop_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt, so ``finally`` blocks clean up as on Ctrl-C."""
    def raise_interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, raise_interrupt)


class Lab:
    """Servers and processes of one benchmark run; ``close()`` removes them all."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-"))
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pg: ThrowawayPostgres | None = None
        self.redis: ThrowawayRedis | None = None
        self.url = ""

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def start_backends(self) -> None:
        print("starting throwaway PostgreSQL (fsync on) and Redis ...", file=sys.stderr)
        self.pg = ThrowawayPostgres(fast=False)
        self.pg.start()
        self.redis = ThrowawayRedis()
        self.redis.start()

    @property
    def base_env(self) -> dict[str, str]:
        assert self.pg is not None and self.redis is not None
        return dict(os.environ, PG_DSN=self.pg.dsn, REDIS_HOST="127.0.0.1",
                    REDIS_PORT=str(self.redis.port), REDIS_PASSWORD=self.redis.password)

    def spawn(self, name: str, argv: list[str], env: dict[str, str],
              cwd: Path = ROOT) -> subprocess.Popen[bytes]:
        """Start a process whose output goes to <tmp>/<name>.log."""
        with open(self.tmp / f"{name}.log", "wb") as out:
            # Own process group: a terminal's Ctrl-C reaches only us, and we stop the
            # children in order (workers before the Coordinator before the servers).
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def start_coordinator(self) -> str:
        port = free_port()
        env = dict(self.base_env, COORDINATOR_PORT=str(port), COORDINATOR_LOG_LEVEL="WARNING")
        self.spawn("coordinator", [sys.executable, "-m", "coordinator"], env, cwd=FILES)
        self.url = f"http://127.0.0.1:{port}"
        route_bench.wait_healthy(self.url)
        return self.url

    def worker_env(self, worker_id: str) -> dict[str, str]:
        return dict(self.base_env, COORDINATOR_URL=self.url, WORKER_ID=worker_id,
                    WORKER_HOST="127.0.0.1")

    def start_noop_workers(self, first: int, count: int) -> list[subprocess.Popen[bytes]]:
        """Workers bench-noop-<first> ... ; returns them once each has registered."""
        ids = [f"bench-noop-{n}" for n in range(first, first + count)]
        procs = [self.spawn(worker_id, [sys.executable, str(BENCH / "common.py"),
                                        "noop-worker"], self.worker_env(worker_id))
                 for worker_id in ids]
        self.wait_registered(ids, procs)
        return procs

    def wait_registered(self, worker_ids: list[str], procs: list[subprocess.Popen[bytes]],
                        timeout: float = 60) -> None:
        assert self.pg is not None
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.pg.dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:
                found = conn.execute("SELECT count(*) FROM workers WHERE worker_id = ANY(%s)",
                                     (worker_ids,)).fetchone()[0]
                if found == len(worker_ids):
                    return
                for proc in procs:
                    if proc.poll() is not None:
                        raise RuntimeError(f"{proc.args} exited with {proc.returncode}; "
                                           f"see the logs in {self.tmp}")
                time.sleep(0.1)
        raise RuntimeError(f"workers {worker_ids} did not register within {timeout:.0f}s")

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGINT (each program's clean stop), then SIGKILL to its whole process group, which
        also takes children it left behind (Celery's pool, RQ's work horses)."""
        stop_process(proc, 15, signal.SIGINT, group=True)

    def cpu_parts(self) -> dict[str, list[int]]:
        """Root process ids of each part, for ``cpu_by_part``."""
        assert self.pg is not None and self.redis is not None and self.redis.proc is not None
        postmaster = int((self.pg.datadir / "postmaster.pid").read_text().split()[0])
        names = [Path(str(proc.args[-1])).name for proc in self.procs]
        return {
            "Coordinator": [p.pid for p, n in zip(self.procs, names, strict=True)
                            if n == "coordinator"],
            "workers": [p.pid for p, n in zip(self.procs, names, strict=True)
                        if n == "noop-worker"],
            "PostgreSQL": [postmaster],
            "Redis": [self.redis.proc.pid],
            "load generator": [os.getpid()],
        }

    def close(self) -> None:
        # Ctrl-C during cleanup would leave servers behind: ignore it until done.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            for proc in reversed(self.procs):
                self.stop(proc)
            self.procs.clear()
            if self.redis is not None:
                self.redis.destroy()
            if self.pg is not None:
                self.pg.destroy()
            shutil.rmtree(self.tmp, ignore_errors=True)
        finally:
            signal.signal(signal.SIGINT, previous)


# -- load --------------------------------------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_table() -> dict[int, tuple[int, float, float]]:
    """pid -> (parent pid, own CPU seconds, CPU seconds of its reaped children), from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = (Path("/proc") / entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state is fields[0]
        ppid, utime, stime, cutime, cstime = (int(fields[i]) for i in (1, 11, 12, 13, 14))
        table[int(entry)] = (ppid, (utime + stime) / CLOCK_TICKS, (cutime + cstime) / CLOCK_TICKS)
    return table


def cpu_by_part(parts: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds used so far by each part: its root processes, their live descendants and
    the descendants they have reaped (PostgreSQL's exited backends)."""
    table = process_table()
    owner = {pid: name for name, pids in parts.items() for pid in pids}
    used = dict.fromkeys(parts, 0.0)
    for pid, (_ppid, own, reaped) in table.items():
        ancestor, hops = pid, 0
        while ancestor not in owner and ancestor in table and hops < 64:
            ancestor, hops = table[ancestor][0], hops + 1
        if ancestor in owner:
            used[owner[ancestor]] += own + (reaped if pid == ancestor else 0.0)
    return used


def route_request(url: str, prompt: str, task_type: str = "web_search") -> bytes:
    host, port = url.removeprefix("http://").split(":")
    body = f'{{"prompt":"{prompt}","task_type":"{task_type}"}}'.encode()
    return (f"POST /route HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode() + body


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def closed_loop(url: str, prompt: str, total: int, concurrency: int
                ) -> tuple[list[float], dict[int, int], float]:
    """``total`` POST /route from ``concurrency`` clients, each sending as fast as answered."""
    host, port = address(url)
    return asyncio.run(route_bench.run_load(host, port, route_request(url, prompt), total,
                                            concurrency))


def fixed_rate(url: str, prompt: str, total: int, rate: float, connections: int = 32
               ) -> tuple[list[float], dict[int, int], float]:
    """``total`` POST /route sent on a fixed schedule (``rate`` per second), whatever the
    answers' latency (open loop), over up to ``connections`` keep-alive connections."""
    host, port = address(url)
    request = route_request(url, prompt)

    async def run() -> tuple[list[float], dict[int, int], float]:
        idle: asyncio.Queue[route_bench.Client] = asyncio.Queue()
        for _ in range(connections):
            client = route_bench.Client(host, port, request)
            await client.connect()
            idle.put_nowait(client)
        latencies: list[float] = []
        statuses: dict[int, int] = {}

        async def one() -> None:
            client = await idle.get()
            t0 = time.perf_counter()
            status = await client.send()
            latencies.append(time.perf_counter() - t0)
            statuses[status] = statuses.get(status, 0) + 1
            idle.put_nowait(client)

        loop = asyncio.get_running_loop()
        start = loop.time()
        pending = []
        for n in range(total):
            await asyncio.sleep(max(0.0, start + n / rate - loop.time()))
            pending.append(asyncio.create_task(one()))
        await asyncio.gather(*pending)
        elapsed = loop.time() - start
        while not idle.empty():
            idle.get_nowait().close()
        return latencies, statuses, elapsed

    return asyncio.run(run())


def new_tag(what: str) -> str:
    """A prompt unique to one run, so its rows can be told from the others'."""
    return f"bench-{what}-{uuid.uuid4().hex[:12]}"


def wait_finished(dsn: str, tag: str, expected: int, timeout: float) -> int:
    """Poll until ``expected`` tasks with prompt ``tag`` are done or failed; return how many."""
    deadline = time.monotonic() + timeout
    finished = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            finished = conn.execute(
                "SELECT count(*) FROM tasks WHERE prompt = %s AND status IN ('done', 'failed')",
                (tag,)).fetchone()[0]
            if finished >= expected:
                break
            time.sleep(0.05)
    return finished


def task_figures(dsn: str, tag: str) -> dict[str, Any]:
    """Figures of the tasks with prompt ``tag``, from the tasks table's own timestamps."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM created_at)::float8, extract(epoch FROM started_at)"
            "::float8, extract(epoch FROM finished_at)::float8, status"
            " FROM tasks WHERE prompt = %s", (tag,)).fetchall()
    finished = [r for r in rows if r[2] is not None]
    dispatch = sorted(r[1] - r[0] for r in finished)
    total = sorted(r[2] - r[0] for r in finished)
    span = (max(r[2] for r in finished) - min(r[0] for r in rows)) if finished else float("nan")
    return {
        "tasks": len(rows), "done": sum(1 for r in rows if r[3] == "done"),
        "span": span, "throughput": len(finished) / span if finished else 0.0,
        "dispatch_p50": percentile(dispatch, 0.5), "dispatch_p99": percentile(dispatch, 0.99),
        "total_p50": percentile(total, 0.5), "total_p99": percentile(total, 0.99),
    }


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


if __name__ == "__main__":
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(__doc__)
        sys.exit(0)
    if sys.argv[1:] != ["noop-worker"]:
        sys.exit("usage: python bench/common.py noop-worker  (with the worker environment of "
                 "docs/workers.md); the benchmarks start it themselves")
    sys.exit(worker_base.main(NoopWorker, worker_base.BaseConfig, []))
