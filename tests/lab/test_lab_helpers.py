"""lab/lab.py's and lab/drive.py's helpers shared by the container suites and benchmarks."""

from __future__ import annotations

import fcntl
import subprocess
from pathlib import Path

import pytest

from lab import drive, lab


def test_play_recap_reads_every_count_of_every_host():
    output = (
        "PLAY RECAP *********************************************************************\n"
        "lab-ai-core                : ok=43   changed=6    unreachable=0    failed=0    "
        "skipped=8    rescued=0    ignored=0   \n"
        "lab-worker-fast            : ok=61   changed=0    unreachable=1    failed=2    "
        "skipped=11   rescued=0    ignored=0\n\n"
        "[WARNING]: something after the recap\n"
    )
    recap = lab.play_recap(output)
    assert recap == {
        "lab-ai-core": {"ok": 43, "changed": 6, "unreachable": 0, "failed": 0, "skipped": 8,
                        "rescued": 0, "ignored": 0},
        "lab-worker-fast": {"ok": 61, "changed": 0, "unreachable": 1, "failed": 2,
                            "skipped": 11, "rescued": 0, "ignored": 0},
    }


def test_changed_results_counts_a_cut_run_without_a_recap():
    output = (
        "TASK [Preflight | read the registry] *******************************************\n"
        "ok: [lab-ai-core]\n"
        "changed: [lab-worker-fast] => (item=pg_hba.conf)\n"
        "  changed: [not a result line]\n"
        "RUNNING HANDLER [postgresql_access : Reload PostgreSQL] ***********************\n"
        "changed: [lab-ai-core]\n"
        "[ERROR]: User interrupted execution\n"
    )
    cut = drive.Run("migrate-web.yml", 1, output, 3.0, Path("cut.log"))
    assert (cut.recap, cut.changed_results()) == ({}, 2)
    quiet = drive.Run("migrate-web.yml", 1, "ok: [lab-ai-core]\nchanged=0\n", 1.0, Path("q"))
    assert quiet.changed_results() == 0


def test_a_fault_hook_whose_line_never_appears_fails_the_run(tmp_path):
    playbook = tmp_path / "one.yml"
    playbook.write_text("- name: One play\n  hosts: localhost\n  gather_facts: false\n"
                        "  tasks:\n    - name: Say hello\n      ansible.builtin.debug:\n"
                        "        msg: hello\n")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n")
    fired = []
    playbooks = drive.Playbooks(tmp_path / "logs")
    run = playbooks.run(str(playbook), inventory, on=[(r"^TASK \[Say hello", fired.append)])
    assert run.returncode == 0 and len(fired) == 1, run.output
    with pytest.raises(AssertionError, match=r"one\.yml never printed a line matching .*Say "
                       r"goodbye.*: the fault meant for that point did not happen \(exit 0; "):
        playbooks.run(str(playbook), inventory, on=[(r"^TASK \[Say goodbye", fired.append)])
    assert len(fired) == 1


def test_exclusive_makes_a_second_holder_wait(tmp_path, monkeypatch):
    monkeypatch.setattr(lab, "LOCK", tmp_path / "lab.lock")
    with lab.exclusive(), (tmp_path / "lab.lock").open("w") as other:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            taken = True
        except BlockingIOError:
            taken = False
    assert not taken
    with (tmp_path / "lab.lock").open("w") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again once the block ends


class FakePodman:
    """``lab.podman`` for one container whose ``rm --force`` fails ``failures`` times with
    exit status 2, as podman does when the stop races the container's own shutdown."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.present = True
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, *args: str, check: bool = True, capture: bool = False,
                 input_text: str | None = None) -> subprocess.CompletedProcess:
        self.calls.append(args)
        returncode, stderr = 0, ""
        if args[:2] == ("container", "exists"):
            returncode = 0 if self.present else 1
        elif args[0] == "rm":
            if self.failures:
                self.failures -= 1
                returncode, stderr = 2, "Error: cannot remove container: it is running"
            else:
                self.present = False
        return subprocess.CompletedProcess(["podman", *args], returncode, "", stderr)


def test_a_container_that_refuses_rm_once_is_killed_and_removed(monkeypatch):
    fake = FakePodman(failures=1)
    monkeypatch.setattr(lab, "podman", fake)
    monkeypatch.setattr(lab.time, "sleep", lambda seconds: None)
    lab.remove_container("lab-ai-core")
    assert not fake.present
    assert [call[0] for call in fake.calls] == ["rm", "container", "kill", "rm"]


def test_a_container_that_outlives_every_rm_is_named_with_podmans_words(monkeypatch):
    fake = FakePodman(failures=99)
    monkeypatch.setattr(lab, "podman", fake)
    monkeypatch.setattr(lab.time, "sleep", lambda seconds: None)
    with pytest.raises(SystemExit) as failed:
        lab.remove_container("lab-ai-core", attempts=3)
    assert str(failed.value) == (
        "lab-ai-core: podman rm --force failed 3 times (exit status 2): Error: cannot remove "
        "container: it is running; remove it with: podman rm --force lab-ai-core")
