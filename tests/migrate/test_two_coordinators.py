"""Two Coordinators over one database (docs/scaling.md), on the shared lab (conftest.py): site.yml
with lab-worker-slow in the group coordinator beside lab-ai-core, and a virtual address they share,
deploys a second Coordinator there (one host after the other), its PostgreSQL login over TLS through
a pg_hba.conf line of its own; every worker's COORDINATOR_URL lists both, in the group's order; the
virtual address (keepalived) is on the first, its certificate naming it. With the first one's
service stopped, the address moves to the second, tasks routed through the second are done and the
workers heartbeat through it, saying so in their log; its service back, the first host takes the
address again. Then, with tasks routed every second through either Coordinator, the second one's
host goes down (its container stops): migrate-web.yml moves the web worker meanwhile, and
upgrade-model.yml checks a model upgrade, both going on without that host, and every routed task is
done or failed with a reason once it is back. Back to one Coordinator and no virtual address,
site.yml takes down the second host's Coordinator and keepalived on both hosts. The last module of
the package (conftest.ORDER)."""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import requests

from lab import drive, lab

FIRST, SECOND = "lab-ai-core", "lab-worker-slow"
# The inventory of both tests: both hosts in the group coordinator, sharing the address.
TWO_COORDINATORS = {"coordinator": [FIRST, SECOND]}
# An address of the lab's subnet no node has.
VIRTUAL_ADDRESS = "10.89.20.50"


