"""The converged three-node lab, built for the modules of tests/migrate/, on two labs of the
same hosts at once where pytest runs in several processes.

A lab is created fresh, the stand-ins installed (lab/prepare.yml) and the cluster converged
with site.yml, reached over SSH as admin with sudo like a real cluster, with pipelining off for
the first lab's first converge (Ansible's own default, which test_migrate_web.py holds the
roles to; the second lab's has it on, as ansible.cfg, 12 % less work). The modules then move
the web worker back and forth and break things on the way; they run in ORDER, each starting
from a converged lab with one web worker, wherever the previous one left it. Most modules run
on the first lab (inventory/lab); the fault cases and the backup's (SECOND_LAB_SUITES of
tests/conftest.py) on a second one, the same hosts in containers of their own on their own
network (lab.second_lab_inventory), in another pytest process, beside them. Every playbook runs
at -vvv and its output is kept for the secrets check (test_secrets.py, and over each lab's
every run when it is taken down) and in .lab/logs/test-migrate*/ for failures. Each lab holds
its own lock; the Molecule scenarios, on networks of their own, may run beside them.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from lab import drive, lab
from lab.throwaway import wait_until
from tests.conftest import SECOND_LAB_SUITES

LOG_DIR = lab.STATE_DIR / "logs" / "test-migrate"
# A test that needs the web worker on one side (the Linux host for systemd's stop, the Mac
# for launchd's reload) pays a whole move when the test before left it on the other: in this
# order, and test_faults.py's, each finds it where it needs it (test_faults.py ends with it
# on the Mac, test_macos.py's last move takes it to the Linux host, the README's move back).
# test_two_coordinators.py comes last: it leaves the lab with two Coordinators.
ORDER = ["test_hardening.py", "test_real_inference.py", "test_check_mode.py",
         "test_migrate_web.py", "test_faults.py", "test_macos.py", "test_readme.py",
         "test_upgrade_model.py", "test_backup.py", "test_secrets.py", "test_probe_incident.py",
         "test_two_coordinators.py"]
WORKER_HOSTS = ("lab-worker-slow", "lab-macbookair")
STANDIN_LATENCY = 0.3


# What a lab's bring-up (create, prepare, converge: 160 to 280 s on 2 cores, by the hour) may
# take, added to the time limit of the first test that uses that lab.
BRING_UP_LIMIT = 600


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules share one lab and each starts where the one before left it: this
    package's tests run in ORDER, in the places the session gave them. The first test on each
    lab has the bring-up's time besides its own."""
    here = Path(__file__).parent
    places = [i for i, item in enumerate(items) if Path(str(item.fspath)).parent == here]
    ours = sorted((items[i] for i in places), key=lambda item: ORDER.index(
        Path(str(item.fspath)).name))
    for place, item in zip(places, ours, strict=True):
        items[place] = item
    firsts: dict[int, pytest.Item] = {}
    for item in ours:
        firsts.setdefault(lab_number(item.nodeid), item)
    for item in firsts.values():
        own = item.get_closest_marker("timeout")
        limit = float(own.args[0] if own and own.args else config.getini("timeout"))
        item.add_marker(pytest.mark.timeout(limit + BRING_UP_LIMIT), append=False)


def lab_number(nodeid: str) -> int:
    """The lab a test runs on: 2 for the fault cases and the backup's (SECOND_LAB_SUITES),
    else 1."""
    return 2 if nodeid.startswith(SECOND_LAB_SUITES) else 1


