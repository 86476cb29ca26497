"""``Front``: the plain ASGI app uvicorn serves, in front of FastAPI (``app``).

It serves ``POST /route`` itself, the hot path, without the framework's per-request
machinery (FastAPI declares the route, its access rule and its schema; ``answer_route`` is
the same code either way), refuses a request without a valid token before its body is read
or its path told apart (``refused_before_body``), then a body over its limit before anyone
reads it, and is the last catch-all: no request ends in a 500.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI
from fastapi.responses import Response
from fastapi.routing import iter_route_contexts
from starlette.routing import Match

from .access import OPERATOR, Access, Keys, api_routes, authorization, rule_of
from .config import Config
from .errors import backend_error, first_line
from .routing import RequestError, body_too_large, parse_route_request
from .service import Coordinator

log = logging.getLogger("coordinator.api")

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


def unavailable(exc: BaseException, cfg: Config, where: str) -> str:
    """Log an unhandled error; return the one-line message of the 503 that answers it."""
    message = backend_error(exc, cfg)
    if message is None:
        log.error("unhandled error in %s", where, exc_info=exc)
        return (f"the coordinator hit an unexpected error ({type(exc).__name__}: "
                f"{first_line(exc)[:200]}); it is logged, retry later")
    log.warning("%s: %s", where, message)
    return message


def declared_rule(api: FastAPI, method: str, path: str) -> Access:
    """The access rule the route ``method path`` declares."""
    for route in api_routes(api):
        if route.path == path and method in route.methods:
            rule = rule_of(route)
            if rule is not None:
                return rule
    raise LookupError(f"{method} {path} declares no access rule")


class Front:
    """The ASGI app: ``POST /route`` served here, under the access rule its route declares;
    every other request to FastAPI (``api``) once its body is known to be within its limit."""

    def __init__(self, api: FastAPI, cfg: Config, coordinator: Coordinator) -> None:
        self.api = api
        self.state = api.state
        self.cfg = cfg
        self.coordinator = coordinator
        self.keys: Keys = api.state.keys
        self.route_rule = declared_rule(api, "POST", "/route")

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.api(scope, receive, send)
            return
        path = scope["path"]
        is_route = path == "/route" and scope["method"] == "POST"
        refused = None if is_route else self.refused_before_body(scope)
        if refused is not None:
            await error_response(refused.status, refused.message, refused.headers)(
                scope, receive, send)
            return
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

    def refused_before_body(self, scope: dict) -> RequestError | None:
        """The 401 of a request without a valid token (where one is wanted) to a path that
        neither an open route nor the status page (its own session) serves, as the route's
        rule would refuse it, but before its body is read or parsed; an unknown path is
        refused so too, so that no path tells a caller without a token whether it exists.
        A method the path does not take is left to its 405."""
        given = authorization(scope)
        if self.keys.cfg.token is None or self.keys.caller(given) is not None:
            return None
        # As Starlette routes: the first route the path and method match, else a 405 when
        # only the path matches; an unknown path is the operator's.
        matches = [(route.matches(scope)[0], route)
                   for route in iter_route_contexts(self.api.routes)]
        full = next((route for match, route in matches if match == Match.FULL), None)
        if full is None and any(match == Match.PARTIAL for match, _ in matches):
            return None
        rule: Access = OPERATOR.dependency
        if full is not None:
            declared = rule_of(full)
            if declared is None or declared.open(self.cfg):
                return None
            rule = declared
        try:
            rule.check(self.keys, given, scope["method"], scope["path"], {})
        except RequestError as refused:
            return refused
        return None

    async def route(self, scope: dict, receive: Any, send: Any) -> None:
        try:
            self.route_rule.check(self.keys, authorization(scope), "POST", "/route", {})
        except RequestError as refused:
            await error_response(refused.status, refused.message, refused.headers)(
                scope, receive, send)
            return
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
