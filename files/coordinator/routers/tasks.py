"""Tasks: POST /route, GET /task/{task_id} (long-poll), GET /tasks, and an operator's retry
and cancel."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from coordinator_contract import TASK_TYPES
from fastapi import Path, Query, Request
from fastapi.responses import Response

from .. import statemachine as sm
from ..access import OPERATOR
from ..api_models import (
    Name,
    RouteAnswer,
    RouteBody,
    Task,
    TaskActionAnswer,
    TasksAnswer,
    errors,
    inline_schema,
)
from ..front import answer_route, json_response
from ..overview import SINCE_VALUES, Overview, TaskFilter
from ..routing import RequestError
from . import ACTION_ERRORS, API_ACTOR, IdempotencyKey, Service, router

MAX_WAIT = 60.0
TaskId = Annotated[str, Path(json_schema_extra={"format": "uuid"},
                             description="the task_id POST /route returned")]

tasks = router()


def parse_task_id(task_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(task_id)
    except ValueError:
        raise RequestError(422, f"task id {task_id[:60]!r} is not a UUID: use the task_id "
                                "that POST /route returned") from None


def no_task(task_id: uuid.UUID) -> RequestError:
    return RequestError(404, f"no task {task_id}: check the id POST /route returned")


@tasks.post(
    "/route", dependencies=[OPERATOR], status_code=201,
    responses={**errors(400, 404, 409, 413, 422, 503),
               201: {"links": {name: {"operationId": operation,
                                      "parameters": {"task_id": "$response.body#/task_id"}}
                               for name, operation in (("GetTask", "get_task"),
                                                       ("CancelTask", "cancel_task"),
                                                       ("RetryTask", "retry_task"))}}},
    summary="Accept a task: saved in PostgreSQL, then its id pushed to its Redis queue",
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
        "schema": inline_schema(RouteBody)}}}},
    response_model=RouteAnswer,
)
async def route(request: Request, coordinator: Service) -> Response:
    # Front serves it first, with the same answer_route and this route's access rule; this
    # declaration documents it (the body is validated by routing, to RouteBody's rules).
    answered = await answer_route(coordinator, request.scope, request.receive)
    status, body = answered or (400, {"error": "the request body did not arrive"})
    return json_response(body, status)


@tasks.get("/task/{task_id}", dependencies=[OPERATOR], responses=errors(404, 422, 503),
           summary="A task's state and result; ?wait=N long-polls")
async def get_task(
    coordinator: Service, task_id: TaskId,
    wait: Annotated[float | None, Query(
        json_schema_extra={"minimum": 0, "maximum": MAX_WAIT},
        description="seconds (0 to 60) to wait for the task to be done or failed")] = None,
) -> Task:
    tid = parse_task_id(task_id)
    seconds = 0.0 if wait is None else wait
    if not 0 <= seconds <= MAX_WAIT:
        raise RequestError(422, f"wait={wait} is out of range: use 0 to {MAX_WAIT:g} seconds")
    task = await coordinator.tasks.get(tid, seconds)
    if task is None:
        raise no_task(tid)
    return task


@tasks.get("/tasks", dependencies=[OPERATOR], responses=errors(422, 503),
           summary="The newest tasks, filtered by status, type, worker and age")
async def list_tasks(
    coordinator: Service,
    status: Annotated[Literal[sm.STATUSES] | None, Query()] = None,  # type: ignore[valid-type]
    task_type: Annotated[Literal[TASK_TYPES] | None, Query()] = None,  # type: ignore[valid-type]
    worker: Annotated[Name | None, Query(description="claimed by or queued for it")] = None,
    since: Annotated[Literal[SINCE_VALUES] | None, Query(  # type: ignore[valid-type]
        description="created in the last hour, day or week")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> TasksAnswer:
    where = TaskFilter(status, task_type, worker, since)
    found, more = await Overview(coordinator.pool, coordinator.stats,
                                 coordinator.workers).tasks(where, limit)
    return TasksAnswer(tasks=found, more=more)


async def act(action: Callable[..., Awaitable[dict[str, Any] | None]], task_id: str,
              key: str | None) -> TaskActionAnswer:
    """``action`` (coordinator.tasks.retry or .cancel) on the task; 404 when there is none."""
    tid = parse_task_id(task_id)
    answer = await action(tid, API_ACTOR, key)
    if answer is None:
        raise no_task(tid)
    return TaskActionAnswer.model_validate(answer)


@tasks.post("/task/{task_id}/retry", dependencies=[OPERATOR], responses=ACTION_ERRORS,
            summary="Queue a failed task again, as a new attempt")
async def retry_task(coordinator: Service, task_id: TaskId,
                     key: IdempotencyKey = None) -> TaskActionAnswer:
    return await act(coordinator.tasks.retry, task_id, key)


@tasks.post("/task/{task_id}/cancel", dependencies=[OPERATOR], responses=ACTION_ERRORS,
            summary="Cancel a queued task (it fails, saying so)")
async def cancel_task(coordinator: Service, task_id: TaskId,
                      key: IdempotencyKey = None) -> TaskActionAnswer:
    return await act(coordinator.tasks.cancel, task_id, key)
