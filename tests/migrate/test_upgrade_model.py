"""upgrade-model.yml on the shared lab (conftest.py), with web tasks routed every 2 s
throughout and none lost (except while the real models are measured: that traffic would
take the same CPU), and the Ollama stand-ins serving real models where their difference
matters:

- a model that does not load (the real-inference kit's file cut short: llama.cpp refuses
  it) stops the run at its warm-up on the canary, nothing switched;
- between two real models (the kit's Q4_1 and its F32, greedy answers of the same length on
  the Coordinator's host's one CPU), the slower one fails the p95 gate on its own compute: the
  canary goes back to the old model, verified;
- a good model passes and rolls to every host, each verified by a routed task answered by
  it; a chat asking for the old model by name is still served (every Ollama keeps it), one
  naming none gets the new one; run again, it changes nothing and verifies; site.yml
  afterwards changes nothing.
"""

from __future__ import annotations

import json
import re
import time

import requests

from lab import inference
from lab.standins.ollama import DEFAULT_MODEL

from .conftest import WORKER_HOSTS

UPGRADE = ("-e", "upgrade_model_tasks=6")
HOSTS = ("lab-ai-core", *WORKER_HOSTS)
BROKEN, GOOD = inference.TRUNCATED, "good-model:1b"
# Two real models of the same weights: F32 takes two (an AVX-512 EPYC, 2026-12-07: 64 tokens
# in 1.61 against 0.81 s on one CPU) to five times Q4_1's seconds a token (lab/inference.py),
# once the model's compute is most of a chat's time. The canary's one CPU is its own whatever
# the other suites run (lab/lab.py, dedicated_cpu_parent): without it they met (docs/lab.md).
REAL, REAL_SLOWER = inference.MODEL, "lab/smollm2-135m-instruct:f32"
# The Coordinator's host: one CPU, and an inference worker only (the web worker is on a
# worker host), so its test tasks are chats that only the model's compute tells apart.
REAL_CANARY = "lab-ai-core"
# The test tasks' options and question: greedy, and an answer longer than num_predict, so
# that each chat is that many tokens of either model (a question answered in a dozen tokens
# left the routing's fixed cost most of a chat's time, and the two models within the
# spread of a loaded machine: 2026-12-07 00:40, F32 p95 1.32 s against Q4_1's 1.87 s).
GREEDY = {"temperature": 0, "seed": 42, "num_predict": 64}
LONG_ANSWER = "Count from 1 to 100, separated by commas."


def running_models(cluster) -> dict[str, set[str]]:
    """host -> the OLLAMA_MODEL of every worker environment (env file or plist) it has
    (hosts without a worker left out)."""
    found = {}
    for host in HOSTS:
        node = cluster.nodes[host]
        lines = [line for worker in ("inference-worker", "web-worker")
                 if node.worker_installed(worker)
                 for line in node.worker_env(worker).splitlines()
                 if line.startswith("OLLAMA_MODEL=")]
        if lines:
            found[host] = {line.split("=", 1)[1].strip('"') for line in lines}
    return found


def chat(cluster, **request: str) -> dict:
    """A chat routed through the Coordinator, once done or failed."""
    answer = requests.post(f"{cluster.coordinator.url}/route", headers=cluster.coordinator.headers,
                           json={"prompt": "こんにちは", "task_type": "chat", **request},
                           timeout=10, verify=cluster.coordinator.verify)
    answer.raise_for_status()
    return cluster.coordinator.finished(answer.json()["task_id"], time.monotonic() + 60)


def upgrade(cluster, model: str, *args: str):
    web = cluster.web_host()
    inventory = cluster.inventory(web, "model-" + re.sub(r"\W+", "-", model.split(":")[0]),
                                  {host: {"cluster_model": model} for host in HOSTS})
    with cluster.traffic() as traffic:
        run = cluster.playbooks.run("upgrade-model.yml", inventory, *UPGRADE, *args)
    cluster.assert_settled(traffic.outcome(), web)
    return run, inventory, web


def test_a_model_that_does_not_load_stops_at_the_canary_before_any_switch(cluster) -> None:
    before = running_models(cluster)
    run, _inventory, web = upgrade(cluster, BROKEN)
    assert run.returncode != 0
    # llama.cpp's refusal, as Ollama's runner words it, of the file where the node sees it.
    load_error = ("llama runner process has terminated: error loading model: Failed to load "
                  f"model from file: {cluster.the_lab.inference_mount}/models/"
                  f"{inference.TRUNCATED_FILE}")
    assert (f"gate 'none failed': {BROKEN} does not load on {web} ({load_error}). Nothing "
            f"was switched here: the workers run {DEFAULT_MODEL}, and no other host was "
            "changed.") in run.unfolded()
    assert running_models(cluster) == before


