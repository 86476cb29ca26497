"""The role's platform-independent task files, run on localhost: preflight and models.

The systemd and launchd parts need a real service manager; the Molecule scenario
(molecule/ollama) runs the Linux one in a systemd container.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from lab.standins.ollama import DEFAULT_MODEL

from .conftest import model_names

HF = DEFAULT_MODEL
DEBIAN = {
    "os_family": "Debian",
    "service_mgr": "systemd",
    "architecture": "x86_64",
    "user_dir": "/root",
}


def role_play(tasks_from: str, facts: dict[str, Any] = DEBIAN) -> list[dict[str, Any]]:
    return [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {"ansible_facts": facts},
            "tasks": [
                {
                    "ansible.builtin.include_role": {"name": "ollama", "tasks_from": tasks_from},
                }
            ],
        }
    ]


def pulls(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The per-model results of the role's pull task (the first looped task)."""
    return next(result["results"] for result in results if "results" in result)


def test_models_are_pulled_once_through_the_role(standin, run_playbook):
    settings = {
        "ollama_host": standin.url.removeprefix("http://"),
        "ollama_models": [HF, "llama3.2:3b"],
    }
    rc, results, output = run_playbook(role_play("models.yml"), settings)
    assert rc == 0, output
    # One read of Ollama's list; ollama_model runs only for the model it lacks.
    assert [(r["item"], r["changed"]) for r in pulls(results)] == [("llama3.2:3b", True)]
    assert model_names(standin) == sorted([HF, "llama3.2:3b"])

    rc, results, output = run_playbook(role_play("models.yml"), settings)
    assert rc == 0, output
    assert pulls(results) == []
    assert standin.config()["requests"]["/api/pull"] == 1


def test_models_pull_error_fails_the_play(standin, run_playbook):
    standin.config(pull_errors={"needs-mac:1b": "this model requires macOS"})
    settings = {
        "ollama_host": standin.url.removeprefix("http://"),
        "ollama_models": ["needs-mac:1b"],
    }
    rc, results, output = run_playbook(role_play("models.yml"), settings)
    assert rc != 0, output
    failed = pulls(results)[0]
    assert failed["msg"] == "Ollama could not pull needs-mac:1b: this model requires macOS"


def test_a_server_that_does_not_answer_fails_after_the_wait_and_check_mode_reports_it(
        run_playbook):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = {"ollama_host": f"127.0.0.1:{port}", "ollama_models": [HF],
                "ollama_api_wait_retries": 2, "ollama_api_wait_delay": 1}
    rc, results, output = run_playbook(role_play("models.yml"), settings)
    assert rc != 0, output
    [failed] = pulls(results)
    assert failed["msg"] == (
        f"Ollama not reachable at http://127.0.0.1:{port}: is the service running / is "
        "OLLAMA_HOST right? (Connection refused); waited 2 s")
    # In check mode nothing was started: asked once, said, not failed.
    rc, results, output = run_playbook(role_play("models.yml"), settings, check=True)
    assert rc == 0, output
    [reported] = pulls(results)
    assert reported["msg"].endswith("(Connection refused)"), reported
    assert not reported.get("failed"), reported


def test_preflight_accepts_good_settings(run_playbook):
    rc, _, output = run_playbook(
        role_play("preflight.yml"),
        {"ollama_host": "0.0.0.0:11434", "ollama_environment": {"OLLAMA_KEEP_ALIVE": "30m"}},
    )
    assert rc == 0, output


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"ollama_host": "http://0.0.0.0:11434"},
            "ollama_host must be ADDRESS:PORT such as 127.0.0.1:11434 or 0.0.0.0:11434 "
            "(no http://), got http://0.0.0.0:11434",
        ),
        (
            {"ollama_environment": {"OLLAMA_HOST": "0.0.0.0"}},
            "ollama_environment must map variable names to one-line values, without "
            "OLLAMA_HOST or OLLAMA_MODELS (set ollama_host and ollama_models_dir instead), "
            "got ['OLLAMA_HOST']",
        ),
        (
            {"ollama_models": ["llama3.2:3b"], "ollama_service_state": "stopped"},
            'ollama_models must be a list of model names such as "llama3.2:3b", and pulling '
            "needs ollama_service_state: started (got ['llama3.2:3b'] with "
            "ollama_service_state: stopped)",
        ),
        (
            {"ollama_install": False, "ollama_binary": "/nonexistent/ollama"},
            "ollama_install is false but /nonexistent/ollama is missing and ollama.service is "
            "missing: install Ollama (https://ollama.com/download/linux), point ollama_binary "
            "at it, or set ollama_install: true",
        ),
    ],
)
def test_preflight_says_what_to_fix(run_playbook, settings, message):
    rc, results, output = run_playbook(role_play("preflight.yml"), settings)
    assert rc != 0
    failed = [r for r in results if r.get("failed")]
    assert [r["msg"] for r in failed] == [message], output


def test_preflight_refuses_a_host_without_systemd(run_playbook):
    facts = {**DEBIAN, "service_mgr": "sysvinit"}
    rc, results, output = run_playbook(role_play("preflight.yml", facts))
    assert rc != 0
    assert [r["msg"] for r in results if r.get("failed")] == [
        "the ollama role supports Linux under systemd and macOS under launchd; localhost "
        "is Debian with sysvinit: remove it from the group that runs this role"
    ], output
