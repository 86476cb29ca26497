"""The API's description: GET /openapi.json (``app.openapi_schema``) and its pages, /docs
(Swagger UI) and /redoc, for the operator's token like the API they describe."""

from __future__ import annotations

from fastapi import Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from ..access import OPERATOR
from . import router

OPENAPI_PATH = "/openapi.json"

docs = router()


@docs.get(OPENAPI_PATH, dependencies=[OPERATOR], include_in_schema=False)
async def openapi(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@docs.get("/docs", dependencies=[OPERATOR], include_in_schema=False)
async def swagger_ui(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(openapi_url=OPENAPI_PATH, title=f"{request.app.title} - Swagger UI",
                               oauth2_redirect_url=None)


@docs.get("/redoc", dependencies=[OPERATOR], include_in_schema=False)
async def redoc(request: Request) -> HTMLResponse:
    return get_redoc_html(openapi_url=OPENAPI_PATH, title=f"{request.app.title} - ReDoc")
