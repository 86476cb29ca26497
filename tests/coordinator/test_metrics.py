"""/metrics held to Prometheus' own checker and to its documentation, and its queue label
bounded by what the routing table makes and by the workers alive."""

from __future__ import annotations

import logging
import re
import shutil
import ssl
import subprocess
import time
import uuid
from pathlib import Path

import coordinator_contract as contract
import httpx
from prometheus_client.parser import text_string_to_metric_families

from coordinator.metrics import Metrics
from lab import throwaway
from lab.drive import REPO
from lab.throwaway import ThrowawayRedis

from .coordkit import Backends, ServerThread, wait_for

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


def promtool_check_metrics(text: str) -> tuple[int, str]:
    assert PROMTOOL, "promtool not found: ./dev installs it (Debian's prometheus package)"
    checked = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                             text=True, check=False)
    return checked.returncode, checked.stdout + checked.stderr


def gauge(text: str, family_name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """A gauge's samples in a scrape: sorted label pairs -> value."""
    return {tuple(sorted(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) if family.name == family_name
            for sample in family.samples}


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
    assert scrape.headers["content-type"].startswith("text/plain; version=")
    assert promtool_check_metrics(scrape.text) == (0, "")
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


def test_the_oldest_queued_tasks_age_is_read_by_type_from_its_row(
        client: httpx.Client, backends: Backends) -> None:
    """No web worker: the task stays queued; its age is the row's, every other type 0."""
    task = client.post("/route", json={"prompt": "p", "task_type": "web_search"}).json()
    backends.sql("UPDATE tasks SET created_at = clock_timestamp() - interval '10 minutes'"
                 " WHERE id = %s", (task["task_id"],))
    web = (("task_type", "web_search"),)

    def aged() -> dict | None:
        found = gauge(client.get("/metrics").text, "coordinator_oldest_queued_task_seconds")
        return found if found[web] >= 600 else None

    # (The scrape reads the backends at most every 2 s.)
    ages = wait_for(aged, 5, what="the aged task in the metrics")
    assert 600 <= ages.pop(web) < 660
    assert ages == {(("task_type", t),): 0.0 for t in contract.TASK_TYPES if t != "web_search"}


def test_a_worker_gone_silent_is_dead_by_kind_and_one_that_said_goodbye_is_not(
        client: httpx.Client, server: ServerThread, backends: Backends, make_worker) -> None:
    make_worker(server, "alive", kind="web").start()
    make_worker(server, "gone", device="cpu").register()
    bye = make_worker(server, "bye", device="cpu")
    bye.register()
    assert bye.http.post("/workers/bye/deregister",
                         json={"instance_id": bye.instance_id}).status_code == 200
    backends.sql("UPDATE workers SET last_heartbeat = clock_timestamp() - interval '1 hour'"
                 " WHERE worker_id IN ('gone', 'bye')")
    states = {w["worker_id"]: w["state"] for w in client.get("/workers").json()["workers"]}
    assert states == {"alive": "alive", "gone": "dead", "bye": "stopped"}
    dead = {(("kind", "inference"),): 1.0, (("kind", "web"),): 0.0, (("kind", "rag"),): 0.0}
    wait_for(lambda: gauge(client.get("/metrics").text, "coordinator_workers_dead") == dead, 5,
             what="the dead worker in the metrics")


def test_the_last_backup_is_the_newest_dump_the_backup_recorded(
        client: httpx.Client, backends: Backends) -> None:
    name = "coordinator_backup_last_success_timestamp_seconds"
    assert gauge(client.get("/metrics").text, name) == {(): 0.0}  # none recorded yet
    backends.sql("INSERT INTO backups (finished_at, file, bytes) VALUES"
                 " (clock_timestamp() - interval '2 days', '/b/old.dump', 10),"
                 " (clock_timestamp() - interval '1 hour', '/b/new.dump', 20)")
    try:
        last = wait_for(lambda: gauge(client.get("/metrics").text, name)[()] or None, 5,
                        what="the recorded dump in the metrics")
    finally:
        backends.sql("DELETE FROM backups")
    assert time.time() - 3660 < last < time.time() - 3540


def test_the_certificates_expiry_is_read_from_the_files_the_configuration_names(
        start_server, tmp_path: Path, caplog) -> None:
    """The serving certificate and the CA one (both made here, valid one day) by their
    expiry; one that cannot be read any more loses its series and says why in the log."""
    certificates = throwaway.make_certificates(tmp_path / "cluster")
    with ThrowawayRedis(tls=certificates) as rds:
        server = start_server(
            REDIS_PORT=str(rds.port), REDIS_PASSWORD=rds.password,
            REDIS_CA_FILE=str(certificates.ca), COORDINATOR_TLS_CERT=str(certificates.cert),
            COORDINATOR_TLS_KEY=str(certificates.key))
        with httpx.Client(base_url=server.url, timeout=30,
                          verify=ssl.create_default_context(cafile=certificates.ca)) as client:
            scrape = client.get("/metrics").text
            expiry = gauge(scrape, "coordinator_certificate_expiry_timestamp_seconds")
            assert sorted(expiry) == [(("certificate", "ca"), ("file", str(certificates.ca))),
                                      (("certificate", "serving"),
                                       ("file", str(certificates.cert)))]
            tomorrow = time.time() + 86400
            assert all(tomorrow - 600 < value <= tomorrow for value in expiry.values()), expiry
            assert promtool_check_metrics(scrape) == (0, "")
            certificates.cert.write_text("not a certificate\n")
            with caplog.at_level(logging.WARNING, logger="coordinator"):
                expiry = gauge(client.get("/metrics").text,
                               "coordinator_certificate_expiry_timestamp_seconds")
        server.stop()
    assert sorted(expiry) == [(("certificate", "ca"), ("file", str(certificates.ca)))]
    assert f"metrics: cannot read the serving certificate {certificates.cert}: " in caplog.text
