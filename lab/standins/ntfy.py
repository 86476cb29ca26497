"""ntfy-standin: a STAND-IN for ntfy, not ntfy itself.

ntfy (https://ntfy.sh, binwiederhier/ntfy) is the notification server most home clusters
send to and read with its phone app; it cannot be installed on the project's test machines,
so the lab runs this small server instead, as the receiver of the Coordinator's
notifications (files/coordinator/notify.py, format ``ntfy``). It speaks the part of ntfy's
HTTP API that the Coordinator and a subscriber use, closely enough that unchanged clients
work against it, and answers as ntfy does (each cited in lab/standins/README.md):

- ``PUT|POST /`` with a JSON body (publishing as JSON): ``topic``, ``message``, ``title``,
  ``priority``, ``tags``; ``PUT|POST /<topic>`` with the message as the body, and ``GET
  /<topic>/publish`` (also ``/send``, ``/trigger``), with the title, priority and tags in
  ``X-Title``/``Title``/``t``, ``X-Priority``/``Priority``/``prio``/``p``,
  ``X-Tags``/``Tags``/``tag``/``ta`` headers or query parameters. The answer is the message
  as ntfy stores it: ``id``, ``time``, ``expires``, ``event``, ``topic``, ``title``,
  ``message``, ``priority``, ``tags`` (empty ones left out). Refusals are ntfy's error JSON
  (``code``, ``http``, ``error``, ``link``): a bad topic, priority or JSON, a message of
  4096 bytes or more (ntfy would make it an attachment, which its default settings refuse).
- ``GET /<topic>/json?poll=1`` (also ``/<topic1>,<topic2>/json``): the cached messages as
  newline-delimited JSON, oldest first; ``since=all|none|latest|<unix time>|<duration>|<message
  id>`` as ntfy reads it (``all`` when polling without it). A request without ``poll``
  (ntfy's stream) is refused with a 400 saying so: the stand-in does not stream.
- ``GET /v1/health``: ``{"healthy":true}``.

Messages are kept in memory, as ntfy keeps them without a ``cache-file``, for its
``cache-duration`` (12 h unless set), and are lost at a restart. Any other path is ntfy's 404
JSON. Settings (``fail``: 500 to publishes, a silence, or a connection closed unanswered),
the control endpoint and how to run it: standin_core (``python3 ntfy.py --port 8090``);
every setting: lab/standins/README.md.
"""

from __future__ import annotations

import contextlib
import email.errors
import email.header
import json
import re
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import SplitResult, parse_qs

if __package__:
    from . import standin_core as core
else:  # copied onto a host: the files it imports lie beside it
    import standin_core as core  # type: ignore[no-redef]


NAME = "ntfy-standin"
# ntfy listens on :80 (listen-http), which a stand-in run as nobody cannot bind.
DEFAULT_PORT = 8090

# server/server.go and server/config.go (binwiederhier/ntfy 81a486a, 2025-07).
TOPIC = r"[-_A-Za-z0-9]{1,64}"
DISALLOWED_TOPICS = ("docs", "static", "file", "app", "metrics", "account", "settings",
                     "signup", "login", "v1")
EMPTY_MESSAGE_BODY = "triggered"
MESSAGE_SIZE_LIMIT = 4096
JSON_BODY_LIMIT = 2 * MESSAGE_SIZE_LIMIT
CACHE_SECONDS = 12 * 3600  # cache-duration
MESSAGE_ID_LENGTH = 12
MESSAGE_ID_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
PRIORITIES = {"1": 1, "min": 1, "2": 2, "low": 2, "3": 3, "default": 3, "4": 4, "high": 4,
              "5": 5, "max": 5, "urgent": 5}
# server/util.go: the RFC 9218 Priority header a proxy adds is not a message priority.
HTTP_PRIORITY = re.compile(r"^u=\d,\s*(i|\d)$|^u=\d$")
# Go's time.ParseDuration: a sequence of decimal numbers, each with its unit.
DURATION_PART = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
                  "m": 60.0, "h": 3600.0}
# The fields of server/types.go's publishMessage and the JSON types Go decodes them from;
# a value of another type fails the whole body.
PUBLISH_FIELDS: dict[str, type | tuple[type, ...]] = {
    **dict.fromkeys(("topic", "title", "message", "click", "icon", "attach", "filename",
                     "email", "call", "cache", "firebase", "delay"), str),
    "priority": int, "tags": list, "actions": list, "markdown": bool,
}


