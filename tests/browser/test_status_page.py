"""The Coordinator's status page in a real browser: log in, watch tasks and workers, filter,
retry a failed task and drain a worker from the page, and the page at a phone's size.

One Coordinator (with a token) serves the module, in-process, on a database of its own and
the Redis the Coordinator tests use (``coord_redis``); each test starts from empty tables and
queues. Workers are the fake ones
of tests/coordinator (plain SQL and Redis). The page has no JavaScript: the tests reload it
as a person would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from urllib.parse import parse_qs, urlsplit

import httpx
import psycopg
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

from lab.throwaway import ThrowawayPostgres, ThrowawayRedis, free_port, wait_until

from ..coordinator.coordkit import Backends, FakeWorker, ServerThread
from .conftest import phone, wait_for_text

DB = "browser_tests"
TOKEN = "browser-test-token"
USER = "alice"
ACTOR = f"{USER} (status page)"
EMPTIED = ("audit", "task_transitions", "tasks", "worker_instances", "workers")


# -- the Coordinator and its backends ----------------------------------------------------------


@pytest.fixture(scope="module")
def backends_module(pg: ThrowawayPostgres, coord_redis: ThrowawayRedis) -> Backends:
    return Backends.create(pg, coord_redis, DB)


@pytest.fixture(scope="module")
def server(backends_module: Backends) -> Iterator[ServerThread]:
    coordinator = ServerThread(backends_module.config(free_port(), COORDINATOR_TOKEN=TOKEN))
    coordinator.start()
    try:
        yield coordinator
    finally:
        coordinator.stop()


@pytest.fixture
def backends(backends_module: Backends, server: ServerThread) -> Backends:
    """The module's backends, emptied for this test (the Coordinator keeps running).

    DELETE, not TRUNCATE: TRUNCATE's exclusive locks, taken table by table, can deadlock with
    a pass of the running Coordinator's Reaper."""
    for attempt in range(5):
        try:
            with backends_module.db() as conn, conn.transaction():
                for table in EMPTIED:
                    conn.execute(f"DELETE FROM {table}")
            break
        except psycopg.errors.DeadlockDetected:
            if attempt == 4:
                raise
    with backends_module.redis() as r:
        r.flushall()
    return backends_module


@pytest.fixture
def api(server: ServerThread) -> Iterator[httpx.Client]:
    """The JSON API, with the bearer token."""
    with server.client(TOKEN) as client:
        yield client


@pytest.fixture
def make_worker(backends: Backends, server: ServerThread
                ) -> Iterator[Callable[..., FakeWorker]]:
    """make_worker("web1", kind="web") → a registered fake worker, heartbeating."""
    workers: list[FakeWorker] = []

    def make(worker_id: str, **kwargs: object) -> FakeWorker:
        worker = FakeWorker(backends, server.url, worker_id, token=TOKEN, **kwargs)
        workers.append(worker)
        return worker.start()

    yield make
    for worker in workers:
        worker.close()


# -- the browser side --------------------------------------------------------------------------


def on_login_form(browser: webdriver.Chrome) -> bool:
    return (urlsplit(browser.current_url).path == "/ui/login"
            and bool(browser.find_elements(By.CSS_SELECTOR, "form#login")))


def log_in(browser: webdriver.Chrome, token: str, name: str = USER) -> None:
    """Type the token (and the name) into the login form on screen and submit it."""
    browser.find_element(By.CSS_SELECTOR, "form#login input[name=token]").send_keys(token)
    if name:
        browser.find_element(By.CSS_SELECTOR, "form#login input[name=name]").send_keys(name)
    browser.find_element(By.ID, "login-submit").click()


@pytest.fixture
def ui(browser: webdriver.Chrome, server: ServerThread, backends: Backends
       ) -> webdriver.Chrome:
    """The browser on the overview, logged in as alice (logging in only when it is not)."""
    browser.get(server.url + "/ui")
    if on_login_form(browser):
        log_in(browser, TOKEN)
        wait_for(browser, "#tasks")
    assert urlsplit(browser.current_url).path == "/ui", browser.current_url
    assert browser.find_elements(By.ID, "tasks")
    return browser


