"""coordinator_workers' pure logic (module_utils/coordinator_registry.py): no servers."""

from __future__ import annotations

import pytest

from module_utils import coordinator_registry as reg

HOSTS = {"10.89.20.42": "lab-worker-slow", "10.89.20.43": "lab-worker-fast"}


def worker(worker_id: str, host: str, pid: int, *, kind: str = "web", alive: bool = True,
           since: float = 2.0, version: str = "2.1", models: tuple[str, ...] = ()) -> dict:
    return {"worker_id": worker_id, "host": host, "pid": pid, "kind": kind, "alive": alive,
            "version": version, "queues": ["tasks:web"] if kind == "web" else ["tasks:cpu:x"],
            "models": list(models), "seconds_since_heartbeat": since}


def registry(*workers: dict, ttl: float = 30.0) -> dict:
    return {"workers": list(workers), "heartbeat_ttl": ttl}


def test_only_alive_workers_of_the_kind_are_read():
    seen, ttl = reg.parse_registry(registry(
        worker("web-worker-lab-worker-slow", "10.89.20.42", 812, models=("llama3.2:3b",)),
        worker("web-worker-old", "10.89.20.41", 99, alive=False),
        worker("lab-ai-core", "10.89.20.40", 77, kind="inference"),
    ), "web")
    assert [s.as_dict() for s in seen] == [{
        "worker_id": "web-worker-lab-worker-slow", "host": "10.89.20.42", "pid": 812,
        "version": "2.1", "queues": ["tasks:web"], "models": ["llama3.2:3b"],
        "seconds_since_heartbeat": 2.0}]
    assert ttl == 30.0


def test_an_answer_that_is_not_the_registry_says_so():
    with pytest.raises(reg.RegistryError) as error:
        reg.parse_registry([{"worker_id": "x"}], "web")
    assert str(error.value) == ('GET /workers did not answer {"workers": [...]}: check '
                                "coordinator_url points at the Coordinator API")


def test_a_rogue_copy_on_an_inventory_host_is_named_with_how_to_stop_it():
    seen, _ = reg.parse_registry(registry(
        worker("web-worker-lab-worker-slow", "10.89.20.42", 812),
        worker("web-worker-by-hand", "10.89.20.43", 4242, since=1.2),
    ), "web")
    failure = reg.verdict(seen, [reg.Expected("10.89.20.42", 812)], "accounted", "web", HOSTS)
    assert failure == (
        "web-worker-by-hand on lab-worker-fast (10.89.20.43), pid 4242, v2.1, heartbeat 1.2 s "
        "ago: no service manager runs it there (a copy started by hand, outside "
        "systemd/launchd, or one its service manager lost); stop it: `kill 4242` on "
        "lab-worker-fast (10.89.20.43)")


def test_a_worker_on_a_host_outside_the_inventory_is_named():
    elsewhere = worker("web-worker-elsewhere", "192.168.0.77", 31)
    seen, _ = reg.parse_registry(registry(elsewhere), "web")
    failure = reg.verdict(seen, [], "accounted", "web", HOSTS)
    assert failure == ("web-worker-elsewhere on 192.168.0.77, pid 31, v2.1, heartbeat 2.0 s "
                       "ago: a host outside the inventory; stop it: `kill 31` on 192.168.0.77")


# A run with --limit lab-worker-slow: lab-worker-fast, which web_workers names, and lab-ai-core,
# which it does not, are left out.
LEFT_OUT = [reg.LeftOut("10.89.20.43", "lab-worker-fast", "web_workers"),
            reg.LeftOut("10.89.20.40", "lab-ai-core")]
SLOW_ONLY = {"10.89.20.42": "lab-worker-slow"}


