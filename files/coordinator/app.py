"""The HTTP API (FastAPI). Parsing and rendering only; the work is in ``service``.

Every 4xx body is ``{"error": "<one line: what is wrong and how to fix it>"}``; nothing
answers 500: ``Front`` (plain ASGI in front of FastAPI, cheap on the hot path) checks the
bearer token and turns any unhandled exception into a logged 503 naming the backend that
failed.
"""

from __future__ import annotations

import hmac
import json
import logging
import uuid
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from coordinator_contract import TASK_TYPES, WORKER_TOKEN_PREFIX, token_worker
from fastapi import FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import __version__, audit
from . import statemachine as sm
from .api_models import (
    NO_NUL,
    PATTERN_RULES,
    DeregisterAnswer,
    DeregisterBody,
    DrainAnswer,
    HealthAnswer,
    HeartbeatAnswer,
    HeartbeatBody,
    Name,
    QueuesAnswer,
    RegisterAnswer,
    RegisterBody,
    RouteAnswer,
    RouteBody,
    TaskActionAnswer,
    TasksAnswer,
    TaskView,
    WorkersAnswer,
    error_responses,
)
from .config import Config
from .errors import backend_error, first_line
from .metrics import CONTENT_TYPE
from .overview import SINCE_VALUES, Overview, TaskFilter
from .routing import RequestError, body_too_large, parse_route_request
from .service import Coordinator
from .ui import add_status_pages, is_ui_path

log = logging.getLogger("coordinator.api")

METRICS_PATH = "/metrics"


def open_paths(cfg: Config) -> frozenset[str]:
    """The paths anyone may read when the Coordinator has a token."""
    return frozenset(("/health", *((METRICS_PATH,) if cfg.metrics_open else ())))


#: The optional header that makes an action safe to repeat (audit.perform).
IdempotencyKey = Annotated[str | None, Header(
    alias="Idempotency-Key", max_length=200, pattern=NO_NUL,
    description="any unique string: a repeat with the same key gets the first answer and "
                "does nothing again")]
TaskId = Annotated[str, Path(json_schema_extra={"format": "uuid"},
                             description="the task_id POST /route returned")]
#: Who the audit record names for an action asked through the API (the operator's token).
API_ACTOR = "api"
MAX_WAIT = 60.0
OTHER_BODY_LIMIT = 64 * 1024
# A refused body is still read, up to this many bytes, before the 413 goes out: clients that
# write the whole body before they read (urllib, requests) would otherwise see the connection
# reset instead of the answer. A bigger one is not read (such a client may see the reset).
DISCARD_LIMIT = 64 * 1024 * 1024


def json_response(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(),
                    status_code=status, media_type="application/json")


def error_response(status: int, message: str, headers: dict[str, str] | None = None
                   ) -> Response:
    response = json_response({"error": message}, status)
    if headers:
        response.headers.update(headers)
    return response


def validation_message(errors: list[dict[str, Any]]) -> str:
    """One line from pydantic's errors: the first problem and where."""
    if not errors:
        return "invalid request: see /docs for the schema"
    err = errors[0]
    loc = [str(p) for p in err.get("loc", ())]
    where_kind = loc[0] if loc else "body"
    loc = loc[1:] if loc and loc[0] in ("body", "query", "path") else loc
    # A field name comes from the client's JSON: escape its control characters (a newline
    # would break the one-line message) and keep it short.
    name = "".join(c if c.isprintable() else repr(c)[1:-1] for c in ".".join(loc))[:100]
    kind = err.get("type", "")
    if kind == "json_invalid":
        detail = (err.get("ctx") or {}).get("error", "")
        return (f"request body is not valid JSON ({detail}): send a JSON object, see /docs "
                "for the schema")
    if where_kind == "query":
        return f"query parameter '{name}': {err.get('msg')}"
    if not name:
        if kind in ("model_attributes_type", "dict_type", "model_type"):
            return "request body must be a JSON object: see /docs for the schema"
        return f"request body: {err.get('msg')} (see /docs for the schema)"
    if kind == "missing":
        return f"'{name}' is missing: see /docs for the request schema"
    if kind == "extra_forbidden":
        return f"unknown field '{name}': see /docs for the allowed fields"
    if kind == "string_pattern_mismatch":
        rule = PATTERN_RULES.get((err.get("ctx") or {}).get("pattern", ""))
        if rule is not None:
            return f"'{name}': {rule}"
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return f"'{name}': {err.get('msg')}{more}"


# -- the app ---------------------------------------------------------------------------------


