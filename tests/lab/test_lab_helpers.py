"""lab/lab.py's helpers shared by the container suites and benchmarks."""

from __future__ import annotations

import fcntl

from lab import lab


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
