"""The HTTP API's bodies as pydantic models: what the OpenAPI schema documents and the server
does. Request bodies are validated with them (``POST /route`` by ``routing`` on its fast
path, to the same rules); the handlers return them as their answers. Each route lists beside
its path the error statuses it can give (``errors``), every one with the ``{"error": ...}``
body.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

import annotated_types
from coordinator_contract import (
    INFERENCE_TYPES,
    KIND_QUEUES,
    PROBE_TYPE,
    SHARED_TYPES,
    TASK_TYPES,
    WORKER_KINDS,
)
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    create_model,
    field_validator,
)

from .queries import WORKER_STATES
from .routing import BLANK, NAME, OPTION_KINDS, ROUTES, TASK_OPTIONS

# Text PostgreSQL can store: no NUL. With at least one character that is not white space.
NO_NUL = "^[^\\u0000]*$"
SOME_TEXT = f"^[^\\u0000]*[^{BLANK}\\u0000][^\\u0000]*$"

NAME_PATTERN = f"^{NAME}$"
Name = Annotated[StrictStr, Field(pattern=NAME_PATTERN)]
Text = Annotated[StrictStr, Field(pattern=NO_NUL)]
#: What a value that misses each pattern gets told.
PATTERN_RULES = {
    NO_NUL: "NUL characters cannot be stored; remove them",
    SOME_TEXT: "empty, only white space or with a NUL character: send some text, without NUL",
    NAME_PATTERN: "not a name: use 1 to 128 letters, digits and . _ @ -, starting with a "
                  "letter or digit",
}


def _integral(value: Any) -> Any:
    """JSON Schema counts 135379.0 as an integer; so does the server (a float with a
    fraction, a string or a boolean stays refused)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# The workers columns are PostgreSQL integers: a larger number is bad input, not a failed write.
Count = Annotated[StrictInt, Field(ge=0, le=2**31 - 1), BeforeValidator(_integral)]


class ErrorBody(BaseModel):
    error: str = Field(description="one line: what is wrong and how to fix it")


# -- POST /route -----------------------------------------------------------------------------

_ROUTE_RULE = {"allOf": [
    # 'worker' only for the inference types: the shared ones go to their shared queue.
    {"if": {"properties": {"task_type": {"enum": list(SHARED_TYPES)}},
            "required": ["task_type"]},
     "then": {"properties": {"worker": {"type": "null"}}}},
    # 'options' only for the types whose workers ask Ollama.
    {"if": {"properties": {"task_type": {"enum": [
        t for t in TASK_TYPES if ROUTES[t].kind not in OPTION_KINDS]}},
            "required": ["task_type"]},
     "then": {"properties": {"options": {"type": "null"}}}},
]}


def _option_type(name: str) -> Any:
    rule = TASK_OPTIONS[name]
    if rule.kind == "strings":
        return list[Annotated[StrictStr, Field(min_length=1, pattern=NO_NUL)]]
    bounds = annotated_types.Interval(ge=rule.minimum, le=rule.maximum)
    if rule.kind == "integer":
        return Annotated[StrictInt, bounds, BeforeValidator(_integral)]
    return Annotated[StrictFloat, bounds]


#: POST /route's ``options``, from routing.TASK_OPTIONS (which the server checks).
TaskOptions = create_model(
    "TaskOptions",
    __config__=ConfigDict(extra="forbid"),
    __doc__="Ollama options for the model the worker asks (the web worker: its summary, "
            "num_predict at most its SUMMARY_MAX_TOKENS)",
    # Left out, not null: the server takes a given option as a value.
    **{name: (_option_type(name), None) for name in TASK_OPTIONS},
)


