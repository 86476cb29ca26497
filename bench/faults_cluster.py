"""The processes of a fault-injection run: stand-ins, the Coordinator and supervised workers.

Every process runs from the repository as a user (or systemd) would start it, on
127.0.0.1, with its output in its own log file: each start of a worker gets a new file, so
the checker can tell which process wrote which line.
"""

from __future__ import annotations

import random
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.processes import CoordinatorProcess, Process, Standin
from lab.standins.ollama import DEFAULT_MODEL
from lab.throwaway import ThrowawayPostgres, ThrowawayRedis

ROOT = Path(__file__).resolve().parent.parent
FILES = ROOT / "files"
PYTHON = sys.executable
MODEL = DEFAULT_MODEL


def standin(module: str, logdir: Path, **settings: Any) -> Standin:
    """A stand-in on a free port with ``settings`` applied."""
    started = Standin(module, logdir / f"{module.rsplit('.', 1)[-1]}.log").start()
    started.config(**settings)
    return started


def coordinator(pg: ThrowawayPostgres, rds: ThrowawayRedis, logdir: Path, ttl: float,
                web_deadline: float) -> CoordinatorProcess:
    return CoordinatorProcess(pg.dsn, rds, logdir / "coordinator.log", heartbeat_ttl=f"{ttl:g}",
                              web_task_deadline=f"{web_deadline:g}")


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