@dataclass(frozen=True)
class NtfyError(Exception):
    """One of ntfy's errors (server/errors.go, errHTTP), answered as its JSON."""

    code: int
    http: int
    error: str
    link: str = ""

    def wrap(self, text: str) -> NtfyError:
        """errHTTP.Wrap: the same error with more words."""
        return NtfyError(self.code, self.http, f"{self.error}; {text}", self.link)

    def document(self) -> dict[str, Any]:
        return {"code": self.code, "http": self.http, "error": self.error,
                **({"link": self.link} if self.link else {})}


BAD_REQUEST = NtfyError(40000, 400, "invalid request")
PRIORITY_INVALID = NtfyError(40007, 400, "invalid priority parameter",
                             "https://ntfy.sh/docs/publish/#message-priority")
SINCE_INVALID = NtfyError(40008, 400, "invalid since parameter",
                          "https://ntfy.sh/docs/subscribe/api/#fetch-cached-messages")
TOPIC_INVALID = NtfyError(40009, 400, "invalid request: topic invalid")
TOPIC_DISALLOWED = NtfyError(40010, 400, "invalid request: topic name is not allowed")
ATTACHMENTS_DISALLOWED = NtfyError(40014, 400, "invalid request: attachments not allowed",
                                   "https://ntfy.sh/docs/config/#attachments")
JSON_INVALID = NtfyError(40024, 400, "invalid request: request body must be valid JSON")
NOT_FOUND = NtfyError(40401, 404, "page not found")
JSON_TOO_LARGE = NtfyError(41303, 413, "JSON body too large")
INTERNAL_ERROR = NtfyError(50001, 500, "internal server error")

SCHEMA = (
    core.Setting(
        "fail",
        None,
        core.as_fail(("error", "timeout", "down")),
        'injected failure of publishes: "error" = ntfy\'s 500, "timeout" = no answer for '
        'hang_seconds, "down" = the connection closed unanswered',
    ),
    core.Setting("hang_seconds", 600.0, core.as_float(0), 'how long fail="timeout" stays silent'),
    core.Setting(
        "cache_duration",
        float(CACHE_SECONDS),
        core.as_float(1),
        "ntfy's cache-duration: seconds a message is kept (and its expires); default 12 h",
    ),
)


def go_json(document: object) -> bytes:
    """JSON as Go's json.Encoder writes it: compact, UTF-8, HTML characters escaped, one line."""
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    for char in "<>&\u2028\u2029":  # only ever inside strings in JSON text
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text.encode() + b"\n"


def go_duration(text: str) -> float | None:
    """Seconds of a Go duration (``10m``, ``1h30m``, ``-5s``), None when it is none."""
    sign = -1.0 if text.startswith("-") else 1.0
    rest = text[1:] if text[:1] in "+-" else text
    seconds, position = 0.0, 0
    while position < len(rest):
        part = DURATION_PART.match(rest, position)
        if part is None:
            return None
        seconds += float(part.group(1)) * DURATION_UNITS[part.group(2)]
        position = part.end()
    return sign * seconds if rest else None


def publish_fields(body: bytes) -> dict[str, Any]:
    """The publishMessage a JSON body decodes to as Go's decoder does it: the first JSON
    value, names matched regardless of case, null leaving a field empty; else JSON_INVALID."""
    text = body.decode("utf-8", "replace").lstrip(" \t\r\n")
    try:
        document, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        raise JSON_INVALID from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise JSON_INVALID
    fields: dict[str, Any] = {}
    for key, value in document.items():
        name = key.lower()
        if name not in PUBLISH_FIELDS or value is None:
            continue
        wanted = PUBLISH_FIELDS[name]
        if not isinstance(value, wanted) or (wanted is not bool and isinstance(value, bool)):
            raise JSON_INVALID
        if name == "tags" and not all(isinstance(tag, str) for tag in value):
            raise JSON_INVALID
        fields[name] = value
    return fields