class RouteBody(BaseModel):
    """POST /route (validated by ``routing.parse_route_request``, documented here)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_ROUTE_RULE)
    prompt: str = Field(description="the text to work on (at most COORDINATOR_MAX_PROMPT_BYTES "
                                    "bytes of UTF-8; not only white space)",
                        pattern=SOME_TEXT)
    task_type: Literal[TASK_TYPES] = Field(description="what to do with it")  # type: ignore[valid-type]
    model: str | None = Field(None, pattern=SOME_TEXT,
                              description="inference: the model; default: any worker")
    worker: str | None = Field(
        None, pattern=SOME_TEXT,
        description=f"inference ({', '.join(INFERENCE_TYPES)}) only: send to this worker id "
                    "(404 when no such worker registered)")
    options: TaskOptions | None = Field(  # type: ignore[valid-type]
        None, description="Ollama options for this task's model (web_search and inference "
                          "types): e.g. temperature 0 and a seed for answers that repeat")


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON Schema with its ``$defs`` written in where they are referred to: a
    schema placed inside the OpenAPI document by hand (POST /route's body) has no ``$defs``
    of its own there, and ``#/$defs/...`` would point at the document's root."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(item) for item in node]
        return node

    return inline(schema)


class RouteAnswer(BaseModel):
    task_id: uuid.UUID
    queue: str | None = Field(description="null while the task waits for an inference worker")
    status: Literal["queued"]
    worker: str = Field(description="'default' for shared queues, else the worker id")
    note: str | None = Field(None, description="why the task waits (queue null)")
    warning: str | None = Field(None, description="saved, but Redis did not take the id yet")


# -- a task ----------------------------------------------------------------------------------


# The one shape of a task: GET /task/{task_id}, each of GET /tasks and the status page's
# (its public columns, coordinator_sql.PUBLIC_COLUMNS, made into one by tasks.task_view).
class Task(BaseModel):
    """A task: what was asked, where it is, and its result or error."""

    task_id: uuid.UUID
    task_type: Literal[(*TASK_TYPES, PROBE_TYPE)] = Field(  # type: ignore[valid-type]
        description=f"what was asked; {PROBE_TYPE}: a worker probe the Coordinator queued "
                    "(read by its id only: left out of GET /tasks)")
    status: Literal["queued", "running", "done", "failed"]
    result: str | None
    fallback: bool = Field(description="the answer is not the model's: the raw search "
                           "results (summarisation failed), or why there are none (SearXNG's "
                           "engines failed)")
    worker: str
    requested_worker: str | None = Field(description="the worker POST /route named, if any")
    worker_id: str | None
    worker_host: str | None
    error: str | None
    attempts: int
    max_attempts: int
    model: str | None
    options: dict[str, Any] | None = Field(description="the Ollama options POST /route gave")
    answered_model: str | None = Field(description="the model whose answer is the result, "
                                       "as the worker asked Ollama for it")
    queue: str | None
    waiting: bool = Field(description="queued with no worker to go to yet (see note)")
    created_at: str
    started_at: str | None
    finished_at: str | None
    note: str | None = Field(None, description="why a waiting task waits")


# -- workers ---------------------------------------------------------------------------------


class WorkerBody(BaseModel):
    """PostgreSQL text cannot hold NUL: refuse it as bad input (422), not a failed write."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        texts = value if isinstance(value, list) else [value]
        if any(isinstance(text, str) and "\x00" in text for text in texts):
            raise ValueError("NUL characters cannot be stored; remove them")
        return value


def _register_rules() -> dict[str, Any]:
    """The rules between fields of a registration, as JSON Schema: a worker of a shared queue
    may name only that queue; an inference worker sends its device, and its queue,
    tasks:<device>:<worker_id>, follows from it."""
    rules: list[dict[str, Any]] = [
        {"if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
         "then": {"properties": {"queues": {"items": {"const": queue}}}}}
        for kind, queue in sorted(KIND_QUEUES.items())]
    rules.append({"if": {"properties": {"kind": {"const": "inference"}}, "required": ["kind"]},
                  "then": {"required": ["device"],
                           "properties": {"device": {"type": "string"},
                                          "queues": {"maxItems": 0}}}})
    return {"allOf": rules}


class RegisterBody(WorkerBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_register_rules())
    worker_id: Name
    host: Annotated[StrictStr, Field(min_length=1, max_length=255, pattern=NO_NUL)]
    kind: Literal[WORKER_KINDS]  # type: ignore[valid-type]
    instance_id: uuid.UUID
    queues: list[Text] = Field([], description="a web or RAG worker: its shared queue (an "
                               "inference worker's, tasks:<device>:<worker_id>, follows from "
                               "its device)")
    version: Text | None = None
    pid: Count | None = None
    device: Name | None = Field(None, description="an inference worker: part of its queue name")
    models: list[Text] = []
    os: Text | None = Field(None, description="the worker host's operating system, shown on "
                            "the status page (e.g. 'Linux 6.1', 'Darwin 24.1')")


class RegisterAnswer(BaseModel):
    heartbeat_interval: float
    heartbeat_ttl: float
    duplicate: bool = Field(description="another live process uses this worker id")
    queues: list[str]
    dispatched: int = Field(description="waiting tasks sent to this worker now")
    drain: bool = Field(description="the worker is drained: take no task until undrained")


class HeartbeatBody(WorkerBody):
    instance_id: uuid.UUID
    pid: Count | None = None
    in_flight: Count | None = None
    db_write_failures: Count | None = None
    last_error: Text | None = None
    drained: StrictBool | None = Field(None, description="drained, the worker holds no task and "
                                 "takes none")


