#!/usr/bin/env python3
"""Figures of the probes on the lab: the seed's incident (a worker host loses its pg_hba.conf
line and its PostgreSQL sessions end) timed to the worker shown unhealthy in GET /workers and
to the notification the lab's ntfy receiver gets, with the program's default probe interval
(300 s, timeout 120 s) and with a short one (10 s, 10 s); and what the probes cost: the CPU
the Coordinator and the workers used over 90 s with each interval, and the probe tasks made.

The scenario is a lab test, tests/migrate/test_probe_incident.py, run on demand (it takes up
to 15 min with the default interval: the notification waits for a second failed probe); this
script runs it on a fresh lab and prints its
figures (.lab/logs/test-migrate/probe-figures.json):

    .venv/bin/python bench/probe_incident.py                  (about 25 min)
    .venv/bin/python bench/probe_incident.py --figures-only   (print the last run's figures)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / ".lab" / "logs" / "test-migrate" / "probe-figures.json"
TEST = "tests/migrate/test_probe_incident.py"


def table(figures: dict) -> list[str]:
    lines = ["| probe interval / timeout s | unhealthy after s | notified after s "
             "| healthy again s after the repair began | probes in 90 s "
             "| CPU s in 90 s (Coordinator + workers) |",
             "|---|---|---|---|---|---|"]
    for case, row in figures.items():
        lines.append(f"| {row['interval']:g} / {row['timeout']:g} ({case}) "
                     f"| {row['unhealthy_after']} | {row['notified_after']} "
                     f"| {row['healthy_again_after_repair_began']} | {row['probes_in_window']} "
                     f"| {row['cpu_in_window']} |")
    default, short = figures.get("default"), figures.get("short")
    if default and short and short["probes_in_window"] > default["probes_in_window"]:
        per_probe = ((short["cpu_in_window"] - default["cpu_in_window"])
                     / (short["probes_in_window"] - default["probes_in_window"]))
        per_hour = default["alive_workers"] * 3600 / default["interval"]
        lines.append(f"\nCPU per probe about {per_probe:.3f} s (Coordinator and worker); at the "
                     f"default interval, {per_hour:.0f} probe tasks an hour for "
                     f"{default['alive_workers']} workers, about {per_probe * per_hour:.1f} "
                     "CPU s an hour.")
    for case, row in figures.items():
        lines.append(f"\n{case}: shown as {row['reason']!r}; notified {row['problem']!r}, "
                     f"then {row['recovery']!r}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figures-only", action="store_true",
                        help="print the last run's figures without running the lab")
    parser.add_argument("--case", action="append", choices=("default", "short"),
                        help="run only this interval's case (repeatable; default: both)")
    args = parser.parse_args(argv)
    if not args.figures_only:
        FIGURES.unlink(missing_ok=True)
        chosen = ["-k", " or ".join(args.case)] if args.case else []
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-x", *chosen, TEST],
            cwd=ROOT, env={**os.environ, "LAB_PROBE_INCIDENT": "1"}, check=False)
        if done.returncode != 0:
            return done.returncode
    print("\n".join(table(json.loads(FIGURES.read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
