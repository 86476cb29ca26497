"""searxng-standin: a STAND-IN for SearXNG, not SearXNG itself.

SearXNG cannot be installed on the project's test machines, so tests and the demo run this
small server instead. It speaks the part of SearXNG's HTTP API that the web-search worker
uses, closely enough that an unchanged client (``requests``, the worker) works against it:

- ``GET|POST /search?q=...&format=json``: SearXNG's JSON answer (``query``,
  ``number_of_results``, ``results`` [url, title, content, engine, engines, score,
  category, ...], ``answers``, ``corrections``, ``infoboxes``, ``suggestions``,
  ``unresponsive_engines``). Results are made up, deterministic from the query and page,
  and every URL is under example.org/.com/.net (reserved names; nothing is ever fetched).
- ``format=html`` or no format: a small HTML results page; ``format=json`` while JSON is
  disabled (or ``csv``/``rss``): 403 Forbidden, as SearXNG answers for a format missing
  from ``search.formats``.
- ``GET /``: an HTML search page; ``GET /healthz``: ``OK``.

Settings come from command-line flags or ``STANDIN_*`` environment variables at start, and
can be read and changed at runtime with ``GET``/``POST /_standin/config`` (a JSON object of
the same settings), which also reports how many requests each endpoint served.

Standard library only: the file runs alone (``python3 searxng.py --port 8888``) on any
machine with Python 3.11, or as ``python3 -m lab.standins.searxng`` from the repository.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import html
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
from urllib.parse import SplitResult, parse_qs, urlsplit

# ---- shared stand-in core: kept identical in searxng.py and ollama.py so that each file ----
# ---- runs alone when copied to a host; tests/standins/test_core.py checks they match. ----

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

    def do_GET(self) -> None:
        self.dispatch()

    def do_HEAD(self) -> None:
        self.dispatch()

    def do_POST(self) -> None:
        self.dispatch()

    def do_DELETE(self) -> None:
        self.dispatch()

    def do_PUT(self) -> None:
        self.dispatch()

    def do_PATCH(self) -> None:
        self.dispatch()

    def dispatch(self) -> None:
        url = urlsplit(self.path)
        if url.path == CONTROL_PATH:
            self.control()
            return
        methods = self.routes.get(url.path)
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


# ---- end of the shared stand-in core ----

NAME = "searxng-standin"
DEFAULT_PORT = 8888
# SearXNG's own list; a format outside the instance's search.formats is answered with 403.
OUTPUT_FORMATS = ("html", "csv", "json", "rss")
DOMAINS = ("example.org", "example.com", "example.net")
ENGINES = ("duckduckgo", "brave", "wikipedia", "startpage", "qwant")

# Flask's (Werkzeug's) default error pages, which SearXNG answers with.
FORBIDDEN_PAGE = (
    "<!doctype html>\n<html lang=en>\n<title>403 Forbidden</title>\n<h1>Forbidden</h1>\n"
    "<p>You don&#39;t have the permission to access the requested resource. It is either "
    "read-protected or not readable by the server.</p>\n"
)
SERVER_ERROR_PAGE = (
    "<!doctype html>\n<html lang=en>\n<title>500 Internal Server Error</title>\n"
    "<h1>Internal Server Error</h1>\n<p>The server encountered an internal error and was "
    "unable to complete your request. Either the server is overloaded or there is an error "
    "in the application.</p>\n"
)
NOT_FOUND_PAGE = (
    "<!doctype html>\n<html lang=en>\n<title>404 Not Found</title>\n<h1>Not Found</h1>\n"
    "<p>The requested URL was not found on the server. If you entered the URL manually "
    "please check your spelling and try again.</p>\n"
)
METHOD_NOT_ALLOWED_PAGE = (
    "<!doctype html>\n<html lang=en>\n<title>405 Method Not Allowed</title>\n"
    "<h1>Method Not Allowed</h1>\n<p>The method is not allowed for the requested URL.</p>\n"
)


def as_result_count(value: object) -> int:
    """Coerce the number of results per page: a whole number from 0 to 50."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 50:
        raise BadSetting(f"expected a whole number from 0 to 50, got {value!r}")
    return value


SCHEMA = (
    Setting("latency", 0.0, as_float(0), "seconds to wait before answering a search"),
    Setting(
        "fail",
        None,
        as_fail(("error", "timeout", "empty")),
        'injected failure of /search: "error" = 500, "timeout" = no answer for hang_seconds, '
        '"empty" = no results and every engine unresponsive',
    ),
    Setting("hang_seconds", 600.0, as_float(0), 'how long fail="timeout" stays silent'),
    Setting(
        "json_enabled",
        True,
        as_bool,
        "whether json is in search.formats; false answers format=json with 403",
    ),
    Setting("results", 5, as_result_count, "results per page (0-50)"),
)


def is_japanese(text: str) -> bool:
    # Kana, CJK ideographs and full-width forms all lie at or above U+2E80.
    return any(ord(char) >= 0x2E80 for char in text)


