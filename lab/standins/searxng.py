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

Settings, the control endpoint and how to run it: standin_core (``python3 searxng.py
--port 8888``); every setting: lab/standins/README.md.
"""

from __future__ import annotations

import hashlib
import html
import time
from collections.abc import Sequence
from typing import Any, ClassVar
from urllib.parse import SplitResult, parse_qs

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
        raise core.BadSetting(f"expected a whole number from 0 to 50, got {value!r}")
    return value


SCHEMA = (
    core.Setting("latency", 0.0, core.as_float(0), "seconds to wait before answering a search"),
    core.Setting(
        "fail",
        None,
        core.as_fail(("error", "timeout", "empty")),
        'injected failure of /search: "error" = 500, "timeout" = no answer for hang_seconds, '
        '"empty" = no results and every engine unresponsive',
    ),
    core.Setting("hang_seconds", 600.0, core.as_float(0), 'how long fail="timeout" stays silent'),
    core.Setting(
        "json_enabled",
        True,
        core.as_bool,
        "whether json is in search.formats; false answers format=json with 403",
    ),
    core.Setting("results", 5, as_result_count, "results per page (0-50)"),
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


class SearxngHandler(core.StandinHandler):
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
    parser = core.command_line_parser(
        NAME, "SearXNG", "GET /search?q=...&format=json answers deterministic made-up results")
    args, values = core.parse_command_line(parser, SCHEMA, DEFAULT_PORT, argv)
    core.serve(SearxngHandler, core.Store(NAME, SCHEMA, values), args.bind, args.port, "SearXNG")


if __name__ == "__main__":
    main()
