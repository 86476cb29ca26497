"""The demo: provision the container lab, route a web search, move the web worker, route again.

    ./dev demo            (or: .venv/bin/python -m lab.demo)

1. builds the lab (image cached; containers made fresh) and installs the stand-ins;
2. `site.yml` provisions it as the seed's cluster stands before its move: the web worker on
   lab-ai-core (AI-Core: the Coordinator's host, a CPU-like Ollama stand-in), and
   lab-macbookair (the MacBook Air, a Mac-shaped node) running an inference worker and
   Ollama under its launchd;
3. routes the design's test search and shows who answered, how fast, and the summary: real
   inference, by the lab's real model (lab/inference.py: SmolLM2-135M-Instruct, run by
   llama.cpp in the Ollama stand-ins), on the CPU each node has;
4. edits a copy of the lab inventory the way a user would (web_workers: the Mac) and runs
   `migrate-web.yml` with it;
5. routes the search again and prints both answers side by side.

The Ansible output of each step goes to .lab/logs/; the screen shows the step, the task
being run, and the recap. Everything talks only to the lab's own containers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import requests
import yaml

from lab import drive, inference, lab

REPO = Path(__file__).resolve().parent.parent
LAB_INVENTORY = REPO / "inventory" / "lab"
# Two levels below the repository, like inventory/lab, so the inventory's relative paths to
# .lab/secrets and .lab/wheelhouse resolve the same way: the cluster before the move (the web
# worker on the Coordinator's host, as on AI-Core) and after the user's edit.
SEED_INVENTORY = REPO / ".lab" / "inventory-seed"
MOVED_INVENTORY = REPO / ".lab" / "inventory-moved"
LOG_DIR = REPO / ".lab" / "logs"
PROMPT = "今日の東京の天気は？"
SUMMARY_FACT = "migrate_web_summary"  # the fact migrate-web.yml prints at its end
BOLD, DIM, GREEN, RED, RESET = "\033[1m", "\033[2m", "\033[32m", "\033[31m", "\033[0m"


@dataclass
class SearchOutcome:
    task_id: str
    status: str
    worker_host: str
    worker_id: str
    seconds: float
    fallback: bool
    answer: str
    model: str


def step(number: int, text: str) -> None:
    print(f"\n{BOLD}[{number}/6] {text}{RESET}", flush=True)


def run_playbook(playbook: str, inventory: Path, log_name: str) -> None:
    """Run a playbook, showing the current task on one line; the full log goes to a file."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / f"{log_name}.log"
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), playbook]
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    started = time.monotonic()
    recap: list[str] = []
    in_recap = False
    with open(log_path, "w") as log, subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if line.startswith(("TASK [", "PLAY [")):
                label = line.strip().rstrip("*").strip()[:100]
                elapsed = time.monotonic() - started
                print(f"\r\033[K  {DIM}{elapsed:5.0f}s {label}{RESET}", end="", flush=True)
            if line.startswith("PLAY RECAP"):
                in_recap = True
            elif in_recap and line.strip():
                recap.append(line.rstrip())
    print("\r\033[K", end="")
    elapsed = time.monotonic() - started
    for line in recap:
        print(f"  {line}")
    if proc.returncode != 0:
        tail = log_path.read_text().splitlines()[-25:]
        print(f"{RED}  {playbook} failed after {elapsed:.0f}s; last lines of {log_path}:{RESET}")
        for line in tail:
            print(f"    {line}")
        raise SystemExit(1)
    print(f"  {GREEN}{playbook} done in {elapsed:.0f}s{RESET} (log: {log_path.relative_to(REPO)})")


def route_search(url: str, token: str) -> SearchOutcome:
    headers = {"Authorization": f"Bearer {token}"}
    verify = lab.verify_for(url)
    routed = requests.post(
        f"{url}/route", json={"prompt": PROMPT, "task_type": "web_search"},
        headers=headers, timeout=10, verify=verify,
    )
    routed.raise_for_status()
    task_id = routed.json()["task_id"]
    deadline = time.monotonic() + 120
    task: dict = {}
    while time.monotonic() < deadline:
        answer = requests.get(f"{url}/task/{task_id}", params={"wait": 30},
                              headers=headers, timeout=40, verify=verify)
        answer.raise_for_status()
        task = answer.json()
        if task["status"] in ("done", "failed"):
            break
    if task.get("status") != "done":
        raise SystemExit(f"task {task_id} ended {task.get('status')!r}: {task.get('error')}")
    created = _timestamp(task["created_at"])
    finished = _timestamp(task["finished_at"])
    return SearchOutcome(
        task_id=task_id, status=task["status"], worker_host=task["worker_host"],
        worker_id=task["worker_id"], seconds=finished - created,
        fallback=bool(task["fallback"]), answer=task["result"] or "",
        model=task.get("answered_model") or "none (the search results, not a summary)",
    )


