"""Two Coordinators over one database (docs/scaling.md), on the shared lab (conftest.py):
site.yml with lab-worker-slow in the group coordinator beside lab-ai-core, and a virtual
address they share, deploys a second Coordinator there, its PostgreSQL login over TLS through
a pg_hba.conf line of its own; every worker's COORDINATOR_URL lists both, in the group's
order; the virtual address (keepalived) is on the first, its certificate naming it. With the
first one's service stopped, the address moves to the second, tasks routed through the
second are done and the workers heartbeat through it, saying so in their log; its service
back, the first host takes the address again. The lab is left with two Coordinators: the
last module of the package (conftest.ORDER)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator

import requests

from lab import drive, lab

FIRST, SECOND = "lab-ai-core", "lab-worker-slow"
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
    two = cluster.inventory(web, "two-coordinators",
                            {host: {"coordinator_vip_address": VIRTUAL_ADDRESS}
                             for host in (FIRST, SECOND)},
                            groups={"coordinator": [FIRST, SECOND]})
    try:
        run = cluster.playbooks.run("site.yml", two)
        assert run.returncode == 0, run.output[-5000:]
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