def reload_until(browser: webdriver.Chrome, found: Callable[[], object], what: str,
                 timeout: float = 10.0, interval: float = 0.2) -> object:
    """Reload the page (as a person presses F5) until ``found()`` is truthy; its value."""
    def reloaded() -> object:
        value = found()
        if not value:
            browser.refresh()
        return value

    try:
        return wait_until(reloaded, timeout, what, interval)
    except TimeoutError:
        raise AssertionError(f"{what}: not on the page after {timeout} s of reloads "
                             f"({browser.current_url})") from None


def wait_for(browser: webdriver.Chrome, selector: str, timeout: float = 10.0) -> WebElement:
    """The first element matching the CSS selector, once the page on screen has one (a click
    on a submit button returns before the next page is there)."""
    return WebDriverWait(browser, timeout).until(
        EC.presence_of_element_located((By.CSS_SELECTOR, selector)),
        f"no {selector!r} after {timeout} s (on {browser.current_url})")


@contextmanager
def whole_page(browser: webdriver.Chrome, most: int = 2000) -> Iterator[None]:
    """The window as tall as the page (up to ``most`` pixels of it), restored after."""
    before = browser.get_window_size()
    inner, page = browser.execute_script(
        "return [window.innerHeight, document.documentElement.scrollHeight]")
    browser.set_window_size(before["width"], before["height"] - inner + min(page, most))
    try:
        yield
    finally:
        browser.set_window_size(before["width"], before["height"])


def css(browser: webdriver.Chrome, selector: str) -> list[WebElement]:
    return browser.find_elements(By.CSS_SELECTOR, selector)


def task_row(browser: webdriver.Chrome, task_id: str) -> WebElement | None:
    rows = css(browser, f'#tasks tr[data-task-id="{task_id}"]')
    return rows[0] if rows else None


def worker_row(browser: webdriver.Chrome, worker_id: str) -> WebElement | None:
    rows = css(browser, f'#workers tr[data-worker-id="{worker_id}"]')
    return rows[0] if rows else None


def route(api: httpx.Client, prompt: str, task_type: str = "web_search") -> dict:
    resp = api.post("/route", json={"prompt": prompt, "task_type": task_type})
    assert resp.status_code == 201, resp.text
    return resp.json()


def run_web_task(worker: FakeWorker, task_id: str, status: str = "done",
                 result: str = "an answer", error: str | None = None) -> None:
    """The fake web worker takes the task's id, claims it and writes its outcome."""
    taken = worker.take()
    assert taken == task_id, f"took {taken!r}, wanted {task_id}"
    claim = worker.claim(task_id)
    assert claim is not None, f"could not claim {task_id}"
    assert worker.finish(task_id, claim, result=result, status=status, error=error)


def confirm(browser: webdriver.Chrome) -> dict[str, str]:
    """Press Confirm on the confirmation page on screen; the form's hidden fields it sent."""
    fields = {el.get_attribute("name"): el.get_attribute("value")
              for el in css(browser, "form#confirm-form input[type=hidden]")}
    browser.find_element(By.ID, "confirm").click()
    wait_for(browser, "#back")
    return fields


# -- the tests ---------------------------------------------------------------------------------


def test_without_the_token_nothing_is_shown_or_done(browser, server, backends):
    browser.get(server.url + "/ui")  # the cookie is kept per host: drop this session's
    browser.delete_all_cookies()
    browser.get(server.url + "/")
    assert on_login_form(browser), browser.current_url
    assert parse_qs(urlsplit(browser.current_url).query) == {"next": ["/ui"]}
    assert not css(browser, "#tasks") and not css(browser, "#workers")
    password = browser.find_element(By.CSS_SELECTOR, "form#login input[name=token]")
    assert password.get_attribute("type") == "password"

    log_in(browser, "not-the-token")
    error = wait_for_text(browser, ".error[role=alert]", "a wrong token")
    assert error.text.startswith("a wrong token: type the Coordinator's token"), error.text
    assert "\n" not in error.text and error.is_displayed()
    assert on_login_form(browser)
    assert not css(browser, "#tasks")
    assert "coordinator_session" not in {c["name"] for c in browser.get_cookies()}

    with httpx.Client(base_url=server.url, timeout=10) as anonymous:
        resp = anonymous.post("/ui/action", data={"action": "drain", "target": "web1"})
        assert resp.status_code == 401, resp.text
        assert "not logged in" in resp.text
        resp = anonymous.get("/workers")
        assert resp.status_code == 401, resp.text
        assert resp.headers["www-authenticate"] == "Bearer"
    assert backends.sql("SELECT count(*) FROM audit") == [(0,)]