def make_results(query: str, count: int, pageno: int, category: str) -> list[dict[str, Any]]:
    """Made-up, deterministic results that mention the query, in its language."""
    japanese = is_japanese(query)
    results = []
    for index in range(count):
        position = (pageno - 1) * count + index + 1
        digest = hashlib.sha256(f"{query}\n{position}".encode()).hexdigest()
        domain = DOMAINS[int(digest[0:2], 16) % len(DOMAINS)]
        first = int(digest[2:4], 16) % len(ENGINES)
        engines = [ENGINES[first]]
        if int(digest[4], 16) % 2:
            engines.append(ENGINES[(first + 1) % len(ENGINES)])
        path = f"/standin/{digest[:12]}"
        variant = int(digest[5], 16) % 3
        if japanese:
            titles = (f"{query} - 解説", f"{query}｜最新情報まとめ", f"{query} のよくある質問")
            content = f"「{query}」について要点をまとめたサンプルページです（結果 {position}）。"
        else:
            titles = (f"{query} - overview", f"{query}: latest updates", f"FAQ about {query}")
            content = f'A sample page about "{query}" with the main points (result {position}).'
        title = titles[variant]
        results.append(
            {
                "url": f"https://{domain}{path}",
                "title": title,
                "content": content,
                "engine": engines[0],
                "engines": engines,
                "parsed_url": ["https", domain, path, "", "", ""],
                "template": "default.html",
                "positions": [position],
                "score": round(len(engines) / position, 4),
                "category": category,
                "publishedDate": None,
                "thumbnail": "",
                "priority": "",
            }
        )
    return results


def suggestions_for(query: str) -> list[str]:
    if is_japanese(query):
        return [f"{query} 最新", f"{query} とは"]
    return [f"{query} latest", f"what is {query}"]


def page(title: str, body: str) -> bytes:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head><body>\n"
        f"<p><small>{NAME}: a stand-in for SearXNG</small></p>\n{body}\n</body></html>\n"
    ).encode()


SEARCH_FORM = (
    '<form method="get" action="/search"><input type="text" name="q" aria-label="search">'
    '<button type="submit">search</button></form>'
)


class SearxngHandler(StandinHandler):
    standin_name = NAME
    routes: ClassVar[dict[str, dict[str, str]]] = {
        "/": {"GET": "index", "HEAD": "index"},
        "/healthz": {"GET": "healthz", "HEAD": "healthz"},
        "/search": {"GET": "search", "HEAD": "search", "POST": "search"},
    }

    def not_found(self) -> None:
        self.send_body(404, NOT_FOUND_PAGE.encode(), "text/html; charset=utf-8")

    def method_not_allowed(self, allowed: list[str]) -> None:
        self.send_body(
            405,
            METHOD_NOT_ALLOWED_PAGE.encode(),
            "text/html; charset=utf-8",
            [("Allow", ", ".join(allowed))],
        )

    def index(self, url: SplitResult) -> None:
        self.send_body(200, page("SearXNG", SEARCH_FORM), "text/html; charset=utf-8")

    def healthz(self, url: SplitResult) -> None:
        self.send_body(200, b"OK", "text/plain; charset=utf-8")

    def search(self, url: SplitResult) -> None:
        form = parse_qs(url.query)
        body = self.read_body()
        if self.command == "POST":
            form.update(parse_qs(body.decode("utf-8", "replace")))
        query = form.get("q", [""])[0].strip()
        output = form.get("format", ["html"])[0]
        if output not in OUTPUT_FORMATS:
            output = "html"
        # Same order as SearXNG: format allowed?, query present?, then the search.
        if output != "html" and not (output == "json" and self.store.get("json_enabled")):
            self.send_body(403, FORBIDDEN_PAGE.encode(), "text/html; charset=utf-8")
            return
        if not query:
            if output == "html":
                self.index(url)
            else:
                self.send_json(400, {"error": "No query"})
            return
        fail = self.store.get("fail")
        if fail == "timeout":
            self.hang()
        if fail in ("error", "timeout"):
            self.send_body(500, SERVER_ERROR_PAGE.encode(), "text/html; charset=utf-8")
            return
        time.sleep(self.store.get("latency"))
        try:
            pageno = max(1, int(form.get("pageno", ["1"])[0]))
        except ValueError:
            pageno = 1
        category = form.get("categories", ["general"])[0].split(",")[0] or "general"
        if fail == "empty":
            results: list[dict[str, Any]] = []
            unresponsive = [[engine, "timeout"] for engine in ENGINES]
        else:
            results = make_results(query, self.store.get("results"), pageno, category)
            unresponsive = []
        if output == "json":
            digest = hashlib.sha256(query.encode()).digest()
            self.send_json(
                200,
                {
                    "query": query,
                    "number_of_results": int.from_bytes(digest[:3]) % 90000 + 10000
                    if results
                    else 0,
                    "results": results,
                    "answers": [],
                    "corrections": [],
                    "infoboxes": [],
                    "suggestions": suggestions_for(query) if results else [],
                    "unresponsive_engines": unresponsive,
                },
            )
            return
        items = "\n".join(
            f'<article class="result"><h3><a href="{html.escape(result["url"])}">'
            f"{html.escape(result['title'])}</a></h3>"
            f'<p class="content">{html.escape(result["content"])}</p></article>'
            for result in results
        )
        body_html = f"{SEARCH_FORM}\n<h2>{html.escape(query)}</h2>\n{items}"
        self.send_body(200, page(f"{query} - SearXNG", body_html), "text/html; charset=utf-8")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=NAME,
        description="A stand-in for SearXNG (not SearXNG): GET /search?q=...&format=json "
        "answers deterministic made-up results; settings change at runtime with "
        f"POST {CONTROL_PATH}.",
    )
    args, values = parse_command_line(parser, SCHEMA, DEFAULT_PORT, argv)
    serve(SearxngHandler, Store(NAME, SCHEMA, values), args.bind, args.port, "SearXNG")


if __name__ == "__main__":
    main()
