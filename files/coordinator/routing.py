"""Routing: the task-type table, request validation and worker choice. Pure functions, no I/O.

The one routing table (documented in docs/coordinator.md):

==============  ============  ===========================================================
task_type       worker kind   queue
==============  ============  ===========================================================
web_search      web           ``tasks:web`` (shared by every web worker)
rag             rag           ``tasks:rag`` (shared by every RAG worker)
generate        inference     ``tasks:<device>:<worker id>`` of one alive inference worker
chat            inference     that serves the requested model, least loaded first, or the
summarize       inference     one named in ``worker``
==============  ============  ===========================================================
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import coordinator_contract as contract
from coordinator_contract import INFERENCE_TYPES, SHARED_QUEUES, TASK_TYPES


@dataclass(frozen=True)
class Route:
    kind: str  # the kind of worker that serves it: web, rag or inference
    queue: str | None  # the shared queue, or None for a per-worker inference queue


#: The routing table of coordinator_contract, as Route records.
ROUTES: dict[str, Route] = {task_type: Route(*route)
                            for task_type, route in contract.ROUTES.items()}

ROUTE_FIELDS = ("prompt", "task_type", "model", "worker", "options")
_EXAMPLE = '{"prompt": "...", "task_type": "web_search"}'
#: White space by every definition a client may hold (Python's str.isspace, ECMAScript's
#: and so JSON Schema's \s, Unicode's White_Space), as a regex class body: a prompt, model or
#: worker made only of these is empty, and the OpenAPI schema says so with the same class.
BLANK = ("\\t\\n\\v\\f\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f"
         "\\u205f\\u3000\\ufeff")
_TEXT = re.compile(f"[^{BLANK}]")
#: A worker id, device or model name.
NAME = r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}"
NAME_RE = re.compile(f"^{NAME}$")


class RequestError(Exception):
    """A client error: HTTP ``status`` and a one-line ``message`` saying how to fix it (and
    the ``headers`` it needs, such as a 401's ``WWW-Authenticate``)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None
                 ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


@dataclass(frozen=True)
class TaskOption:
    """One Ollama option a task may carry: its JSON type and the values Ollama takes."""

    kind: str  # "integer", "number" or "strings" (a list of texts)
    minimum: float | None = None
    maximum: float | None = None


#: The Ollama options (its API's ``options``: the parameters of its docs/modelfile.md, "Valid
#: Parameters and Values") a task may carry to the model its worker asks: the sampling ones,
#: which Ollama applies per request; the runner's (num_ctx, num_thread, ...) would reload the
#: model and stay the host's. Integers as llama.cpp keeps them (int32; seed -1 is Ollama's
#: default, a random seed); num_predict at least 1, a bound (left out: Ollama's default,
#: none).
TASK_OPTIONS: dict[str, TaskOption] = {
    "num_predict": TaskOption("integer", 1, 2**31 - 1),
    "seed": TaskOption("integer", -1, 2**31 - 1),
    "temperature": TaskOption("number", 0),
    "top_k": TaskOption("integer", 0, 2**31 - 1),
    "top_p": TaskOption("number", 0, 1),
    "min_p": TaskOption("number", 0, 1),
    "repeat_penalty": TaskOption("number", 0),
    "stop": TaskOption("strings"),
}
#: The kinds of worker whose programs ask Ollama, and so take ``options``: the web worker for
#: its summary (its SUMMARY_MAX_TOKENS still caps num_predict), inference workers.
OPTION_KINDS = ("web", "inference")


@dataclass(frozen=True)
class RouteRequest:
    prompt: str
    task_type: str
    model: str | None = None
    worker: str | None = None
    options: Mapping[str, object] | None = None


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _check_text(name: str, value: str) -> bytes:
    if "\x00" in value:
        raise RequestError(
            422, f"'{name}' contains a NUL character (\\u0000), which PostgreSQL text "
                 "cannot store: remove it"
        )
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise RequestError(
            422, f"'{name}' contains an unpaired UTF-16 surrogate escape (\\ud800-\\udfff): "
                 "send valid Unicode text"
        ) from None


def _optional_name(data: Mapping[str, object], name: str, what: str) -> str | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise RequestError(
            422, f"'{name}' must be a string (or left out), got {_type_name(value)}"
        )
    if not _TEXT.search(value):
        raise RequestError(422, f"'{name}' is empty: leave it out to use {what}")
    _check_text(name, value)
    return value


def _option_problem(name: str, value: object) -> str | None:
    """What is wrong with ``options[name] = value``, or None."""
    rule = TASK_OPTIONS[name]
    if rule.kind == "strings":
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            return f"must be an array of non-empty strings, got {_type_name(value)}"
        for text in value:
            _check_text(f"options.{name}", text)
        return None
    number = value
    if rule.kind == "integer" and isinstance(value, float) and value.is_integer():
        number = int(value)  # JSON Schema's integer: 2.0 is one
    wanted = int if rule.kind == "integer" else (int, float)
    if isinstance(number, bool) or not isinstance(number, wanted):
        return f"must be {'an integer' if rule.kind == 'integer' else 'a number'}, got " + (
            "a number with a fraction" if isinstance(number, float) else _type_name(value))
    out_of_range = ((rule.minimum is not None and number < rule.minimum)
                    or (rule.maximum is not None and number > rule.maximum))
    if out_of_range or (isinstance(number, float) and not math.isfinite(number)):
        bounds = (f"from {rule.minimum} to {rule.maximum}" if rule.maximum is not None
                  else f"at least {rule.minimum}")
        return f"must be {bounds}, got {value!r}"
    return None


def _options(data: Mapping[str, object], task_type: str) -> dict[str, object] | None:
    """The request's ``options``, checked against TASK_OPTIONS; None when left out."""
    options = data.get("options")
    if options is None:
        return None
    if not isinstance(options, dict):
        raise RequestError(422, f"'options' must be an object of Ollama options (or left "
                                f"out), got {_type_name(options)}")
    if ROUTES[task_type].kind not in OPTION_KINDS:
        raise RequestError(422, f"'options' are Ollama's and {task_type} tasks ask no model "
                                "through Ollama: leave 'options' out")
    unknown = sorted(k for k in options if k not in TASK_OPTIONS)
    if unknown:
        raise RequestError(422, f"unknown option(s) {', '.join(repr(k) for k in unknown)}: "
                                f"'options' takes {', '.join(TASK_OPTIONS)}")
    for name, value in options.items():
        problem = _option_problem(name, value)
        if problem:
            raise RequestError(422, f"'options.{name}' {problem}")
    return {name: int(value) if TASK_OPTIONS[name].kind == "integer" else value
            for name, value in options.items()} or None


def parse_route_request(body: bytes, max_prompt_bytes: int) -> RouteRequest:
    """Validate a POST /route body; raise ``RequestError`` saying what is wrong."""
    if not body.strip():
        raise RequestError(400, f"request body is empty: send a JSON object like {_EXAMPLE}")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(
            400, f"request body is not valid JSON ({str(exc).splitlines()[0]}): "
                 f"send a JSON object like {_EXAMPLE}"
        ) from None
    if not isinstance(data, dict):
        raise RequestError(
            422, f"request body must be a JSON object, got {_type_name(data)}: "
                 f"send e.g. {_EXAMPLE}"
        )
    unknown = [k for k in data if k not in ROUTE_FIELDS]
    if unknown:
        names = ", ".join(repr(k) for k in sorted(unknown))
        raise RequestError(
            422, f"unknown field(s) {names}: the allowed fields are "
                 f"{', '.join(ROUTE_FIELDS)}"
        )
    task_type = data.get("task_type")
    if task_type is None:
        raise RequestError(
            422, f"'task_type' is missing: use one of {', '.join(TASK_TYPES)}"
        )
    if not isinstance(task_type, str):
        raise RequestError(
            422, f"'task_type' must be a string, got {_type_name(task_type)}: use one of "
                 f"{', '.join(TASK_TYPES)}"
        )
    if task_type not in ROUTES:
        shown = task_type if len(task_type) <= 40 else task_type[:40] + "..."
        raise RequestError(
            422, f"unknown task_type {shown!r}: use one of {', '.join(TASK_TYPES)}"
        )
    prompt = data.get("prompt")
    if prompt is None:
        raise RequestError(
            422, f"'prompt' is missing: send the text to work on, e.g. {_EXAMPLE}"
        )
    if not isinstance(prompt, str):
        raise RequestError(422, f"'prompt' must be a string, got {_type_name(prompt)}")
    if not _TEXT.search(prompt):
        raise RequestError(422, "'prompt' is empty: send the text to work on")
    size = len(prompt) if prompt.isascii() else len(prompt.encode("utf-8", "surrogatepass"))
    if size > max_prompt_bytes:
        raise RequestError(
            413, f"'prompt' is {size} bytes, over the limit of {max_prompt_bytes} bytes "
                 "(COORDINATOR_MAX_PROMPT_BYTES): shorten it"
        )
    if prompt.isascii():
        if "\x00" in prompt:
            _check_text("prompt", prompt)
    else:
        _check_text("prompt", prompt)
    model = _optional_name(data, "model", "the worker's default model")
    worker = _optional_name(data, "worker", "any suitable worker")
    if worker is not None and ROUTES[task_type].kind != "inference":
        raise RequestError(
            422, f"'worker' can only be chosen for the inference task types "
                 f"({', '.join(INFERENCE_TYPES)}); {task_type} goes to the shared queue "
                 f"{ROUTES[task_type].queue}: leave 'worker' out"
        )
    return RouteRequest(prompt=prompt, task_type=task_type, model=model, worker=worker,
                        options=_options(data, task_type))


def body_too_large(size: int, max_body: int, max_prompt: int) -> RequestError:
    return RequestError(
        413, f"request body is {size} bytes or more, over the limit of {max_body} bytes: the "
             f"prompt may be at most {max_prompt} bytes (COORDINATOR_MAX_PROMPT_BYTES)"
    )


# -- workers -----------------------------------------------------------------------------


def inference_queue_of(worker_id: str, device: str | None, queues: Iterable[str]) -> str | None:
    """The per-worker queue of an inference worker: the first non-shared queue it listens
    on, else ``tasks:<device>:<worker_id>``."""
    for queue in queues:
        if queue not in SHARED_QUEUES:
            return queue
    if device:
        return contract.inference_queue(device, worker_id)
    return None


def registered_queues(kind: str, worker_id: str, device: str | None,
                      queues: Iterable[str]) -> list[str]:
    """The queues a worker registers, as the routing table can produce them for its kind and
    id: its kind's shared queue (web, rag), or an inference worker's own
    ``tasks:<device>:<worker_id>``, made from ``device``, which it must send, with no
    ``queues`` (as the schema's rules say). Anything else is refused with a 422: each queue
    is a label of the queue metrics, so a name nothing routes to would be one more series for
    ever."""
    queues = list(dict.fromkeys(queues))
    if kind in contract.KIND_QUEUES:
        allowed = contract.KIND_QUEUES[kind]
        wrong = [queue for queue in queues if queue != allowed]
        if wrong:
            raise RequestError(422, f"a {kind} worker serves {allowed} only, and 'queues' also "
                                    f"names {', '.join(wrong)}: send [\"{allowed}\"]")
        return queues
    if not device:
        raise RequestError(422, "an inference worker must send 'device' (its queue is "
                                "tasks:<device>:<worker_id>)"
                                + (" and no 'queues'" if queues else ""))
    own = contract.inference_queue(device, worker_id)
    if queues:
        raise RequestError(422, f"an inference worker sends 'device' and no 'queues' (its "
                                f"queue, {own}, follows from the device), and 'queues' names "
                                f"{', '.join(queues)}: leave 'queues' out")
    return [own]


@dataclass(frozen=True)
class Candidate:
    """An inference worker as routing sees it."""

    worker_id: str
    queue: str
    models: tuple[str, ...] = ()
    alive: bool = True
    healthy: bool = True  # its last probe did not fail (coordinator/probes.py)


def serves(worker: Candidate, model: str | None) -> bool:
    """No model requested = any worker; else a worker that registered that model, the names
    compared as Ollama compares them (coordinator_contract.same_model: ``llama3.2`` is
    ``llama3.2:latest``)."""
    return model is None or contract.has_model(worker.models, model)


def choose_worker(
    workers: Iterable[Candidate],
    model: str | None,
    load: Mapping[str, int],
    exclude: Iterable[str] = (),
) -> Candidate | None:
    """The alive worker serving ``model`` with the smallest load (queue depth + running,
    keyed by queue); ties go to the smallest worker id. ``exclude`` names workers to avoid
    unless nothing else fits; a worker failing its probes is avoided while a healthy one
    fits."""
    excluded = set(exclude)
    fitting = [w for w in workers if w.alive and serves(w, model)]
    preferred = [w for w in fitting if w.worker_id not in excluded] or fitting
    preferred = [w for w in preferred if w.healthy] or preferred
    if not preferred:
        return None
    return min(preferred, key=lambda w: (load.get(w.queue, 0), w.worker_id))


def describe_no_worker(model: str | None) -> str:
    if model is None:
        return ("no inference worker is alive: the task waits and is dispatched when one "
                "registers")
    return (f"no alive inference worker serves model {model!r}: the task waits and is "
            "dispatched when one registers")
