"""What the stand-ins share: the core they import, runs from a copied folder, start-up errors."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from lab.processes import REPO, clean_env

from .conftest import STANDINS

SYSTEM_PYTHON = Path("/usr/bin/python3")
# What lab/prepare.yml copies onto a host for each stand-in.
BESIDE = {"ollama": [STANDINS / "standin_core.py", REPO / "files" / "coordinator_contract.py"],
          "searxng": [STANDINS / "standin_core.py"],
          "ntfy": [STANDINS / "standin_core.py"]}


@pytest.mark.parametrize(
    ("module", "probe", "expected"),
    [("ollama", "/", "Ollama is running"), ("searxng", "/healthz", "OK"),
     ("ntfy", "/v1/health", '{"healthy":true}\n')],
)
def test_the_copied_files_run_on_the_standard_library(
    launch_file, tmp_path, module, probe, expected
):
    copy = tmp_path / "opt" / "standins" / f"{module}.py"
    copy.parent.mkdir(parents=True)
    for path in [STANDINS / f"{module}.py", *BESIDE[module]]:
        shutil.copy(path, copy.parent / path.name)
    # No PYTHON* variables, no user site, the system Python: only the stdlib and the folder
    # of the files, as the unit lab/prepare.yml writes runs them.
    python = [str(SYSTEM_PYTHON) if SYSTEM_PYTHON.exists() else sys.executable, "-E", "-s"]

    standin = launch_file(python, copy)

    response = requests.get(f"{standin.url}{probe}", timeout=5)
    assert (response.status_code, response.text) == (200, expected)
    assert standin.config()["standin"] == f"{module}-standin"
    assert f"{module}-standin: a stand-in for" in standin.log.read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--latency", "-1"], "ollama-standin: error: --latency: expected a number >= 0, got '-1'"),
        (
            ["--fail", "sometimes"],
            "ollama-standin: error: --fail: expected null (no failure) or one of "
            '"error", "timeout", got \'sometimes\'',
        ),
        (
            ["--pull-errors", "[1]"],
            "ollama-standin: error: --pull-errors: expected a JSON object from model name to "
            'error text, e.g. {"llama3.2": "pull model manifest: 412: ..."}, got [1]',
        ),
    ],
)
def test_a_bad_flag_stops_the_start_with_one_line(args, message):
    result = subprocess.run(
        [sys.executable, "-m", "lab.standins.ollama", *args],
        cwd=REPO,
        env=clean_env("STANDIN_"),
        capture_output=True,
        text=True,
        timeout=30,
    )

    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == message


def test_a_bad_environment_variable_names_the_variable():
    result = subprocess.run(
        [sys.executable, "-m", "lab.standins.searxng"],
        cwd=REPO,
        env=clean_env("STANDIN_", {"STANDIN_RESULTS": "many"}),
        capture_output=True,
        text=True,
        timeout=30,
    )

    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "searxng-standin: error: STANDIN_RESULTS: expected a whole number from 0 to 50, got 'many'"
    )


def test_a_bare_boolean_flag_means_true(launch):
    ollama = launch("ollama", "--fail-generate-only")

    assert ollama.config()["fail_generate_only"] is True
