"""Who may call each endpoint: the bearer tokens, and one rule (an ``Access``) per route.

A route names its rule beside its path, as a FastAPI dependency (``dependencies=[OPERATOR]``,
or ``caller: Annotated[Caller, WORKER]`` when the handler needs to know who called), and
nothing else decides: the OpenAPI schema's bearer scheme and its 401 and 403 answers are
derived from the rules (``documented_refusals``), and ``Front``'s fast path of POST /route
applies the rule that route declares. The status page (``ui``) has its own session instead.

The tokens (``docs/coordinator.md``): the operator's (``COORDINATOR_TOKEN``) may do anything;
the metrics token reads GET /metrics only; a worker's token (derived from
``COORDINATOR_WORKER_TOKEN_KEY`` and its id) serves its own registration, heartbeats and
goodbye only. Without ``COORDINATOR_TOKEN`` every request is the operator's.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from coordinator_contract import WORKER_TOKEN_PREFIX, token_worker
from fastapi import Depends, FastAPI, Request
from fastapi.routing import APIRoute, RouteContext, iter_route_contexts

from .config import Config
from .routing import RequestError

METRICS_PATH = "/metrics"
_BEARER = b"Bearer "

Kind = Literal["operator", "metrics", "worker", "anyone"]


@dataclass(frozen=True)
class Caller:
    """Whose token a request carries: the operator's, the metrics scrape's or a worker's
    (``worker``: its id); ``anyone`` on an open endpoint, where no token is looked at."""

    kind: Kind
    worker: str | None = None


_ANYONE = Caller("anyone")


def authorization(scope: Mapping[str, Any]) -> bytes:
    """The raw ``Authorization`` header of an ASGI request, or b"" (compared as bytes: a
    header's text may hold anything)."""
    for key, value in scope["headers"]:
        if key == b"authorization":
            return value
    return b""


class Keys:
    """The tokens of one Coordinator (its ``Config``), as the requests spell them."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.operator = _bearer(cfg.token)
        self.metrics = _bearer(cfg.metrics_token)

    def caller(self, given: bytes) -> Caller | None:
        """Whose token ``given`` (the Authorization header) is; None: missing or wrong."""
        if self.operator is None or hmac.compare_digest(given, self.operator):
            return Caller("operator")
        worker = self.worker_of(given)
        if worker is not None:
            return Caller("worker", worker)
        if self.metrics is not None and hmac.compare_digest(given, self.metrics):
            return Caller("metrics")
        return None

    def worker_of(self, given: bytes) -> str | None:
        """The worker id of a worker token (``Bearer worker.<id>.<mac>``), else None."""
        key = self.cfg.worker_token_key
        if key is None or not given.startswith(_BEARER + WORKER_TOKEN_PREFIX.encode()):
            return None
        return token_worker(key, given[len(_BEARER):].decode("utf-8", "replace"))

    def kinds(self) -> frozenset[Kind]:
        """The kinds of token besides the operator's that this Coordinator accepts anywhere."""
        return frozenset(kind for kind, present in (("metrics", self.metrics is not None),
                                                    ("worker", self.cfg.worker_token_key))
                         if present)


def _bearer(token: str | None) -> bytes | None:
    return None if token is None else _BEARER + token.encode()


@dataclass(frozen=True)
class Access:
    """The rule of a route, called by FastAPI as a dependency: the ``Caller``, or a 401
    (no token or a wrong one) or 403 (a token for other requests)."""

    name: str
    admits: frozenset[Kind] = frozenset()  # besides the operator
    #: A worker's token only for its own worker (the path's ``worker_id``; at registration,
    #: the body's, which the handler checks), so a worker's token can be refused here too.
    own_worker: bool = False
    #: Whether the endpoint is open to anyone (no token looked at) under this configuration.
    open: Callable[[Config], bool] = lambda cfg: False

    async def __call__(self, request: Request) -> Caller:
        keys: Keys = request.app.state.keys
        return self.check(keys, authorization(request.scope), request.method,
                          request.url.path, request.path_params)

    def check(self, keys: Keys, given: bytes, method: str, path: str,
              path_params: Mapping[str, Any]) -> Caller:
        if self.open(keys.cfg):
            return _ANYONE
        caller = keys.caller(given)
        if caller is None:
            why = "missing" if not given else "wrong"
            raise RequestError(
                401, f"{why} bearer token: send 'Authorization: Bearer <token>' with the token "
                     "the coordinator was given in COORDINATOR_TOKEN",
                {"WWW-Authenticate": "Bearer"})
        if caller.kind == "operator" or (
                caller.kind in self.admits
                and (not self.own_worker or path_params.get("worker_id", caller.worker)
                     == caller.worker)):
            return caller
        raise RequestError(403, _refusal(caller, method, path))

    def refusals(self, keys: Keys) -> tuple[int, ...]:
        """The statuses this rule can refuse with under ``keys``' configuration."""
        if keys.cfg.token is None or self.open(keys.cfg):
            return ()
        refused = any(kind not in self.admits or self.own_worker for kind in keys.kinds())
        return (401, 403) if refused else (401,)


def _refusal(caller: Caller, method: str, path: str) -> str:
    needs = f"{method} {path} needs the operator's token (COORDINATOR_TOKEN)"
    if caller.kind == "worker":
        return (f"the token of worker {caller.worker!r} may register, heartbeat and say "
                f"goodbye as {caller.worker!r} only: {needs}")
    return f"the metrics token reads GET {METRICS_PATH} only: {needs}"


#: The rules, each as the ``Depends`` a route declares (``rule_of`` finds the rule again).
OPERATOR = Depends(Access("operator"))
ANYONE = Depends(Access("anyone", open=lambda cfg: True))
METRICS = Depends(Access("metrics", frozenset({"metrics"}), open=lambda cfg: cfg.metrics_open))
#: A worker's own registration (the handler checks the body's worker_id), heartbeats, goodbye.
WORKER = Depends(Access("worker", frozenset({"worker"}), own_worker=True))


def api_routes(app: FastAPI) -> Iterator[RouteContext]:
    """The app's FastAPI routes (the routers' included ones too), as the app serves them."""
    for route in iter_route_contexts(app.routes):
        if isinstance(route.original_route, APIRoute):
            yield route


def rule_of(route: RouteContext) -> Access | None:
    """The rule a route declares (a dependency of its own), or None: none declared, or not
    an API route (the stylesheet's mount)."""
    dependant = getattr(route, "dependant", None)
    for dependency in dependant.dependencies if dependant is not None else ():
        if isinstance(dependency.call, Access):
            return dependency.call
    return None