def unavailable(exc: BaseException, cfg: Config, where: str) -> str:
    """Log an unhandled error; return the one-line message of the 503 that answers it."""
    message = backend_error(exc, cfg)
    if message is None:
        log.error("unhandled error in %s", where, exc_info=exc)
        return (f"the coordinator hit an unexpected error ({type(exc).__name__}: "
                f"{first_line(exc)[:200]}); it is logged, retry later")
    log.warning("%s: %s", where, message)
    return message


class Front:
    """The ASGI app uvicorn serves, in front of FastAPI.

    It checks the bearer token, serves ``POST /route`` itself as plain ASGI (the hot path
    skips the framework's per-request machinery; FastAPI still declares the route for the
    OpenAPI schema, with the same code), and is the last catch-all: no request ends in a 500.
    """

    def __init__(self, api: FastAPI, cfg: Config, coordinator: Coordinator) -> None:
        self.api = api
        self.state = api.state
        self.cfg = cfg
        self.coordinator = coordinator
        self.expected = (f"Bearer {cfg.token}".encode() if cfg.token else None)
        self.metrics_key = (f"Bearer {cfg.metrics_token}".encode() if cfg.metrics_token
                            else None)
        self.open_paths = open_paths(cfg)
        # A method no endpoint takes (TRACE, PUT, ...) gets its 405 before the token check.
        self.methods = frozenset(method for route in api.routes
                                 for method in getattr(route, "methods", ()))

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.api(scope, receive, send)
            return
        path = scope["path"]
        if (self.expected is not None and path not in self.open_paths
                and not is_ui_path(path) and scope["method"] in self.methods):
            given = b""
            for key, value in scope["headers"]:
                if key == b"authorization":
                    given = value
                    break
            if not hmac.compare_digest(given, self.expected):
                refused = self.refusal(given, scope["method"], path, scope)
                if refused is not None:
                    await refused(scope, receive, send)
                    return
        is_route = path == "/route" and scope["method"] == "POST"
        if not is_route:
            length = content_length_or_none(scope)
            if length is not None and length > OTHER_BODY_LIMIT:
                if length <= DISCARD_LIMIT:
                    await discard_body(receive)
                await error_response(
                    413, f"request body is {length} bytes, over the limit of "
                         f"{OTHER_BODY_LIMIT} bytes for {path}")(scope, receive, send)
                return
        started = False

        async def tracking_send(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            if is_route:
                await self.route(scope, receive, tracking_send)
            else:
                await self.api(scope, receive, tracking_send)
        except Exception as exc:
            # FastAPI's own handler answered (and logged) already when a response started.
            if not started:
                message = unavailable(exc, self.cfg, f"{scope['method']} {path}")
                await error_response(503, message, {"Retry-After": "2"})(scope, receive, send)

    def refusal(self, given: bytes, method: str, path: str, scope: dict) -> Response | None:
        """The answer to a request without the operator's token: None when the metrics
        token asks for /metrics or a worker's token for its own registration, heartbeat or
        goodbye (its id then in ``scope["state"]["worker"]``); 403 when either asks for
        anything else; else 401."""
        worker = self.worker_of(given)
        if worker is not None:
            if worker_may(method, path, worker):
                scope.setdefault("state", {})["worker"] = worker
                return None
            return error_response(403, f"the token of worker {worker!r} may register, "
                                       f"heartbeat and say goodbye as {worker!r} only: "
                                       f"{method} {path} "
                                       "needs the operator's token (COORDINATOR_TOKEN)")
        if self.metrics_key is not None and hmac.compare_digest(given, self.metrics_key):
            if path == METRICS_PATH:
                return None
            return error_response(403, f"the metrics token reads GET {METRICS_PATH} only: "
                                       f"{method} {path} needs the operator's token "
                                       "(COORDINATOR_TOKEN)")
        why = "missing" if not given else "wrong"
        return error_response(
            401, f"{why} bearer token: send 'Authorization: Bearer <token>' with the token "
                 "the coordinator was given in COORDINATOR_TOKEN",
            {"WWW-Authenticate": "Bearer"})

    def worker_of(self, given: bytes) -> str | None:
        """The worker id of a worker token (``Bearer worker.<id>.<mac>``), else None."""
        key = self.cfg.worker_token_key
        if key is None or not given.startswith(b"Bearer " + WORKER_TOKEN_PREFIX.encode()):
            return None
        return token_worker(key, given[len(b"Bearer "):].decode("utf-8", "replace"))

    async def route(self, scope: dict, receive: Any, send: Any) -> None:
        answered = await answer_route(self.coordinator, scope, receive)
        if answered is None:
            return  # the client went away
        status, answer = answered
        payload = json.dumps(answer, separators=(",", ":"), ensure_ascii=False).encode()
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})


