"""The status page's router (``status_page``): its session, its protection against
cross-site requests, and its actions. The HTML is ``pages`` (templates/, static/); the data
``overview``; the actions are the same service calls as the API's (``Tasks.retry``,
``Tasks.cancel``, ``Workers.drain``). Its routes are left out of the OpenAPI schema (they are
HTML), and each names beside its path what it needs of the session (``Viewer``, ``Actor``).

Authentication: the login form takes the Coordinator's bearer token once and sets a session
cookie (``HttpOnly``, ``SameSite=Strict``, ``Path=/ui``) holding its issue time and the
name typed for the audit record, signed with an HMAC keyed by the token: it lasts
``SESSION_SECONDS`` and every session ends when the token changes. Without a token (auth
off) a session is issued on the first visit, keyed by a secret of this process.

Cross-site requests: each state-changing POST must carry a CSRF token derived from the
session (a hidden field that another site cannot read), the cookie is not sent on cross-site
requests at all (``SameSite=Strict``), and a POST whose ``Origin`` or ``Sec-Fetch-Site``
says it came from another site is refused. Every action is first shown on a confirmation
page whose form carries a fresh idempotency key, so a double click has one effect.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
import uuid
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import parse_qs, quote, urlsplit

from coordinator_contract import TASK_TYPES
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.types import Scope

from . import pages
from . import statemachine as sm
from .config import Config
from .overview import SINCE, Overview, TaskFilter
from .pages import PREFIX
from .routers import Service

COOKIE = "coordinator_session"
SESSION_SECONDS = 12 * 3600
FORM_LIMIT = 16 * 1024
#: The headers of every page and of the stylesheet. The Content-Security-Policy is quoted in
#: docs/operating.md ("The status page"), which a test holds to the header sent.
HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; style-src 'self'; img-src 'self'; "
                                "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
#: action -> (what it acts on, the question the confirmation page asks)
ACTIONS = {
    "retry": ("task", "Retry failed task {target}? It is queued again as a new attempt."),
    "cancel": ("task", "Cancel queued task {target}? It fails, marked as cancelled."),
    "drain": ("worker", "Drain worker {target}? It finishes the task it holds and is sent "
                        "nothing new until it is undrained."),
    "undrain": ("worker", "Undrain worker {target}? It takes tasks again."),
}


def is_ui_path(path: str) -> bool:
    """Whether ``path`` is the status page's (where a login may send the browser on to)."""
    return path == "/" or path == PREFIX or path.startswith(PREFIX + "/")


def same(given: str, expected: str) -> bool:
    """A constant-time comparison of what a client sent (any text) with a secret."""
    return hmac.compare_digest(given.encode(), expected.encode())


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _unb64(text: str) -> str:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()


