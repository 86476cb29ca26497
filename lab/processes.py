"""Programs started as a user starts them, for the tests and bench/: a subprocess with its
output in a file (``Process``), a stand-in server (``Standin``) and the Coordinator
(``CoordinatorProcess``), each on a free loopback port.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lab.throwaway import Certificates, ThrowawayRedis, free_port, wait_until

REPO = Path(__file__).resolve().parent.parent
FILES = REPO / "files"


def clean_env(prefix: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without ``prefix``* variables (a developer's shell must not
    leak settings into the program under test), plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(prefix)}
    env.update(extra or {})
    return env


def soft_open_files(limit: int | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` that starts the child with soft open-file limit ``limit`` (its hard
    limit kept), as systemd starts services with 1024; None leaves the inherited limit."""
    if limit is None:
        return None

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    return lower


def stop_process(proc: subprocess.Popen[Any], grace: float = 15,
                 signum: int = signal.SIGTERM, group: bool = False) -> int:
    """Stop ``proc`` and return its exit status: ``signum`` (its clean stop), then SIGKILL
    after ``grace`` seconds (0: SIGKILL at once). ``group``: SIGKILL its whole process group
    at the end in any case, which also takes children it left behind; for a process started
    in a session of its own (pgid == pid), so only ours."""
    if proc.poll() is None:
        proc.send_signal(signum if grace else signal.SIGKILL)
        try:
            proc.wait(grace or 10)
        except subprocess.TimeoutExpired:
            proc.kill()
    if group:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait(10)


class Process:
    """One subprocess, stdout and stderr in ``log``, so a test reads what a user would see."""

    def __init__(self, args: Sequence[str], env: dict[str, str], log: Path, cwd: Path,
                 append: bool = False, open_files: int | None = None) -> None:
        self.args = list(args)
        self.log_path = log
        with open(log, "ab" if append else "wb") as out:
            self.proc = subprocess.Popen(self.args, env=env, cwd=cwd, stdout=out,
                                         stderr=subprocess.STDOUT,
                                         preexec_fn=soft_open_files(open_files))
        self.pid = self.proc.pid

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def lines(self) -> list[str]:
        return self.output().splitlines()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_for(self, text: str, timeout: float = 30) -> str:
        """The first output line containing ``text``; fails when the process exits first."""
        def found() -> str | None:
            line = next((line for line in self.lines() if text in line), None)
            if line is None and not self.alive():
                raise AssertionError(f"process exited ({self.proc.returncode}) before "
                                     f"logging {text!r}:\n{self.output()}")
            return line

        return wait_until(found, timeout, f"{text!r} in {self.log_path.name}")

    def wait_exit(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout)

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def stop(self, grace: float = 15) -> None:
        """SIGTERM, and SIGKILL after ``grace`` seconds (0: at once)."""
        stop_process(self.proc, grace)


class Standin:
    """A stand-in (lab/standins) on a free loopback port, answering its control endpoint.

    ``command`` is a module (``lab.standins.ollama``, run with this Python) or an argv; ``env``
    is added to this environment without its STANDIN_* settings. ``restart()`` keeps its port
    and arguments (and so its state file)."""

    def __init__(self, command: str | Sequence[str], log: Path, *args: str,
                 env: dict[str, str] | None = None, cwd: Path = REPO,
                 timeout: float = 20) -> None:
        self.command = ([sys.executable, "-m", command] if isinstance(command, str)
                        else list(command))
        self.args = list(args)
        self.log = log
        self.env = clean_env("STANDIN_", env)
        self.cwd = cwd
        self.timeout = timeout
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: Process | None = None

    def start(self) -> Standin:
        self.process = Process([*self.command, "--bind", "127.0.0.1", "--port",
                                str(self.port), *self.args], self.env, self.log, self.cwd,
                               append=True)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                self.config()
                return self
            except OSError:
                if not self.process.alive():
                    raise RuntimeError(f"stand-in exited at start:\n{self.log.read_text()}"
                                       ) from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"stand-in did not answer within {self.timeout:g} s:\n"
                                       f"{self.log.read_text()}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace=5)

    def restart(self) -> Standin:
        self.stop()
        return self.start()

    def __enter__(self) -> Standin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def config(self, **settings: Any) -> dict[str, Any]:
        """Read (no arguments) or change the stand-in's settings (``/_standin/config``)."""
        request = urllib.request.Request(
            f"{self.url}/_standin/config",
            data=json.dumps(settings).encode() if settings else None,
            method="POST" if settings else "GET",
            headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise AssertionError(f"the stand-in refused {settings}: {error.read().decode()}"
                                 ) from None

    def get(self, path: str) -> Any:
        """A JSON answer of the stand-in's own API (``/api/tags``, ``/search?...``)."""
        with urllib.request.urlopen(f"{self.url}{path}", timeout=10) as response:
            return json.loads(response.read())


class CoordinatorProcess:
    """``python -m coordinator`` from files/, as its service runs it, on a free port; ready
    once /health answers 200. ``settings`` are COORDINATOR_* variables without the prefix
    (``heartbeat_ttl=2``); none is inherited from this environment. ``open_files``: the soft
    open-file limit it starts with (see ``soft_open_files``). ``redis_login``: the Redis ACL
    user (name, password) it logs in as, instead of ``redis``'s requirepass password.
    ``tls``: the certificates (``lab.throwaway.make_certificates``) it serves HTTPS with;
    ``url`` is then https:// and ``ca_file`` the CA that verifies it."""

    def __init__(self, dsn: str, redis: ThrowawayRedis, log: Path, *,
                 token: str | None = None, port: int | None = None, timeout: float = 60,
                 open_files: int | None = None, redis_login: tuple[str, str] | None = None,
                 tls: Certificates | None = None, **settings: Any) -> None:
        self.port = port or free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.ca_file = str(tls.ca) if tls else None
        self.token = token
        self.log = log
        # No worker probes unless asked for (``probe_interval=...``): a test counts the
        # tasks, and the stand-ins' requests, of its own making.
        settings.setdefault("probe_interval", 0)
        variables = {f"COORDINATOR_{name.upper()}": str(value)
                     for name, value in settings.items()}
        variables.update(PG_DSN=dsn, REDIS_HOST="127.0.0.1", REDIS_PORT=str(redis.port),
                         REDIS_PASSWORD=redis.password, COORDINATOR_PORT=str(self.port))
        if redis_login is not None:  # an ACL user (name, password) instead of requirepass
            variables.update(REDIS_USERNAME=redis_login[0], REDIS_PASSWORD=redis_login[1])
        if token:
            variables["COORDINATOR_TOKEN"] = token
        if tls is not None:
            variables.update(COORDINATOR_TLS_CERT=str(tls.cert), COORDINATOR_TLS_KEY=str(tls.key))
        self.process = Process([sys.executable, "-m", "coordinator"],
                               clean_env("COORDINATOR_", variables), log, FILES,
                               open_files=open_files)
        try:
            wait_until(self._healthy, timeout, f"the Coordinator on port {self.port}")
        except BaseException:
            self.process.stop(grace=0)
            raise

    def _healthy(self) -> bool:
        if not self.process.alive():
            raise AssertionError(f"the Coordinator exited ({self.process.proc.returncode}):\n"
                                 f"{self.process.output()}")
        try:
            context = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None
            with urllib.request.urlopen(f"{self.url}/health", timeout=2,
                                        context=context) as answer:
                return answer.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        self.process.stop()

    def __enter__(self) -> CoordinatorProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
