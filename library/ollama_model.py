#!/usr/bin/python
# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ollama_model
short_description: Pull or remove a model in an Ollama server
description:
  - Makes sure a model is present in (or absent from) an Ollama server, through Ollama's HTTP API.
  - Asks C(GET /api/tags) first and pulls only a model that is missing, so a second run changes
    nothing. Names match the way Ollama matches them, case-insensitively and with the implicit
    C(:latest) tag and C(registry.ollama.ai/library/) prefix, so V(llama3.2) and
    V(llama3.2:latest) are the same model.
  - A pull streams Ollama's NDJSON progress line by line, so a pull of several gigabytes works
    within O(timeout); the final status and byte counts are returned.
  - >-
    A failed pull fails the task with Ollama's own message, whether it arrives as an
    C({"error": ...}) line inside the progress stream or as the body of an HTTP error.
  - With O(digest), the model must be those weights. Ollama names can move to other weights
    (a tag pulled again later), so a pin says which ones a cluster runs. A present model with
    another digest fails the task, naming both, and is left alone.
  - A listed model is not yet a model that serves (too little memory, a damaged blob, an
    Ollama that lists what it cannot load). With O(generate), the default, the model is
    proven by a one-token generation (C(POST /api/generate) with C(options.num_predict) 1,
    not streamed), and the task fails with Ollama's own words when it does not answer.
  - Runs on the target with the Python standard library and Ansible's own URL helpers only.
