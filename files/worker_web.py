#!/usr/bin/env python3
"""Web Search Worker: answers the Coordinator's `web_search` tasks.

It takes task ids from the shared Redis queue `tasks:web`, searches SearXNG (JSON API),
has a small model on Ollama summarise the results, and writes the answer to the `tasks`
table in PostgreSQL. When the summary fails the answer is the search results themselves
with a note (the v2.1 fallback); when SearXNG's engines failed and found nothing the answer
says which and why, flagged as a fallback too; when the search fails the task is `failed`
with the reason. The Coordinator's probe (a task of type probe) searches and asks Ollama for
one token (``WebWorker.probe``).
Everything else (checks, lock, heartbeat, reliable take, guarded writes, --check) is
worker_base.py, which the worker role ships beside it. Configuration: docs/workers.md.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import coordinator_contract as contract
import requests
import worker_base as base

# The one place the version lives: the banner, --version and registration all read it.
VERSION = "2.1"
KIND = "web"
# The task types routed to web workers (web_search), and the queue they share.
TASK_TYPES = tuple(t for t, (kind, _) in contract.ROUTES.items() if kind == KIND)
SEARCH_RESULTS_USED = 5
# The most tokens a summary may take (options.num_predict). Ollama's own default is no limit,
# and a small model can run on to the end of its context: SmolLM2-135M at Ollama's default
# options ran one summary in three of the lab's to 3,477 tokens (52 s, its 4,096-token
# context full); a few sentences take well under this.
SUMMARY_MAX_TOKENS = 256
# Headers SearXNG's bot detection (searx/botdetection, run when its limiter is on) lets
# through: it answers 429 to a User-Agent it takes for a script (python-requests, curl, ...),
# to an Accept without text/html, an Accept-Encoding without gzip or deflate, and a missing
# Accept-Language. "*" states no language preference, as no header would.
SEARCH_HEADERS = {
    "User-Agent": f"worker_web/{VERSION}",
    "Accept": "application/json, text/html;q=0.1",
    "Accept-Encoding": "gzip, deflate",
    "Accept-Language": "*",
}


class SearchError(Exception):
    """SearXNG did not give results; the task fails with this message."""


class SummaryError(Exception):
    """Ollama did not give a summary; the task falls back to the search results."""


@dataclass(frozen=True)
class Found:
    """What a search found: the results used, and the engines that did not answer, each as
    ``engine (SearXNG's reason)``."""
    results: list[dict[str, Any]]
    failed_engines: list[str]

    def failures_note(self) -> str:
        """The line an answer ends with when some engines failed ("" when none did)."""
        if not self.failed_engines:
            return ""
        return f"\n\n(SearXNG: these engines did not answer: {', '.join(self.failed_engines)})"


@dataclass(frozen=True)
class WebConfig(base.OllamaConfig):
    searxng_url: str
    searxng_timeout: float
    summary_max_tokens: int

    @classmethod
    def own_fields(cls, env: base.EnvReader) -> dict[str, Any]:
        return {"searxng_url": base.http_url(env.required("SEARXNG_URL")),
                "searxng_timeout": env.seconds("SEARXNG_TIMEOUT", 15),
                "summary_max_tokens": env.count("SUMMARY_MAX_TOKENS", SUMMARY_MAX_TOKENS),
                **super().own_fields(env)}


class WebWorker(base.OllamaWorker):
    program = "worker_web"
    title = "Web Search Worker"
    kind = KIND
    version = VERSION
    cfg: WebConfig

    @property
    def queues(self) -> list[str]:
        return [contract.KIND_QUEUES[KIND]]

    def registration_extra(self) -> dict[str, Any]:
        # The model it summarises with: the registry says what it serves, which a move of
        # the web worker (migrate-web.yml) must keep, whatever the inventory names now.
        return {**super().registration_extra(), "models": [self.cfg.ollama_model]}

    def backend_checks(self) -> list[base.Check]:
        return [("searxng", self.check_searxng), *super().backend_checks()]

    def check_searxng(self) -> str:
        try:
            self.search("coordinator")
        except SearchError as error:
            raise base.CheckFailed(f"SearXNG check FAILED: {error}") from None
        return f"SearXNG OK ({self.cfg.searxng_url}, JSON API)"

    def result_worker(self) -> str:
        # tasks.worker gets this literal, never the host (docs/design.md).
        return contract.WEB_RESULT_WORKER

    def execute(self, task: base.Task) -> base.Outcome:
        if task.task_type not in TASK_TYPES:
            return base.Outcome("failed", error=f"{self.program} answers {', '.join(TASK_TYPES)} "
                                           f"tasks only, not {task.task_type}")
        try:
            found = self.search(task.prompt)
        except SearchError as error:
            return base.Outcome("failed", error=str(error))
        if not found.results and found.failed_engines:
            # Not an answer: the engines failed (timeouts, CAPTCHAs, rate limits), flagged
            # like any answer that is not the summary.
            return base.Outcome("done", fallback=True, result=(
                "No search results: SearXNG's engines did not answer: "
                f"{', '.join(found.failed_engines)}"))
        if not found.results:
            return base.Outcome("done", result=f"SearXNG found nothing for: {task.prompt}")
        note = found.failures_note()
        try:
            return base.Outcome("done", result=self.summarise(task.prompt, found.results,
                                                               task.options) + note,
                                answered_model=self.cfg.ollama_model)
        except SummaryError as error:
            return base.Outcome("done", result=fallback_answer(str(error), found.results) + note,
                                fallback=True)

    def probe(self, task: base.Task) -> base.Outcome:
        """One search and one token of the summary model: both backends a web task needs."""
        model = self.cfg.ollama_model
        try:
            found = self.search(task.prompt)
            self.one_token(model, task.prompt)
        except (SearchError, base.OllamaError) as error:
            return base.Outcome("failed", error=str(error))
        return base.Outcome("done", answered_model=model, result=(
            f"SearXNG at {self.cfg.searxng_url} answered {len(found.results)} result(s); "
            f"Ollama at {self.cfg.ollama_host} ran {model} for one token"
            f"{found.failures_note()}"))

    def search(self, query: str) -> Found:
        url = self.cfg.searxng_url
        try:
            # POST: the query travels in the body, where no limit on a URL's length (uWSGI's
            # buffer-size, nginx's header buffers: 8 KiB; a Japanese character is 9 bytes
            # percent-encoded) cuts a long prompt. SearXNG's redirects are never followed:
            # an external bang sends the client to a third-party site.
            response = requests.post(f"{url}/search", data={"q": query, "format": "json"},
                                     headers=SEARCH_HEADERS, timeout=self.cfg.searxng_timeout,
                                     allow_redirects=False)
        except requests.Timeout:
            raise SearchError(f"SearXNG at {url} did not answer within "
                              f"{self.cfg.searxng_timeout:g}s") from None
        except requests.RequestException as error:
            raise SearchError(f"SearXNG at {url} is not reachable ({base.one_line(error)}); "
                              "check SEARXNG_URL") from None
        if response.is_redirect:
            raise SearchError(redirect_error(url, query, response))
        if response.status_code == 403:
            raise SearchError(f"SearXNG at {url} answered 403 to format=json: its JSON API is "
                              "disabled; add json to search.formats in its settings.yml and "
                              "restart it")
        if response.status_code == 429:
            raise SearchError(f"SearXNG at {url} answered 429 Too Many Requests: its limiter "
                              "turned this worker away; set server.limiter (and "
                              "server.public_instance) to false in its settings.yml, or add "
                              "this host to pass_ip in its limiter.toml, and restart it")
        if response.status_code != 200:
            raise SearchError(f"SearXNG at {url} answered HTTP {response.status_code}")
        try:
            answer = response.json()
            results = answer["results"]
        except (ValueError, KeyError, TypeError):
            results = None
        if not isinstance(results, list):
            raise SearchError(f"SearXNG at {url} did not answer JSON with results")
        return Found([item for item in results if isinstance(item, dict)][:SEARCH_RESULTS_USED],
                     failed_engines(answer.get("unresponsive_engines")))

    def summarise(self, question: str, results: list[dict[str, Any]],
                  options: dict[str, Any] | None = None) -> str:
        """Ollama's summary of ``results``, with the task's Ollama ``options`` (num_predict at
        most SUMMARY_MAX_TOKENS); SummaryError (the task falls back) otherwise."""
        options = summary_options(options, self.cfg.summary_max_tokens)
        try:
            answer = self.ollama("/api/generate", {
                "model": self.cfg.ollama_model, "prompt": summary_prompt(question, results),
                "options": options})
        except base.OllamaError as error:
            raise SummaryError(str(error)) from None
        summary = answer.get("response")
        if not isinstance(summary, str):
            raise SummaryError(f"Ollama at {self.cfg.ollama_host} answered without a response")
        summary = summary.strip()
        if not summary:
            raise SummaryError(f"Ollama at {self.cfg.ollama_host} gave an empty summary")
        if answer.get("done_reason") == "length":
            # Cut by num_predict, not ended by the model: said, so nobody takes it as whole.
            base.log.warning("summary cut at %d tokens (SUMMARY_MAX_TOKENS=%d)",
                             options["num_predict"], self.cfg.summary_max_tokens)
            return f"{summary} …"
        return summary


def summary_options(options: dict[str, Any] | None, max_tokens: int) -> dict[str, Any]:
    """A task's Ollama options for its summary: its own num_predict when it asks for fewer
    tokens than ``max_tokens`` (SUMMARY_MAX_TOKENS), else that bound."""
    options = dict(options or {})
    options["num_predict"] = min(int(options.get("num_predict") or max_tokens), max_tokens)
    return options


def failed_engines(unresponsive: object) -> list[str]:
    """SearXNG's ``unresponsive_engines`` ([engine, reason] pairs) as ``engine (reason)``."""
    pairs = unresponsive if isinstance(unresponsive, list) else []
    return [f"{pair[0]} ({pair[1]})" for pair in pairs
            if isinstance(pair, list) and len(pair) == 2]


def redirect_error(url: str, query: str, response: requests.Response) -> str:
    said = (f"SearXNG at {url} answered {response.status_code} with a redirect to "
            f"{response.headers['Location']} (not followed)")
    if any(word.startswith("!!") and len(word) > 2 for word in query.split()):
        return (f"{said}: a word of the query starting with !! is an external bang, which "
                "SearXNG answers by sending the client to that search site instead of "
                "searching; leave it out of the prompt")
    return f"{said}; check SEARXNG_URL"


def summary_prompt(question: str, results: list[dict[str, Any]]) -> str:
    lines = [f"Question: {question}", "", "Search results:"]
    for number, item in enumerate(results, 1):
        lines.append(f"{number}. {item.get('title', '')} ({item.get('url', '')})")
        lines.append(f"   {item.get('content', '')}")
    lines += ["", "Answer the question in a few sentences, in the language of the question, "
                  "using only these search results."]
    return "\n".join(lines)


def fallback_answer(reason: str, results: list[dict[str, Any]]) -> str:
    """The v2.1 fallback: the search results themselves, with a note saying why."""
    lines = [f"Summary failed ({reason}); here are the search results instead."]
    for number, item in enumerate(results, 1):
        lines.append(f"{number}. {item.get('title', '')} <{item.get('url', '')}>")
        if item.get("content"):
            lines.append(f"   {item['content']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return base.main(WebWorker, WebConfig, argv)


if __name__ == "__main__":
    sys.exit(main())
