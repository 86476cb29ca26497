"""What the stand-ins (ollama.py, searxng.py, ntfy.py) share: settings from flags, environment
and the control endpoint, the request counter, JSON and streamed answers, the server loop.

A stand-in takes its settings from command-line flags or ``STANDIN_*`` environment
variables at start; ``GET``/``POST /_standin/config`` reads and changes them at runtime (a
JSON object of the same settings) and reports how many requests each endpoint served.

Standard library only, like the stand-ins: one runs on any machine with Python 3.11 as
``python3 <name>.py --port N`` with this file beside it (lab/prepare.yml copies both onto
the lab's hosts, where it is imported as ``standin_core``), or as ``python3 -m
lab.standins.<name>`` from the repository.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import SplitResult, urlsplit

CONTROL_PATH = "/_standin/config"
READ_ONLY_KEYS = ("standin", "requests")
OFF_WORDS = ("", "0", "false", "no", "off", "none", "null")
ON_WORDS = ("1", "true", "yes", "on")


class BadSetting(ValueError):
    """A setting value that cannot be used; the message says what to give instead."""


def as_float(minimum: float) -> Callable[[object], float]:
    """Coerce to a finite number no smaller than ``minimum`` (from JSON or from text)."""

    def coerce(value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise BadSetting(f"expected a number >= {minimum:g}, got {value!r}")
        try:
            number = float(value)
        except ValueError:
            raise BadSetting(f"expected a number >= {minimum:g}, got {value!r}") from None
        if not math.isfinite(number) or number < minimum:
            raise BadSetting(f"expected a number >= {minimum:g}, got {value!r}")
        return number

    return coerce


def as_bool(value: object) -> bool:
    """Coerce to a boolean: JSON true/false, or words such as on/off, yes/no, 1/0."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ON_WORDS:
        return True
    if isinstance(value, str) and value.strip().lower() in OFF_WORDS:
        return False
    raise BadSetting(f"expected true or false, got {value!r}")


def json_object(value: object) -> object:
    """A setting given as JSON text (a flag, a variable) parsed, "" as {}, None for text that
    is no JSON; any other value as it is. The caller checks it is the object it wants."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value) if value.strip() else {}
    except ValueError:
        return None


def as_fail(modes: Sequence[str]) -> Callable[[object], str | None]:
    """Coerce a failure mode: off (null/false), one of ``modes``; true means ``"error"``."""

    def coerce(value: object) -> str | None:
        if value is None or value is False:
            return None
        if value is True:
            return "error"
        if isinstance(value, str):
            word = value.strip().lower()
            if word in OFF_WORDS:
                return None
            if word in ON_WORDS:
                return "error"
            if word in modes:
                return word
        choices = ", ".join(f'"{mode}"' for mode in modes)
        raise BadSetting(f"expected null (no failure) or one of {choices}, got {value!r}")

    return coerce


class Setting:
    """One setting: its name (also the flag ``--name`` and the variable ``STANDIN_NAME``)."""

    def __init__(
        self, name: str, default: Any, coerce: Callable[[object], Any], help_text: str
    ) -> None:
        self.name = name
        self.default = default
        self.coerce = coerce
        self.help = help_text

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return "STANDIN_" + self.name.upper()


class Store:
    """The current settings and per-endpoint request counts, shared by all request threads."""

    def __init__(self, standin: str, schema: Sequence[Setting], values: dict[str, Any]) -> None:
        self.standin = standin
        self.schema = {setting.name: setting for setting in schema}
        self.values = dict(values)
        self.requests: Counter[str] = Counter()
        # Re-entrant so that a caller can hold it across a get() and the update() it decides.
        self.lock = threading.RLock()

    def get(self, name: str) -> Any:
        with self.lock:
            return self.values[name]

    def count(self, endpoint: str) -> None:
        with self.lock:
            self.requests[endpoint] += 1

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "standin": self.standin,
                **json.loads(json.dumps(self.values)),
                "requests": dict(sorted(self.requests.items())),
            }

    def update(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Apply all of ``changes`` or none of them (``BadSetting`` names the first bad one)."""
        coerced: dict[str, Any] = {}
        for name, value in changes.items():
            if name in READ_ONLY_KEYS:
                continue  # a config read back and posted again carries them; not settings
            setting = self.schema.get(name)
            if setting is None:
                known = ", ".join(sorted(self.schema))
                raise BadSetting(f"unknown setting {name!r}; the settings are: {known}")
            try:
                coerced[name] = setting.coerce(value)
            except BadSetting as exc:
                raise BadSetting(f"{name}: {exc}") from None
        with self.lock:
            self.values.update(coerced)
            self.applied(coerced)
            return self.snapshot()

    def applied(self, changes: dict[str, Any]) -> None:
        """Hook run under the lock after settings changed (e.g. to persist some of them)."""


def command_line_parser(name: str, what: str, answers: str) -> argparse.ArgumentParser:
    """A stand-in's command line; its description says first that it is not ``what``."""
    return argparse.ArgumentParser(
        prog=name,
        description=f"A stand-in for {what} (not {what}): {answers}; settings change at "
        f"runtime with POST {CONTROL_PATH}.",
    )


