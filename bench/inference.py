#!/usr/bin/env python3
"""Benchmark the lab's real inference: what one web summary costs each model of the kit
(lab/inference.py) on 1 and 2 CPUs, through the Ollama stand-in as the workers reach it.

For each model and CPU count, starts the stand-in (its registry, pinned to that many CPUs
with taskset, threads following) and sends the web worker's own summary request N times:
files/worker_web.py's prompt over the SearXNG stand-in's results for a question numbered
like the lab's traffic (so no two prompts share the prompt cache past the question), the
worker's num_predict and Ollama's default options. Prints per model and CPUs the medians
of the whole answer, the prompt evaluation (tokens, tokens/s), the generation (tokens,
tokens/s), and the CPU seconds the stand-in used per summary. The figures in
docs/lab.md and docs/benchmarks.md come from:

    .venv/bin/python bench/inference.py --runs 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import common  # noqa: F401 - puts the repository and files/ on sys.path
import requests
import worker_web

from lab import inference
from lab.standins import searxng
from lab.throwaway import free_port, wait_for_port

QUESTION = "今日の東京の天気は？"
MODELS = (inference.MODEL, *inference.REQUANTISED)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="summaries per model and CPUs")
    parser.add_argument("--cpus", type=int, nargs="+", default=[1, 2])
    return parser.parse_args(argv)


def summary_request(model: str, number: int) -> dict:
    question = f"{QUESTION} #{number}"
    results = searxng.make_results(question, worker_web.SEARCH_RESULTS_USED, 1, "general", {})
    return {"model": model, "stream": False,
            "prompt": worker_web.summary_prompt(question, results),
            "options": {"num_predict": worker_web.SUMMARY_MAX_TOKENS}}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(model: str, cpus: int, runs: int) -> dict[str, float]:
    port = free_port()
    standin = subprocess.Popen(
        ["taskset", "--cpu-list", f"0-{cpus - 1}", sys.executable, "-m", "lab.standins.ollama",
         "--port", str(port), "--registry", str(inference.INDEX), "--models", model],
        env={**os.environ, "PYTHONPATH": str(inference.SITE)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, 15, "the Ollama stand-in")
        url = f"http://127.0.0.1:{port}/api/generate"
        requests.post(url, json={"model": model, "prompt": ""}, timeout=60).raise_for_status()
        rows = []
        for number in range(runs):
            used = cpu_seconds(standin.pid)
            started = time.monotonic()
            answer = requests.post(url, json=summary_request(model, number), timeout=600).json()
            rows.append({"seconds": time.monotonic() - started,
                         "cpu": cpu_seconds(standin.pid) - used,
                         "prompt": answer["prompt_eval_count"],
                         "prompt_rate": answer["prompt_eval_count"]
                         / (answer["prompt_eval_duration"] / 1e9),
                         "tokens": answer["eval_count"],
                         "eval_rate": answer["eval_count"] / (answer["eval_duration"] / 1e9)})
    finally:
        standin.terminate()
        standin.wait(10)
    return {key: statistics.median(row[key] for row in rows) for key in rows[0]}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    inference.ensure()
    print(f"{'model':50} {'CPUs':>4} {'answer s':>8} {'CPU s':>6} {'prompt':>6} "
          f"{'tok/s':>6} {'tokens':>6} {'tok/s':>6}   (medians of {args.runs})")
    for model in MODELS:
        for cpus in args.cpus:
            m = measure(model, cpus, args.runs)
            print(f"{model:50} {cpus:4d} {m['seconds']:8.2f} {m['cpu']:6.2f} "
                  f"{m['prompt']:6.0f} {m['prompt_rate']:6.0f} {m['tokens']:6.0f} "
                  f"{m['eval_rate']:6.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
