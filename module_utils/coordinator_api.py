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
    describe_unreachable,
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
        "coordinator_url": {"type": "str", "required": True},
        "coordinator_token": {"type": "str", "no_log": True},
        "validate_certs": {"type": "bool", "default": True},
        "ca_path": {"type": "path"},
    }


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
    url = params["coordinator_url"].rstrip("/")
    ca_path = params["ca_path"] or None
    problem = describe_url_problem(url, ca_path)
    if problem:
        raise error(problem)
    headers = {"Accept": "application/json"}
    if params["coordinator_token"]:
        headers["Authorization"] = f"Bearer {params['coordinator_token']}"
    if method == "POST":
        headers["Idempotency-Key"] = str(uuid.uuid4())
    try:
        answer = open_url(f"{url}{path}", headers=headers, method=method,
                          timeout=timeout or params["timeout"],
                          validate_certs=params["validate_certs"], ca_path=ca_path)
        return json.loads(answer.read())
    except HTTPError as exc:
        failure = error(describe_http_error(url, exc.code, exc.read(),
                                            bool(params["coordinator_token"]),
                                            request=f"{method} {path}"))
        if is_restarting(exc.code):
            raise _Restarting(failure) from exc
        raise failure from exc
    except (URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        failure = error(describe_unreachable(url, str(reason), ca_path))
        if is_restarting(None, reason):
            raise _Restarting(failure) from exc
        raise failure from exc
    except ValueError as exc:
        raise error(f"Coordinator at {url} did not answer {method} {path} with JSON: "
                    "check coordinator_url") from exc
