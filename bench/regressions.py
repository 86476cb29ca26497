#!/usr/bin/env python3
"""Compare a fresh quick run of the main benchmarks with the figures stored in the repository.

Runs bench/dispatch.py (4 no-op workers: a closed-loop burst, then a fixed 200 tasks/s) and
bench/route_bench.py (POST /route alone) as subprocesses, each --runs times (alternating;
the median counts), reads the figures they print, and sets each beside the one stored in
bench/figures.json (the commit, date and load average it came from are in that file).
Every figure is printed, stored vs now, and those that moved by more than --threshold
percent (25 by default) are marked, better or worse. A tool for developers, not a timed
test: the figures follow the machine's load (printed and stored with them), so compare runs
taken at a similar load, and run again before believing a move. It exits 0 whatever moved;
1 if a benchmark failed or printed something this script cannot read.

    .venv/bin/python bench/regressions.py            # compare (about a minute a run)
    .venv/bin/python bench/regressions.py --runs 3   # medians of 3 alternating runs
    .venv/bin/python bench/regressions.py --save     # store this run's figures instead
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import common

FIGURES = common.BENCH / "figures.json"

# The commands measured: stored with the figures, as figures of other commands do not compare.
COMMANDS = {
    "dispatch": ["bench/dispatch.py", "--workers", "4", "--tasks", "2000", "--warmup", "300",
                 "--rate", "200", "--rate-tasks", "1000"],
    "route": ["bench/route_bench.py", "--tasks", "5000", "--concurrency", "64"],
}


@dataclass(frozen=True)
class Figure:
    name: str
    command: str  # a key of COMMANDS
    block: str  # regular expression of the heading line of the part of the output it is in
    line: str  # regular expression with one group, the number, in that part
    unit: str
    higher_is_better: bool


MS = r"([\d.]+) ms"
WANTED = (
    Figure("dispatch burst, 4 workers: tasks/s", "dispatch", r"closed loop, 4 worker",
           r"end to end\s+([\d.]+) tasks/s", "tasks/s", True),
    Figure("dispatch burst, 4 workers: CPU per task", "dispatch", r"closed loop, 4 worker",
           r"CPU per task ([\d.]+) ms", "ms", False),
    Figure("dispatch at 200/s: created → started p50", "dispatch", r"fixed rate",
           r"dispatch\s+p50 " + MS, "ms", False),
    Figure("dispatch at 200/s: created → started p99", "dispatch", r"fixed rate",
           r"dispatch\s+p50 [\d.]+ ms\s+p99 " + MS, "ms", False),
    Figure("dispatch at 200/s: CPU per task", "dispatch", r"fixed rate",
           r"CPU per task ([\d.]+) ms", "ms", False),
    Figure("POST /route: requests/s", "route", r"POST /route",
           r"throughput\s+([\d.]+) requests/s", "requests/s", True),
    Figure("POST /route: p50", "route", r"POST /route", r"latency\s+p50 " + MS, "ms", False),
    Figure("POST /route: p99", "route", r"POST /route",
           r"latency\s+p50 [\d.]+ ms\s+p99 " + MS, "ms", False),
    Figure("POST /route: Coordinator CPU per request", "route", r"POST /route",
           r"coordinator\s+([\d.]+) us CPU per request", "µs", False),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1,
                   help="runs of each benchmark, alternating; the median counts")
    p.add_argument("--threshold", type=float, default=25.0,
                   help="percent a figure must move to be marked")
    p.add_argument("--figures", type=Path, default=FIGURES,
                   help=f"the stored figures (default {FIGURES.relative_to(common.ROOT)})")
    p.add_argument("--save", action="store_true",
                   help="store this run's figures in --figures instead of comparing")
    p.add_argument("--note", default="", help="with --save: a note stored with the figures")
    p.add_argument("--verbose", "-v", action="store_true", help="print the benchmarks' output")
    return p.parse_args(argv)


def blocks(output: str) -> list[tuple[str, str]]:
    """(heading line, the indented lines under it) of a benchmark's output."""
    parts: list[tuple[str, list[str]]] = []
    for line in output.splitlines():
        if line.startswith(" ") and parts:
            parts[-1][1].append(line)
        else:
            parts.append((line, []))
    return [(head, "\n".join(body)) for head, body in parts]


def read_figures(command: str, output: str) -> dict[str, float]:
    """The WANTED figures of ``command`` in its output; ValueError if one is missing."""
    found = {}
    for figure in (f for f in WANTED if f.command == command):
        for head, body in blocks(output):
            match = re.search(figure.line, body) if re.match(figure.block, head) else None
            if match:
                found[figure.name] = float(match.group(1))
                break
        else:
            raise ValueError(f"{command}: no {figure.name!r} in its output")
    return found


