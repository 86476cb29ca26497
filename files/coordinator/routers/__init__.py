"""The HTTP API, one ``APIRouter`` per resource: ``tasks``, ``workers``, ``stats`` (queues,
health, metrics) and ``docs`` (the OpenAPI schema and its pages); the status page is
``coordinator.ui``. Each route declares beside its path its access rule (``access``), its
answer model (the handler returns it) and the error statuses it can give (``errors``); the
work is in the service (``Service``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request
from fastapi.routing import APIRoute

from ..api_models import NO_NUL, errors
from ..service import Coordinator


async def _coordinator(request: Request) -> Coordinator:
    return request.app.state.coordinator


#: The Coordinator serving the request, as a handler's parameter.
Service = Annotated[Coordinator, Depends(_coordinator)]
#: The optional header that makes an action safe to repeat (audit.perform).
IdempotencyKey = Annotated[str | None, Header(
    alias="Idempotency-Key", max_length=200, pattern=NO_NUL,
    description="any unique string: a repeat with the same key gets the first answer and "
                "does nothing again")]
#: Who the audit record names for an action asked through the API (the operator's token).
API_ACTOR = "api"
#: The errors of an operator's action on a task or a worker (drain, retry, ...).
ACTION_ERRORS = errors(404, 409, 422, 503)


def _operation_id(route: APIRoute) -> str:
    # The handler's name: what the OpenAPI links (what a client calls next) refer to.
    return route.name


def router() -> APIRouter:
    """An ``APIRouter`` whose operations are named after their handlers."""
    return APIRouter(generate_unique_id_function=_operation_id)
