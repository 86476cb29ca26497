"""Fixtures for the ollama tests: the Ollama stand-in as a subprocess, and Ansible runners.

Ansible runs from a temporary directory with every setting given as ANSIBLE_* variables, so
the tests do not depend on the repository's ansible.cfg.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
ROLE = REPO / "roles" / "ollama"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def closed_url() -> str:
    """A loopback URL where nothing listens (the port was free a moment ago)."""
    return f"http://127.0.0.1:{free_port()}"


@dataclass
class Standin:
    url: str
    process: subprocess.Popen[bytes]

    def config(self, **changes: Any) -> dict[str, Any]:
        """Read (no arguments) or change the stand-in's settings."""
        data = json.dumps(changes).encode() if changes else None
        request = urllib.request.Request(
            self.url + "/_standin/config",
            data=data,
            method="POST" if changes else "GET",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def tags(self) -> list[str]:
        with urllib.request.urlopen(self.url + "/api/tags", timeout=10) as response:
            return sorted(entry["name"] for entry in json.loads(response.read())["models"])


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[Standin]:
    """A fresh stand-in with one model present; pulls take no time."""
    port = free_port()
    log = (tmp_path / "standin.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lab.standins.ollama",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--pull-seconds",
            "0",
            "--models",
            "hf.co/LiquidAI/LFM2.5-1.2B-JP-GGUF:Q4_K_M",
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Standin(f"http://127.0.0.1:{port}", process)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                server.config()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "the Ollama stand-in did not start: "
                        + (tmp_path / "standin.log").read_text()
                    ) from None
                time.sleep(0.1)
        yield server
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def ansible_env(workdir: Path) -> dict[str, str]:
    # An empty config of our own, so that no ansible.cfg (the repository's or the user's) applies.
    config = workdir / "ansible.cfg"
    config.write_text("[defaults]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        {
            "ANSIBLE_CONFIG": str(config),
            "ANSIBLE_HOME": str(workdir / "ansible-home"),
            "ANSIBLE_LIBRARY": str(REPO / "library"),
            "ANSIBLE_MODULE_UTILS": str(REPO / "module_utils"),
            "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
            "ANSIBLE_LOCALHOST_WARNING": "false",
            "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "true",
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "ANSIBLE_NOCOLOR": "true",
            "ANSIBLE_RETRY_FILES_ENABLED": "false",
            "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    return env


def host_results(stdout: str) -> list[dict[str, Any]]:
    """Every task result for localhost from the json callback's output, in order."""
    document = json.loads(stdout)
    return [
        task["hosts"]["localhost"]
        for play in document["plays"]
        for task in play["tasks"]
        if "localhost" in task["hosts"]
    ]


@pytest.fixture
def run_module(tmp_path: Path):
    """Run ollama_model once with ``ansible localhost -m``; returns the task's result."""

    def run(args: dict[str, Any], check: bool = False) -> dict[str, Any]:
        command = [
            str(VENV_BIN / "ansible"),
            "localhost",
            "-m",
            "ollama_model",
            "-a",
            json.dumps(args),
        ]
        if check:
            command.append("--check")
        completed = subprocess.run(
            command, cwd=tmp_path, env=ansible_env(tmp_path), capture_output=True, text=True
        )
        results = host_results(completed.stdout)
        assert len(results) == 1, completed.stdout + completed.stderr
        result = results[0]
        # Exit status and result must agree, or the task outcome would be misreported.
        assert (completed.returncode != 0) == bool(result.get("failed")), completed.stderr
        return result

    return run


@pytest.fixture
def run_playbook(tmp_path: Path):
    """Write and run a playbook on localhost; returns (exit status, task results, output)."""

    def run(
        playbook: list[dict[str, Any]],
        extra_vars: dict[str, Any] | None = None,
        path_prefix: Path | None = None,
    ) -> tuple[int, list[dict[str, Any]], str]:
        path = tmp_path / "playbook.yml"
        path.write_text(json.dumps(playbook))
        command = [str(VENV_BIN / "ansible-playbook"), str(path)]
        if extra_vars is not None:
            command += ["--extra-vars", json.dumps(extra_vars)]
        env = ansible_env(tmp_path)
        if path_prefix is not None:
            # Test doubles of host commands (e.g. launchctl) found first on PATH.
            env["PATH"] = f"{path_prefix}{os.pathsep}{env['PATH']}"
        completed = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
        return (
            completed.returncode,
            host_results(completed.stdout),
            completed.stdout + completed.stderr,
        )

    return run