def _timestamp(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def show(outcome: SearchOutcome) -> None:
    answer = " ".join(outcome.answer.split())
    print(f"  task {outcome.task_id}: {outcome.status} in {outcome.seconds:.2f}s "
          f"by {outcome.worker_id} on {outcome.worker_host}, fallback {outcome.fallback}")
    print(f"  answer by {outcome.model}: {answer[:160]}{'…' if len(answer) > 160 else ''}")


def write_inventory(target: Path, web_host: str) -> None:
    """Copy the lab inventory with the web worker on ``web_host``, as a user edits theirs,
    and the lab's real model as the cluster's (the lab has no LFM2.5: the home inventory's)."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(LAB_INVENTORY, target)
    (target / "group_vars" / "all" / "model.yml").write_text(
        "---\n# The model the lab really has (lab/inference.py), in place of the home "
        f"cluster's.\ncluster_model: {inference.MODEL}\n")
    hosts_file = target / "hosts.yml"
    hosts = yaml.safe_load(hosts_file.read_text())
    hosts["all"]["children"]["web_workers"]["hosts"] = {web_host: None}
    hosts_file.write_text(yaml.safe_dump(hosts, sort_keys=False, allow_unicode=True))


def migration_summary(log: str) -> list[str]:
    """What migrate-web.yml's summary fact says, one line per item, from its output (the
    answer left out: the demo shows both answers side by side)."""
    summary = drive.printed_fact(log, SUMMARY_FACT)
    if summary is None:
        return [f"(no summary in the log: migrate-web.yml printed no {SUMMARY_FACT})"]
    return [
        f"task {summary['task_id']}: {summary['status']} in {summary['seconds']} s, processed by "
        f"{summary['worker_host']} ({summary['worker_id']}), fallback {summary['fallback']}",
        f"before: {', '.join(summary['before']) or 'no host'}",
        f"after: {', '.join(summary['after'])}",
        f"model: {summary['model']}",
        f"registry: {summary['registry']}",
        *summary["notes"],
    ]


def read_token() -> str:
    token_file = lab.SECRETS_DIR / "coordinator_token"
    return token_file.read_text().split()[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--to", default="lab-macbookair",
                        help="host the web worker moves to (default: lab-macbookair, the Mac)")
    args = parser.parse_args(argv)
    the_lab = lab.load_lab()
    if args.to not in the_lab.nodes:
        parser.error(f"--to {args.to}: not a lab host (hosts: {', '.join(the_lab.nodes)})")
    seed_host = next(iter(yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text())
                          ["all"]["children"]["coordinator"]["hosts"]))
    if args.to == seed_host:
        parser.error(f"--to {args.to}: the web worker starts there; name another lab host")
    started = time.monotonic()

    step(1, "Build the lab: a node image (cached) and fresh systemd containers")
    lab.destroy(the_lab)
    lab.create(the_lab)
    run_playbook("lab/prepare.yml", LAB_INVENTORY, "1-prepare")

    write_inventory(SEED_INVENTORY, seed_host)
    step(2, f"Provision the cluster with site.yml (web worker on {seed_host}, the Coordinator's "
            f"host; {SEED_INVENTORY.relative_to(REPO)})")
    run_playbook("site.yml", SEED_INVENTORY, "2-site")

    url, token = lab.load_lab().coordinator_url, read_token()
    step(3, f"Route a web search through the Coordinator at {url}: {PROMPT}")
    before = route_search(url, token)
    show(before)

    step(4, f"Edit the inventory: web_workers becomes {args.to} "
            f"({MOVED_INVENTORY.relative_to(REPO)}/hosts.yml)")
    write_inventory(MOVED_INVENTORY, args.to)
    print(f"  web_workers: {seed_host} -> {args.to}")

    step(5, "Move the web worker with migrate-web.yml")
    run_playbook("migrate-web.yml", MOVED_INVENTORY, "5-migrate-web")
    for line in migration_summary((LOG_DIR / "5-migrate-web.log").read_text()):
        print(f"  {line}")

    step(6, "Route the same search again")
    after = route_search(url, token)
    show(after)

    cpus = {the_lab.nodes[name]: f"{count:g} CPU" for name, count in the_lab.cpus.items()}
    print(f"\n{BOLD}Before and after the move{RESET} (seconds of real inference: "
          f"{inference.MODEL} run by llama.cpp on each host's own CPUs)")
    print(f"  {'':8} {'processed by':42} {'seconds':>8}  fallback")
    for name, outcome in (("before", before), ("after", after)):
        where = (f"{outcome.worker_host} ({outcome.worker_id}, "
                 f"{cpus.get(outcome.worker_host, 'every CPU')})")
        print(f"  {name:8} {where:42} {outcome.seconds:8.2f}  {outcome.fallback}")
    print(f"\nDemo finished in {time.monotonic() - started:.0f}s. The lab keeps running:")
    print(f"  .venv/bin/ansible-playbook -i {MOVED_INVENTORY.relative_to(REPO)} migrate-web.yml"
          "   # re-run: changes nothing, verifies again")
    print("  .venv/bin/python -m lab.lab destroy   # tear the lab down")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