class Cache:
    """The messages of every topic, in publishing order (ntfy's in-memory message cache)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.messages: list[dict[str, Any]] = []

    def add(self, message: dict[str, Any]) -> None:
        with self.lock:
            self.messages.append(message)

    def poll(self, topics: Sequence[str], since: str | int) -> list[dict[str, Any]]:
        """server/message_cache.go, Messages, for each topic: ``since`` is all, none, latest,
        a message id (those published after it; an unknown one: all), or a unix time (time >=
        it); expired messages are gone. Oldest first, as sendOldMessages sorts them (by time,
        then as published)."""
        now = time.time()
        with self.lock:
            self.messages = [m for m in self.messages if m.get("expires", now + 1) > now]
            kept = list(self.messages)
        ordered = sorted(enumerate(kept), key=lambda item: (item[1]["time"], item[0]))
        after = next((index for index, m in enumerate(kept) if m["id"] == since), -1)
        chosen: set[int] = set()
        for topic in topics:
            mine = [index for index, m in ordered if m["topic"] == topic]
            if since == "latest":
                chosen.update(mine[-1:])
            elif since == "all":
                chosen.update(mine)
            elif isinstance(since, str) and since != "none":
                chosen.update(index for index in mine if index > after)
            elif isinstance(since, int):
                chosen.update(index for index in mine if kept[index]["time"] >= since)
        return [m for index, m in ordered if index in chosen]


class NtfyHandler(core.StandinHandler):
    standin_name = NAME
    cache: ClassVar[Cache] = Cache()
    # server/server.go, handleInternal: the routes a publisher and a subscriber use.
    patterns: ClassVar[Sequence[tuple[re.Pattern[str], dict[str, str]]]] = (
        (re.compile("/v1/health"), {"GET": "health"}),
        (re.compile("/"), {"PUT": "publish_json", "POST": "publish_json"}),
        (re.compile(f"/{TOPIC}"), {"PUT": "publish_topic", "POST": "publish_topic"}),
        (re.compile(f"/{TOPIC}/(?:publish|send|trigger)"), {"GET": "publish_topic"}),
        (re.compile(f"/{TOPIC}(?:,{TOPIC})*/json"), {"GET": "subscribe"}),
    )

    def route(self, path: str) -> dict[str, str] | None:
        return next((methods for pattern, methods in self.patterns if pattern.fullmatch(path)),
                    None)

    # -- answers ------------------------------------------------------------------------------
    def send_ntfy(self, status: int, body: bytes,
                  content_type: str = "application/json") -> None:
        # server.go, writeJSON and handleError: CORS open to any origin, ntfy's default.
        self.send_body(status, body, content_type, [("Access-Control-Allow-Origin", "*")])

    def send_error_json(self, error: NtfyError) -> None:
        self.send_ntfy(error.http, go_json(error.document()))

    # ntfy answers a path or method it does not route with its 404; it has no 405.
    def not_found(self) -> None:
        self.send_error_json(NOT_FOUND)

    def method_not_allowed(self, allowed: list[str]) -> None:
        self.send_error_json(NOT_FOUND)

    def health(self, url: SplitResult) -> None:
        self.send_ntfy(200, go_json({"healthy": True}))

    # -- parameters ---------------------------------------------------------------------------
    def param(self, url: SplitResult, names: Sequence[str],
              overrides: dict[str, str] | None = None) -> str:
        """server/util.go, readParam: the first header of ``names`` set (``overrides`` are the
        headers a JSON body stands for), else the first query parameter of them."""
        for name in names:
            value = (overrides or {}).get(name) or self.header(name)
            if value:
                return value
        query = parse_qs(url.query)
        for name in names:
            value = query.get(name.lower(), [""])[0].strip()
            if value:
                return value
        return ""

    def header(self, name: str) -> str:
        """A header as ntfy reads it: its raw UTF-8, RFC 2047 words decoded, trimmed."""
        raw = self.headers.get(name) or ""
        value = raw.encode("latin-1", "replace").decode("utf-8", "replace")
        # Go's mime.WordDecoder; where it fails too, the value stays as it came.
        with contextlib.suppress(email.errors.HeaderParseError, LookupError):
            if "=?" in value:
                value = str(email.header.make_header(email.header.decode_header(value)))
        if name.lower() == "priority" and HTTP_PRIORITY.match(value.strip()):
            return ""
        return value.strip()

    # -- publishing ---------------------------------------------------------------------------
    def publish_json(self, url: SplitResult) -> None:
        """server.go, transformBodyJSON: the body's fields become the topic's path, the body
        and headers of a publish to that topic."""
        body = self.read_body()
        try:
            if len(body) >= JSON_BODY_LIMIT:
                raise JSON_TOO_LARGE
            fields = publish_fields(body)
            topic = fields.get("topic", "")
            if not re.fullmatch(TOPIC, topic):
                raise TOPIC_INVALID
        except NtfyError as error:
            self.send_error_json(error)
            return
        # The headers it sets, by the lower-case names parameters are read with; an empty
        # one leaves the request's own header in force, as in ntfy.
        overrides = {"x-title": fields.get("title", ""), "x-tags": ",".join(fields.get("tags", [])),
                     "x-priority": str(fields["priority"]) if fields.get("priority") else "",
                     "x-cache": fields.get("cache", "")}
        message = fields.get("message") or EMPTY_MESSAGE_BODY
        self.publish(url, topic, message.encode(), overrides)

    def publish_topic(self, url: SplitResult) -> None:
        self.publish(url, url.path.split("/")[1], self.read_body(), {})

    def publish(self, url: SplitResult, topic: str, body: bytes,
                overrides: dict[str, str]) -> None:
        if self.injected_failure():
            return
        try:
            message = self.message(url, topic, body, overrides)
        except NtfyError as error:
            self.send_error_json(error)
            return
        if "expires" in message:  # X-Cache: no leaves it out of the cache, and unexpiring
            self.cache.add(message)
        self.log_message("published %s to %s: %s", message["id"], topic,
                         json.dumps(message.get("title", ""), ensure_ascii=False))
        self.send_ntfy(200, go_json(message))

    def message(self, url: SplitResult, topic: str, body: bytes,
                overrides: dict[str, str]) -> dict[str, Any]:
        """server.go, handlePublishInternal with parsePublishParams and handlePublishBody, for
        a server with its default settings (no attachments, no e-mail, no calls)."""
        if topic in DISALLOWED_TOPICS:
            raise TOPIC_DISALLOWED
        title = self.param(url, ("x-title", "title", "t"), overrides)
        text = self.param(url, ("x-message", "message", "m"), overrides).replace("\\n", "\n")
        priority_text = self.param(url, ("x-priority", "priority", "prio", "p"), overrides)
        priority = PRIORITIES.get(priority_text.lower(), 0 if not priority_text else None)
        if priority is None:
            raise PRIORITY_INVALID
        tags = [tag.strip() for tag in self.param(url, ("x-tags", "tags", "tag", "ta"),
                                                   overrides).split(",") if tag.strip()]
        cache = self.param(url, ("x-cache", "cache"), overrides).lower() in ("", "1", "yes",
                                                                            "true")
        # A body of the peek limit or more, or not UTF-8, is an attachment (handlePublishBody).
        try:
            if len(body) >= MESSAGE_SIZE_LIMIT:
                raise ValueError
            if body:  # an empty body keeps the message of the parameters (publish via GET)
                text = body.decode("utf-8").strip()
        except ValueError:
            raise ATTACHMENTS_DISALLOWED from None
        now = int(time.time())
        message: dict[str, Any] = {
            "id": "".join(secrets.choice(MESSAGE_ID_CHARS) for _ in range(MESSAGE_ID_LENGTH)),
            "time": now,
        }
        if cache:
            message["expires"] = now + int(self.store.get("cache_duration"))
        message.update(event="message", topic=topic)
        # server/types.go, message: empty fields are left out (omitempty).
        optional = {"title": title, "message": text or EMPTY_MESSAGE_BODY,
                    "priority": priority, "tags": tags}
        message.update((key, value) for key, value in optional.items() if value)
        return message

    def injected_failure(self) -> bool:
        """Answer the injected failure of a publish, if one is set; True when it did."""
        fail = self.store.get("fail")
        if fail is None:
            return False
        if fail == "down":
            self.close_connection = True  # no answer at all, as from a server that died
            return True
        if fail == "timeout":
            self.hang()
        self.send_error_json(INTERNAL_ERROR)
        return True

    # -- subscribing --------------------------------------------------------------------------
    def subscribe(self, url: SplitResult) -> None:
        """server.go, handleSubscribeHTTP with parseSubscribeParams and parseSince, polls only."""
        self.read_body()
        topics = [name for name in url.path.split("/")[1].split(",") if name]
        poll = self.param(url, ("x-poll", "poll", "po")).lower() in ("1", "yes", "true")
        try:
            if any(topic in DISALLOWED_TOPICS for topic in topics):
                raise TOPIC_INVALID  # topicsFromPath reports any topic error so
            since = self.since(self.param(url, ("x-since", "since", "si")), poll)
            if not poll:
                raise BAD_REQUEST.wrap(
                    f"{NAME} answers only polls (poll=1) and does not stream; ntfy would "
                    "keep this connection open")
        except NtfyError as error:
            self.send_error_json(error)
            return
        lines = b"".join(go_json(message) for message in self.cache.poll(topics, since))
        self.send_ntfy(200, lines, "application/x-ndjson; charset=utf-8")

    @staticmethod
    def since(text: str, poll: bool) -> str | int:
        """parseSince: all, none, latest, a message id, or a unix time (from a timestamp or a
        duration back from now); empty is all for a poll."""
        if not text:
            return "all" if poll else "none"
        if text in ("all", "latest", "none"):
            return text
        if len(text) == MESSAGE_ID_LENGTH and all(c in MESSAGE_ID_CHARS for c in text):
            return text
        if re.fullmatch(r"[+-]?[0-9]+", text):  # strconv.ParseInt
            return int(text)
        seconds = go_duration(text)
        if seconds is None:
            raise SINCE_INVALID
        return int(time.time() - seconds)


def main(argv: Sequence[str] | None = None) -> None:
    core.main(NtfyHandler, SCHEMA, DEFAULT_PORT, "ntfy",
              "publishes kept in memory, read back by polling /<topic>/json?poll=1", argv)


if __name__ == "__main__":
    main()