def test_a_routed_task_shows_done_once_a_worker_finished_it(ui, api, make_worker):
    web = make_worker("web1", kind="web")
    answer = route(api, "who wrote the status page?")
    assert answer["queue"] == "tasks:web"
    task_id = answer["task_id"]
    run_web_task(web, task_id, result="alice and the tests")

    ui.refresh()
    row = reload_until(ui, lambda: (r := task_row(ui, task_id)) is not None
                       and r.get_attribute("data-status") == "done" and r,
                       f"task {task_id} done")
    assert "web_search" in row.text and "done" in row.text
    assert not row.find_elements(By.CSS_SELECTOR, "a[data-action]")  # nothing to retry
    assert worker_row(ui, "web1").get_attribute("data-state") == "alive"


def test_filter_by_status_keeps_only_failed_tasks(ui, api, make_worker):
    web = make_worker("web1", kind="web")
    failed = route(api, "a search that fails")["task_id"]
    run_web_task(web, failed, status="failed", result="", error="search engine said 503")
    done = route(api, "a search that works")["task_id"]
    run_web_task(web, done)
    waiting = route(api, "write a haiku", task_type="generate")["task_id"]  # no GPU worker
    ui.refresh()
    statuses = {tid: task_row(ui, tid).get_attribute("data-status")
                for tid in (failed, done, waiting)}
    assert statuses == {failed: "failed", done: "done", waiting: "queued"}

    Select(ui.find_element(By.CSS_SELECTOR, "form#filters select[name=status]")
           ).select_by_value("failed")
    ui.find_element(By.ID, "apply-filters").click()
    WebDriverWait(ui, 10).until(EC.url_contains("status=failed"))
    wait_for(ui, "#tasks")
    assert parse_qs(urlsplit(ui.current_url).query).get("status") == ["failed"]
    rows = css(ui, "#tasks tbody tr[data-task-id]")
    assert [(r.get_attribute("data-task-id"), r.get_attribute("data-status")) for r in rows] \
        == [(failed, "failed")]
    chosen = Select(ui.find_element(By.CSS_SELECTOR, "form#filters select[name=status]"))
    assert chosen.first_selected_option.get_attribute("value") == "failed"
    assert chosen.first_selected_option.text == "failed"


def test_retry_a_failed_task_from_the_page(ui, api, make_worker, backends):
    web = make_worker("web1", kind="web")
    task_id = route(api, "news about the lab")["task_id"]
    error = "search backend answered 503: try again later"
    run_web_task(web, task_id, status="failed", result="", error=error)
    ui.refresh()
    row = reload_until(ui, lambda: task_row(ui, task_id), f"task {task_id}")
    assert row.get_attribute("data-status") == "failed"
    shown = row.find_element(By.CSS_SELECTOR, ".error")
    assert shown.text == error and shown.is_displayed()

    row.find_element(By.CSS_SELECTOR, "a[data-action=retry]").click()
    question = wait_for(ui, "#question")
    assert question.text.startswith(f"Retry failed task {task_id}?"), question.text
    sent = confirm(ui)
    assert ui.find_element(By.TAG_NAME, "h1").text == "Done"
    assert f"retried task {task_id}" in ui.find_element(By.CSS_SELECTOR, ".notice").text

    # A second submission of the same form (back, Confirm again) has no second effect.
    ui.back()
    wait_for(ui, "#confirm")
    key = ui.find_element(By.CSS_SELECTOR, "form#confirm-form input[name=idempotency_key]")
    assert key.get_attribute("value") == sent["idempotency_key"], \
        "the browser fetched the confirmation page again on Back, with a new key"
    confirm(ui)
    assert ui.find_element(By.TAG_NAME, "h1").text == "Done already"
    assert "done once already: retried task" in ui.find_element(By.CSS_SELECTOR, ".notice").text
    assert backends.sql(
        "SELECT actor, ok, idempotency_key FROM audit WHERE action = 'retry' AND target = %s",
        (task_id,)) == [(ACTOR, True, sent["idempotency_key"])]

    run_web_task(web, task_id, result="the lab is fine")  # only one id was pushed
    assert web.redis.llen("tasks:web") == 0

    ui.find_element(By.ID, "back").click()  # to the task's page
    wait_for(ui, "dl#task")
    assert urlsplit(ui.current_url).path == f"/ui/task/{task_id}"
    fields = dict(zip((dt.text for dt in css(ui, "dl#task dt")),
                      (dd.text for dd in css(ui, "dl#task dd")), strict=True))
    assert fields["Status"] == "done" and fields["Attempts"] == "2 of 4", fields  # 1 + 3 more
    assert ui.find_element(By.ID, "result").text == "the lab is fine"
    events = [li.get_attribute("data-event") for li in css(ui, "#timeline li[data-event]")]
    assert events == ["created", "claimed", "failed", "retried", "claimed", "done"]
    retried = ui.find_element(By.CSS_SELECTOR, '#timeline li[data-event="retried"]')
    assert f"retried by {ACTOR}" in retried.text
    audit = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
             for tr in css(ui, "#audit tbody tr")]
    assert len(audit) == 1, audit
    _, actor, action, target, result = audit[0]
    assert (actor, action, target) == (ACTOR, "retry", task_id)
    assert result.startswith(f"retried task {task_id}")


