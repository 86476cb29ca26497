"""The HTTP API against real PostgreSQL and Redis, with the coordinator in-process."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid

import coordinator_contract as contract
import httpx
import psycopg
import pytest
import requests

from coordinator.routing import ROUTE_FIELDS, TASK_OPTIONS

from .coordkit import Backends, ServerThread, wait_for

# -- routing -------------------------------------------------------------------------------


def route(client: httpx.Client, **body: object) -> dict:
    resp = client.post("/route", json=body)
    assert resp.status_code == 201, resp.text
    answer = resp.json()
    assert answer["status"] == "queued"
    uuid.UUID(answer["task_id"])
    return answer


@pytest.mark.parametrize(("task_type", "queue"), [("web_search", "tasks:web"),
                                                  ("rag", "tasks:rag")])
def test_shared_task_types_go_to_their_shared_queue(
        client: httpx.Client, backends: Backends, task_type: str, queue: str) -> None:
    answer = route(client, prompt="what is new", task_type=task_type)
    assert answer["queue"] == queue
    row = backends.task(answer["task_id"])
    assert (row["status"], row["queue"], row["worker"], row["attempts"]) == (
        "queued", queue, "default", 0)
    assert row["dispatched_at"] is not None
    assert backends.redis().lrange(queue, 0, -1) == [answer["task_id"]]


@pytest.mark.parametrize("task_type", ["generate", "chat", "summarize"])
def test_inference_goes_to_a_per_worker_queue(server: ServerThread, backends: Backends,
                                              make_worker, task_type: str) -> None:
    make_worker(server, "macbookair", device="cpu").start()
    with server.client() as client:
        answer = route(client, prompt="hello", task_type=task_type)
    assert answer["queue"] == "tasks:cpu:macbookair"
    assert backends.task(answer["task_id"])["worker"] == "macbookair"
    assert backends.redis().lrange("tasks:cpu:macbookair", 0, -1) == [answer["task_id"]]


def test_inference_waits_without_worker_and_is_dispatched_on_register(
        server: ServerThread, backends: Backends, make_worker) -> None:
    with server.client() as client:
        answer = route(client, prompt="hello", task_type="generate")
        assert answer["queue"] is None and "dispatched when one registers" in answer["note"]
        task = client.get(f"/task/{answer['task_id']}").json()
        assert task["status"] == "queued" and task["waiting"] is True and task["queue"] is None
        registered = make_worker(server, "gpu1", device="gpu").register()
        assert registered["dispatched"] == 1
        task = client.get(f"/task/{answer['task_id']}").json()
    assert (task["queue"], task["worker"], task["waiting"]) == ("tasks:gpu:gpu1", "gpu1", False)
    assert backends.redis().lrange("tasks:gpu:gpu1", 0, -1) == [answer["task_id"]]


def test_a_worker_registering_while_the_reaper_holds_the_waiting_task_still_gets_it(
        server: ServerThread, backends: Backends, make_worker) -> None:
    # The Reaper's pass locks the waiting tasks it reviews (FOR UPDATE) for its transaction;
    # a register in that window waits for the pass instead of passing the task over.
    with server.client() as client:
        answer = route(client, prompt="hello", task_type="generate")
    answers: list[dict] = []
    with psycopg.connect(backends.dsn) as reaper, reaper.transaction():
        reaper.execute("SELECT id FROM tasks WHERE id = %s FOR UPDATE", (answer["task_id"],))
        registering = threading.Thread(target=lambda: answers.append(
            make_worker(server, "gpu1", device="gpu").register()))
        registering.start()
        time.sleep(0.5)
        assert answers == []  # waiting for the pass's lock, not answered without the task
    registering.join(10)
    assert answers[0]["dispatched"] == 1, answers
    assert backends.redis().lrange("tasks:gpu:gpu1", 0, -1) == [answer["task_id"]]


def test_model_choice_and_least_loaded(server: ServerThread, backends: Backends,
                                       make_worker) -> None:
    make_worker(server, "a", models=("llama3.2:3b",)).start()
    make_worker(server, "b", models=("llama3.2:3b", "qwen2.5:7b")).start()
    with server.client() as client:
        qwen = [route(client, prompt="p", task_type="chat", model="qwen2.5:7b")
                for _ in range(2)]
        assert {a["queue"] for a in qwen} == {"tasks:cpu:b"}
        spread = [route(client, prompt="p", task_type="generate") for _ in range(4)]
        # b already has 2 tasks: a gets the first two, then they alternate
        assert [a["queue"] for a in spread][:2] == ["tasks:cpu:a", "tasks:cpu:a"]
        assert sorted(a["queue"] for a in spread) == ["tasks:cpu:a"] * 3 + ["tasks:cpu:b"]
        nobody = route(client, prompt="p", task_type="chat", model="mistral")
        assert nobody["queue"] is None and "mistral" in nobody["note"]
        # Model names match as Ollama matches them: mistral is mistral:latest, for the task
        # that waited and for one routed to that worker by name.
        assert make_worker(server, "c", models=("mistral:latest",)).register()["dispatched"] == 1
        assert backends.task(nobody["task_id"])["queue"] == "tasks:cpu:c"
        named = route(client, prompt="p", task_type="chat", model="mistral", worker="c")
        assert named["queue"] == "tasks:cpu:c"


def test_named_worker(start_server, backends: Backends, make_worker) -> None:
    server = start_server(COORDINATOR_HEARTBEAT_TTL="2")
    a = make_worker(server, "a").start()
    make_worker(server, "b").start()
    web = make_worker(server, "web1", kind="web").start()
    with server.client() as client:
        for _ in range(3):
            assert route(client, prompt="p", task_type="chat", worker="b")["queue"] == \
                "tasks:cpu:b"
        resp = client.post("/route", json={"prompt": "p", "task_type": "chat",
                                           "worker": "nobody"})
        assert resp.status_code == 404 and "unknown worker 'nobody'" in resp.json()["error"]
        resp = client.post("/route", json={"prompt": "p", "task_type": "chat",
                                           "worker": web.worker_id})
        assert resp.status_code == 409 and "web worker" in resp.json()["error"]
        resp = client.post("/route", json={"prompt": "p", "task_type": "chat", "worker": "a",
                                           "model": "qwen"})
        assert resp.status_code == 409 and "does not serve model 'qwen'" in resp.json()["error"]
        # known but dead: accepted, waits for that worker only
        a.stop()
        wait_for(lambda: not client.get("/workers").json()["workers"][0]["alive"], 10,
                 what="worker a to be dead")
        answer = route(client, prompt="p", task_type="chat", worker="a")
        assert answer["queue"] is None and answer["worker"] == "a"
        server.reap()
        assert backends.task(answer["task_id"])["queue"] is None  # not given to b
        a.start()
        wait_for(lambda: backends.task(answer["task_id"])["queue"] == "tasks:cpu:a", 10,
                 what="the pinned task to reach worker a")


# -- the state machine ---------------------------------------------------------------------


def test_guarded_state_machine(client: httpx.Client, server: ServerThread, backends: Backends,
                               make_worker) -> None:
    w1 = make_worker(server, "web1", kind="web", host="hostA").start()
    w2 = make_worker(server, "web2", kind="web", host="hostB").start()
    task_id = route(client, prompt="news", task_type="web_search")["task_id"]
    assert w1.take() == task_id
    claim = w1.claim(task_id)
    assert claim is not None
    # a second copy of the id in Redis reaches another worker: its claim is dropped
    backends.redis().lpush("tasks:web", task_id)
    assert w2.take() == task_id
    assert w2.claim(task_id) is None
    # a result written without the claim is dropped
    assert not w2.finish(task_id, str(uuid.uuid4()), result="wrong")
    assert w1.finish(task_id, claim, result="the news", worker="web-worker")
    assert not w1.finish(task_id, claim, result="again")  # exactly one result
    task = client.get(f"/task/{task_id}").json()
    assert task["status"] == "done" and task["result"] == "the news"
    assert (task["worker"], task["worker_id"], task["worker_host"]) == ("web-worker", "web1",
                                                                         "hostA")
    assert task["attempts"] == 1 and task["fallback"] is False
    assert task["started_at"] and task["finished_at"] and task["created_at"]
    assert backends.redis().llen("processing:web1") == 0


def test_get_task_fields_and_errors(client: httpx.Client) -> None:
    task_id = route(client, prompt="p", task_type="rag")["task_id"]
    task = client.get(f"/task/{task_id}").json()
    for field in ("task_id", "task_type", "status", "result", "fallback", "worker",
                  "worker_id", "worker_host", "error", "attempts", "created_at", "started_at",
                  "finished_at", "model", "options", "answered_model", "queue"):
        assert field in task
    assert task["options"] is None
    options = {"temperature": 0, "seed": 42, "num_predict": 64, "stop": ["\n\n"]}
    searched = route(client, prompt="p", task_type="web_search", options=options)["task_id"]
    assert client.get(f"/task/{searched}").json()["options"] == options
    resp = client.get("/task/not-a-uuid")
    assert resp.status_code == 422 and "not a UUID" in resp.json()["error"]
    resp = client.get(f"/task/{uuid.uuid4()}")
    assert resp.status_code == 404 and "no task" in resp.json()["error"]
    for wait in ("61", "-1", "abc"):
        resp = client.get(f"/task/{task_id}", params={"wait": wait})
        assert resp.status_code == 422, wait
        assert "wait" in resp.json()["error"]


# -- long-poll -----------------------------------------------------------------------------


def test_long_poll_returns_when_the_task_completes(client: httpx.Client, server: ServerThread,
                                                   make_worker) -> None:
    worker = make_worker(server, "web1", kind="web").start()
    task_id = route(client, prompt="p", task_type="web_search")["task_id"]

    def complete() -> None:
        time.sleep(0.5)
        worker.take()
        worker.finish(task_id, worker.claim(task_id), result="done soon")

    completing = threading.Thread(target=complete)
    completing.start()
    started = time.monotonic()
    task = client.get(f"/task/{task_id}", params={"wait": 20}).json()
    elapsed = time.monotonic() - started
    # The answer may come before the worker's last statement: the worker's connection is
    # closed with the test, after that.
    completing.join(10)
    assert task["status"] == "done" and task["result"] == "done soon"
    assert 0.4 < elapsed < 5


def test_long_poll_times_out(client: httpx.Client) -> None:
    task_id = route(client, prompt="p", task_type="web_search")["task_id"]
    started = time.monotonic()
    task = client.get(f"/task/{task_id}", params={"wait": 1}).json()
    assert task["status"] == "queued"
    assert 0.9 < time.monotonic() - started < 4
    started = time.monotonic()
    assert client.get(f"/task/{task_id}", params={"wait": 0}).json()["status"] == "queued"
    assert time.monotonic() - started < 1


def test_many_long_polls_hold_no_connection(server: ServerThread, backends: Backends,
                                            make_worker) -> None:
    """Hundreds of waiting long-polls use neither database connections nor threads."""
    worker = make_worker(server, "web1", kind="web").start()
    count = 400
    with server.client() as client:
        ids = [route(client, prompt=f"p{i}", task_type="web_search")["task_id"]
               for i in range(count)]
    threads_before = threading.active_count()

    async def poll_all() -> list[dict]:
        limits = httpx.Limits(max_connections=count + 10)
        async with httpx.AsyncClient(base_url=server.url, timeout=60, limits=limits) as ac:
            polls = [asyncio.create_task(ac.get(f"/task/{i}", params={"wait": 60}))
                     for i in ids]
            await asyncio.to_thread(wait_for, lambda: server.coordinator.events.waiting
                                    >= count, 30, 0.05, "every long-poll to wait")
            # while they wait: the pool's connections only, and no new threads
            connections = backends.sql(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE"
                " 'coordinator %%' AND datname = current_database()")[0][0]
            assert connections <= server.cfg.pg_pool_size + 1
            assert threading.active_count() <= threads_before + 2

            def complete_all() -> None:
                for task_id in ids:
                    assert worker.take() == task_id
                    assert worker.finish(task_id, worker.claim(task_id), f"r-{task_id}")

            await asyncio.to_thread(complete_all)
            return [r.json() for r in await asyncio.gather(*polls)]

    results = asyncio.run(poll_all())
    assert [r["status"] for r in results] == ["done"] * count
    assert [r["result"] for r in results] == [f"r-{i}" for i in ids]
    assert server.coordinator.events.waiting == 0


# -- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(("content", "status", "words"), [
    (b"this is not json", 400, "not valid JSON"),
    (b"", 400, "empty"),
    (b'["web_search"]', 422, "JSON object"),
    (b'{"task_type": "web_search"}', 422, "'prompt' is missing"),
    (b'{"prompt": "", "task_type": "web_search"}', 422, "'prompt' is empty"),
    (b'{"prompt": 42, "task_type": "web_search"}', 422, "'prompt' must be a string"),
    (b'{"prompt": "p", "task_type": "juggle"}', 422, "unknown task_type 'juggle'"),
    (b'{"prompt": "p"}', 422, "'task_type' is missing"),
    (b'{"prompt": "p", "task_type": "chat", "priority": 1}', 422, "unknown field(s)"),
    (b'{"prompt": "p", "task_type": "chat", "model": 1}', 422, "'model' must be a string"),
    (b'{"prompt": "p", "task_type": "chat", "worker": ["a"]}', 422, "'worker' must be"),
])
def test_bad_route_requests(client: httpx.Client, backends: Backends, content: bytes,
                            status: int, words: str) -> None:
    resp = client.post("/route", content=content,
                       headers={"Content-Type": "application/json"})
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert words in error and "\n" not in error
    assert backends.sql("SELECT count(*) FROM tasks")[0][0] == 0


def test_oversized_prompts(start_server, backends: Backends) -> None:
    server = start_server(COORDINATOR_MAX_PROMPT_BYTES="1000")
    with server.client() as client:
        resp = client.post("/route", json={"prompt": "x" * 1001, "task_type": "chat"})
        assert resp.status_code == 413
        assert "1001 bytes" in resp.json()["error"]
        assert "COORDINATOR_MAX_PROMPT_BYTES" in resp.json()["error"]
        # a 10 MB body is refused from its Content-Length, before it is read
        big = b'{"prompt": "' + b"y" * (10 * 1024 * 1024) + b'", "task_type": "chat"}'
        resp = client.post("/route", content=big, headers={"Content-Type": "application/json"})
        assert resp.status_code == 413 and "over the limit" in resp.json()["error"]

        # ... and a chunked one without Content-Length as soon as it grows past the limit
        sent = 0

        def chunks():
            nonlocal sent
            yield b'{"prompt": "'
            for _ in range(160):
                sent += 65536
                yield b"z" * 65536

        resp = client.post("/route", content=chunks(),
                           headers={"Content-Type": "application/json"})
        assert resp.status_code == 413
        # the connection still works afterwards
        assert client.post("/route", json={"prompt": "ok", "task_type": "chat"}).status_code \
            == 201
    assert backends.sql("SELECT count(*) FROM tasks")[0][0] == 1


@pytest.mark.parametrize("path", ["/route", "/workers/register"])
def test_clients_that_send_the_whole_body_first_read_the_413(server: ServerThread,
                                                              path: str) -> None:
    # urllib and requests write the whole body before they read: had the server closed the
    # connection with the body unread, they would see "Connection reset by peer" instead.
    big = b'{"prompt": "' + b"y" * (10 * 1024 * 1024) + b'", "task_type": "chat"}'
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(
            server.url + path, data=big, headers={"Content-Type": "application/json"}),
            timeout=30)
    assert refused.value.code == 413
    assert "over the limit of" in json.loads(refused.value.read())["error"]
    answer = requests.post(server.url + path, data=big, timeout=30,
                           headers={"Content-Type": "application/json"})
    assert answer.status_code == 413 and "over the limit of" in answer.json()["error"]


def test_whole_numbers_written_as_floats_are_integers(client: httpx.Client) -> None:
    # JSON Schema's integer includes 135379.0; so do the worker endpoints.
    body = {"worker_id": "w1", "host": "h", "kind": "web", "instance_id": str(uuid.uuid4())}
    assert client.post("/workers/register", json=body | {"pid": 135379.0}).status_code == 200
    beat = client.post("/workers/w1/heartbeat", json={
        "instance_id": body["instance_id"], "pid": 135379.0, "in_flight": 1.0})
    assert (beat.status_code, beat.json()) == (200, {"duplicate": False, "drain": False})
    refused = client.post("/workers/w1/heartbeat", json={
        "instance_id": body["instance_id"], "pid": 1.5})
    assert refused.status_code == 422 and refused.json()["error"].startswith("'pid': ")


def test_worker_endpoint_errors(client: httpx.Client) -> None:
    good = {"worker_id": "w1", "host": "h", "kind": "web", "instance_id": str(uuid.uuid4())}
    for change, words in [({"kind": "robot"}, "'kind'"), ({"pid": "12"}, "'pid'"),
                          ({"worker_id": "bad id!"}, "'worker_id'"), ({"x": 1}, "unknown field"),
                          ({"instance_id": "nope"}, "'instance_id'")]:
        resp = client.post("/workers/register", json=good | change)
        assert resp.status_code == 422, change
        assert words in resp.json()["error"], resp.json()
    resp = client.post("/workers/register", json={"worker_id": "w1"})
    assert resp.status_code == 422 and "missing" in resp.json()["error"]
    resp = client.post("/workers/register", content=b"{", headers={
        "Content-Type": "application/json"})
    assert resp.status_code == 422 and "not valid JSON" in resp.json()["error"]
    resp = client.post("/workers/register", json=good | {"kind": "inference"})
    assert resp.status_code == 422 and "device" in resp.json()["error"]
    resp = client.post("/workers/register", json=good | {"kind": "inference", "device": "cpu",
                                                         "queues": ["tasks:cpu:w1"]})
    assert (resp.status_code, resp.json()) == (422, {
        "error": "an inference worker sends 'device' and no 'queues' (its queue, tasks:cpu:w1, "
                 "follows from the device), and 'queues' names tasks:cpu:w1: leave 'queues' "
                 "out"})
    resp = client.post("/workers/register", json=good | {"queues": ["tasks:web", "x"]})
    assert resp.json() == {"error": "a web worker serves tasks:web only, and 'queues' also "
                                    "names x: send [\"tasks:web\"]"}
    assert resp.status_code == 422
    resp = client.post("/workers/ghost/heartbeat", json={"instance_id": str(uuid.uuid4())})
    assert resp.status_code == 404 and "register" in resp.json()["error"]
    resp = client.post("/workers/ghost/deregister", json={"instance_id": str(uuid.uuid4())})
    assert resp.json() == {"error": "unknown worker 'ghost': nothing to deregister"}
    assert resp.status_code == 404
    resp = client.get("/no/such/path")
    assert resp.status_code == 404 and "error" in resp.json()
    resp = client.delete("/route")
    assert resp.status_code == 405 and "error" in resp.json()


# -- auth ----------------------------------------------------------------------------------

PROTECTED = [
    ("POST", "/route", {"prompt": "p", "task_type": "web_search"}),
    ("GET", f"/task/{uuid.uuid4()}", None),
    ("POST", "/workers/register", {"worker_id": "w", "host": "h", "kind": "web",
                                   "instance_id": str(uuid.uuid4())}),
    ("POST", "/workers/w/heartbeat", {"instance_id": str(uuid.uuid4())}),
    ("POST", "/workers/w/deregister", {"instance_id": str(uuid.uuid4())}),
    ("GET", "/workers", None),
    ("GET", "/queues", None),
    ("GET", "/tasks", None),
    ("POST", "/workers/w/drain", None),
    ("POST", "/workers/w/undrain", None),
    ("POST", f"/task/{uuid.uuid4()}/retry", None),
    ("POST", f"/task/{uuid.uuid4()}/cancel", None),
    ("GET", "/openapi.json", None),
    ("GET", "/docs", None),
]


def test_auth(start_server, backends: Backends) -> None:
    server = start_server(COORDINATOR_TOKEN="s3cret-token")
    with httpx.Client(base_url=server.url) as anon:
        for method, path, body in PROTECTED:
            for headers in ({}, {"Authorization": "Bearer wrong"},
                            {"Authorization": "s3cret-token"}):
                resp = anon.request(method, path, json=body, headers=headers)
                assert resp.status_code == 401, (method, path, headers)
                assert "bearer token" in resp.json()["error"]
                assert resp.headers["www-authenticate"] == "Bearer"
        # Refused before anything else: a path that does not exist tells a caller without
        # a token nothing, and a body is not read (nor its size judged) for one.
        for method, path, content in (("GET", "/no-such-path", None),
                                      ("POST", "/workers/w/drain", b"x" * 100_000),
                                      ("POST", "/workers/register", b"{not json")):
            resp = anon.request(method, path, content=content)
            assert (resp.status_code, resp.headers["www-authenticate"]) == (401, "Bearer"), path
            assert resp.json()["error"].startswith("missing bearer token: "), resp.json()
        assert anon.get("/health").status_code == 200
        # /metrics is open only when COORDINATOR_METRICS_OPEN says so.
        assert anon.get("/metrics").status_code == 401
        # A method no endpoint takes is a 405 whatever the token: nothing to authorise.
        for method in ("TRACE", "PUT"):
            resp = anon.request(method, "/workers")
            assert (resp.status_code, resp.json()) == (405, {
                "error": f"{method} is not allowed on /workers; see /docs for the methods it "
                         "takes"})
    assert backends.sql("SELECT count(*) FROM tasks")[0][0] == 0
    with server.client(token="s3cret-token") as client:
        for method, path, body in PROTECTED:
            assert client.request(method, path, json=body).status_code != 401, path


def test_the_metrics_token_reads_metrics_only(start_server) -> None:
    server = start_server(COORDINATOR_TOKEN="operator-token",
                          COORDINATOR_METRICS_TOKEN="scrape-token")
    with httpx.Client(base_url=server.url,
                      headers={"Authorization": "Bearer scrape-token"}) as scrape:
        metrics = scrape.get("/metrics")
        assert metrics.status_code == 200 and "coordinator_tasks_routed_total" in metrics.text
        for method, path, body in PROTECTED:
            refused = scrape.request(method, path, json=body)
            assert refused.status_code == 403, (method, path)
            assert refused.json()["error"] == (
                f"the metrics token reads GET /metrics only: {method} {path} needs the "
                "operator's token (COORDINATOR_TOKEN)")
    with server.client(token="operator-token") as operator:
        assert operator.get("/metrics").status_code == 200
    schema = httpx.get(f"{server.url}/openapi.json",
                       headers={"Authorization": "Bearer operator-token"}).json()
    assert set(schema["paths"]["/workers"]["get"]["responses"]) >= {"401", "403"}
    assert "403" not in schema["paths"]["/metrics"]["get"]["responses"]
    opened = start_server(COORDINATOR_TOKEN="operator-token", COORDINATOR_METRICS_OPEN="true")
    assert httpx.get(f"{opened.url}/metrics").status_code == 200
    assert httpx.get(f"{opened.url}/workers").status_code == 401


def test_a_worker_token_serves_its_own_worker_only(start_server, backends: Backends) -> None:
    server = start_server(COORDINATOR_TOKEN="operator-token",
                          COORDINATOR_WORKER_TOKEN_KEY="worker-token-key")
    token = contract.worker_token("worker-token-key", "w1")
    instance = str(uuid.uuid4())
    body = {"worker_id": "w1", "host": "h", "kind": "web", "instance_id": instance}
    with httpx.Client(base_url=server.url,
                      headers={"Authorization": f"Bearer {token}"}) as worker:
        assert worker.post("/workers/register", json=body).status_code == 200
        beat = worker.post("/workers/w1/heartbeat", json={"instance_id": instance})
        assert beat.status_code == 200
        other = worker.post("/workers/register", json=body | {"worker_id": "w2"})
        assert (other.status_code, other.json()["error"]) == (403, (
            "the token of worker 'w1' cannot register worker 'w2': each worker registers "
            "with its own"))
        for method, path, sent in [*PROTECTED, ("POST", "/workers/w2/heartbeat",
                                                {"instance_id": instance})]:
            if path in ("/workers/register",) or path.startswith("/workers/w1/"):
                continue
            refused = worker.request(method, path, json=sent)
            assert refused.status_code == 403, (method, path)
            assert refused.json()["error"] == (
                f"the token of worker 'w1' may register, heartbeat and say goodbye as 'w1' only: "
                f"{method} {path} needs the operator's token (COORDINATOR_TOKEN)")
        metrics = worker.get("/metrics")
        assert (metrics.status_code, metrics.json()["error"]) == (403, (
            "the token of worker 'w1' may register, heartbeat and say goodbye as 'w1' only: "
            "GET /metrics needs the operator's token (COORDINATOR_TOKEN)"))
        goodbye = worker.post("/workers/w1/deregister", json={"instance_id": instance})
        assert goodbye.json() == {"stopped": True}
    schema = httpx.get(f"{server.url}/openapi.json",
                       headers={"Authorization": "Bearer operator-token"}).json()
    assert set(schema["paths"]["/metrics"]["get"]["responses"]) >= {"401", "403"}
    forged = token[:-4] + "0000"
    answer = httpx.post(f"{server.url}/workers/w1/heartbeat", json={"instance_id": instance},
                        headers={"Authorization": f"Bearer {forged}"})
    assert answer.status_code == 401
    other_key = contract.worker_token("another-key", "w1")
    answer = httpx.post(f"{server.url}/workers/w1/heartbeat", json={"instance_id": instance},
                        headers={"Authorization": f"Bearer {other_key}"})
    assert answer.status_code == 401
    assert backends.sql("SELECT count(*) FROM tasks")[0][0] == 0


# -- workers, queues, health, metrics ------------------------------------------------------


def test_workers_and_queues(server: ServerThread, client: httpx.Client, make_worker) -> None:
    w = make_worker(server, "mac", device="cpu", models=("llama3.2:3b",), host="mac.lan").start()
    make_worker(server, "web1", kind="web").start()
    route(client, prompt="p", task_type="web_search")
    route(client, prompt="p", task_type="generate")
    task_id = route(client, prompt="p", task_type="generate")["task_id"]
    assert w.take() is not None
    w.claim(task_id) or w.claim(w.redis.lindex(w.processing, 0))
    workers = {x["worker_id"]: x for x in client.get("/workers").json()["workers"]}
    mac = workers["mac"]
    assert (mac["host"], mac["kind"], mac["queues"], mac["pid"]) == (
        "mac.lan", "inference", ["tasks:cpu:mac"], w.pid)
    assert mac["alive"] is True and mac["duplicate"] is False and mac["version"] == "test"
    assert mac["last_heartbeat"] and mac["db_write_failures"] == 0
    assert mac["models"] == ["llama3.2:3b"] and "in_flight" in mac and "last_error" in mac
    queues = {q["queue"]: q for q in client.get("/queues").json()["queues"]}
    assert queues["tasks:web"]["depth"] == 1 and queues["tasks:web"]["in_flight"] == 0
    assert queues["tasks:cpu:mac"]["depth"] == 1 and queues["tasks:cpu:mac"]["in_flight"] == 1
    assert queues["tasks:rag"]["depth"] == 0


def test_deregistered_worker_is_stopped_at_once_and_its_queue_moves(
        server: ServerThread, client: httpx.Client, backends: Backends, make_worker) -> None:
    leaving = make_worker(server, "leaving", device="cpu").start()
    staying = make_worker(server, "staying", device="cpu").start()
    task_id = route(client, prompt="p", task_type="generate")["task_id"]
    first = backends.task(task_id)["worker"]
    goer, other = (leaving, staying) if first == "leaving" else (staying, leaving)
    goer.stop()
    answer = client.post(f"/workers/{goer.worker_id}/deregister",
                         json={"instance_id": goer.instance_id})
    assert answer.status_code == 200 and answer.json() == {"stopped": True}
    listed = {w["worker_id"]: w for w in client.get("/workers").json()["workers"]}
    assert listed[goer.worker_id]["alive"] is False
    assert listed[goer.worker_id]["stopped_at"] is not None
    assert listed[goer.worker_id]["live_instances"] == []
    assert listed[other.worker_id]["alive"] is True
    # Its waiting task goes to the worker that stays, without waiting for the TTL.
    wait_for(lambda: backends.task(task_id)["worker"] == other.worker_id, 10)
    # A goodbye from an instance that is no longer the worker's current one stops nothing.
    stale = client.post(f"/workers/{other.worker_id}/deregister",
                        json={"instance_id": str(uuid.uuid4())})
    assert stale.json() == {"stopped": False}
    assert {w["worker_id"]: w["alive"] for w in client.get("/workers").json()["workers"]}[
        other.worker_id] is True


def test_health_and_metrics(client: httpx.Client, server: ServerThread, make_worker) -> None:
    health = client.get("/health")
    assert health.status_code == 200
    assert health.json()["postgresql"] == "ok" and health.json()["redis"] == "ok"
    assert health.json()["instance"] == socket.gethostname()  # which instance answered
    make_worker(server, "web1", kind="web").start()
    task_id = route(client, prompt="p", task_type="web_search")["task_id"]
    route(client, prompt="p", task_type="rag")
    worker = make_worker(server, "web2", kind="web").start()
    worker.take()
    worker.finish(task_id, worker.claim(task_id), "r")
    client.get(f"/task/{task_id}", params={"wait": 5})
    wait_for(lambda: 'coordinator_tasks_finished_total{status="done",task_type="web_search"} 1.0'
             in client.get("/metrics").text, 5, what="the finished counter")
    text = client.get("/metrics").text
    for needle in (
        'coordinator_tasks_finished_total{status="done",task_type="web_search"} 1.0',
        'coordinator_tasks{status="queued",task_type="rag"} 1.0',
        'coordinator_tasks{status="running",task_type="chat"} 0.0',
        'coordinator_queue_depth{queue="tasks:rag"} 1.0',
        'coordinator_workers_alive{kind="web"} 2.0',
        "coordinator_dispatch_latency_seconds_bucket",
        "coordinator_redispatches_total",
        "coordinator_workers_duplicate 0.0",
        'coordinator_tasks_routed_total{task_type="web_search"} 1.0',
    ):
        assert needle in text, needle


def test_openapi_schema(client: httpx.Client) -> None:
    schema = client.get("/openapi.json").json()
    for path in ("/route", "/task/{task_id}", "/workers/register",
                 "/workers/{worker_id}/heartbeat", "/workers", "/queues", "/health", "/metrics"):
        assert path in schema["paths"], path
    body = schema["paths"]["/route"]["post"]["requestBody"]["content"]["application/json"]
    # The fields documented are the fields the server's own check takes.
    assert set(body["schema"]["properties"]) == set(ROUTE_FIELDS)
    # Every reference resolves within the document (a hand-placed schema has no $defs there).
    assert "#/$defs/" not in json.dumps(schema)
    assert set(body["schema"]["properties"]["options"]["anyOf"][0]["properties"]) == set(
        TASK_OPTIONS)


def test_unexpected_errors_answer_503_not_500(server: ServerThread, client: httpx.Client,
                                              caplog: pytest.LogCaptureFixture) -> None:
    async def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("something odd")

    server.coordinator.workers.list = boom
    server.coordinator.tasks.route = boom
    for method, path, body in [("GET", "/workers", None),
                               ("POST", "/route", {"prompt": "p", "task_type": "rag"})]:
        resp = client.request(method, path, json=body)
        assert resp.status_code == 503, path
        assert "RuntimeError: something odd" in resp.json()["error"]
    assert "unhandled error in GET /workers" in caplog.text
    assert client.get("/health").status_code == 200
