"""What the Coordinator and its backends look like now: GET /queues, /health and /metrics."""

from __future__ import annotations

from fastapi.responses import PlainTextResponse, Response

from ..access import ANYONE, METRICS, METRICS_PATH, OPERATOR
from ..api_models import HealthAnswer, QueuesAnswer, errors
from ..metrics import CONTENT_TYPE
from . import Service, router

stats = router()


@stats.get("/queues", dependencies=[OPERATOR], responses=errors(503),
           summary="Every queue's depth (LLEN) and in-flight (running) count")
async def queues(coordinator: Service) -> QueuesAnswer:
    return QueuesAnswer.model_validate(await coordinator.stats.queues())


@stats.get("/health", dependencies=[ANYONE], responses=errors(503, body=HealthAnswer),
           summary="200 when PostgreSQL and Redis both answer, else 503")
async def health(coordinator: Service, response: Response) -> HealthAnswer:
    ok, body = await coordinator.stats.health()
    if not ok:
        response.status_code = 503
    return HealthAnswer.model_validate(body)


@stats.get(METRICS_PATH, dependencies=[METRICS], response_class=PlainTextResponse,
           summary="Prometheus metrics (text format)")
async def metrics(coordinator: Service) -> Response:
    return Response(await coordinator.stats.render_metrics(), media_type=CONTENT_TYPE)
