#!/usr/bin/env python3
"""Web Search Worker: answers the Coordinator's `web_search` tasks.

It takes task ids from the shared Redis queue `tasks:web`, searches SearXNG (JSON API),
has a small model on Ollama summarise the results, and writes the answer to the `tasks`
table in PostgreSQL. When the summary fails the answer is the search results themselves
with a note (the v2.1 fallback); when the search fails the task is `failed` with the reason.
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


class SearchError(Exception):
    """SearXNG did not give results; the task fails with this message."""


class SummaryError(Exception):
    """Ollama did not give a summary; the task falls back to the search results."""


@dataclass(frozen=True)
class WebConfig(base.OllamaConfig):
    searxng_url: str
    searxng_timeout: float

    @classmethod
    def own_fields(cls, env: base.EnvReader) -> dict[str, Any]:
        return {"searxng_url": base.http_url(env.required("SEARXNG_URL")),
                "searxng_timeout": env.seconds("SEARXNG_TIMEOUT", 15),
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

    def check_backends(self) -> None:
        url = self.cfg.searxng_url
        try:
            self.search("coordinator")
        except SearchError as error:
            raise base.CheckFailed(f"SearXNG check FAILED: {error}") from None
        base.log.info("SearXNG OK (%s, JSON API)", url)
        super().check_backends()

    def result_worker(self) -> str:
        # tasks.worker gets this literal, never the host (docs/design.md).
        return contract.WEB_RESULT_WORKER

    def execute(self, task: base.Task) -> base.Outcome:
        if task.task_type not in TASK_TYPES:
            return base.Outcome("failed", error=f"{self.program} answers {', '.join(TASK_TYPES)} "
                                           f"tasks only, not {task.task_type}")
        try:
            results = self.search(task.prompt)
        except SearchError as error:
            return base.Outcome("failed", error=str(error))
        if not results:
            return base.Outcome("done", result=f"SearXNG found nothing for: {task.prompt}")
        try:
            return base.Outcome("done", result=self.summarise(task.prompt, results),
                                answered_model=self.cfg.ollama_model)
        except SummaryError as error:
            return base.Outcome("done", result=fallback_answer(str(error), results), fallback=True)

    def search(self, query: str) -> list[dict[str, Any]]:
        url = self.cfg.searxng_url
        try:
            response = requests.get(f"{url}/search", params={"q": query, "format": "json"},
                                    timeout=self.cfg.searxng_timeout)
        except requests.Timeout:
            raise SearchError(f"SearXNG at {url} did not answer within "
                              f"{self.cfg.searxng_timeout:g}s") from None
        except requests.RequestException as error:
            raise SearchError(f"SearXNG at {url} is not reachable ({base.one_line(error)}); "
                              "check SEARXNG_URL") from None
        if response.status_code == 403:
            raise SearchError(f"SearXNG at {url} answered 403 to format=json: its JSON API is "
                              "disabled; add json to search.formats in its settings.yml and "
                              "restart it")
        if response.status_code != 200:
            raise SearchError(f"SearXNG at {url} answered HTTP {response.status_code}")
        try:
            results = response.json()["results"]
        except (ValueError, KeyError, TypeError):
            results = None
        if not isinstance(results, list):
            raise SearchError(f"SearXNG at {url} did not answer JSON with results")
        return [item for item in results if isinstance(item, dict)][:SEARCH_RESULTS_USED]

    def summarise(self, question: str, results: list[dict[str, Any]]) -> str:
        """Ollama's summary of ``results``; SummaryError (the task falls back) otherwise."""
        try:
            answer = self.ollama("/api/generate", {"model": self.cfg.ollama_model,
                                                   "prompt": summary_prompt(question, results)})
        except base.OllamaError as error:
            raise SummaryError(str(error)) from None
        summary = answer.get("response")
        if not isinstance(summary, str):
            raise SummaryError(f"Ollama at {self.cfg.ollama_host} answered without a response")
        summary = summary.strip()
        if not summary:
            raise SummaryError(f"Ollama at {self.cfg.ollama_host} gave an empty summary")
        return summary


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
