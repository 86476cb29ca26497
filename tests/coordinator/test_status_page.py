"""The status page over HTTP (the browser test in tests/browser drives it in Chromium): its
login, its session cookie, its protection against cross-site requests and its actions,
against real PostgreSQL and Redis with the coordinator in-process."""

from __future__ import annotations

import html
import re
import ssl
import uuid
from pathlib import Path

import httpx
import pytest

from coordinator.pages import STATIC, STATIC_PATH, STYLESHEET
from coordinator.ui import SESSION_SECONDS, Sessions, clean_name
from lab import throwaway

from .coordkit import Backends, ServerThread

TOKEN = "page-token"
OPERATING = Path(__file__).resolve().parents[2] / "docs" / "operating.md"


@pytest.fixture
def page_server(start_server) -> ServerThread:
    return start_server(COORDINATOR_TOKEN=TOKEN)


def browser(server: ServerThread) -> httpx.Client:
    """A client without the bearer token, as a browser is."""
    return httpx.Client(base_url=server.url, timeout=30, follow_redirects=False)


def log_in(client: httpx.Client, name: str = "alice") -> None:
    answer = client.post("/ui/login", data={"token": TOKEN, "name": name, "next": "/ui"})
    assert answer.status_code == 303 and answer.headers["location"] == "/ui"


def shown(answer: httpx.Response) -> str:
    """The page's text as a reader sees it (entities decoded)."""
    return html.unescape(answer.text)


