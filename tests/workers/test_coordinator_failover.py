"""A worker given several Coordinators (COORDINATOR_URL comma-separated: the instances of one
cluster, over one database and one Redis): it uses the first that answers and says which it
passed over and why; when the one it uses stops, it moves to the next, keeps its registration
alive and its tasks done, and says goodbye where it is; when none answers it names each and
its error in one line."""

from __future__ import annotations

import time

from lab.throwaway import free_port

from .conftest import HEARTBEAT_TTL, TOKYO, WAITING, Coordinator, wait_until
from .test_web import error_of


def nobody() -> str:
    """A loopback URL where nothing listens: connections are refused at once."""
    return f"http://127.0.0.1:{free_port()}"


def state(coordinator: Coordinator, worker_id: str) -> str | None:
    return (coordinator.worker(worker_id) or {}).get("state")


def test_a_coordinator_that_does_not_answer_is_passed_over_and_named(
        web_env, start_worker, coordinator, tasks) -> None:
    down = nobody()
    worker = start_worker(web_env | {"COORDINATOR_URL": f"{down},{coordinator.url}"})
    passed = worker.wait_for("Using the Coordinator at")
    assert f"Using the Coordinator at {coordinator.url}: {down} did not answer (" in passed
    assert f" at {coordinator.url} (v" in worker.wait_for("register: ")
    worker.wait_for(WAITING)
    row = tasks.wait_status(coordinator.route(TOKYO, "web_search"), "done", "failed")
    assert (row["status"], row["worker_id"]) == ("done", web_env["WORKER_ID"]), row


def test_when_the_coordinator_in_use_stops_the_worker_moves_to_the_next(
        web_env, start_worker, pg, redis_server, coordinator, tasks, tmp_path) -> None:
    worker_id = web_env["WORKER_ID"]
    with Coordinator(pg, redis_server, tmp_path) as first:
        worker = start_worker(web_env | {"COORDINATOR_URL": f"{first.url},{coordinator.url}"})
        assert f" at {first.url} (v" in worker.wait_for("register: ")
        worker.wait_for(WAITING)
        first.stop()
        moved = worker.wait_for(f"Using the Coordinator at {coordinator.url}",
                                timeout=HEARTBEAT_TTL * 10)
    assert f"{first.url} did not answer (" in moved
    assert "Heartbeat to" not in worker.output()  # no outage: the next one answered
    # Its heartbeats reach the other instance: alive there past several TTLs.
    time.sleep(HEARTBEAT_TTL * 2)
    assert state(coordinator, worker_id) == "alive"
    row = tasks.wait_status(coordinator.route(TOKYO, "web_search"), "done", "failed")
    assert (row["status"], row["worker_id"]) == ("done", worker_id), row
    worker.stop()
    assert f"Deregistered {worker_id} from {coordinator.url}" in worker.output()
    wait_until(lambda: state(coordinator, worker_id) == "stopped", 5, "the goodbye")


def test_no_coordinator_answering_names_each_and_why(web_env, start_worker) -> None:
    first, second = nobody(), nobody()
    worker = start_worker(web_env | {"COORDINATOR_URL": f"{first}, {second}/"})
    assert worker.wait_exit() != 0
    message = error_of(worker)
    assert message.startswith(f"Coordinator check FAILED: not reachable at any of {first}, "
                              f"{second} ({first}: "), message
    assert f"; {second}: " in message and "Connection refused" in message, message
    assert message.endswith("); fix: check COORDINATOR_URL and that the Coordinator runs")


def test_a_coordinator_url_that_names_none_is_refused(web_env, start_worker) -> None:
    worker = start_worker(web_env | {"COORDINATOR_URL": " , "})
    assert worker.wait_exit() != 0
    assert error_of(worker) == ("COORDINATOR_URL ' , ' names no Coordinator: give its URL, or "
                                "the cluster's comma-separated")