@dataclass
class Cluster:
    """The lab as a user drives it, with the lab's inventory and a client of its API."""

    the_lab: lab.Lab
    source: Path  # its inventory: inventory/lab, or the second lab's copy of it
    playbooks: drive.Playbooks
    coordinator: drive.Coordinator
    nodes: dict[str, drive.Node]
    redis_url: str
    first_converge: drive.Run | None = None
    # What bench/migration_faults.py prints: per test, the traffic's outcome (no timing of
    # a test is asserted anywhere).
    figures: list[dict] = field(default_factory=list)

    def node_of(self, address: str) -> str:
        return next(name for name, node in self.nodes.items() if node.address == address)

    def web_host(self) -> str:
        """The host whose web worker is the one alive in the registry (exactly one)."""
        alive = self.coordinator.alive_web_workers()
        assert len(alive) == 1, f"expected one alive web worker, the registry lists {alive}"
        return self.node_of(alive[0]["host"])

    def inventory(self, web_host: str, name: str | None = None,
                  host_vars: dict[str, dict] | None = None,
                  groups: dict[str, list[str]] | None = None) -> Path:
        """The lab's inventory with the web worker on ``web_host`` (and ``groups``' hosts)."""
        label = "" if self.source == lab.INVENTORY else (
            self.source.name.removeprefix("inventory-") + "-")
        return drive.inventory_copy(label + (name or f"web-on-{web_host}"), [web_host],
                                    host_vars, self.source, groups)

    def other(self, host: str) -> str:
        return next(h for h in WORKER_HOSTS if h != host)

    def traffic(self, **kwargs: Any) -> drive.Traffic:
        return drive.Traffic(self.coordinator, self.redis_url, **kwargs)

    def web_on(self, host: str) -> None:
        """Move the web worker to ``host`` unless it serves from there already."""
        if self.web_host() != host:
            moved = self.migrate(host)
            assert moved.returncode == 0, moved.output[-6000:]

    def linux_web_host(self) -> str:
        """The host of the web worker, moved to a Linux worker host first if it serves from
        the Mac: for the tests of what systemd does when a worker stops."""
        web = self.web_host()
        if self.nodes[web].kind == "linux":
            return web
        linux = next(h for h in WORKER_HOSTS if self.nodes[h].kind == "linux")
        self.web_on(linux)
        return linux

    def migrate(self, web_host: str, **kwargs: object) -> drive.Run:
        return self.playbooks.run("migrate-web.yml", self.inventory(web_host), **kwargs)

    def assert_proven(self, run: drive.Run, web_host: str) -> dict:
        """migrate-web.yml's summary: its test task done in PostgreSQL, without fallback, by
        the web worker of ``web_host``, in some seconds. Returns the summary."""
        summary = run.fact("migrate_web_summary")
        assert (summary["status"], summary["fallback"], summary["worker_host"]) == (
            "done", False, self.nodes[web_host].address), summary
        assert isinstance(summary["seconds"], float) and summary["seconds"] >= 0, summary
        return summary

    def assert_settled(self, outcome: drive.Outcome, web_host: str, failed_ok: int = 0) -> None:
        """No routed task lost, none failed beyond ``failed_ok`` (each with its reason), and
        exactly one web worker (``assert_one_web_worker``)."""
        assert not outcome.lost, f"lost tasks: {outcome.lost}"
        reasons = [(t["task_id"], t.get("error")) for t in outcome.failed]
        assert len(outcome.failed) <= failed_ok, f"failed tasks: {reasons}"
        assert all(error for _, error in reasons), f"a failed task without a reason: {reasons}"
        self.figures.append({"test": drive.current_test(), "routed": outcome.routed,
                             "refused": outcome.refused, "done": len(outcome.done),
                             "failed": len(outcome.failed), "failed_over": outcome.failed_over,
                             "longest_untaken": round(outcome.longest_untaken, 1)})
        self.assert_one_web_worker(web_host)

    def assert_one_web_worker(self, web_host: str) -> None:
        # A worker that was killed stays listed alive until the heartbeat TTL runs out.
        alive = wait_until(lambda: (lambda w: w if len(w) == 1 else None)(
            self.coordinator.alive_web_workers()), 60, "exactly one alive web worker")
        assert self.node_of(alive[0]["host"]) == web_host, alive
        assert {name: len(node.processes()) for name, node in self.nodes.items()} == {
            name: int(name == web_host) for name in self.nodes}
        assert self.nodes[web_host].processes() == [alive[0]["pid"]]


