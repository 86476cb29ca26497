"""The seed's Mac where it hurts (issue: the seed's own move, on a Mac as it ships), on the
lab's Mac-shaped node (lab-macbookair: launchd with macOS's semantics, docs/lab.md): nobody
logged in at its console, a plist changed while its worker is busy, a move off it cut short
and followed by a login, Ollama.app on the Ollama port, and Local Network privacy denying
launchd's jobs the LAN. Each failure asserts the line the user reads; the switches the tests
flip are what a person does at the Mac (lab/macos/node.py)."""

from __future__ import annotations

import time

import requests

from lab import drive
from lab.macos import node as mac
from lab.throwaway import wait_until

from .conftest import STANDIN_LATENCY

MAC, LINUX = "lab-macbookair", "lab-worker-slow"


def test_nobody_logged_in_at_the_mac_is_named_and_nothing_changes_anywhere(cluster) -> None:
    web = cluster.web_host()
    mac.logout(cluster.nodes[MAC].container)
    try:
        site = cluster.playbooks.run("site.yml", cluster.inventory(web))
        move = cluster.migrate(cluster.other(web))
    finally:
        mac.login(cluster.nodes[MAC].container)
    named = (f"{MAC}: {mac.USER} is not logged in at the console, so launchd has no "
             f"gui/{mac.UID} domain for its agents")
    for run in (site, move):
        assert run.returncode != 0
        text = run.unfolded()
        assert named in text, run.output[-4000:]
        assert "log in at the console or enable automatic login, then run again" in text
        assert "Nothing was changed" in text
        assert set(run.changed().values()) == {0}, run.recap
    # Logged in again, launchd loads the agents of ~/Library/LaunchAgents: the Mac's workers
    # run and register again by themselves.
    wait_until(lambda: cluster.nodes[MAC].processes("worker_infer.py"), 60,
               "the Mac's inference worker started by launchd at login")
    cluster.assert_one_web_worker(web)


def test_a_plist_change_reloads_a_busy_mac_worker_which_finishes_its_task(cluster) -> None:
    cluster.web_on(MAC)
    node = cluster.nodes[MAC]
    (before,) = node.processes()
    standin = f"http://{node.address}:11434/_standin/config"
    # A search that takes 6 s: within the worker's shutdown timeout (the lab's 10 s).
    requests.post(standin, json={"latency": 6}, timeout=10).raise_for_status()
    try:
        busy = cluster.coordinator.route("busy while its plist changes")
        wait_until(lambda: cluster.coordinator.task(busy)["status"] == "running", 30,
                   "the Mac's web worker on the task")
        # Another environment in both workers' plists: launchd reads a plist only at
        # bootstrap, so each agent is booted out (its job drains) and bootstrapped again.
        changed = cluster.playbooks.run("site.yml", cluster.inventory(
            MAC, "mac-reload", {MAC: {"worker_env": {"LAB_RELOAD": "1"}}}))
    finally:
        requests.post(standin, json={"latency": STANDIN_LATENCY}, timeout=10).raise_for_status()
    assert changed.returncode == 0, changed.output[-6000:]
    task = cluster.coordinator.finished(busy, time.monotonic() + 120)
    assert (task["status"], task["worker_host"], task["fallback"]) == (
        "done", node.address, False), task
    assert node.worker_active() and node.worker_enabled()
    (after,) = node.processes()
    assert after != before
    cluster.assert_one_web_worker(MAC)
    # The Mac's inference worker keeps LAB_RELOAD until the next site.yml of the inventory's
    # own environment: test_ollama_app_on_the_port_is_named_before_any_change's (a move
    # handles the web worker alone), and no test before it asserts that plist.