def test_a_web_worker_on_a_declared_host_left_out_is_no_rogue_and_said_left_out():
    seen, _ = reg.parse_registry(registry(
        worker("web-worker-lab-worker-fast", "10.89.20.43", 4194, since=1.5)), "web")
    assert reg.verdict(seen, [], "accounted", "web", SLOW_ONLY, LEFT_OUT) is None
    assert reg.compare(seen, [], LEFT_OUT) == ([], [])
    assert reg.describe_serving(seen, "web", SLOW_ONLY, LEFT_OUT) == (
        "the Coordinator's registry lists 1 alive web worker serving tasks:web: "
        "web-worker-lab-worker-fast on lab-worker-fast (10.89.20.43), pid 4194, v2.1, "
        "heartbeat 1.5 s ago (declared in web_workers, left out of this run by --limit)")
    # Without the left-out hosts, the same worker is a copy to stop: what the run said.
    assert "`kill 4194` on 10.89.20.43" in reg.verdict(seen, [], "accounted", "web", SLOW_ONLY)


def test_a_web_worker_on_an_undeclared_host_left_out_is_a_rogue_with_how_to_stop_it():
    seen, _ = reg.parse_registry(registry(
        worker("web-worker-by-hand", "10.89.20.40", 4242, since=0.5)), "web")
    assert reg.verdict(seen, [], "accounted", "web", SLOW_ONLY, LEFT_OUT) == (
        "web-worker-by-hand on lab-ai-core (10.89.20.40), pid 4242, v2.1, heartbeat 0.5 s ago: "
        "lab-ai-core is left out of this run by --limit and the inventory declares no web "
        "worker there (if the inventory moved it away from there, run without --limit); stop "
        "it: `kill 4242` on lab-ai-core (10.89.20.40)")


def test_the_same_host_with_another_pid_is_not_accounted_for():
    seen = [reg.Seen("w", "10.89.20.42", 900, "2.1", ("tasks:web",), 1.0)]
    unaccounted, missing = reg.compare(seen, [reg.Expected("10.89.20.42", 812)])
    assert [s.pid for s in unaccounted] == [900]
    assert [e.pid for e in missing] == [812]


def test_exactly_also_wants_every_expected_worker_alive_with_its_version():
    seen = [reg.Seen("w", "10.89.20.43", 812, "2.0", ("tasks:web",), 1.0)]
    expected = [reg.Expected("10.89.20.43", 812, "2.1")]
    assert reg.verdict(seen, expected, "accounted", "web", HOSTS) == (
        "w on lab-worker-fast (10.89.20.43), pid 812, v2.0, heartbeat 1.0 s ago: no service "
        "manager runs it there (a copy started by hand, outside systemd/launchd, or one its "
        "service manager lost); stop it: `kill 812` on lab-worker-fast (10.89.20.43)")
    assert reg.verdict([], expected, "exactly", "web", HOSTS) == (
        "the web worker pid 812 on lab-worker-fast (10.89.20.43) is not registered alive "
        "with version 2.1")
    assert reg.verdict([], expected, "accounted", "web", HOSTS) is None
    assert reg.verdict(seen, [], "none", "web", HOSTS) is None


def test_serving_line_names_the_queue_and_every_worker():
    seen, _ = reg.parse_registry(registry(worker("web-worker-lab-worker-slow", "10.89.20.42", 812)),
                             "web")
    assert reg.describe_serving(seen, "web", HOSTS) == (
        "the Coordinator's registry lists 1 alive web worker serving tasks:web: "
        "web-worker-lab-worker-slow on lab-worker-slow (10.89.20.42), pid 812, v2.1, "
        "heartbeat 2.0 s ago")
    assert reg.describe_serving([], "web", HOSTS) == (
        "the Coordinator's registry lists no alive web worker")


def test_only_a_heartbeat_after_the_first_read_proves_a_worker_alive():
    stale = reg.Seen("killed", "10.89.20.42", 1, None, (), 12.0)
    fresh = reg.Seen("rogue", "10.89.20.43", 2, None, (), 0.4)
    assert reg.heard_since([stale, fresh], waited=3.0) == [fresh]