class Sessions:
    """Signed session cookies and the CSRF tokens derived from them."""

    def __init__(self, token: str | None) -> None:
        self.token = token
        self.key = (token or secrets.token_urlsafe(32)).encode()

    def _mac(self, purpose: str, value: str) -> str:
        return hmac.new(self.key, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()

    def issue(self, name: str, now: float | None = None) -> str:
        payload = f"{int(now if now is not None else time.time())}.{_b64(name)}"
        return f"{payload}.{self._mac('session', payload)}"

    def name(self, cookie: str | None, now: float | None = None) -> str | None:
        """The name in a valid, unexpired session cookie ("" if none was typed), else None."""
        if not cookie or cookie.count(".") != 2:
            return None
        issued, name, mac = cookie.split(".")
        if not same(mac, self._mac("session", f"{issued}.{name}")) or not issued.isdigit():
            return None
        age = (now if now is not None else time.time()) - int(issued)
        if not 0 <= age <= SESSION_SECONDS:
            return None
        return _unb64(name)

    def csrf(self, cookie: str) -> str:
        return self._mac("csrf", cookie)

    def token_ok(self, given: str) -> bool:
        return self.token is None or same(given, self.token)


def audit_actor(name: str) -> str:
    """Who the audit record names for an action from the status page."""
    return f"{name} (status page)" if name else "status page"


def clean_name(raw: str) -> str:
    """The typed name, printable and short (it goes into the audit record and the cookie)."""
    return "".join(c for c in raw if c.isprintable()).strip()[:60]


def cross_site(request: Request) -> str | None:
    """Why a POST looks cross-site, or None."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return f"the browser says it came from another site (Sec-Fetch-Site: {site})"
    origin = request.headers.get("origin")
    if origin is not None and origin != "null":
        host = request.headers.get("host", "")
        if urlsplit(origin).netloc != host:
            return f"it came from {origin}, not from this Coordinator"
    elif origin == "null":
        return "it came from an opaque origin"
    return None


def html(text: str, status: int = 200) -> Response:
    return Response(text, status_code=status, media_type="text/html; charset=utf-8",
                    headers=HEADERS)


# -- what each route needs of the session --------------------------------------------------------


@dataclass(frozen=True)
class Session:
    name: str  # typed at the login, for the audit record ("" if none)
    cookie: str

    def form(self, sessions: Sessions) -> pages.Form:
        """What an action form of this session carries: its CSRF token, a new idempotency key."""
        return pages.Form(sessions.csrf(self.cookie), str(uuid.uuid4()))


class LoginNeeded(Exception):
    """A page needs a session the request does not have: the answer is the login page."""


class Refused(Exception):
    """A request the status page does not do: the answer is a page saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _sessions(request: Request) -> Sessions:
    return request.app.state.sessions


async def session_of(request: Request) -> Session | None:
    """The request's session; without a token, a new one when it has none."""
    sessions = _sessions(request)
    cookie = request.cookies.get(COOKIE)
    name = sessions.name(cookie)
    if name is not None and cookie is not None:
        return Session(name, cookie)
    if sessions.token is None:
        return Session("", sessions.issue(""))
    return None


async def viewer(session: Annotated[Session | None, Depends(session_of)]) -> Session:
    """A page's reader: logged in, else sent to the login page."""
    if session is None:
        raise LoginNeeded
    return session


async def posted(request: Request) -> dict[str, str]:
    """The request's form fields (the first of each; none for a body over FORM_LIMIT)."""
    body = await request.body()
    if len(body) > FORM_LIMIT:
        return {}
    return {key: values[0] for key, values in parse_qs(body.decode("utf-8", "replace"),
                                                         max_num_fields=20).items()}


Posted = Annotated[dict[str, str], Depends(posted)]


async def actor(request: Request, session: Annotated[Session | None, Depends(session_of)],
          form: Posted) -> Session:
    """Who asks for an action: logged in, from this site, with the form of its session."""
    if session is None:
        raise Refused(401, "not done: you are not logged in (or the session ended); log in "
                           f"at {PREFIX}/login with the Coordinator's token")
    why = cross_site(request)
    if why is not None:
        raise Refused(403, f"not done: {why}")
    if not same(form.get("csrf", ""), _sessions(request).csrf(session.cookie)):
        raise Refused(403, "not done: the form is stale or not from this page; reload the "
                           "page and try again")
    return session


Viewer = Annotated[Session, Depends(viewer)]
Actor = Annotated[Session, Depends(actor)]


def with_session(response: Response, request: Request, session: Session | None = None
                 ) -> Response:
    """``response`` setting the session cookie: the one just issued at a login, or, without
    a token, the page's own session (kept alive by every page). HttpOnly, SameSite strict,
    and Secure when the page is served over HTTPS, so a browser never sends it in clear to a
    plain http:// address of the same host."""
    if session is not None:
        response.set_cookie(COOKIE, session.cookie, max_age=SESSION_SECONDS, path=PREFIX,
                            httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")
    return response


def page_session(request: Request, session: Session) -> Session | None:
    """The session a page sets again: only the one a Coordinator without a token issues."""
    return session if _sessions(request).token is None else None


async def _to_login(request: Request, exc: Exception) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"{PREFIX}/login?next={quote(target, safe='')}", 303,
                            headers=HEADERS)


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Refused)
    return html(pages.result_page("Not done", exc.message, False, PREFIX), exc.status)


#: The app's handlers of what the dependencies above raise.
EXCEPTION_HANDLERS: dict[Any, Any] = {LoginNeeded: _to_login, Refused: _refused}