def served_names(address: str, port: int) -> list[tuple[str, str]]:
    """The subject alternative names of the certificate served at ``address``, verified
    against the cluster CA."""
    context = ssl.create_default_context(cafile=str(lab.CLUSTER_CA_CERT))
    with socket.create_connection((address, port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=address) as tls:
        return list(tls.getpeercert()["subjectAltName"])


def instance_at(address: str, port: int, timeout: float = 2) -> str | None:
    """The instance whose /health answers at ``address`` (None: no answer)."""
    try:
        return requests.get(f"https://{address}:{port}/health", timeout=timeout,
                            verify=str(lab.CLUSTER_CA_CERT)).json()["instance"]
    except requests.RequestException:
        return None


@contextlib.contextmanager
def answers_at_the_virtual_address(port: int) -> Iterator[list[tuple[float, str | None]]]:
    """(time, instance or None) of a /health request at the virtual address every 0.2 s,
    from a thread, until the block ends."""
    answers: list[tuple[float, str | None]] = []
    done = threading.Event()

    def ask() -> None:
        while not done.is_set():
            answers.append((time.monotonic(), instance_at(VIRTUAL_ADDRESS, port, timeout=1)))
            done.wait(0.2)

    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    try:
        yield answers
    finally:
        done.set()
        asker.join()


def holder_within(port: int, instance: str, timeout: float) -> bool:
    """Whether the virtual address reaches ``instance`` within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while instance_at(VIRTUAL_ADDRESS, port) != instance:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def two_coordinators(cluster, web: str) -> Path:
    """The lab's inventory with the web worker on ``web`` and both Coordinators."""
    return cluster.inventory(web, f"two-coordinators-web-on-{web}",
                             {host: {"coordinator_vip_address": VIRTUAL_ADDRESS}
                              for host in (FIRST, SECOND)},
                             groups=TWO_COORDINATORS)


def keepalived_logs(*nodes: drive.Node) -> str:
    return "\n".join(node.sh("journalctl", "-u", "keepalived", "--no-pager", "-n", "30").stdout
                     for node in nodes)


def log_says(node: drive.Node, unit: str, text: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in node.sh("journalctl", "-u", unit, "--no-pager", "-n", "200").stdout:
            return True
        time.sleep(1)
    return False


def test_a_second_coordinator_serves_the_cluster_while_the_first_is_stopped(cluster) -> None:
    web = cluster.web_host()
    first, second = cluster.nodes[FIRST], cluster.nodes[SECOND]
    port = int(cluster.coordinator.url.rsplit(":", 1)[1])
    urls = [f"https://{node.address}:{port}" for node in (first, second)]
    two = two_coordinators(cluster, web)
    try:
        run = cluster.playbooks.run("site.yml", two)
        assert run.returncode == 0, run.output[-5000:]
        # One Coordinator host at a time (a rolling upgrade, docs/scaling.md), in the group's
        # order: the play's batches and the hosts each one's tasks ran on.
        batches = re.findall(r"^PLAY \[Coordinator\] \*+$(.*?)(?=^PLAY \[)", run.output,
                             re.M | re.S)
        assert [sorted(set(re.findall(r"^(?:ok|changed|skipping): \[([a-z-]+)\]", batch,
                                      re.M))) for batch in batches] == [[FIRST], [SECOND]]
        coordinators = [drive.Coordinator(url) for url in urls]
        for coordinator, node in zip(coordinators, (first, second), strict=True):
            health = requests.get(f"{coordinator.url}/health", timeout=10,
                                        verify=coordinator.verify).json()
            assert (health["postgresql"], health["redis"], health["instance"]) == (
                "ok", "ok", node.name), health
        # The virtual address on the first host (the group's order), once keepalived's first
        # election is over, and its certificate naming it, as the second's does.
        assert holder_within(port, FIRST, 30), keepalived_logs(first, second)
        for address in (VIRTUAL_ADDRESS, second.address):
            assert ("IP Address", VIRTUAL_ADDRESS) in served_names(address, port), address
        # Its own pg_hba.conf line, and its sessions over TLS.
        hba = first.sh("cat", "/etc/postgresql/15/main/pg_hba.conf", check=True).stdout
        assert (f"hostssl    coordinator    coordinator    {second.address}/32    scram-sha-256"
                f"    # {SECOND} (Coordinator)") in hba
        sessions = first.sh("runuser", "-u", "postgres", "--", "psql", "-tAc",
                            "SELECT DISTINCT s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s"
                            f" USING (pid) WHERE a.client_addr = '{second.address}'"
                            " AND a.usename = 'coordinator'", check=True).stdout.split()
        assert sessions == ["t"], sessions
        for name, node in cluster.nodes.items():
            for worker in ("inference-worker", "web-worker"):
                if node.worker_installed(worker) and node.worker_active(worker):
                    assert f'COORDINATOR_URL="{",".join(urls)}"' in node.worker_env(worker), (
                        name, worker)

        registered = {worker_id for worker_id, worker in coordinators[0].workers().items()
                      if worker["alive"]}
        with answers_at_the_virtual_address(port) as answers:
            first.sh("systemctl", "stop", "coordinator", check=True)
            stopped = time.monotonic()
            # keepalived's check fails twice, 2 s apart, and the second host takes the address.
            assert holder_within(port, SECOND, 30), keepalived_logs(first, second)
        last_first = max(at for at, instance in answers if instance == FIRST)
        first_second = min(at for at, instance in answers if instance == SECOND)
        print(f"the virtual address answered nothing for {first_second - last_first:.1f} s "
              f"(the first Coordinator stopped {stopped - last_first:.1f} s after its last "
              "answer there)")
        # The first Coordinator's own inference worker turns to the second.
        assert log_says(first, "inference-worker",
                        f"Using the Coordinator at {urls[1]}: {urls[0]} did not answer", 60)
        for task_type in ("web_search", "chat"):
            task = coordinators[1].finished(coordinators[1].route(task_type=task_type),
                                            time.monotonic() + 120)
            assert task["status"] == "done", task
        # Every worker heartbeats through the second since the first stopped.
        deadline = time.monotonic() + 60
        while True:
            since = time.monotonic() - stopped
            workers = coordinators[1].workers()
            beating = {worker_id for worker_id, worker in workers.items()
                       if worker["alive"] and worker["seconds_since_heartbeat"] < since}
            if beating >= registered or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert beating >= registered, workers
        # Its Coordinator back, the first host takes the address again (the higher priority).
        first.sh("systemctl", "start", "coordinator", check=True)
        assert holder_within(port, FIRST, 60), keepalived_logs(first, second)
    finally:
        first.sh("systemctl", "start", "coordinator")



def test_a_coordinators_host_down_amid_traffic_loses_nothing_and_the_move_goes_on(cluster) -> None:
    first, second = cluster.nodes[FIRST], cluster.nodes[SECOND]
    port = int(cluster.coordinator.url.rsplit(":", 1)[1])
    coordinators = [drive.Coordinator(f"https://{node.address}:{port}") for node in (first, second)]
    web = cluster.web_host()
    if instance_at(second.address, port) != SECOND:
        # Run alone: the Coordinators of the test above first.
        run = cluster.playbooks.run("site.yml", two_coordinators(cluster, web))
        assert run.returncode == 0, run.output[-5000:]
    if web == SECOND:
        # A host that runs a worker must answer a move: the web worker leaves it first.
        web = "lab-macbookair"
        run = cluster.playbooks.run("migrate-web.yml", two_coordinators(cluster, web))
        assert run.returncode == 0, run.output[-5000:]
    target = FIRST if web != FIRST else "lab-macbookair"
    inference = {worker_id for worker_id, worker in coordinators[0].workers().items()
                 if worker["alive"] and worker["kind"] == "inference"}

    # A web search and a chat in turn, one a second, through each Coordinator in turn.
    with cluster.traffic(interval=1, also=(coordinators[1],),
                         task_types=("web_search", "chat")) as traffic:
        try:
            time.sleep(4)
            second.stop_container()
            # The move while the second Coordinator's host is down: the first play goes on
            # without it, saying so, and the move is proven through the first Coordinator.
            move = cluster.playbooks.run("migrate-web.yml", two_coordinators(cluster, target))
            # And a model upgrade, checked (which reaches every host as a run does).
            upgrade = cluster.playbooks.run("upgrade-model.yml", two_coordinators(cluster, target),
                                            "--check", "-e", "upgrade_model_tasks=2")
        finally:
            second.start_container()
        deadline = time.monotonic() + 60
        while instance_at(second.address, port) != SECOND:
            assert time.monotonic() < deadline, "the second Coordinator did not come back"
            time.sleep(1)
        time.sleep(4)
    passed_over = (f"going on without {SECOND}, unreachable: it runs a Coordinator and "
                   "nothing this run reads or changes, and the Coordinator of "
                   f"{FIRST} answers for the cluster")
    for run in (move, upgrade):
        assert run.returncode == 0, run.output[-5000:]
        assert passed_over in run.unfolded(), run.output[-5000:]
    cluster.assert_proven(move, target)

    # Every routed task done, or failed with a reason, and one web worker, the new one; a
    # web task never ran twice, a chat only as at-least-once allows (counted).
    outcome = traffic.outcome()
    assert outcome.refused == 0 and outcome.failed_over > 0, outcome
    cluster.assert_settled(outcome, target)
    again = [task for task in outcome.done + outcome.failed if task["attempts"] > 1]
    assert [task for task in again if task["task_type"] == "web_search"] == [], again
    print(f"{outcome.routed} tasks routed, {outcome.failed_over} through the first Coordinator "
          f"as the second did not answer: {len(outcome.done)} done, {len(outcome.failed)} "
          f"failed, {len(again)} run more than once")
    # The registry whole: every inference worker alive, as before the host went down.
    workers = coordinators[1].workers()
    assert {worker_id for worker_id in inference if workers[worker_id]["alive"]} == inference, (
        workers)

    # Back to one Coordinator and no virtual address (the lab's own inventory): site.yml takes
    # down the Coordinator of the host that left the group, with its environment file, and
    # the keepalived the role configured on both hosts.
    one = cluster.playbooks.run("site.yml", cluster.inventory(target))
    assert one.returncode == 0, one.output[-5000:]
    # (A unit whose file is gone has no UnitFileState.)
    for node, unit, file_state in ((second, "coordinator", ""), (first, "keepalived", "disabled"),
                                   (second, "keepalived", "disabled")):
        shown = dict(line.split("=", 1) for line in node.sh(
            "systemctl", "show", unit, "-p", "ActiveState", "-p", "UnitFileState",
            check=True).stdout.split())
        assert shown == {"ActiveState": "inactive", "UnitFileState": file_state}, (
            node.name, unit, shown)
    for node, path in ((second, "/etc/coordinator/coordinator.env"),
                       (second, "/etc/systemd/system/coordinator.service"),
                       (first, "/etc/keepalived/keepalived.conf"),
                       (second, "/etc/keepalived/keepalived.conf")):
        assert node.sh("test", "-e", path).returncode == 1, (node.name, path)
    assert instance_at(VIRTUAL_ADDRESS, port) is None
    assert instance_at(first.address, port) == FIRST
