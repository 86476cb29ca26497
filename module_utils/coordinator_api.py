# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One request to the Coordinator API from a module, with one-line errors.

Shared by the modules that talk to the API (coordinator_workers, coordinator_drain, and
coordinator_task for its options); uses Ansible's own ``open_url``, so no Python package is
needed on the host that runs them.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any
from urllib.error import HTTPError, URLError

from ansible.module_utils.coordinator_probe import (
    describe_http_error,
    describe_unanswered,
    describe_url_problem,
    is_restarting,
)
from ansible.module_utils.urls import open_url

#: Seconds between two reads of the API by a module that waits for a state
#: (coordinator_drain for a drain, coordinator_workers for the registry).
READ_INTERVAL = 1.0


def api_argument_spec() -> dict[str, Any]:
    """The options every module that calls the Coordinator API takes, as the doc fragment
    coordinator_api documents them: coordinator_url, coordinator_token, validate_certs,
    ca_path."""
    return {
        "coordinator_url": {"type": "list", "elements": "str", "required": True},
        "coordinator_token": {"type": "str", "no_log": True},
        "validate_certs": {"type": "bool", "default": True},
        "ca_path": {"type": "path"},
    }


def coordinator_urls(params: dict[str, Any]) -> list[str]:
    """coordinator_url: the cluster's Coordinators in the order they are asked (one URL, a
    list, or comma-separated), without a trailing slash."""
    return [url.strip().rstrip("/") for url in params["coordinator_url"] if url.strip()]


def urls_problem(params: dict[str, Any]) -> str | None:
    """What makes coordinator_url unusable with ca_path, or None."""
    urls = coordinator_urls(params)
    if not urls:
        return "coordinator_url names no Coordinator: give its URL, or the cluster's"
    return next((problem for problem in (describe_url_problem(url, params["ca_path"] or None)
                                         for url in urls) if problem), None)


class Unanswered(Exception):
    """No Coordinator of coordinator_url answered: (url, reason) of each, in order."""

    def __init__(self, failures: list[tuple[str, Any]]) -> None:
        super().__init__("; ".join(f"{url}: {reason}" for url, reason in failures))
        self.failures = failures

    def restarting(self) -> bool:
        """Whether every one may just be restarting (is_restarting): worth asking again."""
        return all(is_restarting(None, reason) for _url, reason in self.failures)


def open_first(urls: list[str], path: str, **request: Any) -> tuple[str, Any]:
    """(url, answer) of ``open_url(url + path, **request)`` on the first of ``urls`` that
    answers: the instances of one cluster say the same, so an error status is an answer
    too (HTTPError, raised at once, its ``coordinator_url`` the instance's). Unanswered when
    none did (refused, timed out, a TLS failure)."""
    failures: list[tuple[str, Any]] = []
    for url in urls:
        try:
            return url, open_url(url + path, **request)
        except HTTPError as exc:
            exc.coordinator_url = url
            raise
        except (URLError, OSError) as exc:
            failures.append((url, getattr(exc, "reason", exc)))
    raise Unanswered(failures)


def call(params: dict[str, Any], method: str, path: str, error: type[Exception],
         timeout: int | None = None, restart_deadline: float | None = None) -> Any:
    """The JSON answer of ``method path``; raises ``error`` with a line a user can act on.

    ``params`` holds the modules' common options: coordinator_url, coordinator_token,
    validate_certs, ca_path and timeout. A POST carries a fresh Idempotency-Key, so a request
    retried after a lost answer has one effect. Until ``restart_deadline`` (a
    ``time.monotonic()`` value), a Coordinator that is restarting is asked again every
    READ_INTERVAL seconds, the last time at the deadline itself."""
    while True:
        try:
            return _call_once(params, method, path, error, timeout)
        except _Restarting as exc:
            remaining = 0.0 if restart_deadline is None else restart_deadline - time.monotonic()
            if remaining <= 0:
                raise exc.failure from exc
            time.sleep(min(READ_INTERVAL, remaining))


class _Restarting(Exception):
    """A request the Coordinator did not take because it is restarting; carries the error a
    user sees if it does not come back in time."""

    def __init__(self, failure: Exception) -> None:
        super().__init__(str(failure))
        self.failure = failure


def _call_once(params: dict[str, Any], method: str, path: str, error: type[Exception],
               timeout: int | None) -> Any:
    problem = urls_problem(params)
    if problem:
        raise error(problem)
    ca_path = params["ca_path"] or None
    headers = {"Accept": "application/json"}
    if params["coordinator_token"]:
        headers["Authorization"] = f"Bearer {params['coordinator_token']}"
    if method == "POST":
        headers["Idempotency-Key"] = str(uuid.uuid4())
    urls = coordinator_urls(params)
    url = urls[0]
    try:
        url, answer = open_first(urls, path, headers=headers, method=method,
                                 timeout=timeout or params["timeout"],
                                 validate_certs=params["validate_certs"], ca_path=ca_path)
        return json.loads(answer.read())
    except HTTPError as exc:
        failure = error(describe_http_error(exc.coordinator_url, exc.code, exc.read(),
                                            bool(params["coordinator_token"]),
                                            request=f"{method} {path}"))
        if is_restarting(exc.code):
            raise _Restarting(failure) from exc
        raise failure from exc
    except Unanswered as exc:
        failure = error(describe_unanswered(exc.failures, ca_path))
        if exc.restarting():
            raise _Restarting(failure) from exc
        raise failure from exc
    except ValueError as exc:
        raise error(f"Coordinator at {url} did not answer {method} {path} with JSON: "
                    "check coordinator_url") from exc
    except OSError as exc:  # the answer cut short while it was read
        raise error(describe_unanswered([(url, exc)], ca_path)) from exc
