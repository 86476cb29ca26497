"""Workers: a worker's registration, heartbeats and goodbye (its own token may make them),
an operator's drain and undrain, and GET /workers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

from ..access import OPERATOR, WORKER, Caller
from ..api_models import (
    DeregisterAnswer,
    DeregisterBody,
    DrainAnswer,
    HeartbeatAnswer,
    HeartbeatBody,
    Name,
    RegisterAnswer,
    RegisterBody,
    WorkersAnswer,
    errors,
)
from ..routing import RequestError
from . import ACTION_ERRORS, API_ACTOR, IdempotencyKey, Service, router

WorkerId = Annotated[Name, Path()]
#: The errors of a worker's own calls: those of a body, and 404 for an unknown worker.
BODY_ERRORS = (400, 413, 422, 503)

workers = router()


def _same_worker(*names: str) -> dict[str, dict[str, object]]:
    """The links from a registration to this worker's other calls (OpenAPI: what a client,
    or schemathesis' stateful phase, calls next)."""
    heartbeat_body = {"requestBody": {"instance_id": "$request.body#/instance_id"}}
    return {name.capitalize(): {
        "operationId": name, "parameters": {"worker_id": "$request.body#/worker_id"},
        **(heartbeat_body if name in ("heartbeat", "deregister") else {})} for name in names}


@workers.post("/workers/register",
              responses={**errors(*BODY_ERRORS), 200: {"links": _same_worker(
                  "heartbeat", "deregister", "drain", "undrain")}},
              summary="A worker announces itself")
async def register(caller: Annotated[Caller, WORKER], coordinator: Service,
                   body: RegisterBody) -> RegisterAnswer:
    if caller.kind == "worker" and body.worker_id != caller.worker:
        raise RequestError(403, f"the token of worker {caller.worker!r} cannot register worker "
                                f"{body.worker_id!r}: each worker registers with its own")
    return RegisterAnswer.model_validate(
        await coordinator.workers.register(body.model_dump(mode="json")))


@workers.post("/workers/{worker_id}/heartbeat", dependencies=[WORKER],
              responses=errors(*BODY_ERRORS, 404), summary="A worker says it is alive")
async def heartbeat(coordinator: Service, worker_id: WorkerId,
                    body: HeartbeatBody) -> HeartbeatAnswer:
    answer = await coordinator.workers.heartbeat(worker_id, body.model_dump(mode="json"))
    if answer is None:
        raise RequestError(404, f"unknown worker {worker_id!r}: register it again with "
                                "POST /workers/register")
    return HeartbeatAnswer.model_validate(answer)


@workers.post("/workers/{worker_id}/deregister", dependencies=[WORKER],
              responses=errors(*BODY_ERRORS, 404), summary="A worker process says goodbye")
async def deregister(coordinator: Service, worker_id: WorkerId,
                     body: DeregisterBody) -> DeregisterAnswer:
    answer = await coordinator.workers.deregister(worker_id, str(body.instance_id))
    if answer is None:
        raise RequestError(404, f"unknown worker {worker_id!r}: nothing to deregister")
    return DeregisterAnswer.model_validate(answer)


async def set_drained(coordinator: Service, worker_id: str, drained: bool,
                      key: str | None) -> DrainAnswer:
    answer = await coordinator.workers.drain(worker_id, drained, API_ACTOR, key)
    if answer is None:
        raise RequestError(404, f"unknown worker {worker_id!r}: GET /workers lists the workers")
    return DrainAnswer.model_validate(answer)


@workers.post("/workers/{worker_id}/drain", dependencies=[OPERATOR], responses=ACTION_ERRORS,
              summary="Drain a worker: it finishes what it holds and is sent nothing new")
async def drain(coordinator: Service, worker_id: WorkerId,
                key: IdempotencyKey = None) -> DrainAnswer:
    return await set_drained(coordinator, worker_id, True, key)


@workers.post("/workers/{worker_id}/undrain", dependencies=[OPERATOR], responses=ACTION_ERRORS,
              summary="Undrain a worker: it takes tasks again")
async def undrain(coordinator: Service, worker_id: WorkerId,
                  key: IdempotencyKey = None) -> DrainAnswer:
    return await set_drained(coordinator, worker_id, False, key)


@workers.get("/workers", dependencies=[OPERATOR], responses=errors(503),
             summary="Every registered worker, alive or not")
async def list_workers(coordinator: Service) -> WorkersAnswer:
    return WorkersAnswer.model_validate({"workers": await coordinator.workers.list(),
                                         "heartbeat_ttl": coordinator.cfg.heartbeat_ttl})