def run(command: str, verbose: bool) -> tuple[dict[str, float], str]:
    """Run one benchmark; its figures and the load average just before it."""
    load = common.load_average()
    argv = [sys.executable, *COMMANDS[command]]
    print(f"  {' '.join(COMMANDS[command])}   (load average {load}) ...", end="", flush=True)
    started = time.monotonic()
    done = subprocess.run(argv, cwd=common.ROOT, capture_output=True, text=True)
    print(f" {time.monotonic() - started:.0f} s", flush=True)
    if verbose or done.returncode != 0:
        print("\n".join("    | " + line for line in (done.stdout + done.stderr).splitlines()))
    if done.returncode != 0:
        raise RuntimeError(f"{COMMANDS[command][0]} exited with {done.returncode}")
    return read_figures(command, done.stdout), load


def measure(runs: int, verbose: bool) -> tuple[dict[str, list[float]], list[str]]:
    values: dict[str, list[float]] = {f.name: [] for f in WANTED}
    loads = []
    for number in range(1, runs + 1):
        print(f"run {number} of {runs}:")
        for command in COMMANDS:
            found, load = run(command, verbose)
            loads.append(load)
            for name, value in found.items():
                values[name].append(value)
    return values, loads


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=common.ROOT, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def source_commit() -> str:
    """HEAD, with a note if the code the benchmarks run has uncommitted changes."""
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", "files", "bench", "lab")
    return f"{commit} (with uncommitted changes)" if changed else commit


def highest_load(loads: list[str]) -> float:
    ones = [float(load.split()[0]) for load in loads if load != "?"]
    return max(ones) if ones else float("nan")


def runs_of(values: list[float]) -> str:
    return f"  (runs {', '.join(f'{v:g}' for v in values)})" if len(values) > 1 else ""


def change(stored: float, now: float) -> float:
    return (now - stored) / stored * 100 if stored else float("inf")


def compare(stored: dict, values: dict[str, list[float]], threshold: float) -> list[str]:
    """Print every figure, stored vs now; the names of those that moved more than threshold."""
    moved = []
    print(f"\n{'figure':44} {'stored':>10} {'now':>10} {'change':>8}")
    for figure in WANTED:
        now = statistics.median(values[figure.name])
        spread = runs_of(values[figure.name])
        entry = stored["figures"].get(figure.name)
        if entry is None:
            print(f"{figure.name:44} {'-':>10} {now:10g} {'':>8}  {figure.unit}, not stored"
                  + spread)
            continue
        pct = change(entry["value"], now)
        mark = ""
        if abs(pct) > threshold:
            better = (pct > 0) == figure.higher_is_better
            mark = f"  MOVED, {'better' if better else 'worse'}"
            moved.append(figure.name)
        print(f"{figure.name:44} {entry['value']:10g} {now:10g} {pct:+7.0f}%  {figure.unit}"
              f"{mark}{spread}")
    return moved


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    common.stop_on_sigterm()
    stored = None
    if not args.save:
        try:
            stored = json.loads(args.figures.read_text())
        except FileNotFoundError:
            print(f"no stored figures in {args.figures}: run with --save first", file=sys.stderr)
            return 1
        if stored.get("commands") != {k: " ".join(v) for k, v in COMMANDS.items()}:
            print(f"note: {args.figures.name} was measured with other commands "
                  f"({stored.get('commands')}); the figures may not compare")
        print(f"stored: commit {stored['commit']}, {stored['date']}, load average "
              f"{stored['load_average']}" + (f"; {stored['note']}" if stored.get("note") else ""))
    commit = source_commit()
    print(f"now:    commit {commit}; before: {common.uptime()}")
    try:
        values, loads = measure(args.runs, args.verbose)
    except (RuntimeError, ValueError) as error:
        print(f"failed: {error}", file=sys.stderr)
        return 1
    after = common.uptime()
    load = highest_load(loads)
    print(f"after: {after}")
    print(f"load average (1 min) before each benchmark: {', '.join(loads)}")
    if load > 2:
        print(f"note: load average up to {load:g} (above 2, the machine has 2 cores): the "
              "figures are taken under load and noisy")
    if args.save:
        record = {
            "commit": commit,
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "load_average": ", ".join(loads),
            "runs": args.runs,
            "note": args.note,
            "commands": {k: " ".join(v) for k, v in COMMANDS.items()},
            "figures": {f.name: {"value": statistics.median(values[f.name]),
                                 "runs": values[f.name], "unit": f.unit,
                                 "better": "higher" if f.higher_is_better else "lower"}
                        for f in WANTED},
        }
        args.figures.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
        for figure in WANTED:
            print(f"  {figure.name:44} {record['figures'][figure.name]['value']:10g} "
                  f"{figure.unit}{runs_of(values[figure.name])}")
        print(f"stored in {args.figures}")
        return 0
    assert stored is not None
    moved = compare(stored, values, args.threshold)
    if moved:
        print(f"\n{len(moved)} of {len(WANTED)} figures moved by more than "
              f"{args.threshold:g} %: {', '.join(moved)}")
    else:
        print(f"\nnone of the {len(WANTED)} figures moved by more than {args.threshold:g} %")
    return 0


if __name__ == "__main__":
    common.exit_with(main)
