"""Fixtures starting the stand-ins as real subprocesses on free loopback ports."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from lab.processes import REPO, Standin

STANDINS = REPO / "lab" / "standins"


@pytest.fixture
def launch(tmp_path: Path) -> Iterator:
    """``launch("ollama", "--latency", "1", env={...})`` starts ``python -m lab.standins.X``."""
    started: list[Standin] = []

    def start(module: str, *args: str, env: dict[str, str] | None = None) -> Standin:
        log = tmp_path / f"{module}-{len(started)}.log"
        standin = Standin(f"lab.standins.{module}", log, *args, env=env, timeout=15)
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
        standin = Standin([*python, str(path)], tmp_path / f"{path.stem}-file.log", *args,
                          cwd=path.parent, timeout=15)
        started.append(standin)
        return standin.start()

    yield start
    for standin in started:
        standin.stop()
