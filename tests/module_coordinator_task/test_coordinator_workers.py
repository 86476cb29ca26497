"""coordinator_workers, run by ansible-playbook, against the real Coordinator's registry.

Workers here are only registrations (POST /workers/register, heartbeats, deregister) with
addresses and pids of their own; the module compares them with what a play says its service
managers run.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from lab import throwaway
from lab.processes import CoordinatorProcess
from lab.throwaway import free_port

from ..library_kit import documented_as_coded
from .coordinator_task_harness import Registration, finish_probe, start_coordinator, start_probe

SLOW, FAST = "10.0.7.42", "10.0.7.43"
HOSTS = {SLOW: "lab-worker-slow", FAST: "lab-worker-fast"}


def witness(tmp_path: Path, coordinator: CoordinatorProcess, **args: object):
    return finish_probe(start_probe(tmp_path, {
        "coordinator_url": coordinator.url, "coordinator_token": coordinator.token,
        "kind": "web", "hosts": HOSTS, **args}, module="coordinator_workers"))


def test_every_alive_worker_accounted_for(tmp_path, coordinator, registrations):
    registrations.append(Registration(coordinator, SLOW, 812).register())
    run = witness(tmp_path, coordinator, expected=[{"host": SLOW, "pid": 812}],
                  require="accounted")
    assert run.rc == 0, run.stdout
    assert run.result["changed"] is False
    assert run.result["msg"] == run.result["serving"]
    assert run.result["serving"].startswith(
        "the Coordinator's registry lists 1 alive web worker serving tasks:web: "
        f"{registrations[0].worker_id} on lab-worker-slow ({SLOW}), pid 812, v2.1, heartbeat ")
    assert [w["pid"] for w in run.result["workers"]] == [812]


def test_a_copy_nobody_manages_is_named_at_once_even_while_waiting(tmp_path, coordinator,
                                                                   registrations):
    registrations.append(Registration(coordinator, SLOW, 812).register())
    rogue = Registration(coordinator, FAST, 4242).register().heartbeat_every(0.5)
    registrations.append(rogue)
    started = time.monotonic()
    run = witness(tmp_path, coordinator, expected=[{"host": SLOW, "pid": 812}],
                  require="accounted", wait_for_heartbeats=True)
    # It heartbeats: no stale entry, so the module does not wait out the TTL.
    assert time.monotonic() - started < 10
    assert run.rc != 0
    assert run.result["msg"].startswith(f"{rogue.worker_id} on lab-worker-fast ({FAST}), "
                                        "pid 4242, v2.1, heartbeat ")
    assert run.result["msg"].endswith(
        "no service manager runs it there (a copy started by hand, outside systemd/launchd, "
        f"or one its service manager lost); stop it: `kill 4242` on lab-worker-fast ({FAST})")
    assert [w["pid"] for w in run.result["unaccounted"]] == [4242]


def test_under_limit_a_worker_on_a_declared_host_left_out_is_reported_not_refused(
        tmp_path, coordinator, registrations):
    registrations.append(Registration(coordinator, FAST, 4194).register())
    # A run limited to lab-worker-slow, which runs no web worker.
    run = witness(tmp_path, coordinator, hosts={SLOW: "lab-worker-slow"}, expected=[],
                  left_out=[{"host": FAST, "name": "lab-worker-fast",
                             "declared_in": "web_workers"}],
                  require="accounted", wait_for_heartbeats=True)
    assert run.rc == 0, run.stdout
    assert run.result["serving"].startswith(
        "the Coordinator's registry lists 1 alive web worker serving tasks:web: "
        f"{registrations[0].worker_id} on lab-worker-fast ({FAST}), pid 4194, v2.1, heartbeat ")
    assert run.result["serving"].endswith(
        "s ago (declared in web_workers, left out of this run by --limit)")
    assert [w["pid"] for w in run.result["left_out"]] == [4194]
    assert run.result["unaccounted"] == []


def test_an_entry_that_goes_while_waiting_passes(tmp_path, coordinator, registrations):
    leaving = Registration(coordinator, SLOW, 700).register()
    registrations.append(leaving)
    threading.Timer(2, leaving.deregister).start()
    run = witness(tmp_path, coordinator, expected=[], require="exactly",
                  wait_for_heartbeats=True)
    assert run.rc == 0, run.stdout
    assert run.result["serving"] == "the Coordinator's registry lists no alive web worker"


def test_exactly_names_the_worker_the_registry_lacks(tmp_path, coordinator, registrations):
    registrations.append(Registration(coordinator, FAST, 812).register())
    run = witness(tmp_path, coordinator,
                  expected=[{"host": FAST, "pid": 813, "version": "2.1"}], require="exactly")
    assert run.rc != 0
    assert run.result["msg"].endswith(
        f"the web worker pid 813 on lab-worker-fast ({FAST}) is not registered alive with "
        "version 2.1")
    assert run.result["missing"] == [{"host": FAST, "pid": 813, "version": "2.1",
                                      "worker_id": None}]


def test_wrong_token_and_no_coordinator_are_one_line(tmp_path, coordinator):
    run = witness(tmp_path, coordinator, coordinator_token="wrong")
    assert run.result["msg"] == (f"Coordinator at {coordinator.url} refused the token (401 on "
                                 "GET /workers): check coordinator_token")
    run = witness(tmp_path, coordinator, coordinator_url="http://127.0.0.1:9")
    assert run.result["msg"].startswith("Coordinator unreachable at http://127.0.0.1:9 (")
    assert run.result["msg"].endswith("): check coordinator_url")


def test_the_registry_is_read_from_the_first_coordinator_that_answers(tmp_path, coordinator,
                                                                     registrations):
    """coordinator_url as a list or comma-separated: one where nothing listens is passed
    over; when none answers, each is named with its reason."""
    registrations.append(Registration(coordinator, SLOW, 812).register())
    down, gone = (f"http://127.0.0.1:{free_port()}" for _ in range(2))
    for urls in ([down, coordinator.url], f"{down},{coordinator.url}/"):
        run = witness(tmp_path, coordinator, coordinator_url=urls,
                      expected=[{"host": SLOW, "pid": 812}], require="accounted")
        assert run.rc == 0, run.stdout
        assert [w["pid"] for w in run.result["workers"]] == [812]
    run = witness(tmp_path, coordinator, coordinator_url=[down, gone])
    assert run.rc != 0
    assert run.result["msg"].startswith(
        f"Coordinator unreachable at every URL of coordinator_url: {down} (")
    assert f"; {gone} (" in run.result["msg"]
    assert run.result["msg"].endswith("): check coordinator_url")
    run = witness(tmp_path, coordinator, coordinator_url=[" "])
    assert run.result["msg"] == ("coordinator_url names no Coordinator: give its URL, or the "
                                 "cluster's")


def test_while_waiting_a_coordinator_that_restarts_is_asked_again(tmp_path, tasks_db,
                                                                   probe_redis):
    # Nothing listens on the port for the first seconds (the Coordinator restarting): a
    # module that waits for heartbeats asks again every second, within its timeout.
    port, token = free_port(), "restart-token"
    args = {"coordinator_url": f"http://127.0.0.1:{port}", "coordinator_token": token,
            "kind": "web", "hosts": HOSTS, "expected": [], "require": "exactly",
            "wait_for_heartbeats": True, "timeout": 60}
    proc = start_probe(tmp_path, args, module="coordinator_workers")
    time.sleep(3)
    assert proc.poll() is None, "the module gave up while the Coordinator was down"
    with start_coordinator(tasks_db, probe_redis, tmp_path, port=port, token=token):
        run = finish_probe(proc)
    assert run.rc == 0, run.stdout
    assert run.result["serving"] == "the Coordinator's registry lists no alive web worker"
    # One that does not come back within the timeout is the usual one line.
    started = time.monotonic()
    run = finish_probe(start_probe(tmp_path, {**args, "timeout": 2},
                                   module="coordinator_workers"))
    assert time.monotonic() - started >= 2
    assert run.result["msg"].startswith(f"Coordinator unreachable at http://127.0.0.1:{port} (")
    assert run.result["msg"].endswith("): check coordinator_url")


def test_over_https_the_coordinator_is_verified_against_ca_path(tmp_path, tasks_db,
                                                                probe_redis):
    certificates = throwaway.make_certificates(tmp_path / "cluster")
    with start_coordinator(tasks_db, probe_redis, tmp_path, tls=certificates) as https:
        run = witness(tmp_path, https, ca_path=str(certificates.ca), expected=[],
                      require="accounted")
        assert run.rc == 0, run.stdout
        plain = https.url.replace("https://", "http://")
        run = witness(tmp_path, https, coordinator_url=plain, ca_path=str(certificates.ca))
        assert run.result["msg"] == (f"coordinator_url {plain} is http://, and ca_path is set: "
                                     f"the Coordinator serves HTTPS, use {https.url}")
        run = witness(tmp_path, https, coordinator_url=plain)
        assert run.result["msg"] == (
            f"Coordinator unreachable at {plain} (Remote end closed connection without "
            f"response): the Coordinator at {plain} closed the connection without an answer, "
            "as one that serves HTTPS only does: use https:// and the cluster CA's certificate "
            "(ca_path, docs/tls.md)")
        run = witness(tmp_path, https)
        assert run.result["msg"].startswith(f"Coordinator unreachable at {https.url} (")
        assert run.result["msg"].endswith(
            f"the Coordinator's certificate is not from the CA in the system's CA store or "
            f"does not name the host of {https.url}: use the cluster CA's ca.crt, and the "
            "address site.yml gave the Coordinator's certificate (docs/tls.md)")


def test_documentation_matches_the_code(tmp_path, coordinator, registrations):
    doc = documented_as_coded("coordinator_workers")
    registrations.append(Registration(coordinator, SLOW, 812).register())
    run = witness(tmp_path, coordinator)
    returned = set(run.result) - {"action", "changed", "failed", "invocation", "_ansible_no_log"}
    assert returned == set(doc["return"])