class HeartbeatAnswer(BaseModel):
    duplicate: bool
    drain: bool = Field(description="the worker is drained: finish what it holds, take no "
                        "new task")


class DeregisterBody(WorkerBody):
    instance_id: uuid.UUID


class DeregisterAnswer(BaseModel):
    stopped: bool = Field(description="false when that instance is no longer the worker's")


class LiveInstance(BaseModel):
    instance_id: str
    host: str
    pid: int | None
    started_at: str
    last_heartbeat: str


class WorkerView(BaseModel):
    worker_id: str
    host: str
    kind: Literal[WORKER_KINDS]  # type: ignore[valid-type]
    device: str | None
    queues: list[str]
    models: list[str]
    version: str | None
    pid: int | None
    instance_id: str | None
    registered_at: str
    last_heartbeat: str
    alive: bool
    stopped_at: str | None
    seconds_since_heartbeat: float
    in_flight: int
    db_write_failures: int
    last_error: str | None
    duplicate: bool
    os: str | None
    drain_requested_at: str | None = Field(description="when it was drained; null unless "
                                           "drained")
    state: Literal[WORKER_STATES] = Field(  # type: ignore[valid-type]
        description="alive, draining (drained, still finishing), drained (holds nothing), "
                    "dead, stopped (said goodbye) or duplicate")
    live_instances: list[LiveInstance]
    probe_at: str | None = Field(description="when its last finished probe was queued; null "
                                 "when it has had none (COORDINATOR_PROBE_INTERVAL)")
    probe_seconds: float | None = Field(description="from that probe's queueing to its "
                                        "result, its wait behind queued tasks included")
    probe_ok: bool | None = Field(description="whether that probe was done: false marks the "
                                  "worker unhealthy (routing avoids it while a healthy worker "
                                  "serves the model); null: never probed")
    probe_error: str | None = Field(description="why that probe failed: the worker's own "
                                    "error, or that it took no probe in time")


class WorkersAnswer(BaseModel):
    workers: list[WorkerView]
    heartbeat_ttl: float


class TasksAnswer(BaseModel):
    tasks: list[Task] = Field(description="newest first")
    more: bool = Field(description="more tasks match than the limit")


class DrainAnswer(BaseModel):
    worker_id: str
    state: Literal[WORKER_STATES]  # type: ignore[valid-type]
    changed: bool = Field(description="false when it was drained (undrained) already")
    message: str = Field(description="one line: what was done")
    repeated: bool = Field(description="the answer of an earlier request with this "
                           "Idempotency-Key; nothing was done now")


class TaskActionAnswer(BaseModel):
    task_id: uuid.UUID
    status: Literal["queued", "running", "done", "failed"]
    changed: bool = Field(description="false when the task's status did not allow it")
    message: str = Field(description="one line: what was done")
    repeated: bool = Field(description="the answer of an earlier request with this "
                           "Idempotency-Key; nothing was done now")


# -- stats -----------------------------------------------------------------------------------


class QueueView(BaseModel):
    queue: str
    depth: int = Field(description="LLEN of the Redis list")
    in_flight: int = Field(description="running tasks taken from it")
    queued: int = Field(description="queued tasks in PostgreSQL for it")


class QueuesAnswer(BaseModel):
    queues: list[QueueView]
    waiting: int = Field(description="queued inference tasks waiting for a worker")


class HealthAnswer(BaseModel):
    postgresql: Literal["ok", "failed"]
    redis: Literal["ok", "failed"]
    version: str
    instance: str = Field(description="the host name of the instance that answered (several "
                                      "may serve one cluster)")
    error: str | None = Field(None, description="what did not answer (503 only)")


# -- status codes ----------------------------------------------------------------------------

WHY = {
    400: "the body is missing or not JSON",
    401: "missing or wrong bearer token",
    403: "a token for other requests: the metrics token reads GET /metrics only, a worker's "
         "token serves its own registration, heartbeats and goodbye only",
    404: "no such task or worker",
    409: "the named worker cannot take it (not an inference worker, or not that model), or "
         "the Idempotency-Key was used for another action",
    413: "the body or the prompt is over its limit",
    422: "a field is wrong",
    503: "PostgreSQL or Redis did not answer; retry (Retry-After)",
}


def errors(*statuses: int, body: type[BaseModel] = ErrorBody) -> dict[int | str, dict[str, Any]]:
    """FastAPI's ``responses=`` for the error statuses an operation gives besides its access
    rule's 401 and 403 (``access.Access.refusals``), each with ``body``."""
    return {status: {"model": body, "description": WHY[status]} for status in statuses}