def chats_on(cluster, host: str) -> list[dict]:
    """The chats of the last hour routed to ``host``'s inference worker, oldest first."""
    worker_id = next(w["worker_id"] for w in cluster.coordinator.workers().values()
                     if w["kind"] == "inference" and cluster.node_of(w["host"]) == host)
    answer = requests.get(f"{cluster.coordinator.url}/tasks", headers=cluster.coordinator.headers,
                          params={"task_type": "chat", "worker": worker_id, "since": "1h",
                                  "limit": 500}, timeout=10, verify=cluster.coordinator.verify)
    answer.raise_for_status()
    return answer.json()["tasks"][::-1]


def test_a_slower_real_model_fails_the_p95_gate_on_its_compute_and_is_reverted(cluster) -> None:
    web = cluster.web_host()
    # The canary's workers on the real Q4_1 first, as site.yml puts the model a host's
    # inventory names.
    on_real = cluster.inventory(web, "model-real", {REAL_CANARY: {"cluster_model": REAL}})
    converged = cluster.playbooks.run("site.yml", on_real)
    assert converged.returncode == 0, converged.output[-5000:]
    before = running_models(cluster)
    assert before[REAL_CANARY] == {REAL}
    seen = {task["task_id"] for task in chats_on(cluster, REAL_CANARY)}

    inventory = cluster.inventory(web, "model-real-f32",
                                  {REAL_CANARY: {"cluster_model": REAL_SLOWER}})
    run = cluster.playbooks.run("upgrade-model.yml", inventory, *UPGRADE,
                                "-e", f"upgrade_model_canary={REAL_CANARY}",
                                "-e", json.dumps({"upgrade_model_options": GREEDY,
                                                  "upgrade_model_prompt": LONG_ANSWER}))
    assert run.returncode != 0
    text = run.unfolded()
    gate = re.search(r"the canary (\S+) failed gate 'p95': ([\d.]+) s on the canary, "
                     r"([\d.]+) s before: \+(\d+)%, at most \+20% allowed\. Reverted: its "
                     rf"workers run {re.escape(REAL)} again \(digest [0-9a-f]{{12}}\), "
                     r"verified by task [0-9a-f-]{36}", text)
    assert gate, text[-3000:]
    assert gate.group(1) == REAL_CANARY
    assert "no other host was changed" in text
    assert f"{REAL_CANARY} | {REAL} |" in text and "| reverted" in text
    assert running_models(cluster) == before

    # What was measured, from PostgreSQL: the same greedy chats, as many tokens each, answered
    # for real by the old model then the new one (then the old again, verifying the revert).
    chats = [task for task in chats_on(cluster, REAL_CANARY) if task["task_id"] not in seen]
    assert [task["status"] for task in chats] == ["done"] * len(chats), chats
    assert {task["answered_model"] for task in chats} == {REAL, REAL_SLOWER}
    assert all("ollama-standin" not in task["result"] for task in chats)
    # Every chat the long answer, cut at num_predict.
    assert all(task["options"] == GREEDY and "1, 2, 3, 4, 5, 6" in task["result"]
               for task in chats), chats
    # Greedy: each model gives one answer to the same question, every time.
    for model in (REAL, REAL_SLOWER):
        assert len({task["result"] for task in chats if task["answered_model"] == model}) == 1


def test_a_good_model_rolls_to_every_host_and_a_rerun_changes_nothing(cluster) -> None:
    loose = ("-e", "upgrade_model_max_p95_increase=1.0")
    run, inventory, web = upgrade(cluster, GOOD, *loose)
    assert run.returncode == 0, run.output[-5000:]
    text = run.unfolded()
    assert f"{web} | {GOOD} |" in text and "| kept" in text
    workers = running_models(cluster)
    assert set(workers) > {web} and workers == {host: {GOOD} for host in workers}
    for host in set(workers) - {web}:
        assert re.search(rf"{host} \| {GOOD} \| [0-9a-f]{{12}} \| -/- \| -/- \| - \| "
                         "switched", text), text[-3000:]

    # The old model stays on every host: a task that asks for it by name is still served.
    for request, model in (({"model": DEFAULT_MODEL}, DEFAULT_MODEL), ({}, GOOD)):
        task = chat(cluster, **request)
        assert task["status"] == "done", task
        assert f"が {model} の代わりに生成" in task["result"]

    again = cluster.playbooks.run("upgrade-model.yml", inventory, *UPGRADE)
    assert again.returncode == 0, again.output[-5000:]
    assert set(again.changed().values()) == {0}
    assert again.unfolded().count("| already on it") == len(workers)
    site = cluster.playbooks.run("site.yml", inventory)
    assert site.returncode == 0, site.output[-5000:]
    assert set(site.changed().values()) == {0}
