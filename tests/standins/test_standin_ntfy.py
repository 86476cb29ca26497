"""The ntfy stand-in, published to as the Coordinator publishes (its own body and send) and
read back as a subscriber polls (lab/drive.py's ``notifications``, what the lab tests use)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest
import requests

from coordinator.notify import Notification, body, post, target
from lab import drive
from lab.standins.ntfy import MESSAGE_ID_CHARS

# server/types.go, message: the fields in their order (the empty ones left out).
MESSAGE_KEYS = ["id", "time", "expires", "event", "topic", "title", "message", "priority",
                "tags"]


def notification(problem: bool, message: str = "inference worker 'gpu-a' on host "
                 "'10.89.20.43' failed its last two probes: timeout") -> Notification:
    return Notification(notification_id=1, subject="unhealthy:gpu-a", problem=problem,
                        message=message, created_at=datetime.now(UTC), attempts=1)


def publish_json(ntfy, document: object, timeout: float = 10) -> requests.Response:
    return requests.post(f"{ntfy.url}/", data=json.dumps(document), timeout=timeout)


def poll(ntfy, path: str, **params: str) -> requests.Response:
    return requests.get(f"{ntfy.url}/{path}/json", params={"poll": "1", **params}, timeout=10)


def messages(answer: requests.Response) -> list[dict]:
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"] == "application/x-ndjson; charset=utf-8"
    return [json.loads(line) for line in answer.text.splitlines()]


@pytest.fixture
def ntfy(launch):
    return launch("ntfy")


def test_the_coordinators_notifications_are_read_back_by_polling_their_topic(ntfy):
    url = f"{ntfy.url}/lab-cluster"
    before = int(time.time())

    for problem in (True, False):
        post(target("ntfy", url), body("ntfy", url, notification(problem)))

    problem, recovery = drive.notifications(url)
    assert (problem["title"], problem["priority"], problem["tags"]) == (
        "Cluster problem", 4, ["warning"])
    assert (recovery["title"], recovery["priority"], recovery["tags"]) == (
        "Cluster recovered", 3, ["white_check_mark"])
    for message in (problem, recovery):
        assert list(message) == MESSAGE_KEYS
        assert (message["event"], message["topic"]) == ("message", "lab-cluster")
        assert message["message"] == notification(True).message
        assert before <= message["time"] <= time.time()
        # ntfy's default cache-duration, 12 h
        assert message["expires"] == message["time"] + 12 * 3600
    assert drive.notifications(f"{ntfy.url}/another-topic") == []
    assert ntfy.config()["requests"] == {"/": 2, "/another-topic/json": 1,
                                         "/lab-cluster/json": 1}


def test_a_publish_answers_the_message_as_ntfy_stores_it(ntfy):
    answer = publish_json(ntfy, {"topic": "lab-cluster", "title": "障害", "message": "a <b> & c",
                                 "priority": 5, "tags": ["warning", "skull"]})

    assert answer.status_code == 200, answer.text
    assert answer.headers["Server"] == "ntfy-standin"
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.headers["Access-Control-Allow-Origin"] == "*"
    message = answer.json()
    assert list(message) == MESSAGE_KEYS
    assert len(message["id"]) == 12 and set(message["id"]) <= set(MESSAGE_ID_CHARS)
    # Go's json.Encoder: compact, UTF-8 as it is, <, > and & escaped, a newline after it.
    assert answer.content == (
        f'{{"id":"{message["id"]}","time":{message["time"]},"expires":{message["expires"]},'
        '"event":"message","topic":"lab-cluster","title":"障害",'
        '"message":"a \\u003cb\\u003e \\u0026 c","priority":5,'
        '"tags":["warning","skull"]}\n').encode()
    assert messages(poll(ntfy, "lab-cluster")) == [message]


@pytest.mark.parametrize(
    ("headers", "query"),
    [
        ({"X-Title": "Disk", "X-Priority": "high", "X-Tags": "warning, disk"}, {}),
        ({"Title": "Disk", "Priority": "4", "Tags": "warning,disk"}, {}),
        ({"t": "Disk", "prio": "4", "ta": "warning,,disk"}, {}),
        ({"p": "HIGH"}, {"title": "Disk", "tag": "warning,disk"}),
        ({}, {"t": "Disk", "p": "4", "ta": "warning,disk"}),
    ],
)
def test_a_topic_publish_takes_title_priority_and_tags_by_any_name_ntfy_reads(
    ntfy, headers, query
):
    answer = requests.put(f"{ntfy.url}/disks", data=b"  98% full\n", headers=headers,
                          params=query, timeout=10)

    assert answer.status_code == 200, answer.text
    message = answer.json()
    assert (message["topic"], message["message"], message["title"], message["priority"],
            message["tags"]) == ("disks", "98% full", "Disk", 4, ["warning", "disk"])


def test_a_title_header_may_be_utf8_or_an_encoded_word(ntfy):
    raw = requests.post(f"{ntfy.url}/disks", data=b"x", timeout=10,
                        headers={"Title": "ディスク".encode()})
    encoded = requests.post(f"{ntfy.url}/disks", data=b"x", timeout=10,
                            headers={"Title": "=?UTF-8?B?44OH44Kj44K544Kv?="})

    assert raw.json()["title"] == encoded.json()["title"] == "ディスク"


def test_a_publish_via_get_and_an_empty_message_are_triggered(ntfy):
    via_get = requests.get(f"{ntfy.url}/disks/trigger", timeout=10)
    with_message = requests.get(f"{ntfy.url}/disks/publish", params={"m": "one\\ntwo"},
                                timeout=10)
    empty_json = publish_json(ntfy, {"topic": "disks", "message": ""})
    empty_body = requests.post(f"{ntfy.url}/disks", timeout=10)

    assert with_message.json()["message"] == "one\ntwo"
    for answer in (via_get, empty_json, empty_body):
        assert answer.status_code == 200, answer.text
        message = answer.json()
        assert message["message"] == "triggered"
        # no title, priority or tags: left out, not null
        assert list(message) == ["id", "time", "expires", "event", "topic", "message"]


def test_an_uncached_message_has_no_expiry_and_is_not_polled(ntfy):
    answer = publish_json(ntfy, {"topic": "disks", "message": "now only", "cache": "no"})

    assert answer.status_code == 200, answer.text
    assert "expires" not in answer.json()
    assert messages(poll(ntfy, "disks")) == []


@pytest.mark.parametrize(
    ("document", "status", "error"),
    [
        ({"message": "no topic"}, 400,
         {"code": 40009, "http": 400, "error": "invalid request: topic invalid"}),
        ({"topic": "lab cluster"}, 400,
         {"code": 40009, "http": 400, "error": "invalid request: topic invalid"}),
        ({"topic": "t" * 65}, 400,
         {"code": 40009, "http": 400, "error": "invalid request: topic invalid"}),
        ({"topic": "v1"}, 400,
         {"code": 40010, "http": 400, "error": "invalid request: topic name is not allowed"}),
        ({"topic": "disks", "priority": 6}, 400,
         {"code": 40007, "http": 400, "error": "invalid priority parameter",
          "link": "https://ntfy.sh/docs/publish/#message-priority"}),
        # Go decodes priority into an int: text is not valid JSON for it, nor is 4.0.
        ({"topic": "disks", "priority": "4"}, 400,
         {"code": 40024, "http": 400, "error": "invalid request: request body must be valid JSON"}),
        ({"topic": "disks", "priority": 4.0}, 400,
         {"code": 40024, "http": 400, "error": "invalid request: request body must be valid JSON"}),
        ({"topic": "disks", "tags": "warning"}, 400,
         {"code": 40024, "http": 400, "error": "invalid request: request body must be valid JSON"}),
        (["disks"], 400,
         {"code": 40024, "http": 400, "error": "invalid request: request body must be valid JSON"}),
        ({"topic": "disks", "message": "x" * 4096}, 400,
         {"code": 40014, "http": 400, "error": "invalid request: attachments not allowed",
          "link": "https://ntfy.sh/docs/config/#attachments"}),
        ({"topic": "disks", "message": "x" * 9000}, 413,
         {"code": 41303, "http": 413, "error": "JSON body too large"}),
    ],
)
def test_a_bad_json_publish_gets_ntfys_error_and_stores_nothing(ntfy, document, status, error):
    answer = publish_json(ntfy, document)

    assert answer.status_code == status
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.json() == error
    assert messages(poll(ntfy, "disks")) == []


def test_a_body_that_is_not_json_is_refused_as_ntfy_does(ntfy):
    answer = requests.post(f"{ntfy.url}/", data="topic=disks", timeout=10)

    assert (answer.status_code, answer.json()) == (400, {
        "code": 40024, "http": 400, "error": "invalid request: request body must be valid JSON"})


def test_json_is_decoded_as_go_decodes_it(ntfy):
    # names in any case, null as absent, text after the first value ignored
    answer = requests.post(f"{ntfy.url}/", timeout=10,
                           data='{"Topic": "disks", "TITLE": "Disk", "tags": null} trailing')

    assert answer.status_code == 200, answer.text
    assert (answer.json()["topic"], answer.json()["title"]) == ("disks", "Disk")


def test_bad_topic_publishes_and_unknown_paths_get_ntfys_errors(ntfy):
    priority = requests.post(f"{ntfy.url}/disks", data="x", headers={"X-Priority": "7"},
                             timeout=10)
    binary = requests.post(f"{ntfy.url}/disks", data=b"\xff\xfe", timeout=10)
    unknown = requests.get(f"{ntfy.url}/disks/nothing", timeout=10)
    no_such_method = requests.delete(f"{ntfy.url}/disks", timeout=10)

    assert (priority.status_code, priority.json()["code"]) == (400, 40007)
    assert (binary.status_code, binary.json()["code"]) == (400, 40014)  # an attachment
    for answer in (unknown, no_such_method):
        assert (answer.status_code, answer.json()) == (404, {
            "code": 40401, "http": 404, "error": "page not found"})


def test_a_poll_reads_since_all_none_latest_a_message_or_a_time(ntfy):
    first, second, third = (publish_json(ntfy, {"topic": "disks", "message": text}).json()
                            for text in ("one", "two", "three"))
    publish_json(ntfy, {"topic": "other", "message": "elsewhere"})

    def texts(**params: str) -> list[str]:
        return [m["message"] for m in messages(poll(ntfy, "disks", **params))]

    assert texts() == texts(since="all") == ["one", "two", "three"]
    assert texts(since="none") == []
    assert texts(since="latest") == ["three"]
    assert texts(since=first["id"]) == ["two", "three"]
    assert texts(since=third["id"]) == []
    assert texts(since="zzzzzzzzzzzz") == ["one", "two", "three"]  # unknown id: all
    assert texts(since=str(first["time"])) == ["one", "two", "three"]
    assert texts(since=str(third["time"] + 60)) == []
    assert texts(since="10m") == texts(since="1h30m") == ["one", "two", "three"]
    assert texts(since="-1h") == []  # from an hour ahead
    # headers and short names, as ntfy reads them
    latest = requests.get(f"{ntfy.url}/disks/json", headers={"X-Poll": "yes", "X-Since": "latest"},
                          timeout=10)
    assert [m["message"] for m in messages(latest)] == ["three"]
    assert [m["message"] for m in messages(poll(ntfy, "disks", si=second["id"]))] == ["three"]
    both = [m["message"] for m in messages(poll(ntfy, "other,disks"))]
    assert both == ["one", "two", "three", "elsewhere"]


def test_a_bad_since_a_stream_and_a_disallowed_topic_are_refused(ntfy):
    since = poll(ntfy, "disks", since="yesterday")
    stream = requests.get(f"{ntfy.url}/disks/json", timeout=10)
    disallowed = poll(ntfy, "disks,v1")

    assert (since.status_code, since.json()) == (400, {
        "code": 40008, "http": 400, "error": "invalid since parameter",
        "link": "https://ntfy.sh/docs/subscribe/api/#fetch-cached-messages"})
    assert (stream.status_code, stream.json()) == (400, {
        "code": 40000, "http": 400,
        "error": "invalid request; ntfy-standin answers only polls (poll=1) and does not "
                 "stream; ntfy would keep this connection open"})
    assert (disallowed.status_code, disallowed.json()["code"]) == (400, 40009)


def test_messages_expire_after_the_cache_duration(launch):
    ntfy = launch("ntfy", "--cache-duration", "1")
    message = publish_json(ntfy, {"topic": "disks", "message": "short-lived"}).json()

    assert message["expires"] == message["time"] + 1
    assert len(messages(poll(ntfy, "disks"))) == 1
    time.sleep(2.1)
    assert messages(poll(ntfy, "disks")) == []


def test_health_answers_as_ntfy(ntfy):
    answer = requests.get(f"{ntfy.url}/v1/health", timeout=10)

    assert (answer.status_code, answer.content) == (200, b'{"healthy":true}\n')
    assert answer.headers["Content-Type"] == "application/json"


def test_an_injected_failure_is_what_the_coordinators_send_reports(ntfy):
    url = f"{ntfy.url}/lab-cluster"
    payload = body("ntfy", url, notification(True))

    ntfy.config(fail="error")
    with pytest.raises(OSError) as refused:
        post(target("ntfy", url), payload)
    assert str(refused.value) == "127.0.0.1 answered HTTP 500 Internal Server Error"
    answer = publish_json(ntfy, payload)
    assert (answer.status_code, answer.json()) == (500, {
        "code": 50001, "http": 500, "error": "internal server error"})

    ntfy.config(fail="down")
    with pytest.raises(OSError) as closed:
        post(target("ntfy", url), payload)
    assert str(closed.value) == ("127.0.0.1 not reachable: Remote end closed connection "
                                 "without response")

    ntfy.config(fail="timeout", hang_seconds=1.5)
    with pytest.raises(requests.ReadTimeout):
        publish_json(ntfy, payload, timeout=0.5)

    ntfy.config(fail=None)
    # Subscribers still read through a failure, and nothing failed was stored.
    assert drive.notifications(url) == []
    post(target("ntfy", url), payload)
    assert [m["title"] for m in drive.notifications(url)] == ["Cluster problem"]


def test_bad_settings_are_refused_with_a_one_line_reason(ntfy):
    answer = requests.post(f"{ntfy.url}/_standin/config", json={"fail": "sometimes"}, timeout=5)

    assert (answer.status_code, answer.json()) == (400, {
        "error": 'fail: expected null (no failure) or one of "error", "timeout", "down", '
                 "got 'sometimes'"})
