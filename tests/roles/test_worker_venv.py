"""The worker role's shared virtualenv (tasks/install.yml) on a fake Mac: pip runs when the
shipped requirements differ from the ones the virtualenv was built from, and only then."""

from __future__ import annotations

import getpass
import re
import sys

from .test_worker_darwin import changed, play

PIP_TASK = "worker : Install the pinned dependencies into the shared virtualenv"


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
