"""searxng-standin: a STAND-IN for SearXNG, not SearXNG itself.

SearXNG cannot be installed on the project's test machines, so tests and the demo run this
small server instead. It speaks the part of SearXNG's HTTP API that the web-search worker
uses, closely enough that an unchanged client (``requests``, the worker) works against it,
and does what a real server does to such a client (each cited in lab/standins/README.md):

- ``GET|POST /search?q=...&format=json``: SearXNG's JSON answer (``query``, ``results``
  [url, title, content, engine, engines, score, category, ...], ``answers``,
  ``corrections``, ``infoboxes``, ``suggestions``, ``unresponsive_engines``). Results are
  made up, deterministic from the query and page, and every URL is under
  example.org/.com/.net (reserved names; nothing is ever fetched). Engines set unresponsive
  contribute nothing and are listed with SearXNG's reason.
- ``format=json`` is off unless enabled, as in SearXNG's default settings.yml: 403
  Forbidden, as for any format missing from ``search.formats`` (``csv``/``rss`` always);
  ``format=html`` or no format: a small HTML results page.
- a query with an external bang (a word ``!!g``, ``!!ddg``, ...): 302 to that search site.
- the limiter (``server.limiter``, off by default): 429 to clients its bot detection takes
  for scripts, and to too many requests from one address.
- uWSGI's buffer-size in front (SearXNG's documented uWSGI setup: 8192): a request whose
  head (URL and headers) does not fit is dropped without an answer.
- ``GET /``: an HTML search page; ``GET /healthz``: ``OK``.

Settings, the control endpoint and how to run it: standin_core (``python3 searxng.py
--port 8888``); every setting: lab/standins/README.md.
"""

from __future__ import annotations

import hashlib
import html
import ipaddress
import re
import socket
import threading
import time
from collections import defaultdict, deque
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any, ClassVar
from urllib.parse import SplitResult, parse_qs, quote_plus, unquote_to_bytes, urlsplit

if __package__:
    from . import standin_core as core
else:  # copied onto a host: the files it imports lie beside it
    import standin_core as core  # type: ignore[no-redef]


NAME = "searxng-standin"
DEFAULT_PORT = 8888
# SearXNG's own list; a format outside the instance's search.formats is answered with 403.
OUTPUT_FORMATS = ("html", "csv", "json", "rss")
DOMAINS = ("example.org", "example.com", "example.net")
ENGINES = ("duckduckgo", "brave", "wikipedia", "startpage", "qwant")

# A few of SearXNG's external bangs (searx/data/external_bangs.json); {} takes the query.
BANGS = {
    "g": "//www.google.com/search?q={}",
    "ddg": "http://duckduckgo.com/?q={}",
    "bing": "//www.bing.com/search?q={}",
    "w": "//en.wikipedia.org/wiki/Special:Search?search={}",
    "wja": "http://ja.wikipedia.org/wiki/Special:Search?search={}&go=Go",
}
# searx/botdetection/http_user_agent.py: a User-Agent starting like these is a bot's.
BOT_USER_AGENT = re.compile(
    r"("
    + r"unknown"
    + r"|[Cc][Uu][Rr][Ll]|[wW]get|Scrapy|splash|JavaFX|FeedFetcher|python-requests"
    + r"|Go-http-client|Java|Jakarta|okhttp"
    + r"|HttpClient|Jersey|Python|libwww-perl|Ruby|SynHttpClient|UniversalFeedParser"
    + r"|Googlebot|GoogleImageProxy"
    + r"|bingbot|Baiduspider|yacybot|YandexMobileBot|YandexBot|Yahoo! Slurp|MJ12bot|AhrefsBot"
    + r"|archive.org_bot|msnbot"
    + r"|MJ12bot|SeznamBot|linkdexbot|Netvibes|SMTBot|zgrab|James BOT|Sogou|Abonti|Pixray"
    + r"|Spinn3r|SemrushBot|Exabot"
    + r"|ZmEu|BLEXBot|bitlybot|HeadlessChrome"
    + r"|"
    + re.escape(r"Mozilla/5.0 (compatible; Farside/0.1.0; +https://farside.link)")
    + "|.*PetalBot.*"
    + r")"
)
# searx/botdetection/ip_limit.py (without link_token): (window seconds, most requests in it)
# per client address; the API window counts requests whose query string asks for a format
# other than html.
API_WINDOW = (3600, 4)
BURST_WINDOW = (20, 15)
LONG_WINDOW = (600, 150)
# How many characters of the query a made-up title or snippet quotes.
QUOTED = 80

