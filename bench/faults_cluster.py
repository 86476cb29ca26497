"""The processes of a fault-injection run: stand-ins, the Coordinator and supervised workers.

Every process runs from the repository as a user (or systemd) would start it, on
127.0.0.1, with its output in its own log file: each start of a worker gets a new file, so
the checker can tell which process wrote which line.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from lab.throwaway import ThrowawayPostgres, ThrowawayRedis, free_port, wait_until

ROOT = Path(__file__).resolve().parent.parent
FILES = ROOT / "files"
PYTHON = sys.executable
MODEL = "hf.co/LiquidAI/LFM2.5-1.2B-JP-GGUF:Q4_K_M"


class Process:
    """One subprocess with stdout and stderr in a file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, cwd: Path) -> None:
        self.log_path = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(args, env=env, cwd=cwd, stdout=out,
                                         stderr=subprocess.STDOUT)
        self.pid = self.proc.pid

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class Standin:
    def __init__(self, module: str, logdir: Path, **settings: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        name = module.rsplit(".", 1)[-1]
        self.process = Process(
            [PYTHON, "-m", module, "--bind", "127.0.0.1", "--port", str(self.port)],
            dict(os.environ), logdir / f"{name}.log", ROOT)
        wait_until(self._up, 20, f"the {name} stand-in")
        self.config(**settings)

    def _up(self) -> bool:
        try:
            return requests.get(f"{self.url}/_standin/config", timeout=1).ok
        except requests.RequestException:
            return False

    def config(self, **settings: Any) -> dict[str, Any]:
        response = requests.post(f"{self.url}/_standin/config", json=settings, timeout=5)
        response.raise_for_status()
        return response.json()


class Coordinator:
    def __init__(self, pg: ThrowawayPostgres, rds: ThrowawayRedis, logdir: Path,
                 ttl: float, web_deadline: float) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, PG_DSN=pg.dsn, REDIS_HOST="127.0.0.1", REDIS_PORT=str(rds.port),
                   REDIS_PASSWORD=rds.password, COORDINATOR_PORT=str(self.port),
                   COORDINATOR_HEARTBEAT_TTL=f"{ttl:g}",
                   COORDINATOR_WEB_TASK_DEADLINE=f"{web_deadline:g}")
        self.process = Process([PYTHON, "-m", "coordinator"], env, logdir / "coordinator.log",
                               FILES)
        wait_until(self._healthy, 60, "the Coordinator")

    def _healthy(self) -> bool:
        if not self.process.alive():
            raise RuntimeError(f"the Coordinator exited:\n{self.process.output()}")
        try:
            return requests.get(f"{self.url}/health", timeout=1).status_code == 200
        except requests.RequestException:
            return False


@dataclass
class Start:
    """One process of a worker slot and what became of it."""

    process: Process
    started: float
    killed: float | None = None
    exit_code: int | None = None


@dataclass
class WorkerSlot:
    """One WORKER_ID under a service manager: restarted after it dies, like systemd's
    Restart=on-failure with a RestartSec drawn from `restart_delay`."""

    worker_id: str
    script: str
    env: dict[str, str]
    logdir: Path
    restart_delay: tuple[float, float]
    rng: random.Random
    starts: list[Start] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # A kill waits while the duplicate check needs this slot's process to stay.
    protected: bool = False
    stopping: bool = False

    @property
    def kind(self) -> str:
        return "web" if self.script == "worker_web.py" else "inference"

    def spawn(self, suffix: str = "") -> Process:
        log = self.logdir / f"{self.worker_id}-{len(self.starts)}{suffix}.log"
        return Process([PYTHON, self.script], self.env, log, FILES)

    def current(self) -> Start | None:
        with self.lock:
            return self.starts[-1] if self.starts else None

    def supervise(self) -> None:
        while True:
            with self.lock:
                if self.stopping:
                    return
                start = Start(self.spawn(), time.time())
                self.starts.append(start)
            start.exit_code = start.process.proc.wait()
            time.sleep(self.rng.uniform(*self.restart_delay))

    def kill(self) -> float | None:
        """SIGKILL the running process; the time of the kill, or None if none runs."""
        with self.lock:
            start = self.starts[-1] if self.starts else None
            if self.protected or start is None or not start.process.alive():
                return None
            start.process.proc.send_signal(signal.SIGKILL)
            start.killed = time.time()
            return start.killed

    def next_start_after(self, moment: float) -> float | None:
        with self.lock:
            return next((s.started for s in self.starts if s.started > moment), None)

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
            starts = list(self.starts)
        for start in starts:
            start.process.stop()

    def logs(self) -> list[Path]:
        return sorted(self.logdir.glob(f"{self.worker_id}-*.log"))
