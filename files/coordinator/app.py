"""The Coordinator's HTTP side: ``create_app`` puts together the FastAPI app (the API's
routers, ``routers/``; the status page, ``ui``; its stylesheet, ``static/``) and ``Front``,
the ASGI app uvicorn serves. Parsing and rendering only; the work is in ``service``.

Every 4xx body is ``{"error": "<one line: what is wrong and how to fix it>"}`` (the handlers
below turn every exception into one); nothing answers 500: an unexpected error is a logged
503 naming the backend that failed.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from fastapi.routing import RouteContext
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import __version__, audit, ui
from .access import Access, Keys, api_routes, rule_of
from .api_models import PATTERN_RULES, WHY
from .config import Config
from .front import Front, error_response, unavailable
from .routers.docs import docs
from .routers.stats import stats
from .routers.tasks import tasks
from .routers.workers import workers
from .routing import RequestError
from .service import Coordinator

ROUTERS = (tasks, workers, stats, docs)


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


# -- every error as {"error": ...} -------------------------------------------------------------


async def _request_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestError)
    return error_response(exc.status, exc.message, exc.headers)


async def _key_reused(request: Request, exc: Exception) -> Response:
    return error_response(409, str(exc))


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return error_response(422, validation_message(list(exc.errors())))


async def _unhandled(request: Request, exc: Exception) -> Response:
    message = unavailable(exc, request.app.state.coordinator.cfg,
                          f"{request.method} {request.url.path}")
    return error_response(503, message, {"Retry-After": "2"})


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        message = (f"no such endpoint: {request.method} {request.url.path}; see /docs "
                   "for the API")
    elif exc.status_code == 405:
        message = (f"{request.method} is not allowed on {request.url.path}; see /docs for "
                   "the methods it takes")
    else:
        message = str(exc.detail)
    return error_response(exc.status_code, message, dict(exc.headers or {}))


EXCEPTION_HANDLERS: dict[Any, Any] = {
    RequestError: _request_error, audit.KeyReused: _key_reused,
    RequestValidationError: _validation_error, Exception: _unhandled,
    StarletteHTTPException: _http_error, **ui.EXCEPTION_HANDLERS,
}


# -- the schema ----------------------------------------------------------------------------------


def openapi_schema(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema, with each operation's 401 and 403 and its bearer scheme as its
    access rule gives them under this Coordinator's tokens (``Access.refusals``)."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    keys: Keys = app.state.keys
    schema = get_openapi(title=app.title, version=app.version, description=app.description,
                         routes=app.routes)
    if keys.cfg.token is not None:
        schema.setdefault("components", {})["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer",
                       "description": "the token given in COORDINATOR_TOKEN (for GET "
                                      "/metrics, COORDINATOR_METRICS_TOKEN too)"}}
    error_body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for route in api_routes(app):
        if not route.include_in_schema:
            continue
        refusals = declared(route).refusals(keys)
        for method in route.methods:
            operation = schema["paths"][route.path_format][method.lower()]
            if refusals:
                operation["security"] = [{"bearer": []}]
            responses = operation["responses"]
            for status in refusals:
                responses[str(status)] = {"description": WHY[status], "content": error_body}
            for status, response in responses.items():
                # An error is JSON even where the success is not (/metrics' text).
                content = response.get("content", {})
                if status[0] in "45" and "text/plain" in content:
                    content["application/json"] = content.pop("text/plain")
    app.openapi_schema = schema
    return schema


def declared(route: RouteContext) -> Access:
    """The access rule of an API route; an API route without one is a mistake, found at
    start rather than by an open endpoint."""
    rule = rule_of(route)
    if rule is None:
        raise LookupError(f"{sorted(route.methods)} {route.path} declares no access rule "
                          "(access.OPERATOR, WORKER, METRICS or ANYONE)")
    return rule


# -- the app -----------------------------------------------------------------------------------


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
        # served by routers.docs, under the operator's token like the rest of the API
        openapi_url=None, docs_url=None, redoc_url=None,
        exception_handlers=EXCEPTION_HANDLERS,
    )
    app.state.coordinator = coordinator
    app.state.keys = Keys(cfg)
    for router in ROUTERS:
        app.include_router(router)
    ui.install(app, cfg)
    for route in api_routes(app):
        if route.include_in_schema:
            declared(route)
    app.openapi = lambda: openapi_schema(app)  # type: ignore[method-assign]
    return Front(app, cfg, coordinator)
