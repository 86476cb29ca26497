"""Fixtures for the ollama tests: the Ollama stand-in as a subprocess, and Ansible runners.

Ansible runs from a temporary directory with every setting given as ANSIBLE_* variables, so
the tests do not depend on the repository's ansible.cfg.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lab.processes import Standin
from lab.standins.ollama import DEFAULT_MODEL
from lab.throwaway import free_port

from ..library_kit import REPO, VENV_BIN, module_env

ROLE = REPO / "roles" / "ollama"


@pytest.fixture
def closed_url() -> str:
    """A loopback URL where nothing listens (the port was free a moment ago)."""
    return f"http://127.0.0.1:{free_port()}"


def model_names(standin: Standin) -> list[str]:
    """The models the stand-in has, sorted, as ``ollama list`` shows them."""
    return sorted(entry["name"] for entry in standin.get("/api/tags")["models"])


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[Standin]:
    """A fresh stand-in with one model present; pulls take no time."""
    with Standin("lab.standins.ollama", tmp_path / "standin.log", "--pull-seconds", "0",
                 "--models", DEFAULT_MODEL) as up:
        yield up


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
            command, cwd=tmp_path, env=module_env(tmp_path), capture_output=True, text=True
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
        check: bool = False,
    ) -> tuple[int, list[dict[str, Any]], str]:
        path = tmp_path / "playbook.yml"
        path.write_text(json.dumps(playbook))
        command = [str(VENV_BIN / "ansible-playbook"), str(path), *(["--check"] if check else [])]
        if extra_vars is not None:
            command += ["--extra-vars", json.dumps(extra_vars)]
        env = module_env(tmp_path)
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