# Flask's (Werkzeug's) default pages, which SearXNG answers with.
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
REDIRECT_PAGE = (
    "<!doctype html>\n<html lang=en>\n<title>Redirecting...</title>\n<h1>Redirecting...</h1>\n"
    "<p>You should be redirected automatically to the target URL: "
    '<a href="{0}">{0}</a>. If not, click the link.\n'
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
        raise core.BadSetting(f"expected a whole number from 0 to 50, got {value!r}")
    return value


def as_unresponsive(value: object) -> dict[str, str]:
    """Coerce a map from engine to the reason SearXNG gives for it (JSON text or an object)."""
    value = core.json_object(value)
    if not isinstance(value, dict) or not all(
        engine in ENGINES and isinstance(reason, str) and reason.strip()
        for engine, reason in value.items()
    ):
        raise core.BadSetting(
            f"expected a JSON object from engine ({', '.join(ENGINES)}) to SearXNG's reason, "
            f'e.g. {{"brave": "CAPTCHA"}}, got {value!r}'
        )
    return dict(value)


def as_buffer_size(value: object) -> int:
    """Coerce uWSGI's buffer-size: a whole number of bytes, 0 for no uWSGI in front."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise core.BadSetting(f"expected a whole number of bytes (0: no limit), got {value!r}")
    return value


SCHEMA = (
    core.Setting("latency", 0.0, core.as_float(0), "seconds to wait before answering a search"),
    core.Setting(
        "fail",
        None,
        core.as_fail(("error", "timeout")),
        'injected failure of /search: "error" = 500, "timeout" = no answer for hang_seconds',
    ),
    core.Setting("hang_seconds", 600.0, core.as_float(0), 'how long fail="timeout" stays silent'),
    core.Setting(
        "json_enabled",
        False,
        core.as_bool,
        "whether json is in search.formats (not in SearXNG's default settings.yml); false "
        "answers format=json with 403",
    ),
    core.Setting("results", 5, as_result_count, "results per page (0-50)"),
    core.Setting(
        "unresponsive",
        {},
        as_unresponsive,
        'JSON object: engine -> the reason SearXNG gives for it ("timeout", "CAPTCHA", '
        '"too many requests", ...); those engines find nothing',
    ),
    core.Setting(
        "limiter",
        False,
        core.as_bool,
        "server.limiter: 429 to clients taken for bots (User-Agent, Accept, Accept-Encoding, "
        "Accept-Language) and to too many requests from one address",
    ),
    core.Setting(
        "uwsgi_buffer_size",
        8192,
        as_buffer_size,
        "uWSGI's buffer-size in front: a request head (URL, headers) larger than this is "
        "dropped unanswered; 0: no limit",
    ),
)


def is_japanese(text: str) -> bool:
    # Kana, CJK ideographs and full-width forms all lie at or above U+2E80.
    return any(ord(char) >= 0x2E80 for char in text)


def make_results(query: str, count: int, pageno: int, category: str,
                 unresponsive: dict[str, str]) -> list[dict[str, Any]]:
    """Made-up, deterministic results that mention the query, in its language; none from an
    unresponsive engine."""
    japanese = is_japanese(query)
    quoted = query if len(query) <= QUOTED else query[:QUOTED] + "…"
    results = []
    for index in range(count):
        position = (pageno - 1) * count + index + 1
        digest = hashlib.sha256(f"{query}\n{position}".encode()).hexdigest()
        domain = DOMAINS[int(digest[0:2], 16) % len(DOMAINS)]
        first = int(digest[2:4], 16) % len(ENGINES)
        engines = [ENGINES[first]]
        if int(digest[4], 16) % 2:
            engines.append(ENGINES[(first + 1) % len(ENGINES)])
        engines = [engine for engine in engines if engine not in unresponsive]
        if not engines:
            continue
        path = f"/standin/{digest[:12]}"
        variant = int(digest[5], 16) % 3
        if japanese:
            titles = (f"{quoted} - 解説", f"{quoted}｜最新情報まとめ", f"{quoted} のよくある質問")
            content = f"「{quoted}」について要点をまとめたサンプルページです（結果 {position}）。"
        else:
            titles = (f"{quoted} - overview", f"{quoted}: latest updates", f"FAQ about {quoted}")
            content = f'A sample page about "{quoted}" with the main points (result {position}).'
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


def external_bang(query: str) -> str | None:
    """Where SearXNG sends a query with an external bang, else None (searx/query.py: any
    word ``!!<bang>`` of a known bang; the rest of the query goes to that site)."""
    words = query.split()
    bangs = [word[2:].lower() for word in words
             if word.startswith("!!") and word[2:].lower() in BANGS]
    if not bangs:
        return None
    rest = " ".join(word for word in words
                    if not (word.startswith("!!") and word[2:].lower() in BANGS))
    url = BANGS[bangs[-1]]
    url = "https:" + url if url.startswith("//") else url
    if not rest:  # searx/external_bang.py: no query, the site's start page
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.netloc}"
    return url.format(quote_plus(rest))


class SlidingWindows:
    """Requests counted per key in sliding time windows, as SearXNG's Valkey counters."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.times: defaultdict[str, deque[float]] = defaultdict(deque)

    def count(self, key: str, seconds: float) -> int:
        """Count one more request under ``key``; how many fell in the last ``seconds``."""
        now = time.monotonic()
        with self.lock:
            times = self.times[key]
            times.append(now)
            while times[0] <= now - seconds:
                times.popleft()
            return len(times)


def uwsgi_block_size(method: str, target: str, protocol: str, headers: Sequence[tuple[str, str]],
                     server_port: int, client: tuple[str, int]) -> int:
    """The size of the block of variables uWSGI's HTTP router makes of a request's head
    (plugins/http/http.c): each variable costs 2 + key + 2 + value bytes, and the query
    string is there twice (REQUEST_URI and QUERY_STRING)."""
    path, _, query = target.partition("?")
    variables = [
        ("REQUEST_METHOD", method.encode()), ("PATH_INFO", unquote_to_bytes(path)),
        ("REQUEST_URI", target.encode("latin-1")), ("QUERY_STRING", query.encode("latin-1")),
        ("SERVER_PROTOCOL", protocol.encode()), ("SCRIPT_NAME", b""),
        ("SERVER_NAME", socket.gethostname().encode()), ("SERVER_PORT", str(server_port).encode()),
        ("UWSGI_ROUTER", b"http"), ("REMOTE_ADDR", client[0].encode()),
        ("REMOTE_PORT", str(client[1]).encode()),
    ]
    for name, value in headers:
        key = name.upper().replace("-", "_")
        if key not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            key = "HTTP_" + key
        variables.append((key, value.encode("latin-1", "replace")))
    return sum(4 + len(key) + len(value) for key, value in variables)


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


class SearxngHandler(core.StandinHandler):
    standin_name = NAME
    windows: ClassVar[SlidingWindows] = SlidingWindows()
    routes: ClassVar[dict[str, dict[str, str]]] = {
        "/": {"GET": "index", "HEAD": "index"},
        "/healthz": {"GET": "healthz", "HEAD": "healthz"},
        "/search": {"GET": "search", "HEAD": "search", "POST": "search"},
    }

    # -- uWSGI in front ----------------------------------------------------------------------
    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        limit = self.store.get("uwsgi_buffer_size")
        if not limit or urlsplit(self.path).path == core.CONTROL_PATH:
            return True
        size = uwsgi_block_size(self.command, self.path, self.request_version,
                                self.headers.items(), self.server.server_address[1],
                                self.client_address)
        if size <= limit:
            return True
        self.dropped(size, limit)
        return False

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        limit = self.store.get("uwsgi_buffer_size")
        if limit and code in (HTTPStatus.REQUEST_URI_TOO_LONG,
                              HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE):
            # A head too large even for this server: far over uWSGI's buffer too.
            self.dropped(len(self.raw_requestline), limit)
            return
        super().send_error(code, message, explain)

    def dropped(self, size: int, limit: int) -> None:
        """What uWSGI does with a request head over its buffer-size (proto/uwsgi.c): log it
        and close the connection without an answer."""
        self.log_message("invalid request block size: %d (max %d)...skip", size, limit)
        self.close_connection = True

    # -- the limiter --------------------------------------------------------------------------
    def turned_away(self, url: SplitResult) -> bool:
        """searx/limiter.py's filter_request, without IP lists and link tokens: 429."""
        if not self.store.get("limiter") or url.path == "/healthz":
            return False
        client = self.client_address[0]
        if ipaddress.ip_address(client).is_link_local:
            return False
        reason = self.bot_user_agent()
        if reason is None and url.path == "/search":
            reason = self.bot_headers() or self.over_limit(
                client, parse_qs(url.query).get("format", ["html"])[0])
        if reason is None:
            return False
        self.log_message("limiter: BLOCK %s: %s", client, reason)
        self.read_body()
        self.send_body(429, b"Too Many Requests", "text/html; charset=utf-8")
        return True

    def bot_user_agent(self) -> str | None:
        user_agent = self.headers.get("User-Agent", "unknown")
        if BOT_USER_AGENT.match(user_agent):
            return f"bot detected, HTTP header User-Agent: {user_agent}"
        return None

    def bot_headers(self) -> str | None:
        """searx/botdetection's header checks of a /search request, in the limiter's order."""
        accepted = [part.split(";")[0].strip().lower()
                    for part in self.headers.get("Accept", "").split(",")]
        if not {"text/html", "text/*", "*/*"} & set(accepted):
            return "HTTP header Accept did not contain text/html"
        encodings = [part.strip() for part in self.headers.get("Accept-Encoding", "").split(",")]
        if "gzip" not in encodings and "deflate" not in encodings:
            return "HTTP header Accept-Encoding did not contain gzip nor deflate"
        if not self.headers.get("Accept-Language", "").strip():
            return "missing HTTP header Accept-Language"
        return None

    def over_limit(self, client: str, output: str) -> str | None:
        """searx/botdetection/ip_limit.py without link_token; ``output`` is the format the
        query string (not a POSTed form) asks for."""
        windows = [("API_WINDOW", API_WINDOW)] if output != "html" else []
        windows += [("BURST_WINDOW", BURST_WINDOW), ("LONG_WINDOW", LONG_WINDOW)]
        for name, (seconds, most) in windows:
            if self.windows.count(f"{name}:{client}", seconds) > most:
                return f"too many request in {name}"
        return None

    # -- pages --------------------------------------------------------------------------------
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
        # Before any engine is asked, whatever the format (searx/webapp.py).
        location = external_bang(query)
        if location is not None:
            self.send_body(302, REDIRECT_PAGE.format(html.escape(location)).encode(),
                           "text/html; charset=utf-8", [("Location", location)])
            return
        time.sleep(self.store.get("latency"))
        try:
            pageno = max(1, int(form.get("pageno", ["1"])[0]))
        except ValueError:
            pageno = 1
        category = form.get("categories", ["general"])[0].split(",")[0] or "general"
        unresponsive = self.store.get("unresponsive")
        results = make_results(query, self.store.get("results"), pageno, category, unresponsive)
        if output == "json":
            # searx/webutils.py get_json_response; the engines sorted by name.
            self.send_json(
                200,
                {
                    "query": query,
                    "results": results,
                    "answers": [],
                    "corrections": [],
                    "infoboxes": [],
                    "suggestions": suggestions_for(query) if results else [],
                    "unresponsive_engines": [list(pair) for pair in sorted(unresponsive.items())],
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
    core.main(SearxngHandler, SCHEMA, DEFAULT_PORT, "SearXNG",
              "GET /search?q=...&format=json answers deterministic made-up results", argv)


if __name__ == "__main__":
    main()
