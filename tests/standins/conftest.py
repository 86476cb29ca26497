"""Fixtures starting the stand-ins as real subprocesses (see standin_process.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from .standin_process import REPO, Standin, clean_env


@pytest.fixture
def launch(tmp_path: Path) -> Iterator:
    """``launch("ollama", "--latency", "1", env={...})`` starts ``python -m lab.standins.X``."""
    started: list[Standin] = []

    def start(module: str, *args: str, env: dict[str, str] | None = None) -> Standin:
        command = [sys.executable, "-m", f"lab.standins.{module}", *args]
        log = tmp_path / f"{module}-{len(started)}.log"
        standin = Standin(command, clean_env(env), REPO, log)
        started.append(standin)
        return standin.start()

    yield start
    for standin in started:
        standin.stop()


@pytest.fixture
def launch_file(tmp_path: Path) -> Iterator:
    """Start a stand-in file copied alone elsewhere, by a given Python, as a lab host would."""
    started: list[Standin] = []

    def start(python: Sequence[str], path: Path, *args: str) -> Standin:
        log = tmp_path / f"{path.stem}-file.log"
        standin = Standin([*python, str(path), *args], clean_env(), path.parent, log)
        started.append(standin)
        return standin.start()

    yield start
    for standin in started:
        standin.stop()