def parse_command_line(
    parser: argparse.ArgumentParser,
    schema: Sequence[Setting],
    default_port: int,
    argv: Sequence[str] | None,
) -> tuple[argparse.Namespace, dict[str, Any]]:
    """Parse ``--bind``, ``--port`` and one flag per setting; flags win over ``STANDIN_*``."""
    parser.add_argument(
        "--bind",
        default=os.environ.get("STANDIN_BIND", "127.0.0.1"),
        help="address to listen on (env STANDIN_BIND; default 127.0.0.1)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("STANDIN_PORT", default_port)),
        help=f"TCP port (env STANDIN_PORT; default {default_port})",
    )
    for setting in schema:
        # A bare boolean flag (--fail-generate-only) means true; others need their value.
        switch = {"nargs": "?", "const": "true"} if setting.coerce is as_bool else {}
        parser.add_argument(
            setting.flag,
            dest=setting.name,
            metavar="VALUE",
            help=f"{setting.help} (env {setting.env}; default {json.dumps(setting.default)})",
            **switch,
        )
    args = parser.parse_args(argv)
    values: dict[str, Any] = {}
    for setting in schema:
        raw, source = getattr(args, setting.name), setting.flag
        if raw is None:
            raw, source = os.environ.get(setting.env), setting.env
        if raw is None:
            values[setting.name] = json.loads(json.dumps(setting.default))
            continue
        try:
            values[setting.name] = setting.coerce(raw)
        except BadSetting as exc:
            parser.error(f"{source}: {exc}")
    return args, values


class StandinHandler(BaseHTTPRequestHandler):
    """Routing, bodies, streaming and the control endpoint; subclasses add the API routes."""

    protocol_version = "HTTP/1.1"
    standin_name = "standin"
    # path -> {HTTP method -> name of the handler method taking the split URL}
    routes: ClassVar[dict[str, dict[str, str]]] = {}
    store: ClassVar[Store]

    def version_string(self) -> str:
        return self.standin_name

    def log_message(self, format: str, *args: Any) -> None:
        # Named lines, so that two stand-ins logging to one terminal can be told apart.
        sys.stderr.write(f"{self.standin_name} {self.address_string()} {format % args}\n")

    def handle(self) -> None:
        # A client that gives up (e.g. its timeout fired while we "hung") is normal here.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            super().handle()

    def dispatch(self) -> None:
        url = urlsplit(self.path)
        if url.path == CONTROL_PATH:
            self.control()
            return
        if self.turned_away(url):
            return
        methods = self.route(url.path)
        if methods is None:
            self.read_body()
            self.not_found()
            return
        handler = methods.get(self.command)
        if handler is None:
            self.read_body()
            self.method_not_allowed(sorted(methods))
            return
        self.store.count(url.path)
        getattr(self, handler)(url)

    # Every method goes to the one router: it answers 404 or 405 as the real server does.
    do_GET = do_HEAD = do_POST = do_DELETE = do_PUT = do_PATCH = dispatch

    def route(self, path: str) -> dict[str, str] | None:
        """The handlers of ``path`` by HTTP method, None for a path the server does not
        know; a server whose paths hold names (ntfy's ``/<topic>``) matches patterns."""
        return self.routes.get(path)

    def turned_away(self, url: SplitResult) -> bool:
        """Whether the server refused the request before routing it (then it has answered);
        e.g. SearXNG's limiter."""
        return False

    def not_found(self) -> None:
        raise NotImplementedError

    def method_not_allowed(self, allowed: list[str]) -> None:
        raise NotImplementedError

    # -- bodies ------------------------------------------------------------------------------
    def read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def send_body(
        self, status: int, body: bytes, content_type: str, headers: Sequence[tuple[str, str]] = ()
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, status: int, document: object) -> None:
        body = json.dumps(document, ensure_ascii=False).encode()
        self.send_body(status, body, "application/json; charset=utf-8")

    def start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def stream_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%X\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # -- injected behaviour ------------------------------------------------------------------
    def hang(self) -> None:
        """Stay silent longer than a client's timeout, bounded by ``hang_seconds``."""
        time.sleep(self.store.get("hang_seconds"))

    # -- the control endpoint ----------------------------------------------------------------
    def control(self) -> None:
        body = self.read_body()
        if self.command == "GET":
            self.send_json(200, self.store.snapshot())
            return
        if self.command != "POST":
            self.send_json(405, {"error": f"use GET or POST on {CONTROL_PATH}"})
            return
        try:
            changes = json.loads(body or b"{}")
        except ValueError as exc:
            self.send_json(400, {"error": f"the body is not JSON ({exc}); send an object"})
            return
        if not isinstance(changes, dict):
            self.send_json(400, {"error": 'send a JSON object of settings, e.g. {"latency": 2}'})
            return
        try:
            snapshot = self.store.update(changes)
        except BadSetting as exc:
            self.send_json(400, {"error": str(exc)})
            return
        self.log_message("settings changed: %s", json.dumps(changes, ensure_ascii=False))
        self.send_json(200, snapshot)


def main(handler: type[StandinHandler], schema: Sequence[Setting], default_port: int, what: str,
         answers: str, argv: Sequence[str] | None) -> None:
    """A stand-in with no options but its settings: parse the command line, then serve."""
    parser = command_line_parser(handler.standin_name, what, answers)
    args, values = parse_command_line(parser, schema, default_port, argv)
    serve(handler, Store(handler.standin_name, schema, values), args.bind, args.port, what)


def serve(handler: type[StandinHandler], store: Store, bind: str, port: int, what: str) -> None:
    """Listen until interrupted; the first log line says plainly that this is a stand-in."""
    handler.store = store
    server = ThreadingHTTPServer((bind, port), handler)
    server.daemon_threads = True
    settings = json.dumps(store.snapshot(), ensure_ascii=False)
    print(
        f"{store.standin}: a stand-in for {what}, NOT the real thing, listening on "
        f"http://{bind}:{port} (control: {CONTROL_PATH}); settings {settings}",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