async def answer_route(coordinator: Coordinator, scope: dict, receive: Any
                       ) -> tuple[int, dict[str, Any]] | None:
    """POST /route: (status, answer), or None when the client went away before its body."""
    cfg = coordinator.cfg
    try:
        body = await receive_body(scope, receive, cfg.max_body_bytes, cfg.max_prompt_bytes)
        if body is None:
            return None
        return 201, await coordinator.tasks.route(parse_route_request(body,
                                                                      cfg.max_prompt_bytes))
    except RequestError as exc:
        return exc.status, {"error": exc.message}


def content_length_or_none(scope: dict) -> int | None:
    for key, value in scope["headers"]:
        if key == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def content_length(scope: dict) -> int | None:
    for key, value in scope["headers"]:
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                raise RequestError(400, "the Content-Length header is not a number") from None
    return None


async def receive_body(scope: dict, receive: Any, limit: int, max_prompt: int) -> bytes | None:
    """The request body, refused with 413 as soon as it is known to exceed ``limit`` (from
    Content-Length, before keeping anything, or while reading a chunked body); the rest is
    read and dropped (``discard_body``) so that the client gets to read the answer."""
    size = content_length(scope)
    if size is not None and size > limit:
        if size <= DISCARD_LIMIT:
            await discard_body(receive)
        raise body_too_large(size, limit, max_prompt)
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        more = message.get("more_body", False)
        if chunk:
            size += len(chunk)
            if size > limit:
                if more:
                    await discard_body(receive, DISCARD_LIMIT - size)
                raise body_too_large(size, limit, max_prompt)
            chunks.append(chunk)
        if not more:
            return b"".join(chunks)


async def discard_body(receive: Any, limit: int = DISCARD_LIMIT) -> None:
    """Read and drop the rest of a refused body, up to about ``limit`` bytes."""
    read = 0
    while read <= limit:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        read += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def worker_may(method: str, path: str, worker: str) -> bool:
    """Whether a worker's token may make this request: its registration (the body's id is
    checked by the handler), its heartbeats and its goodbye."""
    if method != "POST":
        return False
    return path == "/workers/register" or path in (f"/workers/{worker}/heartbeat",
                                                   f"/workers/{worker}/deregister")


