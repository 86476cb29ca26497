"""The short version of bench/faults.py: 250 mixed tasks through 3 inference and 2 web
workers while workers are killed with SIGKILL, a duplicate worker id is started, Redis is
wiped, PostgreSQL restarts and Ollama and SearXNG fail for a while.

The bar is the full run's (docs/faults.md): nothing lost, nothing worked to two results,
every failure has a readable reason. The Reaper bound, "every inference task of a killed
worker that stays down is re-dispatched within two heartbeat TTLs", is checked against
2 x TTL plus one Reaper pass (TTL/3), the design's bound with room for the pass that notices.
"""

from __future__ import annotations

from pathlib import Path

from bench.faults import Options, run


def test_no_task_is_lost_or_duplicated_under_faults(tmp_path: Path) -> None:
    opts = Options(tasks=250, duration=36, seed=7, ttl=3, kill_every=3, drain=90,
                   logdir=tmp_path)
    report = run(opts)

    assert report.lost == []
    assert report.duplicated == []
    assert report.unreadable == []
    assert report.late == []
    assert report.problems == []
    assert report.counts["done"] + report.counts["failed"] == sum(report.counts.values()) == 250
    assert report.counts["done"] > 0
    assert report.fallbacks > 0  # the Ollama outage hit web tasks
    # The faults really happened (the run would pass vacuously otherwise).
    assert sum(report.kills.values()) >= 5
    notes = "\n".join(report.faults)
    for text in ("already running on host", "Redis restarted with its data wiped",
                 "PostgreSQL restarted", "Ollama fails", "SearXNG fails"):
        assert text in notes