def test_drain_a_worker_from_the_page(ui, api, make_worker):
    make_worker("gpu1", kind="inference", device="cpu", models=("m",))
    ui.refresh()
    row = reload_until(ui, lambda: worker_row(ui, "gpu1"), "worker gpu1")
    assert row.get_attribute("data-state") == "alive"
    row.find_element(By.CSS_SELECTOR, "a[data-action=drain]").click()
    assert wait_for(ui, "#question").text.startswith("Drain worker gpu1?")
    confirm(ui)
    assert ui.find_element(By.TAG_NAME, "h1").text == "Done"
    assert "drained inference worker 'gpu1'" in ui.find_element(By.CSS_SELECTOR, ".notice").text

    ui.find_element(By.ID, "back").click()  # to the overview
    wait_for(ui, "#workers")
    row = worker_row(ui, "gpu1")
    assert row.get_attribute("data-state") == "draining"
    assert row.find_element(By.CSS_SELECTOR, ".state").text == "draining"
    assert row.find_element(By.CSS_SELECTOR, "a[data-action=undrain]").text == "Undrain"
    assert not row.find_elements(By.CSS_SELECTOR, "a[data-action=drain]")
    workers = {w["worker_id"]: w for w in api.get("/workers").json()["workers"]}
    assert workers["gpu1"]["state"] == "draining"
    assert workers["gpu1"]["drain_requested_at"] is not None


def test_screenshots_and_no_overflow_on_a_phone(ui, api, make_worker, screenshot_dir):
    web = make_worker("web1", kind="web", host="mini-pc")
    make_worker("gpu1", kind="inference", device="cuda", models=("llama3.2:3b", "qwen2.5:7b"),
                host="gaming-pc")
    for prompt in ("weather in Lisbon", "train times Porto to Braga"):
        run_web_task(web, route(api, prompt)["task_id"], result="sunny, 24 °C")
    failed = route(api, "latest Debian release notes")["task_id"]
    run_web_task(web, failed, status="failed", result="",
                 error="search backend answered 503: try again later")
    route(api, "write a haiku about queues", task_type="generate")
    route(api, "summarize the release notes", task_type="summarize")
    ui.refresh()
    reload_until(ui, lambda: len(css(ui, "#tasks tr[data-task-id]")) == 5, "the five tasks")

    desktop = screenshot_dir / "status-page-desktop.png"
    assert ui.get_window_size()["width"] == 1280
    with whole_page(ui):  # the tasks too, not just the top of the page
        assert ui.save_screenshot(str(desktop))
    with phone(ui):
        ui.refresh()
        wait_for(ui, "#tasks")
        sizes = ui.execute_script(
            "return [document.body.scrollWidth, document.documentElement.scrollWidth,"
            " window.innerWidth]")
        mobile = screenshot_dir / "status-page-phone.png"
        assert ui.save_screenshot(str(mobile))
        # the wide tables scroll inside their wrappers, not the page
        wrapped = ui.execute_script(
            "return [...document.querySelectorAll('table')]"
            ".every(t => t.parentElement.classList.contains('scroll'))")
        overflowing = ui.execute_script(
            "return [...document.querySelectorAll('.scroll')]"
            ".some(w => w.scrollWidth > w.clientWidth)")
    body, page, width = sizes
    assert width == 390
    assert body <= width + 1 and page <= width + 1, sizes
    assert wrapped and overflowing
    for shot in (desktop, mobile):
        data = shot.read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 10_000, shot