def hidden(page: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert found, f"no hidden {name} in the page"
    return found.group(1)


def test_without_the_token_the_page_asks_for_it(page_server: ServerThread) -> None:
    with browser(page_server) as client:
        assert client.get("/").headers["location"] == "/ui"
        answer = client.get("/ui?status=failed")
        assert answer.status_code == 303
        assert answer.headers["location"] == "/ui/login?next=%2Fui%3Fstatus%3Dfailed"
        wrong = client.post("/ui/login", data={"token": "guess", "next": "/ui"})
        assert wrong.status_code == 401
        assert ("a wrong token: type the Coordinator's token (COORDINATOR_TOKEN; "
                "coordinator_token in the inventory's vault)") in shown(wrong)
        assert "coordinator_session" not in wrong.headers.get("set-cookie", "")
        # The bearer token alone is the API's, not a page session.
        bearer = client.get("/ui", headers={"Authorization": f"Bearer {TOKEN}"})
        assert bearer.status_code == 303
        refused = client.post("/ui/action", data={"action": "drain", "target": "w1"})
        assert refused.status_code == 401
        assert "you are not logged in (or the session ended)" in shown(refused)


def test_the_session_cookie_is_http_only_strict_and_pages_are_locked_down(
        page_server: ServerThread) -> None:
    with browser(page_server) as client:
        answer = client.post("/ui/login", data={"token": TOKEN, "name": "alice",
                                                "next": "https://evil.example/"})
        # A next that leaves the page is not followed.
        assert answer.headers["location"] == "/ui"
        cookie = answer.headers["set-cookie"]
        for part in ("coordinator_session=", "HttpOnly", "Path=/ui", "SameSite=strict",
                     f"Max-Age={SESSION_SECONDS}"):
            assert part in cookie
        assert "Secure" not in cookie  # plain HTTP: a Secure cookie would never come back
        page = client.get("/ui")
        assert page.status_code == 200
        assert page.headers["content-security-policy"] == documented_csp()
        assert page.headers["cache-control"] == "no-store"
        assert 'id="workers"' in page.text and 'id="tasks"' in page.text
        css = client.get(STYLESHEET)
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
        assert css.text == (STATIC / "style.css").read_text()
        assert css.headers["content-security-policy"] == documented_csp()
        assert css.headers["x-content-type-options"] == "nosniff"
        missing = client.get(f"{STATIC_PATH}/nothing.css")
        assert (missing.status_code, missing.json()) == (404, {
            "error": f"no such endpoint: GET {STATIC_PATH}/nothing.css; see /docs for the API"})


def documented_csp() -> str:
    """The Content-Security-Policy docs/operating.md quotes: the one line that starts with
    default-src, in backquotes."""
    quoted = re.findall(r"^`(default-src [^`]*)`$", OPERATING.read_text(), re.MULTILINE)
    assert len(quoted) == 1, quoted
    return quoted[0]


def test_over_https_the_session_cookie_is_secure(start_server, tmp_path) -> None:
    certificates = throwaway.make_certificates(tmp_path / "cluster")
    server = start_server(COORDINATOR_TOKEN=TOKEN, COORDINATOR_TLS_CERT=str(certificates.cert),
                          COORDINATOR_TLS_KEY=str(certificates.key))
    assert server.url.startswith("https://")
    with httpx.Client(base_url=server.url, timeout=30, follow_redirects=False,
                      verify=ssl.create_default_context(cafile=certificates.ca)) as client:
        answer = client.post("/ui/login", data={"token": TOKEN, "name": "alice", "next": "/ui"})
        assert answer.status_code == 303, answer.text
        assert "; Secure" in answer.headers["set-cookie"]
        assert client.get("/ui").status_code == 200  # the client sends it back over HTTPS


def test_an_action_needs_the_pages_csrf_token_and_same_site(
        page_server: ServerThread, backends: Backends, make_worker) -> None:
    make_worker(page_server, "w1", device="cpu", token=TOKEN).start()
    with browser(page_server) as client:
        log_in(client)
        confirm = client.get("/ui/confirm", params={"action": "drain", "target": "w1"})
        assert "Drain worker w1? It finishes the task it holds" in shown(confirm)
        form = {"action": "drain", "target": "w1", "csrf": hidden(confirm.text, "csrf"),
                "idempotency_key": hidden(confirm.text, "idempotency_key")}
        forged = client.post("/ui/action", data=form | {"csrf": "0" * 64})
        assert forged.status_code == 403
        assert "the form is stale or not from this page" in shown(forged)
        other_site = client.post("/ui/action", data=form,
                                 headers={"Origin": "http://evil.example"})
        assert other_site.status_code == 403
        assert "it came from http://evil.example, not from this Coordinator" in shown(other_site)
        fetched = client.post("/ui/action", data=form, headers={"Sec-Fetch-Site": "cross-site"})
        assert fetched.status_code == 403
        assert backends.sql("SELECT drain_requested_at FROM workers") == [(None,)]
        done = client.post("/ui/action", data=form,
                           headers={"Origin": page_server.url, "Sec-Fetch-Site": "same-origin"})
        assert done.status_code == 200 and "<h1>Done</h1>" in shown(done)
        assert "drained inference worker 'w1'" in shown(done)
        twice = client.post("/ui/action", data=form)
        assert "<h1>Done already</h1>" in shown(twice)
    assert backends.sql("SELECT actor, action, target, ok FROM audit") == [
        ("alice (status page)", "drain", "w1", True)]


def test_a_cancel_from_the_page_shows_on_the_task_page(
        page_server: ServerThread, backends: Backends) -> None:
    with page_server.client(TOKEN) as api:
        task_id = api.post("/route", json={"prompt": "p", "task_type": "generate"}).json()[
            "task_id"]
    with browser(page_server) as client:
        log_in(client, name="")
        listed = client.get("/ui", params={"status": "queued"})
        assert f'data-task-id="{task_id}"' in listed.text
        confirm = client.get("/ui/confirm", params={"action": "cancel", "target": task_id})
        done = client.post("/ui/action", data={
            "action": "cancel", "target": task_id, "csrf": hidden(confirm.text, "csrf"),
            "idempotency_key": hidden(confirm.text, "idempotency_key")})
        assert f"cancelled task {task_id}" in shown(done)
        task = client.get(f"/ui/task/{task_id}")
        assert 'data-event="cancelled"' in task.text
        assert "cancelled by status page while queued" in shown(task)
        assert client.get(f"/ui/task/{uuid.uuid4()}").status_code == 404
        bad = client.get("/ui", params={"status": "lost"})
        assert bad.status_code == 200
        assert ("filter ignored: status 'lost' is not one of queued, running, done, "
                "failed") in shown(bad)


def test_without_a_token_the_page_opens_with_a_session_of_its_own(start_server) -> None:
    server = start_server()
    with browser(server) as client:
        page = client.get("/ui")
        assert page.status_code == 200
        assert "coordinator_session=" in page.headers["set-cookie"]


def test_sessions_are_signed_expire_and_end_with_the_token() -> None:
    sessions = Sessions("a-token")
    cookie = sessions.issue("bob", now=1_000_000)
    assert sessions.name(cookie, now=1_000_010) == "bob"
    assert sessions.name(cookie, now=1_000_000 + SESSION_SECONDS + 1) is None
    issued, name, mac = cookie.split(".")
    assert sessions.name(f"{issued}.{name}.{'0' * len(mac)}", now=1_000_010) is None
    assert sessions.name(f"{int(issued) + 5}.{name}.{mac}", now=1_000_010) is None
    assert Sessions("another-token").name(cookie, now=1_000_010) is None
    assert sessions.csrf(cookie) != Sessions("another-token").csrf(cookie)
    assert clean_name(" eve\n\x00" + "x" * 100) == ("eve" + "x" * 100)[:60]


def test_non_ascii_cookies_and_forms_are_refused_not_errors(page_server: ServerThread) -> None:
    with browser(page_server) as client:
        odd = client.get("/ui", headers={"Cookie": "coordinator_session=1.2.é".encode()})
        assert odd.status_code == 303 and odd.headers["location"].startswith("/ui/login")
        log_in(client)
        for path in ("/ui/action", "/ui/logout"):
            answer = client.post(path, data={"action": "drain", "target": "w1", "csrf": "é"})
            assert answer.status_code == 403, (path, answer.text)
        wrong = client.post("/ui/login", data={"token": "é", "next": "/ui"})
        assert wrong.status_code == 401


def test_the_page_shows_the_same_after_a_coordinator_restart(start_server, backends: Backends,
                                                             make_worker) -> None:
    first = start_server(COORDINATOR_TOKEN=TOKEN)
    make_worker(first, "w1", device="cpu", token=TOKEN).start()
    with first.client(TOKEN) as api:
        task_id = api.post("/route", json={"prompt": "p", "task_type": "generate"}).json()[
            "task_id"]
        assert api.post("/workers/w1/drain").status_code == 200
    with browser(first) as client:
        log_in(client)
        before = client.get("/ui")
    first.stop()
    second = start_server(COORDINATOR_TOKEN=TOKEN)
    with browser(second) as client:
        log_in(client)
        after = client.get("/ui")
    for page in (before, after):
        assert f'data-task-id="{task_id}" data-status="queued"' in page.text
        assert 'data-worker-id="w1" data-state="draining"' in page.text


def test_the_counts_show_the_fallback_answers_of_the_last_hour_and_of_all_time(
        page_server: ServerThread, make_worker) -> None:
    """Three web searches done, two of them with a fallback answer, one of those two created
    two hours ago: the row of done web searches counts 2 and 3, of them fallbacks 1 and 2."""
    worker = make_worker(page_server, "web1", kind="web", token=TOKEN).start()
    with page_server.client(TOKEN) as api:
        for fallback, age in ((True, "0"), (True, "2 hours"), (False, "0")):
            task_id = api.post("/route", json={"prompt": "p", "task_type": "web_search"}
                               ).json()["task_id"]
            assert worker.take() == task_id
            assert worker.finish(task_id, worker.claim(task_id), "r", fallback=fallback)
            worker.conn.execute("UPDATE tasks SET created_at = created_at - %s::interval"
                                " WHERE id = %s", (age, task_id))
    with browser(page_server) as client:
        log_in(client)
        page = client.get("/ui").text
    row = re.search(r'<tr data-task-type="web_search" data-status="done">(.*?)</tr>', page)
    assert row, "no row of done web searches in the counts"
    cells = [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>",
                                                                row.group(1))]
    assert cells == ["web_search", "done", "2", "3", "1", "2"]
