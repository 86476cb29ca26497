"""Real inference on the lab (lab/inference.py): every node's Ollama stand-in, the Mac's
(Homebrew's ollama, under its launchd) among them, serves the kit's real model, read-only
from the mount, with llama.cpp; the nodes serving the same file list the same digest; and
the Coordinator's host has the CPUs the inventory gives it, loaded machine or not."""

from __future__ import annotations

import os
import subprocess

import ollama
import pytest

from lab import inference, lab

MODEL = inference.MODEL


@pytest.fixture
def clients(cluster):
    """host -> an Ollama client of its stand-in; the real model removed again afterwards, so
    the other tests find each Ollama as the converge left it."""
    clients = {name: ollama.Client(host=f"http://{node.address}:11434", timeout=120)
               for name, node in cluster.nodes.items()}
    yield clients
    for client in clients.values():
        if any(model.model == MODEL for model in client.list().models):
            client.delete(MODEL)


def test_every_node_runs_the_kits_model_for_real_and_they_agree_on_its_digest(cluster,
                                                                               clients):
    digests = {}
    for name, client in clients.items():
        assert client.pull(MODEL).status == "success"
        answer = client.generate(model=MODEL, prompt="What is the capital of France?",
                                 options={"num_predict": 8, "temperature": 0}, keep_alive=0)
        assert (answer.done_reason, answer.eval_count) == ("length", 8), name
        assert answer.prompt_eval_count > 10 and answer.eval_duration > 0, name
        assert "ollama-standin" not in answer.response, name
        digests[name] = next(model.digest for model in client.list().models
                             if model.model == MODEL)
    assert len(set(digests.values())) == 1, digests


def test_the_kit_is_read_only_on_the_nodes_and_the_coordinators_host_has_its_cpus(cluster):
    mount = cluster.the_lab.inference_mount
    for name, node in cluster.nodes.items():
        written = node.sh("touch", f"{mount}/models/x")
        assert written.returncode != 0 and "Read-only file system" in written.stderr, name
    # Each container's CPU limit as podman applied it: the inventory's lab_cpus, none else.
    limits = {name: int(lab.podman("inspect", "--format", "{{.HostConfig.NanoCpus}}",
                                   cluster.the_lab.container(name), capture=True).stdout) / 1e9
              for name in cluster.nodes}
    assert limits == {name: cluster.the_lab.cpus.get(name, 0.0) for name in cluster.nodes}
    assert limits["lab-ai-core"] == 1.0


# One CPU kept busy for three seconds of wall time; prints the CPU seconds it got a second.
BUSY_THREE_SECONDS = ("import os, time\nstart = time.monotonic()\n"
                      "while time.monotonic() - start < 3: pass\n"
                      "print(sum(os.times()[:2]) / 3)")


def test_the_coordinators_host_gets_its_cpu_while_the_machine_is_loaded(cluster) -> None:
    # The machine loaded as a test run loads it: three busy processes a CPU, each in a session
    # of its own (one autogroup each, as the kernel groups a playbook's forks).
    hogs = [subprocess.Popen(["python3", "-c", "while True: pass"], start_new_session=True)
            for _ in range(3 * len(os.sched_getaffinity(0)))]
    try:
        share = {name: float(cluster.nodes[name].sh("python3", "-c", BUSY_THREE_SECONDS,
                                                    check=True).stdout)
                 for name in ("lab-ai-core", "lab-worker-slow")}
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    # Its one CPU whole, as a virtual machine's; a node without CPUs of its own (lab_cpus)
    # gets what the load leaves it, which shows the load was there.
    assert share["lab-ai-core"] >= 0.9, share
    assert share["lab-worker-slow"] <= 0.6, share
