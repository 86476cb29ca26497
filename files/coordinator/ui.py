"""The status page's handlers: its session, its protection against cross-site requests, and
its actions. The HTML is ``pages``; the data ``overview``; the actions are the same service
calls as the API's (``Tasks.retry``, ``Tasks.cancel``, ``Workers.drain``).

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
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, urlsplit

from coordinator_contract import TASK_TYPES
from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from . import pages
from . import statemachine as sm
from .overview import SINCE, Overview, TaskFilter

if TYPE_CHECKING:
    from .config import Config
    from .service import Coordinator

PREFIX = "/ui"
COOKIE = "coordinator_session"
SESSION_SECONDS = 12 * 3600
FORM_LIMIT = 16 * 1024
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
    """Paths the UI guards itself (with its session), not with the bearer token."""
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


def actor(name: str) -> str:
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


async def read_form(request: Request) -> dict[str, str]:
    body = await request.body()
    if len(body) > FORM_LIMIT:
        return {}
    return {key: values[0] for key, values in parse_qs(body.decode("utf-8", "replace"),
                                                         max_num_fields=20).items()}


def html(text: str, status: int = 200) -> Response:
    return Response(text, status_code=status, media_type="text/html; charset=utf-8",
                    headers=HEADERS)


def with_session(response: Response, cookie: str | None, request: Request) -> Response:
    """``response`` setting the session cookie (when there is one): HttpOnly, SameSite
    strict, and Secure when the page is served over HTTPS, so a browser never sends it in
    clear to a plain http:// address of the same host."""
    if cookie is not None:
        response.set_cookie(COOKIE, cookie, max_age=SESSION_SECONDS, path=PREFIX,
                            httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")
    return response


def add_status_pages(app: FastAPI, cfg: Config, coordinator: Coordinator) -> None:
    """The status page's routes (left out of the OpenAPI schema: they are HTML)."""
    sessions = Sessions(cfg.token)

    def overview() -> Overview:
        return Overview(coordinator.pool, coordinator.stats, coordinator.workers)

    def session_of(request: Request) -> tuple[str, str] | None:
        """(name, cookie) of the request's session; without a token, a new one."""
        cookie = request.cookies.get(COOKIE)
        name = sessions.name(cookie)
        if name is not None and cookie is not None:
            return name, cookie
        if cfg.token is None:
            return "", sessions.issue("")
        return None

    def to_login(request: Request) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"{PREFIX}/login?next={quote(target, safe='')}", 303,
                                headers=HEADERS)

    def refused(status: int, message: str) -> Response:
        return html(pages.result_page("Not done", message, False, PREFIX), status)

    def get(path: str) -> Any:
        return app.get(path, include_in_schema=False)

    def post(path: str) -> Any:
        return app.post(path, include_in_schema=False)

    @get("/")
    async def root() -> Response:
        return RedirectResponse(PREFIX, 303)

    @get(f"{PREFIX}/style.css")
    async def style() -> Response:
        return Response(pages.STYLE, media_type="text/css; charset=utf-8",
                        headers={**HEADERS, "Cache-Control": "max-age=300"})

    @get(f"{PREFIX}/login")
    async def login_form(next: str = PREFIX) -> Response:
        return html(pages.login_page(None, next))

    @post(f"{PREFIX}/login")
    async def login(request: Request) -> Response:
        form = await read_form(request)
        target = form.get("next") or PREFIX
        if not is_ui_path(target.split("?")[0]) or target.startswith("//"):
            target = PREFIX
        why = cross_site(request)
        if why is not None:
            return html(pages.login_page(f"login refused: {why}", target), 403)
        if not sessions.token_ok(form.get("token", "")):
            given = "no token" if not form.get("token") else "a wrong token"
            return html(pages.login_page(
                f"{given}: type the Coordinator's token (COORDINATOR_TOKEN; "
                "coordinator_token in the inventory's vault)", target), 401)
        return with_session(RedirectResponse(target, 303, headers=HEADERS),
                            sessions.issue(clean_name(form.get("name", ""))), request)

    @post(f"{PREFIX}/logout")
    async def logout(request: Request) -> Response:
        session = session_of(request)
        form = await read_form(request)
        if session is not None and same(form.get("csrf", ""), sessions.csrf(session[1])):
            response = RedirectResponse(f"{PREFIX}/login", 303, headers=HEADERS)
            response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")
            return response
        return refused(403, "not logged out: the form is stale; reload the page")

    @get(PREFIX)
    async def overview_page(request: Request, status: str | None = None,
                            task_type: str | None = None, worker: str | None = None,
                            since: str | None = None) -> Response:
        session = session_of(request)
        if session is None:
            return to_login(request)
        where, problems = TaskFilter(status or None, task_type or None, worker or None,
                                     since).checked()
        parts = overview()
        view = await parts.cluster()
        view["tasks"], view["more"] = await parts.tasks(where)
        choices = {"status": list(sm.STATUSES), "task_type": list(TASK_TYPES),
                   "worker": [w["worker_id"] for w in view["workers"]],
                   "since": [(value, label) for value, label, _ in SINCE]}
        notice = ("filter ignored: " + "; ".join(problems)) if problems else None
        form = pages.Form(sessions.csrf(session[1]), str(uuid.uuid4()))
        cookie = session[1] if cfg.token is None else None
        return with_session(html(pages.overview_page(view, where.as_dict(), choices, form,
                                                     notice)), cookie, request)

    @get(PREFIX + "/task/{task_id}")
    async def task_page(request: Request, task_id: str) -> Response:
        if session_of(request) is None:
            return to_login(request)
        try:
            tid = uuid.UUID(task_id)
        except ValueError:
            return refused(404, f"{task_id[:60]!r} is not a task id")
        found = await overview().task(tid)
        if found is None:
            return refused(404, f"no task {tid}")
        return html(pages.task_page(*found))

    @get(f"{PREFIX}/confirm")
    async def confirm(request: Request, action: str = "", target: str = "") -> Response:
        session = session_of(request)
        if session is None:
            return to_login(request)
        if action not in ACTIONS or not target:
            return refused(400, f"unknown action {action[:40]!r}: use one of "
                                f"{', '.join(ACTIONS)} from the overview")
        kind, question = ACTIONS[action]
        back = f"{PREFIX}/task/{quote(target, safe='')}" if kind == "task" else PREFIX
        form = pages.Form(sessions.csrf(session[1]), str(uuid.uuid4()))
        return with_session(html(pages.confirm_page(action, target,
                                                    question.format(target=target), form, back)),
                            session[1] if cfg.token is None else None, request)

    @post(f"{PREFIX}/action")
    async def action(request: Request) -> Response:
        session = session_of(request)
        if session is None:
            return refused(401, "not done: you are not logged in (or the session ended); "
                                f"log in at {PREFIX}/login with the Coordinator's token")
        why = cross_site(request)
        if why is not None:
            return refused(403, f"not done: {why}")
        form = await read_form(request)
        if not same(form.get("csrf", ""), sessions.csrf(session[1])):
            return refused(403, "not done: the form is stale or not from this page; reload "
                                "the page and try again")
        name, target = form.get("action", ""), form.get("target", "")
        key = form.get("idempotency_key") or None
        if name not in ACTIONS:
            return refused(400, f"unknown action {name[:40]!r}")
        who = actor(session[0])
        if ACTIONS[name][0] == "worker":
            answer = await coordinator.workers.drain(target, name == "drain", who, key)
            back = PREFIX
        else:
            try:
                tid = uuid.UUID(target)
            except ValueError:
                return refused(404, f"{target[:60]!r} is not a task id")
            act = coordinator.tasks.retry if name == "retry" else coordinator.tasks.cancel
            answer = await act(tid, who, key)
            back = f"{PREFIX}/task/{tid}"
        if answer is None:
            return refused(404, f"not done: no {ACTIONS[name][0]} {target[:100]!r}")
        title = ("Done already" if answer["repeated"] else "Done" if answer["changed"]
                 else "Nothing to do")
        return html(pages.result_page(title, answer["message"], answer["changed"], back))
