"""upgrade-model.yml on the shared lab (conftest.py), with web tasks routed every 2 s
throughout and none lost, and the Ollama stand-ins set so the difference between models
shows:

- a model that does not load (the real-inference kit's file cut short: llama.cpp refuses
  it) stops the run at its warm-up on the canary, nothing switched;
- a slower model fails the p95 gate: the canary goes back to the old model, verified;
- a good model passes and rolls to every host, each verified by a routed task answered by
  it; a chat asking for the old model by name is still served (every Ollama keeps it), one
  naming none gets the new one; run again, it changes nothing and verifies; site.yml
  afterwards changes nothing.
"""

from __future__ import annotations

import re
import time

import pytest
import requests

from lab import inference
from lab.standins.ollama import DEFAULT_MODEL

from .conftest import WORKER_HOSTS

UPGRADE = ("-e", "upgrade_model_tasks=6")
HOSTS = ("lab-ai-core", *WORKER_HOSTS)
BROKEN, SLOW, GOOD = inference.TRUNCATED, "slow-model:1b", "good-model:1b"


@pytest.fixture(scope="module", autouse=True)
def standins(cluster):
    """Every worker host's Ollama: SLOW answers in 1.5 s."""
    def configure(**settings: object) -> None:
        for node in cluster.nodes.values():
            requests.post(f"http://{node.address}:11434/_standin/config", json=settings,
                          timeout=10).raise_for_status()
    configure(model_latency={SLOW: 1.5})
    yield
    configure(model_latency={})


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


def test_a_slower_model_fails_the_p95_gate_and_the_canary_is_reverted(cluster) -> None:
    before = running_models(cluster)
    run, _inventory, web = upgrade(cluster, SLOW)
    assert run.returncode != 0
    text = run.unfolded()
    gate = re.search(r"the canary (\S+) failed gate 'p95': ([\d.]+) s on the canary, "
                     r"([\d.]+) s before: \+(\d+)%, at most \+20% allowed\. Reverted: its "
                     rf"workers run {re.escape(DEFAULT_MODEL)} again \(digest [0-9a-f]{{12}}\), "
                     r"verified by task [0-9a-f-]{36}", text)
    assert gate, text[-3000:]
    assert gate.group(1) == web
    assert float(gate.group(2)) >= 1.5 > float(gate.group(3))
    assert "no other host was changed" in text
    assert f"{web} | {DEFAULT_MODEL} |" in text and "| reverted" in text
    assert running_models(cluster) == before


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
