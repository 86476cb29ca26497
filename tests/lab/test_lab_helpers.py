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


def test_a_swallowed_ctrl_c_is_told_from_a_cut_and_from_a_run_never_pressed():
    # What a move printed when the press reached Ansible in a fork's callback (2026-12-06):
    # Python ignored the KeyboardInterrupt, and the rollback's last task ended the run.
    swallowed = (
        "TASK [Note whether the host answered: lab-worker-slow] *************************\n"
        "Exception ignored in: <function _releaseLock at 0x7fad76e5a0c0>\n"
        "Traceback (most recent call last):\n"
        '  File "/work/run/.venv/lib/python3.11/site-packages/ansible/executor/'
        'task_queue_manager.py", line 226, in _signal_handler\n'
        "    raise KeyboardInterrupt()\n"
        "KeyboardInterrupt: \n\n"
        "TASK [Fail with what went wrong and what is true now] **************************\n"
        "fatal: [lab-ai-core]: FAILED! => \n"
    )
    vain = drive.Run("migrate-web.yml", 2, swallowed, 40.0, Path("vain.log"))
    assert (vain.interrupted, vain.interrupt_swallowed) == (False, True)
    # Pressed again while it ran: cut, though the first press was swallowed.
    cut = drive.Run("migrate-web.yml", 99, swallowed + "[ERROR]: User interrupted execution\n",
                    20.0, Path("cut.log"))
    assert (cut.interrupted, cut.interrupt_swallowed) == (True, False)
    killed = drive.Run("migrate-web.yml", -2, "TASK [5. Undrain] ***\n", 9.0, Path("k.log"))
    assert (killed.interrupted, killed.interrupt_swallowed) == (True, False)
    never = drive.Run("migrate-web.yml", 2, "fatal: [lab-ai-core]: FAILED! => \n", 9.0,
                      Path("n.log"))
    assert (never.interrupted, never.interrupt_swallowed) == (False, False)


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


def test_a_run_whose_reader_stops_is_killed_and_its_output_kept(tmp_path):
    # A hook that fails (or pytest's time limit, raised in the reader) ends the reading; the
    # playbook, which would wait 600 s and then print more than a pipe holds, must not be
    # left for Popen's exit to wait on (2026-12-06: two labs' bring-ups hung so past their
    # time limit until the 30-minute timer).
    playbook = tmp_path / "long.yml"
    playbook.write_text("- name: Long play\n  hosts: localhost\n  gather_facts: false\n"
                        "  tasks:\n    - name: Wait long\n      ansible.builtin.pause:\n"
                        "        seconds: 600\n    - name: Print much\n"
                        "      ansible.builtin.debug:\n        msg: \"{{ 'x' * 200000 }}\"\n")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n")
    seen: list[subprocess.Popen] = []

    def give_up(proc: subprocess.Popen) -> None:
        seen.append(proc)
        raise RuntimeError("the test gave up")

    playbooks = drive.Playbooks(tmp_path / "logs")
    with pytest.raises(RuntimeError, match="the test gave up"):
        playbooks.run(str(playbook), inventory, on=[(r"^Pausing for 600 seconds", give_up)])
    assert seen[0].returncode == -9 and not playbooks.runs
    kept = (tmp_path / "logs" / "01-long-hosts.yml-unfinished.log").read_text()
    assert "PLAY [Long play]" in kept and "Print much" not in kept, kept


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


def test_documented_commands_are_the_sh_block_of_the_section_as_a_shell_reads_them(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Doc\n\n## Before\n\n```sh\necho not this one\n```\n\n"
        "## The section\n\nText.\n\n```yaml\n# a YAML comment, no heading\nkey: value\n```\n\n"
        "```sh\n# a comment\nA=1\n\ncurl -s \\\n  -d 'x' \\\n  https://h/route\n"
        "echo \"$A\" | cat  # a trailing comment stays\n```\n\n```sh\necho the second block\n```\n"
        "\n### A subsection\n\n## Empty\n\nNo block.\n\n## After\n\n```sh\necho later\n```\n")
    assert drive.documented_commands(doc, "## The section") == [
        "A=1", "curl -s \\\n  -d 'x' \\\n  https://h/route",
        'echo "$A" | cat  # a trailing comment stays']
    with pytest.raises(ValueError, match=r"the section '## Empty' of .* has no ```sh block"):
        drive.documented_commands(doc, "## Empty")
    with pytest.raises(ValueError, match="has no heading '## Missing'"):
        drive.documented_commands(doc, "## Missing")


def test_the_curl_proof_of_docs_operating_md_is_two_scripts_for_the_labs_coordinator():
    """What tests/migrate/test_readme.py runs: the doc's set-up lines, then its POST /route;
    the same lines, then its GET /task/<task_id>; inventory/home's address replaced."""
    home = drive.home_coordinator_address()
    route, read = drive.curl_proof("10.89.20.40")
    commands = drive.documented_commands(*drive.CURL_PROOF)
    setup = commands[:-2]
    assert [line.split("=", 1)[0] for line in setup] == ["CA", "TOKEN"]
    assert route == "\n".join([*setup, commands[-2].replace(home, "10.89.20.40")])
    assert read == "\n".join([*setup, commands[-1].replace(home, "10.89.20.40")])
    assert " -X POST https://10.89.20.40:8000/route " in route
    assert '"https://10.89.20.40:8000/task/<task_id>?wait=30"' in read
    assert home not in route + read


def test_a_curl_proof_without_its_two_commands_says_what_the_doc_gives(tmp_path, monkeypatch):
    doc = tmp_path / "operating.md"
    doc.write_text("## A task by hand, with curl\n\n```sh\nCA=ca.crt\n"
                   "curl -sS --cacert \"$CA\" -X POST https://192.168.0.40:8000/route\n```\n")
    monkeypatch.setattr(drive, "CURL_PROOF", (doc, "## A task by hand, with curl"))
    with pytest.raises(ValueError, match=r"does not give one curl POST /route and one GET "
                       r"/task/<task_id>, both to https://192\.168\.0\.40, after the lines they "
                       r"need: \['CA=ca.crt', "):
        drive.curl_proof("10.89.20.40")
