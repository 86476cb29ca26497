"""/metrics held to Prometheus' own checker and to its documentation, and its queue label
bounded by what the routing table makes and by the workers alive."""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid

import coordinator_contract as contract
import httpx
from prometheus_client.parser import text_string_to_metric_families

from coordinator.metrics import Metrics
from lab.drive import REPO

from .coordkit import ServerThread, wait_for

PROMTOOL = shutil.which("promtool")
DOC_ROW = re.compile(r"^\| `(coordinator_\w+)` \| (\w+) \|([^|]*)\|", re.M)


def documented() -> dict[str, tuple[str, tuple[str, ...]]]:
    """name -> (type, labels) from the table in docs/coordinator.md."""
    text = (REPO / "docs" / "coordinator.md").read_text()
    return {name: (kind, tuple(re.findall(r"`(\w+)`", labels)))
            for name, kind, labels in DOC_ROW.findall(text)}


def exposed() -> dict[str, tuple[str, tuple[str, ...]]]:
    """The same, from the metrics the Coordinator registers (counters as scraped, _total)."""
    metrics = Metrics()
    found = {}
    for collector in metrics.registry._collector_to_names:  # every registered metric
        family = collector.describe()[0]
        name = family.name + ("_total" if family.type == "counter" else "")
        found[name] = (family.type, tuple(collector._labelnames))
    return found


def queue_labels(text: str) -> set[str]:
    return {sample.labels["queue"] for family in text_string_to_metric_families(text)
            if family.name == "coordinator_queue_depth" for sample in family.samples}


def register(client: httpx.Client, worker_id: str, kind: str, **fields: object) -> httpx.Response:
    return client.post("/workers/register", json={
        "worker_id": worker_id, "host": "10.0.0.9", "kind": kind,
        "instance_id": str(uuid.uuid4()), **fields})


def test_the_documentation_lists_exactly_the_exposed_metrics() -> None:
    assert documented() == exposed()


def test_promtool_finds_nothing_in_a_real_scrape(client: httpx.Client, server: ServerThread,
                                                make_worker) -> None:
    worker = make_worker(server, "web1", kind="web").start()
    make_worker(server, "mac", device="cpu").start()
    task = client.post("/route", json={"prompt": "p", "task_type": "web_search"}).json()
    worker.take()
    worker.finish(task["task_id"], worker.claim(task["task_id"]), "r")
    wait_for(lambda: "coordinator_tasks_finished_total{" in client.get("/metrics").text, 5,
             what="the finished counter")
    scrape = client.get("/metrics")
    assert PROMTOOL, "promtool not found: ./dev installs it (Debian's prometheus package)"
    assert scrape.headers["content-type"].startswith("text/plain; version=")
    checked = subprocess.run([PROMTOOL, "check", "metrics"], input=scrape.text,
                             capture_output=True, text=True, check=False)
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")
    # Every queue has both gauges, in flight 0 where nothing runs (as GET /queues says).
    families = {f.name: f for f in text_string_to_metric_families(scrape.text)}
    in_flight = {sample.labels["queue"]: sample.value
                 for sample in families["coordinator_queue_in_flight"].samples}
    assert in_flight == {"tasks:web": 0.0, "tasks:rag": 0.0, "tasks:cpu:mac": 0.0}


def test_queue_names_outside_the_routing_table_add_no_series(start_server) -> None:
    server = start_server(COORDINATOR_HEARTBEAT_TTL="4")
    with server.client() as client:
        before = queue_labels(client.get("/metrics").text)
        for n in range(20):
            refused = register(client, f"fuzz-{n}", "web", queues=[f"fuzz-queue-{n}"])
            assert refused.status_code == 422, refused.text
        assert register(client, "gone", "inference", device="cpu").status_code == 200
        # (The scrape reads the backends at most every 2 s.)
        wait_for(lambda: queue_labels(client.get("/metrics").text) == before | {"tasks:cpu:gone"},
                 5, what="the live worker's queue in the metrics")
        # Its heartbeat stops: once it is dead (TTL 4 s), its queue leaves the metrics.
        wait_for(lambda: queue_labels(client.get("/metrics").text) == before, 10,
                 what="the dead worker's queue to leave the metrics")
        assert before == {"tasks:web", "tasks:rag"}


def test_a_claimed_task_is_in_flight_in_the_metrics_as_get_queues_says(
        client: httpx.Client, server: ServerThread, make_worker) -> None:
    worker = make_worker(server, "web-in-flight", kind="web").start()
    task = client.post("/route", json={"prompt": "p", "task_type": "web_search"}).json()
    worker.take()
    claim = worker.claim(task["task_id"])

    def in_flight() -> float | None:
        families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
        return {sample.labels["queue"]: sample.value
                for sample in families["coordinator_queue_in_flight"].samples}.get("tasks:web")

    # (The scrape reads the backends at most every 2 s.)
    wait_for(lambda: in_flight() == 1.0, 5, what="the claimed task in flight in the metrics")
    queues = {q["queue"]: q for q in client.get("/queues").json()["queues"]}
    assert queues["tasks:web"]["in_flight"] == 1
    worker.finish(task["task_id"], claim, "r")
    wait_for(lambda: in_flight() == 0.0, 5, what="the finished task to leave the in-flight gauge")


def counter(text: str, family_name: str, **labels: str) -> float:
    """A counter's value in a scrape (0 when the series is not there)."""
    return sum(sample.value for family in text_string_to_metric_families(text)
               if family.name == family_name for sample in family.samples
               if sample.name == f"{family_name}_total"
               and all(sample.labels.get(k) == v for k, v in labels.items()))


def test_a_fallback_answer_is_counted_by_its_task_type_from_the_task_event(
        client: httpx.Client, server: ServerThread, make_worker) -> None:
    before = client.get("/metrics").text
    # Every task type has its series from the start, at 0, for a rate() before the first one.
    assert {s.labels["task_type"]: s.value for f in text_string_to_metric_families(before)
            if f.name == "coordinator_task_fallbacks" for s in f.samples} == dict.fromkeys(
        contract.TASK_TYPES, 0.0)
    worker = make_worker(server, "web-fallback", kind="web").start()
    for fallback in (True, False):
        task = client.post("/route", json={"prompt": "p", "task_type": "web_search"}).json()
        worker.take()
        worker.finish(task["task_id"], worker.claim(task["task_id"]), "r", fallback=fallback)
    wait_for(lambda: counter(client.get("/metrics").text, "coordinator_tasks_finished",
                             task_type="web_search", status="done") == 2, 5,
             what="both web tasks counted as finished")
    scrape = client.get("/metrics").text
    assert counter(scrape, "coordinator_task_fallbacks", task_type="web_search") == 1
    assert counter(scrape, "coordinator_task_fallbacks") == 1