def test_a_move_off_the_mac_cut_short_then_a_login_leaves_one_web_worker(cluster) -> None:
    cluster.web_on(MAC)
    with cluster.traffic() as traffic:
        # Cut after the old web worker was stopped and disabled, before its plist is removed
        # (the play's first tasks take about a second): Ctrl-C pressed again and again, as a
        # first SIGINT that lands in a garbage collector's callback is swallowed by Python
        # ("Exception ignored in: ..."), and the play would go on to the plist.
        cut = cluster.migrate(LINUX, on=[(r"^PLAY \[Remove the old web worker's files\]",
                                          lambda proc: drive.interrupt(proc, 0.3, 10))])
        assert cut.returncode != 0
        assert cluster.nodes[MAC].worker_installed(), "the cut came after the plist's removal"
        # The Mac restarts and its user logs in: launchd loads every agent it finds, except
        # the disabled ones; the old web worker stays off.
        mac.logout(cluster.nodes[MAC].container)
        mac.login(cluster.nodes[MAC].container)
        wait_until(lambda: cluster.nodes[MAC].processes("worker_infer.py"), 60,
                   "the Mac's inference worker started by launchd at login")
        assert cluster.nodes[MAC].processes() == []
        finish = cluster.migrate(LINUX)
        assert finish.returncode == 0, finish.output[-6000:]
    cluster.assert_settled(traffic.outcome(), LINUX)


def test_local_network_denied_stops_the_move_onto_the_mac_and_the_old_worker_serves(
        cluster) -> None:
    old = cluster.linux_web_host()
    mac.localnet_deny(cluster.nodes[MAC].container)
    try:
        run = cluster.playbooks.run("migrate-web.yml", cluster.inventory(
            MAC, "mac-localnet", {MAC: {"worker_register_retries": 5}}))
    finally:
        mac.localnet_allow(cluster.nodes[MAC].container)
    assert run.returncode != 0
    text = run.unfolded()
    # The checks over SSH passed (SSH sessions are not denied); the worker launchd started
    # could not reach the LAN, and the user is told what to allow.
    assert "PLAY [Start the web worker" in run.output
    assert (f"the new web worker on {MAC} did not come up, so it was stopped and the old one "
            "was left serving") in text
    assert (f"{MAC} is a Mac whose workers, started by launchd, get EHOSTUNREACH (No route to "
            "host) on the LAN: macOS's Local Network privacy denies ") in text, run.output[-4000:]
    assert "System Settings > Privacy & Security > Local Network" in text
    assert not cluster.nodes[MAC].worker_active()
    cluster.assert_one_web_worker(old)
    # Stopped and disabled, its plist stays until a converge: the next test's site.yml
    # removes it (the Mac is not in web_workers).
    assert cluster.nodes[MAC].worker_installed()


def test_ollama_app_on_the_port_is_named_before_any_change(cluster) -> None:
    web = cluster.web_host()
    node = cluster.nodes[MAC]
    # Ollama.app, opened at login, holds the port before the role's agent can.
    node.sh("launchctl", "bootout", f"gui/{mac.UID}/com.ollama.serve", user=mac.USER,
            check=True)
    wait_until(lambda: not node.processes("ollama serve"), 30, "the role's Ollama agent gone")
    mac.ollama_app_start(cluster.nodes[MAC].container)
    try:
        wait_until(lambda: node.processes("Ollama.app"), 30, "Ollama.app's server")
        refused = cluster.playbooks.run("site.yml", cluster.inventory(web))
    finally:
        mac.ollama_app_stop(cluster.nodes[MAC].container)
    assert refused.returncode != 0
    text = refused.unfolded()
    assert (f"listens on port 11434 on {MAC}, where the role's com.ollama.serve must serve (its "
            "agent would restart every 10 s beside it): quit Ollama.app and remove it from "
            "System Settings > General > Login Items") in text, refused.output[-4000:]
    assert set(refused.changed().values()) == {0}, refused.recap
    # Named in the first play, with every host's answer, before any host could change.
    assert "PLAY [The cluster CA" not in refused.output
    # The app quit, the role's agent is loaded again and proves the model with a generation;
    # the Mac's workers are back on the inventory's environment (the plist reload test left
    # one on LAB_RELOAD), for the tests after this one.
    again = cluster.playbooks.run("site.yml", cluster.inventory(web))
    assert again.returncode == 0, again.output[-6000:]
    assert "LAB_RELOAD" not in node.worker_env("inference-worker")
    # The web worker's plist the local-network refusal left is removed.
    assert not node.worker_installed()
    cluster.assert_one_web_worker(web)