class Static(StaticFiles):
    """static/ (the stylesheet), with the pages' headers; a browser may keep it 5 minutes."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update({**HEADERS, "Cache-Control": "max-age=300"})
        return response


def install(app: FastAPI, cfg: Config) -> None:
    """The status page on ``app``: its routes, its stylesheet and its sessions."""
    app.state.sessions = Sessions(cfg.token)
    app.include_router(status_page)
    app.mount(pages.STATIC_PATH, Static(directory=pages.STATIC), name="static")


# -- the pages -----------------------------------------------------------------------------------

status_page = APIRouter(include_in_schema=False)


@status_page.get("/")
async def root() -> Response:
    return RedirectResponse(PREFIX, 303)


@status_page.get(f"{PREFIX}/login")
async def login_form(next: str = PREFIX) -> Response:
    return html(pages.login_page(None, next))


@status_page.post(f"{PREFIX}/login")
async def login(request: Request, form: Posted) -> Response:
    target = form.get("next") or PREFIX
    if not is_ui_path(target.split("?")[0]) or target.startswith("//"):
        target = PREFIX
    why = cross_site(request)
    if why is not None:
        return html(pages.login_page(f"login refused: {why}", target), 403)
    sessions = _sessions(request)
    if not sessions.token_ok(form.get("token", "")):
        given = "no token" if not form.get("token") else "a wrong token"
        return html(pages.login_page(
            f"{given}: type the Coordinator's token (COORDINATOR_TOKEN; "
            "coordinator_token in the inventory's vault)", target), 401)
    name = clean_name(form.get("name", ""))
    return with_session(RedirectResponse(target, 303, headers=HEADERS), request,
                        Session(name, sessions.issue(name)))


@status_page.post(f"{PREFIX}/logout")
async def logout(request: Request, session: Annotated[Session | None, Depends(session_of)],
                 form: Posted) -> Response:
    if session is None or not same(form.get("csrf", ""), _sessions(request).csrf(session.cookie)):
        raise Refused(403, "not logged out: the form is stale; reload the page")
    response = RedirectResponse(f"{PREFIX}/login", 303, headers=HEADERS)
    response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")
    return response


@status_page.get(PREFIX)
async def overview_page(request: Request, session: Viewer, coordinator: Service,
                        status: str | None = None, task_type: str | None = None,
                        worker: str | None = None, since: str | None = None) -> Response:
    where, problems = TaskFilter(status or None, task_type or None, worker or None,
                                 since).checked()
    parts = Overview(coordinator.pool, coordinator.stats, coordinator.workers)
    view = await parts.cluster()
    view["tasks"], view["more"] = await parts.tasks(where)
    choices = {"status": list(sm.STATUSES), "task_type": list(TASK_TYPES),
               "worker": [w["worker_id"] for w in view["workers"]],
               "since": [(value, label) for value, label, _ in SINCE]}
    notice = ("filter ignored: " + "; ".join(problems)) if problems else None
    page = pages.overview_page(view, where.as_dict(), choices, session.form(_sessions(request)),
                               notice)
    return with_session(html(page), request, page_session(request, session))


@status_page.get(PREFIX + "/task/{task_id}")
async def task_page(session: Viewer, coordinator: Service, task_id: str) -> Response:
    try:
        tid = uuid.UUID(task_id)
    except ValueError:
        raise Refused(404, f"{task_id[:60]!r} is not a task id") from None
    found = await Overview(coordinator.pool, coordinator.stats, coordinator.workers).task(tid)
    if found is None:
        raise Refused(404, f"no task {tid}")
    return html(pages.task_page(found.task, found.prompt, found.timeline, found.audit))


@status_page.get(f"{PREFIX}/confirm")
async def confirm(request: Request, session: Viewer, action: str = "",
                  target: str = "") -> Response:
    if action not in ACTIONS or not target:
        raise Refused(400, f"unknown action {action[:40]!r}: use one of "
                           f"{', '.join(ACTIONS)} from the overview")
    kind, question = ACTIONS[action]
    back = f"{PREFIX}/task/{quote(target, safe='')}" if kind == "task" else PREFIX
    page = pages.confirm_page(action, target, question.format(target=target),
                              session.form(_sessions(request)), back)
    return with_session(html(page), request, page_session(request, session))


@status_page.post(f"{PREFIX}/action")
async def action(session: Actor, coordinator: Service, form: Posted) -> Response:
    name, target = form.get("action", ""), form.get("target", "")
    key = form.get("idempotency_key") or None
    if name not in ACTIONS:
        raise Refused(400, f"unknown action {name[:40]!r}")
    who = audit_actor(session.name)
    if ACTIONS[name][0] == "worker":
        answer = await coordinator.workers.drain(target, name == "drain", who, key)
        back = PREFIX
    else:
        try:
            tid = uuid.UUID(target)
        except ValueError:
            raise Refused(404, f"{target[:60]!r} is not a task id") from None
        act = coordinator.tasks.retry if name == "retry" else coordinator.tasks.cancel
        answer = await act(tid, who, key)
        back = f"{PREFIX}/task/{tid}"
    if answer is None:
        raise Refused(404, f"not done: no {ACTIONS[name][0]} {target[:100]!r}")
    title = ("Done already" if answer["repeated"] else "Done" if answer["changed"]
             else "Nothing to do")
    return html(pages.result_page(title, answer["message"], answer["changed"], back))