version_added: "0.1.0"
options:
  name:
    description:
      - The model, as given to C(ollama pull), for example
        V(hf.co/LiquidAI/LFM2.5-1.2B-JP-GGUF:Q4_K_M) or V(llama3.2:3b).
      - Without a tag, Ollama uses C(latest).
    type: str
    required: true
    aliases: [model]
  digest:
    description:
      - The digest the model must have, as C(GET /api/tags) lists it (64 hex digits, with or
        without C(sha256:); C(ollama list) shows its first 12).
      - A present model with another digest fails the task and is not pulled again (a pull
        fetches whatever the name points to now). An absent model is pulled by name and then
        checked; one with other weights fails the task and stays pulled.
      - Only with O(state=present).
    type: str
    version_added: "0.2.0"
  state:
    description:
      - V(present) pulls the model when Ollama does not list it.
      - V(absent) deletes it (C(DELETE /api/delete)) when Ollama lists it.
    type: str
    choices: [present, absent]
    default: present
  host:
    description:
      - Base URL of the Ollama API, as reached from the target.
      - A value without a scheme, such as the V(127.0.0.1:11434) form of E(OLLAMA_HOST), gets
        C(http://).
    type: str
    default: http://127.0.0.1:11434
  timeout:
    description:
      - Seconds the whole pull may take; it is also the longest wait for the next progress line.
      - Listing and deleting models use the smaller of this and 30 seconds.
    type: int
    default: 3600
  wait:
    description:
      - Seconds to keep asking while O(host) cannot be reached (refused, reset, not answering),
        as while a server just started or restarted opens its port; it is asked again every
        second.
      - V(0) asks once.
    type: int
    default: 0
    version_added: "0.3.0"
  generate:
    description:
      - After the model is present, ask it for one token (C(POST /api/generate), C(stream)
        false, C(options.num_predict) 1), which loads it, and fail unless Ollama answers
        C(done). Not in check mode, and not with O(state=absent).
      - When it fails, the failure carries Ollama's own words in C(generate_error) (for
        instance a model that does not load).
      - A model that has to be loaded from disk takes a while; the generation may take the
        smaller of O(timeout) and 300 seconds.
    type: bool
    default: true
    version_added: "0.4.0"
  insecure:
    description:
      - Let Ollama pull from a registry over plain HTTP or with an unverified certificate
        (the C(insecure) field of C(POST /api/pull)).
    type: bool
    default: false
  validate_certs:
    description:
      - Verify the TLS certificate of O(host) when it is an C(https://) URL, for example an
        Ollama behind a reverse proxy.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: >-
      Reports whether the model would be pulled or deleted, and fails as a run would when a
      present model does not match O(digest); only C(GET /api/tags) is sent (no generation).
  diff_mode:
    support: none
notes:
  - The pull does not update a model that is already present; Ollama's C(ollama pull) does. Remove
    it with O(state=absent) first to fetch a newer copy.
seealso:
  - name: Ollama API reference
    description: The endpoints this module uses.
    link: https://github.com/ollama/ollama/blob/main/docs/api.md
author:
  - Coordinator cluster contributors (@coordinator-cluster)
extends_documentation_fragment:
  - module_attributes
"""

EXAMPLES = r"""
- name: Pull the web worker's summarisation model
  ollama_model:
    name: hf.co/LiquidAI/LFM2.5-1.2B-JP-GGUF:Q4_K_M

- name: Pull several models from an Ollama listening on another port, allowing two hours
  ollama_model:
    name: "{{ item }}"
    host: http://127.0.0.1:11500
    timeout: 7200
  loop:
    - llama3.2:3b
    - nomic-embed-text
  loop_control:
    label: "{{ item }}"

- name: Pull the model once the server just restarted answers (at most a minute)
  ollama_model:
    name: llama3.2:3b
    wait: 60

- name: Remove a model no worker uses any more
  ollama_model:
    name: llama3.2:3b
    state: absent

- name: Make sure the web worker's model is the weights the cluster was tested with
  ollama_model:
    name: hf.co/LiquidAI/LFM2.5-1.2B-JP-GGUF:Q4_K_M
    digest: 9ac2bd8e0b5d3d3c85c1e1bde1f4a9cbb6e0e7e7f28f0ae4f2b8e1b2fd1f4a3c

- name: See what a run would pull, without pulling
  ollama_model:
    name: llama3.2:3b
  check_mode: true
  register: would_pull
"""

RETURN = r"""
name:
  description: The model as given in O(name).
  returned: always
  type: str
  sample: hf.co/LiquidAI/LFM2.5-1.2B-JP-GGUF:Q4_K_M
operation:
  description:
    - What the module did, or would do in check mode.
  returned: always
  type: str
  choices: [pull, delete, none]
  sample: pull
model:
  description:
    - The model as Ollama lists it after the run (C(GET /api/tags)); V(null) when it is absent.
    - In check mode, the model as listed before the run.
  returned: always
  type: dict
  sample: {"name": "llama3.2:3b", "digest": "a80c4f17acd5...", "size": 2019393189}
digest:
  description:
    - The digest of the model after the run (before it, in check mode), as C(GET /api/tags)
      lists it; V(null) when it is absent.
  returned: always
  type: str
  sample: a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72
pull:
  description: How the pull ended, from Ollama's progress stream.
  returned: when a model was pulled
  type: dict
  contains:
    status:
      description: The last status line Ollama sent (V(success) for a complete pull).
      type: str
      sample: success
    total_bytes:
      description: Sum of the sizes of the layers Ollama reported.
      type: int
      sample: 730895360
    completed_bytes:
      description: Sum of the bytes Ollama reported as downloaded (already present layers count).
      type: int
      sample: 730895360
    layers:
      description: Number of layers (blobs) Ollama reported.
      type: int
      sample: 4
generated:
  description:
    - Ollama's answer to the one-token generation that proved the model serves.
  returned: when O(generate) ran (O(state=present), not in check mode)
  type: dict
  contains:
    response:
      description: The token generated.
      type: str
      sample: OK
    done_reason:
      description: Why Ollama stopped (V(length) after the one token).
      type: str
      sample: length
    eval_count:
      description: Tokens generated.
      type: int
      sample: 1
    load_duration:
      description: Nanoseconds Ollama took to load the model for it (0 when it was loaded).
      type: int
      sample: 1523000000
msg:
  description: One line saying what happened.
  returned: always
  type: str
  sample: pulled llama3.2:3b (2019393189 bytes)
"""

import json
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.error import HTTPError, URLError

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.coordinator_contract import (
    canonical_model_name,
    find_model,
    normalize_digest,
)
from ansible.module_utils.urls import open_url

# Listing and deleting are quick; a dead host should not hold the play for the pull timeout.
QUICK_TIMEOUT = 30
# A first generation loads the weights from disk: gigabytes, on a slow disk a few minutes.
LOAD_TIMEOUT = 300


class OllamaError(Exception):
    """Ollama answered with an error; the message is Ollama's own where it gave one."""


class OllamaUnreachable(OllamaError):
    """No HTTP answer at all: refused, timed out, or the name does not resolve."""


class NotGenerating(OllamaError):
    """The model is listed, but Ollama's generation with it failed: ``reason`` in its words."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


# ---------------------------------------------------------------------------
# Pure functions: no network, no AnsibleModule; unit-tested on their own.
# ---------------------------------------------------------------------------


def normalize_url(host: str) -> str:
    """Base URL without a trailing slash; an OLLAMA_HOST-style ``addr:port`` gets ``http://``."""
    url = host.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url


def short_digest(digest: str | None) -> str:
    """The 12 digits ``ollama list`` shows as a model's ID."""
    return (digest or "none")[:12]


def pin_mismatch(name: str, url: str, entry: dict[str, Any] | None, pin: str | None) -> str | None:
    """Why the listed model is not the pinned weights, in one line; None when it is (or no pin,
    or the model is absent)."""
    if pin is None or entry is None:
        return None
    present = str(entry.get("digest") or "")
    if present == pin:
        return None
    return (
        f"{name} on {url} has digest {short_digest(present)}, pinned {short_digest(pin)}: "
        "same name, other weights; pull the pinned weights there, or change the pin"
    )


def decide(state: str, entry: dict[str, Any] | None) -> str:
    """``pull``, ``delete`` or ``none``: the only operation that brings the server to ``state``."""
    if state == "present":
        return "none" if entry else "pull"
    return "delete" if entry else "none"


def error_from_body(body: bytes | str, fallback: str) -> str:
    """Ollama's ``{"error": "..."}`` message from an HTTP error body, else the body or fallback."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    text = text.strip()
    try:
        payload = json.loads(text)
    except ValueError:
        return text or fallback
    if isinstance(payload, dict) and payload.get("error"):
        return str(payload["error"])
    return text or fallback


@dataclass
class PullProgress:
    """What Ollama's pull stream said so far; ``layers`` maps digest to (total, completed)."""

    status: str = ""
    layers: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return sum(total for total, _completed in self.layers.values())

    @property
    def completed_bytes(self) -> int:
        return sum(completed for _total, completed in self.layers.values())

    def as_result(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "total_bytes": self.total_bytes,
            "completed_bytes": self.completed_bytes,
            "layers": len(self.layers),
        }


def apply_progress_line(progress: PullProgress, line: bytes | str) -> None:
    """Fold one NDJSON line of ``POST /api/pull`` into ``progress``.

    Raises OllamaError with Ollama's message for an ``{"error": ...}`` line, the way Ollama
    reports a failure once the stream has begun (the HTTP status is already 200 then).
    """
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    text = text.strip()
    if not text:
        return
    try:
        event = json.loads(text)
    except ValueError as exc:
        raise OllamaError(f"unexpected line in Ollama's pull progress: {text[:200]}") from exc
    if not isinstance(event, dict):
        raise OllamaError(f"unexpected line in Ollama's pull progress: {text[:200]}")
    if event.get("error"):
        raise OllamaError(str(event["error"]))
    if event.get("status"):
        progress.status = str(event["status"])
    digest = event.get("digest")
    if digest and "total" in event:
        total = int(event.get("total") or 0)
        completed = int(event.get("completed") or 0)
        seen_total, seen_completed = progress.layers.get(digest, (0, 0))
        progress.layers[digest] = (max(total, seen_total), max(completed, seen_completed))


def parse_pull_stream(lines: Iterable[bytes | str]) -> PullProgress:
    """Read a whole pull stream; a stream that ends without ``success`` is an error."""
    progress = PullProgress()
    for line in lines:
        apply_progress_line(progress, line)
    check_pull_finished(progress)
    return progress


def check_pull_finished(progress: PullProgress) -> None:
    if progress.status != "success":
        last = progress.status or "nothing"
        raise OllamaError(f"the pull stream ended before success (last status: {last})")


def unreachable_message(url: str, reason: object) -> str:
    # "Connection refused" reads better than "[Errno 111] Connection refused".
    detail = getattr(reason, "strerror", None) or reason
    return (
        f"Ollama not reachable at {url}: is the service running / is OLLAMA_HOST right? ({detail})"
    )


def tags_when_reachable(client: OllamaClient, wait: float,
                        clock: Callable[[], float] = time.monotonic,
                        sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """``GET /api/tags``, asked again every second while the server cannot be reached, for at
    most ``wait`` seconds; then the last unreachable error, saying how long it waited."""
    deadline = clock() + wait
    while True:
        try:
            return client.tags()
        except OllamaUnreachable as exc:
            if clock() >= deadline:
                if wait > 0:
                    raise OllamaUnreachable(f"{exc}; waited {wait:g} s") from exc
                raise
        sleep(1)


def model_summary(entry: dict[str, Any] | None) -> dict[str, Any] | None:
    if entry is None:
        return None
    return {
        "name": entry.get("name") or entry.get("model"),
        "digest": entry.get("digest"),
        "size": entry.get("size"),
    }


def one_token_request(name: str) -> dict[str, Any]:
    """The body of ``POST /api/generate`` that loads ``name`` and generates a single token
    (api.md: ``options.num_predict``, ``stream: false`` for one JSON answer)."""
    return {"model": name, "prompt": "Say OK.", "stream": False, "options": {"num_predict": 1}}


def generated_summary(answer: Any) -> dict[str, Any]:
    """What the one-token generation said; OllamaError unless Ollama finished it (``done``)."""
    if not isinstance(answer, dict) or answer.get("done") is not True:
        raise OllamaError(f"it answered {json.dumps(answer)[:200]}")
    return {
        "response": str(answer.get("response") or ""),
        "done_reason": str(answer.get("done_reason") or ""),
        "eval_count": int(answer.get("eval_count") or 0),
        "load_duration": int(answer.get("load_duration") or 0),
    }


# ---------------------------------------------------------------------------
# HTTP client: the only code that talks to Ollama.
# ---------------------------------------------------------------------------


class OllamaClient:
    def __init__(self, url: str, timeout: int, validate_certs: bool) -> None:
        self.url = url
        self.timeout = timeout
        self.validate_certs = validate_certs

    def _open(self, method: str, path: str, body: dict[str, Any] | None, timeout: float) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else None
        try:
            return open_url(
                self.url + path,
                data=data,
                headers=headers,
                method=method,
                timeout=timeout,
                validate_certs=self.validate_certs,
            )
        except HTTPError as exc:
            raise OllamaError(error_from_body(exc.read(), f"HTTP {exc.code} {exc.reason}")) from exc
        except URLError as exc:
            raise OllamaUnreachable(unreachable_message(self.url, exc.reason)) from exc
        except OSError as exc:  # socket timeout or reset before any HTTP answer
            raise OllamaUnreachable(unreachable_message(self.url, exc)) from exc

    def tags(self) -> dict[str, Any]:
        response = self._open("GET", "/api/tags", None, min(self.timeout, QUICK_TIMEOUT))
        with response:
            return json.loads(response.read() or b"{}")

    def delete(self, name: str) -> None:
        response = self._open(
            "DELETE", "/api/delete", {"model": name}, min(self.timeout, QUICK_TIMEOUT)
        )
        response.close()

    def generate(self, body: dict[str, Any]) -> Any:
        response = self._open("POST", "/api/generate", body, min(self.timeout, LOAD_TIMEOUT))
        with response:
            return json.loads(response.read() or b"null")

    def pull(self, name: str, insecure: bool) -> PullProgress:
        """Pull ``name``, reading progress line by line until ``success`` or the deadline."""
        deadline = time.monotonic() + self.timeout
        response = self._open(
            "POST", "/api/pull", {"model": name, "insecure": insecure, "stream": True}, self.timeout
        )
        progress = PullProgress()
        with response:
            for line in _lines(response, self.url, self.timeout):
                apply_progress_line(progress, line)
                if time.monotonic() > deadline:
                    raise OllamaError(
                        f"the pull did not finish within {self.timeout} s "
                        f"(last status: {progress.status or 'nothing'}); raise timeout"
                    )
        check_pull_finished(progress)
        return progress


def _lines(response: Any, url: str, timeout: int) -> Iterator[bytes]:
    """Lines of a streamed response; a stalled or broken stream becomes a one-line error."""
    while True:
        try:
            line = response.readline()
        # socket.timeout: on Python 3.9 (macOS's python3) it is not yet TimeoutError.
        except socket.timeout as exc:  # noqa: UP041
            raise OllamaError(
                f"no progress from {url} for {timeout} s; raise timeout if the download is slow"
            ) from exc
        except OSError as exc:
            raise OllamaError(f"the pull stream from {url} broke off: {exc}") from exc
        if not line:
            return
        yield line


# ---------------------------------------------------------------------------
# AnsibleModule glue.
# ---------------------------------------------------------------------------


def run(module: AnsibleModule) -> dict[str, Any]:
    params = module.params
    name: str = params["name"]
    try:
        canonical_model_name(name)
        pin = normalize_digest(params["digest"]) if params["digest"] is not None else None
    except ValueError as exc:
        module.fail_json(msg=str(exc), name=name)
    if pin is not None and params["state"] != "present":
        module.fail_json(msg="digest applies to state=present only; leave it out to delete",
                         name=name)
    client = OllamaClient(
        normalize_url(params["host"]), params["timeout"], params["validate_certs"]
    )
    try:
        entry = find_model(name, tags_when_reachable(client, params["wait"]))
    except OllamaUnreachable:
        raise
    except OllamaError as exc:
        raise OllamaError(f"Ollama at {client.url} could not list its models: {exc}") from exc
    mismatch = pin_mismatch(name, client.url, entry, pin)
    if mismatch is not None:
        raise OllamaError(mismatch)
    operation = decide(params["state"], entry)
    result: dict[str, Any] = {
        "changed": operation != "none",
        "name": name,
        "operation": operation,
        "model": model_summary(entry),
        "digest": entry.get("digest") if entry else None,
    }
    # Only a present model generates; check mode sends nothing but GET /api/tags.
    generate = params["state"] == "present" and params["generate"] and not module.check_mode
    if operation == "none":
        result["msg"] = f"{name} is already {params['state']}"
        return prove(client, name, result) if generate else result
    if module.check_mode:
        result["msg"] = f"would {operation} {name} (check mode)"
        return result
    try:
        if operation == "pull":
            progress = client.pull(name, params["insecure"])
            result["pull"] = progress.as_result()
            result["msg"] = f"pulled {name} ({progress.total_bytes} bytes)"
        else:
            # Delete by the name Ollama lists, whatever spelling the task used.
            client.delete(entry["name"] if entry and entry.get("name") else name)
            result["msg"] = f"deleted {name}"
    except OllamaUnreachable:
        raise
    except OllamaError as exc:
        raise OllamaError(f"Ollama could not {operation} {name}: {exc}") from exc
    entry = find_model(name, client.tags())
    result["model"] = model_summary(entry)
    result["digest"] = entry.get("digest") if entry else None
    mismatch = pin_mismatch(name, client.url, entry, pin)
    if mismatch is not None:
        raise OllamaError(f"pulled, and it stays: {mismatch}")
    return prove(client, name, result) if generate else result


def prove(client: OllamaClient, name: str, result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with the one-token generation that proves a present model serves."""
    try:
        result["generated"] = generated_summary(client.generate(one_token_request(name)))
    except OllamaUnreachable:
        raise
    except OllamaError as exc:
        raise NotGenerating(f"Ollama at {client.url} lists {name} but does not generate with "
                            f"it: {exc}", str(exc)) from exc
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True, "aliases": ["model"]},
            "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
            "digest": {"type": "str"},
            "host": {"type": "str", "default": "http://127.0.0.1:11434"},
            "timeout": {"type": "int", "default": 3600},
            "wait": {"type": "int", "default": 0},
            "generate": {"type": "bool", "default": True},
            "insecure": {"type": "bool", "default": False},
            "validate_certs": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    timeout = module.params["timeout"]
    if timeout <= 0:
        module.fail_json(msg=f"timeout must be a positive number of seconds, got {timeout}")
    if module.params["wait"] < 0:
        module.fail_json(msg=f"wait must be 0 or more seconds, got {module.params['wait']}")
    try:
        result = run(module)
    except NotGenerating as exc:
        module.fail_json(msg=str(exc), name=module.params["name"], generate_error=exc.reason)
    except OllamaError as exc:
        module.fail_json(msg=str(exc), name=module.params["name"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