def parse_task_id(task_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(task_id)
    except ValueError:
        raise RequestError(422, f"task id {task_id[:60]!r} is not a UUID: use the task_id "
                                "that POST /route returned") from None


def openapi_schema(app: FastAPI, cfg: Config) -> dict[str, Any]:
    """FastAPI's schema, with the bearer scheme on every path but the open ones when the
    Coordinator has a token (and no 401 anywhere when it has none)."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version,
                             description=app.description, routes=app.routes)
        protected = cfg.token is not None
        if protected:
            schema.setdefault("components", {})["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "the token given in COORDINATOR_TOKEN (for GET "
                                          "/metrics, COORDINATOR_METRICS_TOKEN too)"}}
        anyone = open_paths(cfg)
        for path, operations in schema["paths"].items():
            for operation in operations.values():
                if not protected or path in anyone:
                    operation["responses"].pop("401", None)
                    operation["responses"].pop("403", None)
                else:
                    operation["security"] = [{"bearer": []}]
                    # 403: a worker's token anywhere but its own calls, the metrics token
                    # anywhere but /metrics.
                    if not (cfg.worker_token_key
                            or (cfg.metrics_token and path != METRICS_PATH)):
                        operation["responses"].pop("403", None)
                for status, response in operation["responses"].items():
                    # An error is JSON even where the success is not (/metrics' text).
                    content = response.get("content", {})
                    if status[0] in "45" and "text/plain" in content:
                        content["application/json"] = content.pop("text/plain")
        app.openapi_schema = schema
    return app.openapi_schema


def create_app(cfg: Config) -> Front:
    """The ASGI app: ``Front`` around the FastAPI app; ``.coordinator`` is the service."""
    coordinator = Coordinator(cfg)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await coordinator.start()
        try:
            yield
        finally:
            await coordinator.stop()

    app = FastAPI(
        title="Coordinator", version=__version__, lifespan=lifespan,
        # no OpenTelemetry per request (Prometheus metrics are at /metrics)
        telemetry={"tracing": False, "metrics": False, "logs": False},
        description="Routes tasks to web, RAG and inference workers; PostgreSQL is the "
                    "record, Redis carries task ids. See docs/coordinator.md.",
    )
    app.state.coordinator = coordinator

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError) -> Response:
        return error_response(exc.status, exc.message)

    @app.exception_handler(audit.KeyReused)
    async def _key_reused(request: Request, exc: audit.KeyReused) -> Response:
        return error_response(409, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        return error_response(422, validation_message(list(exc.errors())))

    @app.exception_handler(Exception)
    async def _unhandled(request: Request, exc: Exception) -> Response:
        message = unavailable(exc, cfg, f"{request.method} {request.url.path}")
        return error_response(503, message, {"Retry-After": "2"})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            message = (f"no such endpoint: {request.method} {request.url.path}; see /docs "
                       "for the API")
        elif exc.status_code == 405:
            message = (f"{request.method} is not allowed on {request.url.path}; see /docs for "
                       "the methods it takes")
        else:
            message = str(exc.detail)
        return error_response(exc.status_code, message, dict(exc.headers or {}))

    def documented(method: str, path: str, answer: type | None = None, status: int = 200,
                   links: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        """Declare an operation with its answer model, the operations its answer leads to
        (OpenAPI links: what a client, or schemathesis' stateful phase, calls next) and every
        error status it can give. Its operationId is the handler's name."""
        responses: dict[int | str, dict[str, Any]] = error_responses(method, path)
        if answer is not None:
            responses[status] = {"model": answer, **({"links": links} if links else {})}

        def declare(handler: Any) -> Any:
            return getattr(app, method)(path, status_code=status, responses=responses,
                                        operation_id=handler.__name__, **kwargs)(handler)
        return declare

    # What a registration leads to: this worker's heartbeat and goodbye.
    same_worker = {"parameters": {"worker_id": "$request.body#/worker_id"},
                   "requestBody": {"instance_id": "$request.body#/instance_id"}}

    @documented(
        "post", "/route", RouteAnswer, 201,
        links={name: {"operationId": operation,
                      "parameters": {"task_id": "$response.body#/task_id"}}
               for name, operation in (("GetTask", "get_task"), ("CancelTask", "cancel_task"),
                                       ("RetryTask", "retry_task"))},
        summary="Accept a task: saved in PostgreSQL, then its id pushed to its Redis queue",
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
            "schema": RouteBody.model_json_schema()}}}},
    )
    async def route(request: Request) -> Response:
        # Front serves it first, with the same answer_route; this declaration documents it.
        answered = await answer_route(coordinator, request.scope, request.receive)
        status, answer = answered or (400, {"error": "the request body did not arrive"})
        return json_response(answer, status)

    @documented("get", "/task/{task_id}", TaskView,
                summary="A task's state and result; ?wait=N long-polls")
    async def get_task(
        task_id: Annotated[str, Path(json_schema_extra={"format": "uuid"},
                                     description="the task_id POST /route returned")],
        wait: Annotated[float | None, Query(
            json_schema_extra={"minimum": 0, "maximum": MAX_WAIT},
            description="seconds (0 to 60) to wait for the task to be done or failed")] = None,
    ) -> Response:
        tid = parse_task_id(task_id)
        seconds = 0.0 if wait is None else wait
        if not 0 <= seconds <= MAX_WAIT:
            raise RequestError(422, f"wait={wait} is out of range: use 0 to {MAX_WAIT:g} "
                                    "seconds")
        task = await coordinator.tasks.get(tid, seconds)
        if task is None:
            raise RequestError(404, f"no task {tid}: check the id POST /route returned")
        return json_response(task)

    @documented("post", "/workers/register", RegisterAnswer,
                links={"Heartbeat": {"operationId": "heartbeat", **same_worker},
                       "Deregister": {"operationId": "deregister", **same_worker},
                       **{name: {"operationId": operation,
                                 "parameters": {"worker_id": "$request.body#/worker_id"}}
                          for name, operation in (("Drain", "drain"), ("Undrain", "undrain"))}},
                summary="A worker announces itself")
    async def register(request: Request, body: RegisterBody) -> Response:
        worker = getattr(request.state, "worker", None)
        if worker is not None and body.worker_id != worker:
            raise RequestError(403, f"the token of worker {worker!r} cannot register worker "
                                    f"{body.worker_id!r}: each worker registers with its own")
        return json_response(await coordinator.workers.register(body.model_dump(mode="json")))

    @documented("post", "/workers/{worker_id}/heartbeat", HeartbeatAnswer,
                summary="A worker says it is alive")
    async def heartbeat(worker_id: Annotated[Name, Path()], body: HeartbeatBody) -> Response:
        answer = await coordinator.workers.heartbeat(worker_id, body.model_dump(mode="json"))
        if answer is None:
            raise RequestError(404, f"unknown worker {worker_id!r}: register it again with "
                                    "POST /workers/register")
        return json_response(answer)

    @documented("post", "/workers/{worker_id}/deregister", DeregisterAnswer,
                summary="A worker process says goodbye")
    async def deregister(worker_id: Annotated[Name, Path()], body: DeregisterBody) -> Response:
        answer = await coordinator.workers.deregister(worker_id, str(body.instance_id))
        if answer is None:
            raise RequestError(404, f"unknown worker {worker_id!r}: nothing to deregister")
        return json_response(answer)

    async def set_drained(worker_id: str, drained: bool, key: str | None) -> Response:
        answer = await coordinator.workers.drain(worker_id, drained, API_ACTOR, key)
        if answer is None:
            raise RequestError(404, f"unknown worker {worker_id!r}: GET /workers lists the workers")
        return json_response(answer)

    async def act_on_task(action: Any, task_id: str, key: str | None) -> Response:
        """``action`` (coordinator.tasks.retry or .cancel) on the task, 404 when there is none."""
        tid = parse_task_id(task_id)
        answer = await action(tid, API_ACTOR, key)
        if answer is None:
            raise RequestError(404, f"no task {tid}: check the id POST /route returned")
        return json_response(answer)

    @documented("post", "/workers/{worker_id}/drain", DrainAnswer,
                summary="Drain a worker: it finishes what it holds and is sent nothing new")
    async def drain(worker_id: Annotated[Name, Path()], key: IdempotencyKey = None) -> Response:
        return await set_drained(worker_id, True, key)

    @documented("post", "/workers/{worker_id}/undrain", DrainAnswer,
                summary="Undrain a worker: it takes tasks again")
    async def undrain(worker_id: Annotated[Name, Path()], key: IdempotencyKey = None) -> Response:
        return await set_drained(worker_id, False, key)

    @documented("post", "/task/{task_id}/retry", TaskActionAnswer,
                summary="Queue a failed task again, as a new attempt")
    async def retry_task(task_id: TaskId, key: IdempotencyKey = None) -> Response:
        return await act_on_task(coordinator.tasks.retry, task_id, key)

    @documented("post", "/task/{task_id}/cancel", TaskActionAnswer,
                summary="Cancel a queued task (it fails, saying so)")
    async def cancel_task(task_id: TaskId, key: IdempotencyKey = None) -> Response:
        return await act_on_task(coordinator.tasks.cancel, task_id, key)

    @documented("get", "/tasks", TasksAnswer,
                summary="The newest tasks, filtered by status, type, worker and age")
    async def list_tasks(
        status: Annotated[Literal[sm.STATUSES] | None, Query()] = None,  # type: ignore[valid-type]
        task_type: Annotated[Literal[TASK_TYPES] | None, Query()] = None,  # type: ignore[valid-type]
        worker: Annotated[Name | None, Query(description="claimed by or queued for it")] = None,
        since: Annotated[Literal[SINCE_VALUES] | None, Query(  # type: ignore[valid-type]
            description="created in the last hour, day or week")] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
    ) -> Response:
        where = TaskFilter(status, task_type, worker, since)
        tasks, more = await Overview(coordinator.pool, coordinator.stats,
                                     coordinator.workers).tasks(where, limit)
        return json_response({"tasks": tasks, "more": more})

    @documented("get", "/workers", WorkersAnswer, summary="Every registered worker, alive or not")
    async def workers() -> Response:
        return json_response({"workers": await coordinator.workers.list(),
                              "heartbeat_ttl": cfg.heartbeat_ttl})

    @documented("get", "/queues", QueuesAnswer,
                summary="Every queue's depth (LLEN) and in-flight (running) count")
    async def queues() -> Response:
        return json_response(await coordinator.stats.queues())

    @documented("get", "/health", HealthAnswer,
                summary="200 when PostgreSQL and Redis both answer, else 503")
    async def health() -> Response:
        ok, body = await coordinator.stats.health()
        return json_response(body, 200 if ok else 503)

    @documented("get", "/metrics", summary="Prometheus metrics (text format)",
                response_class=PlainTextResponse)
    async def metrics() -> Response:
        return Response(await coordinator.stats.render_metrics(), media_type=CONTENT_TYPE)

    add_status_pages(app, cfg, coordinator)
    app.openapi = lambda: openapi_schema(app, cfg)
    return Front(app, cfg, coordinator)
