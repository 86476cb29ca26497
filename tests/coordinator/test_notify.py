"""Notifications against real PostgreSQL and Redis and a local receiver (an HTTP server on
127.0.0.1 in the test): a dead worker, a worker failing its probes and a shared queue without
a consumer each sent once, in each format's shape; the recovery once; the rate limit; a
receiver that is down retried with backoff while the Coordinator serves, and the status page
saying why; no secret in any body."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from coordinator.config import NOTIFY_FORMATS, ConfigError, load_config
from coordinator.notify import (
    Condition,
    Last,
    Notification,
    Notifier,
    body,
    decide,
    target,
)

from .coordkit import Backends, ServerThread, wait_for

SECRET_PATH = "/topic-s3cret"
TOKEN = "api-token-0123456789"
#: Passes every half second, so a test waits little for the Reaper and the Notifier.
FAST = {"COORDINATOR_HEARTBEAT_TTL": "1.5", "COORDINATOR_TOKEN": TOKEN}


class Receiver:
    """Records each POST (path, JSON body) and answers ``status``."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.status = 200
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                receiver.posts.append((self.path, json.loads(self.rfile.read(length))))
                self.send_response(receiver.status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def bodies(self) -> list[dict[str, Any]]:
        return [b for _, b in self.posts]


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def notify_pass(server: ServerThread) -> list[Notification]:
    notifier = server.coordinator.notifier
    assert isinstance(notifier, Notifier)
    return server.run(notifier.run_once())


def kill(backends: Backends, worker_id: str) -> None:
    """The worker stops heartbeating long ago; the Reaper's next pass marks it dead."""
    backends.sql("UPDATE workers SET last_heartbeat = clock_timestamp() - interval '1 hour'"
                 " WHERE worker_id = %s", (worker_id,))


def assert_no_secret(receiver: Receiver, server: ServerThread) -> None:
    text = json.dumps(receiver.bodies())
    cfg = server.cfg
    for secret in (TOKEN, cfg.redis_password, cfg.pg_dsn, "password"):
        assert secret and secret not in text


def subjects(receiver: Receiver) -> list[tuple[str, str]]:
    return [(b["subject"], b["state"]) for b in receiver.bodies()]


def test_a_dead_web_worker_and_its_queue_are_sent_once_and_their_recovery_once(
        start_server, backends: Backends, make_worker, receiver: Receiver) -> None:
    server = start_server(COORDINATOR_NOTIFY_URL=receiver.url + SECRET_PATH, **FAST)
    web = make_worker(server, "web-a", kind="web", token=TOKEN)
    web.register()
    kill(backends, "web-a")
    wait_for(lambda: len(receiver.posts) >= 2, what="the dead worker's notifications")
    server.reap()
    notify_pass(server)
    assert sorted(subjects(receiver)) == [("dead:web-a", "problem"),
                                          ("no_consumer:tasks:web", "problem")]
    dead = next(b for b in receiver.bodies() if b["subject"] == "dead:web-a")
    assert dead["message"].startswith(
        "web worker 'web-a' on host 'host-web-a' is dead: it has sent no heartbeat since ")
    assert {path for path, _ in receiver.posts} == {SECRET_PATH}
    assert web.heartbeat().status_code == 200
    wait_for(lambda: len(receiver.posts) >= 4, what="the recoveries")
    notify_pass(server)
    assert sorted(subjects(receiver)[2:]) == [("dead:web-a", "recovered"),
                                              ("no_consumer:tasks:web", "recovered")]
    assert_no_secret(receiver, server)


def test_a_worker_failing_two_probes_is_sent_once_and_its_recovery_once(
        start_server, make_worker, receiver: Receiver) -> None:
    server = start_server(COORDINATOR_NOTIFY_URL=receiver.url, COORDINATOR_PROBE_INTERVAL="0.2",
                          COORDINATOR_PROBE_TIMEOUT="1", **FAST)
    worker = make_worker(server, "gpu-a", models=("m",), token=TOKEN).start()
    # It heartbeats and takes no probe (the pg_hba.conf failure): the probes fail.
    wait_for(lambda: receiver.posts, timeout=20, what="the unhealthy worker's notification")
    assert subjects(receiver) == [("unhealthy:gpu-a", "problem")]
    assert receiver.bodies()[0]["message"].startswith(
        "inference worker 'gpu-a' on host 'host-gpu-a' failed its last two probes: "
        "took no probe for ")

    def answer_probes() -> bool:
        probe = worker.take(0.2)
        if probe is not None:
            worker.finish(probe, worker.claim(probe))
        return len(receiver.posts) >= 2

    wait_for(answer_probes, timeout=20, what="the recovery")
    assert subjects(receiver) == [("unhealthy:gpu-a", "problem"),
                                  ("unhealthy:gpu-a", "recovered")]
    assert_no_secret(receiver, server)


@pytest.mark.parametrize("fmt", NOTIFY_FORMATS)
def test_each_format_has_its_receivers_shape(start_server, backends: Backends, make_worker,
                                             receiver: Receiver, fmt: str) -> None:
    server = start_server(COORDINATOR_NOTIFY_URL=receiver.url + SECRET_PATH,
                          COORDINATOR_NOTIFY_FORMAT=fmt, **FAST)
    make_worker(server, "gpu-a", models=("m",), token=TOKEN).register()
    kill(backends, "gpu-a")
    wait_for(lambda: receiver.posts, what="the notification")
    [(path, sent)] = receiver.posts
    text = "inference worker 'gpu-a' on host 'host-gpu-a' is dead"
    if fmt == "ntfy":  # ntfy's JSON API: the server's root, the topic in the body
        assert path == "/"
        assert sent["topic"] == SECRET_PATH.strip("/")
        assert sent["title"] == "Cluster problem" and sent["message"].startswith(text)
        assert sent["tags"] == ["warning"] and sent["priority"] == 4
    else:
        assert path == SECRET_PATH
        key = {"discord": "content", "slack": "text", "json": "message"}[fmt]
        assert text in sent[key]
    assert_no_secret(receiver, server)


def test_the_rate_limit_holds_a_subjects_problem_to_one_a_gap(
        start_server, backends: Backends, make_worker, receiver: Receiver) -> None:
    server = start_server(COORDINATOR_NOTIFY_URL=receiver.url, COORDINATOR_NOTIFY_GAP="3600",
                          **FAST)
    worker = make_worker(server, "gpu-a", models=("m",), token=TOKEN)
    worker.register()
    for _ in range(2):
        kill(backends, "gpu-a")
        server.reap()
        notify_pass(server)
        assert worker.heartbeat().status_code == 200
        notify_pass(server)
    kill(backends, "gpu-a")
    server.reap()
    for _ in range(3):
        notify_pass(server)
    assert subjects(receiver) == [("dead:gpu-a", "problem"), ("dead:gpu-a", "recovered")]


def test_a_receiver_that_is_down_is_retried_with_backoff_and_the_page_says_why(
        start_server, backends: Backends, make_worker, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", "coordinator.notify")
    server = start_server(
        COORDINATOR_NOTIFY_URL=f"http://127.0.0.1:{closed_port()}{SECRET_PATH}", **FAST)
    server.coordinator.notifier.retry_base = 0.3
    make_worker(server, "gpu-a", models=("m",), token=TOKEN).register()
    kill(backends, "gpu-a")

    def sends() -> int:
        return backends.sql("SELECT attempts FROM notifications")[0][0] \
            if backends.sql("SELECT 1 FROM notifications") else 0

    wait_for(lambda: sends() >= 3, timeout=20, what="three sends")
    [(attempts, error, due_in)] = backends.sql(
        "SELECT attempts, error, extract(epoch FROM next_attempt_at - clock_timestamp())"
        " FROM notifications")
    assert error.startswith("127.0.0.1 not reachable: ")
    assert 0 < float(due_in) <= 0.3 * 2 ** (attempts - 1)
    with server.client(TOKEN) as client:  # the Coordinator serves meanwhile
        answer = client.post("/route", json={"task_type": "chat", "prompt": "hi"})
        assert answer.status_code == 201, answer.text
    with httpx.Client(base_url=server.url, timeout=30) as browser:
        login = browser.post("/ui/login", data={"token": TOKEN, "name": "a", "next": "/ui"})
        assert login.status_code == 303, login.text
        page = browser.get("/ui").text
    assert 'data-subject="dead:gpu-a" data-delivered="false"' in page
    assert "not delivered: 127.0.0.1 not reachable: " in page and "(retried)" in page
    assert "notification 'dead:gpu-a' not delivered (send 1): 127.0.0.1 not reachable: " \
        in caplog.text
    assert SECRET_PATH not in caplog.text + page  # the URL's secret part: never shown


def test_a_receiver_refusing_shows_its_answer(start_server, backends: Backends, make_worker,
                                              receiver: Receiver) -> None:
    receiver.status = 500
    server = start_server(COORDINATOR_NOTIFY_URL=receiver.url, **FAST)
    make_worker(server, "gpu-a", models=("m",), token=TOKEN).register()
    kill(backends, "gpu-a")
    wait_for(lambda: backends.sql("SELECT error FROM notifications WHERE error IS NOT NULL"),
             what="the failed send")
    [(error,)] = backends.sql("SELECT error FROM notifications")
    assert error == "127.0.0.1 answered HTTP 500 Internal Server Error"


# -- pure parts ------------------------------------------------------------------------------

DEAD = Condition("dead", "gpu-a", "h", "inference", "2026-01-01 00:00:00 UTC")


def test_decide_sends_a_problem_once_its_recovery_once_and_waits_out_the_gap() -> None:
    assert decide([DEAD], {}, 60) == [("dead:gpu-a", True, DEAD.message)]
    sent = {"dead:gpu-a": Last("dead:gpu-a", True, DEAD.message, 5)}
    assert decide([DEAD], sent, 60) == []
    assert decide([], sent, 60) == [("dead:gpu-a", False, f"recovered: {DEAD.message}")]
    recovered = {"dead:gpu-a": Last("dead:gpu-a", False, "recovered: ...", 5)}
    assert decide([DEAD], recovered, 60) == []
    assert decide([], recovered, 60) == []
    late = {"dead:gpu-a": Last("dead:gpu-a", False, "recovered: ...", 61)}
    assert decide([DEAD], late, 60) == [("dead:gpu-a", True, DEAD.message)]


def test_no_consumer_says_what_to_do() -> None:
    condition = Condition("no_consumer", "tasks:web", None, None, None)
    assert condition.message == ("no alive worker consumes tasks:web: its tasks wait, then "
                                 "fail; start its worker")


@pytest.mark.parametrize(("url", "root", "topic"), [
    ("https://ntfy.sh/s3cret", "https://ntfy.sh/", "s3cret"),
    ("https://home.example/ntfy/s3cret/", "https://home.example/ntfy/", "s3cret"),
])
def test_ntfy_json_goes_to_the_servers_root_with_the_topic(url: str, root: str,
                                                           topic: str) -> None:
    sent = Notification(1, "s", False, "m", datetime.now(UTC), 1)
    assert target("ntfy", url) == root
    assert body("ntfy", url, sent) == {"topic": topic, "title": "Cluster recovered",
                                       "message": "m", "tags": ["white_check_mark"],
                                       "priority": 3}


def test_discord_content_is_cut_to_its_limit() -> None:
    long = Notification(1, "s", True, "x" * 3000, datetime.now(UTC), 1)
    assert len(body("discord", "https://discord.example/api/webhooks/1/t", long)["content"]) \
        == 2000


@pytest.mark.parametrize(("env", "message"), [
    ({"COORDINATOR_NOTIFY_URL": "ntfy.sh/s3cret-topic"},
     "COORDINATOR_NOTIFY_URL is not an http:// or https:// URL with a host: set the "
     "receiver's URL (ntfy topic, webhook), or unset it"),
    ({"COORDINATOR_NOTIFY_FORMAT": "teams"},
     "COORDINATOR_NOTIFY_FORMAT='teams' is not a format: use ntfy, discord, slack, json"),
])
def test_a_wrong_notify_setting_is_refused_without_quoting_the_url(
        env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config({"PG_DSN": "host=db dbname=c", "REDIS_HOST": "r", **env})
    assert str(refused.value) == message


def test_the_role_offers_the_formats_the_coordinator_takes() -> None:
    """roles/coordinator's argument spec lists its choices literally (Ansible reads no Python):
    they are held to the Coordinator's own list here."""
    specs = yaml.safe_load((REPO / "roles" / "coordinator" / "meta" / "argument_specs.yml")
                           .read_text())["argument_specs"]["main"]["options"]
    offered = specs["coordinator_notify_format"]
    assert tuple(offered["choices"]) == NOTIFY_FORMATS
    assert offered["default"] in NOTIFY_FORMATS