@contextlib.contextmanager
def bring_up(number: int) -> Iterator[Cluster]:
    """Lab ``number`` (1: inventory/lab), created, prepared and converged, then removed."""
    source = lab.INVENTORY if number == 1 else lab.second_lab_inventory(number)
    log_dir = LOG_DIR if number == 1 else LOG_DIR.with_name(f"{LOG_DIR.name}-lab{number}")
    with lab.exclusive(lab.LOCK if number == 1 else lab.STATE_DIR / f"lab{number}.lock"):
        the_lab = lab.load_lab(source)
        lab.destroy(the_lab)
        lab.create(the_lab)
        playbooks = drive.Playbooks(log_dir, verbose=True)
        core = the_lab.nodes["lab-ai-core"]
        password = (lab.SECRETS_DIR / "redis_password").read_text().split()[0]
        cluster = Cluster(
            the_lab, source, playbooks, drive.Coordinator(the_lab.coordinator_url),
            {name: drive.Node(name, address, the_lab.network,
                              the_lab.node_kinds.get(name, "linux"), the_lab.container(name))
             for name, address in the_lab.nodes.items()},
            # The redis role's admin user (`default` is off), over TLS with the lab's CA.
            f"rediss://{lab.REDIS_ADMIN_USER}:{password}@{core}:6379/0"
            f"?ssl_ca_certs={lab.CLUSTER_CA_CERT}")
        try:
            prepared = playbooks.run("lab/prepare.yml", source)
            assert prepared.returncode == 0, prepared.output[-5000:]
            # The labs share the cluster CA in .lab/: made once, before their converges.
            with lab.exclusive(lab.STATE_DIR / "cluster-ca.lock"):
                if not lab.CLUSTER_CA_CERT.exists():
                    made = playbooks.run("lab/cluster_ca.yml", source)
                    assert made.returncode == 0, made.output[-5000:]
            cluster.first_converge = playbooks.run(
                "site.yml", source, extra_env={"ANSIBLE_PIPELINING": "0"} if number == 1 else None)
            assert cluster.first_converge.returncode == 0, cluster.first_converge.output[-5000:]
            # Every Ollama stand-in as fast as the fast node's: one web worker then keeps up
            # with a search every 2 s (the slow node's 3 s would let tasks:web grow, and a
            # test task wait behind that backlog). After the converge: the ollama role's
            # first run restarts the service, and a stand-in starts from its own settings.
            for address in the_lab.nodes.values():
                requests.post(f"http://{address}:11434/_standin/config",
                              json={"latency": STANDIN_LATENCY}, timeout=10).raise_for_status()
            yield cluster
            # test_secrets.py's check again, over every run of this lab, when it ends.
            from .test_secrets import assert_no_secret_in
            assert_no_secret_in(cluster)
        finally:
            log_dir.mkdir(parents=True, exist_ok=True)
            (log_dir / "figures.json").write_text(json.dumps(
                {"playbooks": playbooks.timings, "traffic": cluster.figures}, indent=1))
            lab.destroy(the_lab)


@pytest.fixture(scope="package")
def labs(podman_ready: None) -> Iterator[dict[int, Cluster]]:
    """The labs this process has brought up, by number; each is brought up when a module first
    needs it (a process runs the modules of one lab) and removed with the package."""
    with contextlib.ExitStack() as stack:
        yield LabsByNumber(stack)


class LabsByNumber(dict):
    """Lab number -> its Cluster, brought up on first use and taken down with the stack."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        super().__init__()
        self.stack = stack

    def __missing__(self, number: int) -> Cluster:
        self[number] = self.stack.enter_context(bring_up(number))
        return self[number]


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, labs: dict[int, Cluster]) -> Cluster:
    return labs[lab_number(request.node.nodeid)]
