"""lab/lab.py's and lab/drive.py's helpers shared by the container suites and benchmarks."""

from __future__ import annotations

import fcntl
from pathlib import Path

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
