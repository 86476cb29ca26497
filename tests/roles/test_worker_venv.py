"""The worker role's shared install (tasks/install.yml) on a fake Mac: pip runs when the
shipped requirements differ from the ones the virtualenv was built from, and only then; code
shipped earlier in the same run still restarts the workers."""

from __future__ import annotations

import getpass
import json
import re
import sys

from .test_worker_darwin import BOTH, INFER_LABEL, WEB_LABEL, calls, changed, play

PIP_TASK = "python_service : Install the pinned dependencies into the virtualenv"


def pip_ran(output: str) -> bool:
    """Whether the pip task ran: its banner with a result other than skipping (ansible.cfg
    hides the banner of a task every host skips)."""
    at = output.find(f"TASK [{PIP_TASK}]")
    if at < 0:
        return False
    result = re.search(r"^(ok|changed|skipping|fatal): ", output[at:], re.M)
    assert result, output[at:at + 2000]
    return result.group(1) in ("ok", "changed")


def test_pip_runs_only_when_the_requirements_change(tmp_path):
    source = tmp_path / "files"
    source.mkdir()
    requirements = source / "requirements-worker.txt"
    requirements.write_text("# no dependency: the virtualenv alone\n")
    (source / "worker_program.py").write_text("")
    home = tmp_path / "mac"
    home.mkdir()
    # Its files are owned by the user the fake Mac's facts name: this test's own.
    install = {"worker_source_dir": str(source), "worker_files": ["worker_program.py"],
               "worker_python": sys.executable, "test_user": getpass.getuser()}

    def run() -> str:
        return play(home, [], entry="install", **install)

    first = run()
    assert pip_ran(first)
    stamp = home / "coordinator-worker" / "venv" / "requirements-installed.txt"
    assert stamp.read_text() == requirements.read_text()
    again = run()
    assert not pip_ran(again)
    assert changed(again) == 0
    requirements.write_text("# no dependency: the virtualenv alone, still\n")
    third = run()
    assert pip_ran(third)
    assert stamp.read_text() == requirements.read_text()
    # A virtualenv whose stamp is gone is asked again.
    stamp.unlink()
    assert pip_ran(run())
    assert stamp.exists()


def test_code_shipped_earlier_in_the_same_run_still_restarts_the_workers(tmp_path):
    # migrate-web.yml ships the code in its preflight (tasks_from: install), then runs the
    # whole role, which must not ship it again and forget that it changed: a worker already
    # running would keep the old code.
    source = tmp_path / "files"
    source.mkdir()
    (source / "requirements-worker.txt").write_text("# no dependency: the virtualenv alone\n")
    programs = ["worker_web.py", "worker_infer.py"]
    for name in programs:
        (source / name).write_text("# version 1\n")
    home = tmp_path / "mac"
    home.mkdir()
    (home / "launchctl.json").write_text(json.dumps({"loaded": [], "disabled": [], "calls": []}))
    settings = {"worker_source_dir": str(source), "worker_files": programs,
                "worker_python": sys.executable, "test_user": getpass.getuser(),
                "worker_register_check": False}

    def run() -> tuple[str, list[list[str]]]:
        before = len(calls(home))
        output = play(home, BOTH, entry="install_then_main", **settings)
        return output, calls(home)[before:]

    first, _ = run()
    assert changed(first) > 0
    # The role's own install pass is skipped: the preflight's already ran in this run.
    assert first.count("TASK [python_service : Ship the code]") == 1, first[-3000:]
    _, unchanged = run()
    assert not [c for c in unchanged if c[0] in ("kickstart", "bootstrap", "bootout")]
    (source / "worker_web.py").write_text("# version 2\n")
    _, restarted = run()
    for label in (WEB_LABEL, INFER_LABEL):
        # The plist changed too (WORKER_BUILD): reloaded, which restarts it.
        assert ["bootout", f"gui/501/{label}"] in restarted, restarted
        assert ["kickstart", "-k", f"gui/501/{label}"] not in restarted, restarted


def test_a_worker_another_run_left_on_older_code_restarts_at_the_next_converge(tmp_path):
    # A move ships new code to a host and restarts only the web worker there; the host's
    # inference worker keeps running the code it started with. Its environment still holds
    # the older code's digest, so the next converge of both restarts it.
    source = tmp_path / "files"
    source.mkdir()
    (source / "requirements-worker.txt").write_text("# no dependency: the virtualenv alone\n")
    programs = ["worker_web.py", "worker_infer.py"]
    for name in programs:
        (source / name).write_text("# version 1\n")
    home = tmp_path / "mac"
    home.mkdir()
    (home / "launchctl.json").write_text(json.dumps({"loaded": [], "disabled": [], "calls": []}))
    settings = {"worker_source_dir": str(source), "worker_files": programs,
                "worker_python": sys.executable, "test_user": getpass.getuser(),
                "worker_register_check": False}

    def run(instances: list[dict]) -> list[list[str]]:
        before = len(calls(home))
        play(home, instances, entry="install_then_main", **settings)
        return calls(home)[before:]

    def touched(run_calls: list[list[str]], label: str) -> bool:
        return any(c[0] in ("kickstart", "bootstrap", "bootout") and f"gui/501/{label}" in c
                   for c in run_calls)

    run(BOTH)
    (source / "worker_base_shared.py").write_text("")  # not shipped: no restart
    assert not touched(run(BOTH), WEB_LABEL)
    (source / "worker_infer.py").write_text("# version 2\n")
    web_only = run([w for w in BOTH if w["kind"] == "web"])
    assert touched(web_only, WEB_LABEL)
    assert not touched(web_only, INFER_LABEL)
    both = run(BOTH)
    assert touched(both, INFER_LABEL), both
    assert not touched(both, WEB_LABEL), both
    assert not touched(run(BOTH), INFER_LABEL)
