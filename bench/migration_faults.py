#!/usr/bin/env python3
"""Figures of the move under faults: runs the lab suite (tests/migrate) and prints, per case,
the wall time of each playbook run and what became of the web tasks routed every 2 s through
it: routed, refused (no task made), done, failed, and the longest time `tasks:web` held a
task no worker took (a time without a consumer).

The scenarios are the tests' own (tests/migrate/test_faults.py and the others), so the figures
describe exactly what ./dev test checks; the tests assert no timing, they only record these
(.lab/logs/test-migrate*/figures.json, one for each lab). The figures in docs/benchmarks.md
come from:

    .venv/bin/python bench/migration_faults.py            (about 15 min: builds a fresh lab)
    .venv/bin/python bench/migration_faults.py --figures-only   (print the last run's figures)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / ".lab" / "logs"
# One file for each lab the suite ran on (tests/migrate/conftest.py).
FIGURES = "test-migrate*/figures.json"


def table(figures: dict) -> list[str]:
    runs: dict[str, list[dict]] = defaultdict(list)
    for timing in figures["playbooks"]:
        runs[timing["test"] or "(lab bring-up)"].append(timing)
    traffic = {row["test"]: row for row in figures["traffic"]}
    lines = ["| case | playbook runs (s, exit code) | routed | refused | done | failed "
             "| longest untaken s |", "|---|---|---|---|---|---|---|"]
    for test, timings in runs.items():
        shown = ", ".join(f"{t['playbook']} {t['seconds']:.1f} ({t['returncode']})"
                          for t in timings)
        row = traffic.get(test)
        figures_row = (f"{row['routed']} | {row['refused']} | {row['done']} | {row['failed']} | "
                       f"{row['longest_untaken']:.1f}") if row else "| | | |"
        lines.append(f"| {test} | {shown} | {figures_row} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--figures-only", action="store_true",
                        help="print the figures of the last run without running the suite")
    args = parser.parse_args(argv)
    if not args.figures_only:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "tests/migrate"], cwd=ROOT, check=False)
        if done.returncode != 0:
            print(f"tests/migrate failed (exit {done.returncode}): the figures below are "
                  "from the cases that ran", file=sys.stderr)
    files = sorted(LOGS.glob(FIGURES))
    if not files:
        print(f"no figures: no {LOGS / FIGURES} (the lab suite did not run)", file=sys.stderr)
        return 1
    figures: dict[str, list] = {"playbooks": [], "traffic": []}
    for path in files:
        for key, rows in json.loads(path.read_text()).items():
            figures[key] += rows
    print("\n".join(table(figures)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
