"""The status page's HTML (coordinator.pages): structure, escaping, the CSP's limits (no script,
no inline style, nothing from elsewhere) and which actions are offered. Pure; no servers."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlsplit

import pytest

from coordinator.pages import (
    STATIC,
    STYLESHEET,
    Form,
    age,
    confirm_page,
    login_page,
    overview_page,
    result_page,
    task_page,
    when,
)

VOID = frozenset(("area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
                  "source", "track", "wbr"))
FORM = Form(csrf='csrf-"tok"&<x>', idempotency_key="idem-123")
XSS = "<script>alert(1)</script>"
TASK_ID = "0b7e2f4c-1111-4222-8333-444455556666"


# -- a tiny DOM built with html.parser ---------------------------------------------------------


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def walk(self):
        for child in self.children:
            if isinstance(child, Node):
                yield child
                yield from child.walk()

    def find_all(self, tag: str | None = None, **attrs: str | None) -> list[Node]:
        """Elements with ``tag`` whose attributes match (``class_`` matches one class; None
        only requires the attribute to be present; ``_`` in names stands for ``-``)."""
        found = []
        for node in self.walk():
            if tag is not None and node.tag != tag:
                continue
            ok = True
            for name, want in attrs.items():
                if name == "class_":
                    ok = want in node.attrs.get("class", "").split()
                else:
                    key = name.replace("_", "-")
                    ok = key in node.attrs and (want is None or node.attrs[key] == want)
                if not ok:
                    break
            if ok:
                found.append(node)
        return found

    def one(self, tag: str | None = None, **attrs: str | None) -> Node:
        found = self.find_all(tag, **attrs)
        assert len(found) == 1, f"{len(found)} <{tag} {attrs}>"
        return found[0]

    def by_id(self, element_id: str) -> Node:
        return self.one(id=element_id)


class Builder(HTMLParser):
    """Builds the tree and checks that every non-void element is closed in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]
        self.doctype: str | None = None
        self.all_attrs: list[tuple[str, str, str]] = []

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        assert len(node.attrs) == len(attrs), f"duplicate attribute on <{tag}>"
        self.all_attrs += [(tag, k, v or "") for k, v in attrs]
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag: str) -> None:
        assert tag not in VOID, f"</{tag}>"
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(page: str) -> tuple[Node, Builder]:
    """Parse ``page`` and check what every page must satisfy; return the tree."""
    builder = Builder()
    builder.feed(page)
    builder.close()
    assert builder.stack == [builder.root], "unclosed: " + " ".join(n.tag for n in builder.stack)
    assert page.startswith("<!doctype html>")
    assert builder.doctype is not None and builder.doctype.lower() == "doctype html"
    root = builder.root
    root.one("html", lang="en")
    assert root.one("title").text().strip()
    root.one("meta", name="viewport", content="width=device-width, initial-scale=1")
    root.one("link", rel="stylesheet", href=STYLESHEET)
    # The CSP allows no script and no inline style; nothing may come from another origin.
    assert "<script" not in page.lower()
    assert not root.find_all("script") and not root.find_all("style")
    for tag, name, value in builder.all_attrs:
        assert name != "style", f"style= on <{tag}>"
        assert not name.startswith("on"), f"{name}= on <{tag}>"
        if name in ("href", "src", "action", "formaction", "srcset"):
            assert value.startswith("/") and not value.startswith("//"), f"{name}={value!r}"
        assert not value.lower().startswith("javascript:"), f"{name}={value!r}"
    ids = [node.attrs["id"] for node in root.walk() if "id" in node.attrs]
    assert len(ids) == len(set(ids)), f"duplicate ids: {ids}"
    return root, builder


GOOD = login_page(None, "/ui")


@pytest.mark.parametrize("bad", [
    GOOD.replace("<h1>", '<h1 style="color:red">'),
    GOOD.replace("<h1>", '<h1 onclick="x()">'),
    GOOD.replace("</main>", "<script>x()</script></main>"),
    GOOD.replace('action="/ui/login"', 'action="https://elsewhere.example/"'),
    GOOD.replace(f'href="{STYLESHEET}"', 'href="//cdn.example/style.css"'),
    GOOD.replace("</form>", "</div></form>"),
    GOOD.replace(' name="viewport"', ""),
])
def test_the_checker_refuses(bad: str) -> None:
    """The checks every test relies on do catch what they are for."""
    parse(GOOD)
    assert bad != GOOD
    with pytest.raises(AssertionError):
        parse(bad)


# -- sample data -------------------------------------------------------------------------------


def worker(worker_id: str = "gpu-1", state: str = "alive", **extra: object) -> dict:
    return {"worker_id": worker_id, "host": "node1", "kind": "inference", "version": "1.2.3",
            "os": "Linux", "device": "cuda:0", "models": ["llama3:8b", "qwen2:7b"],
            "seconds_since_heartbeat": 3.24, "in_flight": 2, "state": state,
            "last_error": None, "db_write_failures": 0, "drain_requested_at": None,
            "probe_at": "2026-12-01T19:15:00+00:00", "probe_seconds": 0.42, "probe_ok": True,
            "probe_error": None} | extra


def task(task_id: str = TASK_ID, status: str = "done", **extra: object) -> dict:
    return {"task_id": task_id, "task_type": "chat", "status": status, "worker": "default",
            "worker_id": "gpu-1", "worker_host": "node1", "model": "llama3:8b",
            "answered_model": "llama3:8b", "options": None, "fallback": False, "error": None,
            "attempts": 1, "max_attempts": 3, "queue": "tasks:cuda:gpu-1",
            "created_at": "2026-12-01T19:20:05.123456+00:00",
            "finished_at": "2026-12-01T19:20:09+00:00"} | extra


def count(task_type: str, status: str, last_hour: int, all_time: int,
          fallbacks: tuple[int, int] = (0, 0)) -> dict:
    """A row of SQL.TASK_COUNTS."""
    return {"task_type": task_type, "status": status, "last_hour": last_hour,
            "all_time": all_time, "fallbacks_last_hour": fallbacks[0],
            "fallbacks_all_time": fallbacks[1]}


def view(**extra: object) -> dict:
    return {"generated_at": "2026-12-01T19:21:00+00:00", "version": "0.9.1",
            "instance": "ai-core-b",
            "counts": [
                count("chat", "done", 7, 1234),
                count("chat", "failed", 2, 56),
                count("web_search", "done", 5, 40, fallbacks=(2, 3)),
                count("web_search", "queued", 1, 9),
            ],
            "workers": [worker()],
            "queues": [{"queue": "tasks:web", "depth": 4, "in_flight": 1,
                        "oldest_waiting_seconds": 125.0},
                       {"queue": "tasks:rag", "depth": 0, "in_flight": 0,
                        "oldest_waiting_seconds": None}],
            "waiting": 3,
            "tasks": [task()],
            "more": False} | extra


NO_FILTERS = {"status": None, "task_type": None, "worker": None, "since": None}
CHOICES = {"status": ["queued", "running", "done", "failed"],
           "task_type": ["chat", "generate", "rag", "summarize", "web_search"],
           "worker": ["gpu-1", "web-1"],
           "since": [("1h", "last hour"), ("24h", "last day"), ("7d", "last week"),
                     ("", "all time")]}


def overview(page_view: dict | None = None, filters: dict | None = None,
             notice: str | None = None) -> Node:
    page = overview_page(page_view or view(), filters or NO_FILTERS, CHOICES, FORM, notice)
    return parse(page)[0]


def action_links(node: Node) -> list[tuple[str, dict[str, list[str]]]]:
    """(data-action, query of the href) of every action link under ``node``."""
    links = []
    for a in node.find_all("a", class_="action"):
        url = urlsplit(a.attrs["href"])
        assert url.path == "/ui/confirm"
        query = parse_qs(url.query)
        assert query["action"] == [a.attrs["data-action"]]
        links.append((a.attrs["data-action"], query))
    return links


# -- helpers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "—"), (0, "0.0 s"), (3.24, "3.2 s"), (-0.3, "0.0 s"), (59.97, "1 min"),
    (240, "4 min"), (3599, "1 h"), (7200, "2 h"), (47 * 3600, "47 h"), (3 * 86400, "3 d"),
])
def test_age(seconds: float | None, text: str) -> None:
    assert age(seconds) == text


@pytest.mark.parametrize(("iso", "text"), [
    ("2026-12-01T19:20:05.123456+00:00", "2026-12-01 19:20:05"),
    ("2026-12-01T19:20:05Z", "2026-12-01 19:20:05"),
    ("2026-12-01T21:20:05+02:00", "2026-12-01 19:20:05"),  # shown in UTC
    ("2026-12-01T19:20:05", "2026-12-01 19:20:05"),
    (None, "—"),
    ("", "—"),
    ("yesterday-ish", "yesterday-ish"),
])
def test_when(iso: str | None, text: str) -> None:
    assert when(iso) == text


def test_style_is_self_contained_and_phone_friendly() -> None:
    assert STYLESHEET.endswith("/style.css")
    style = (STATIC / "style.css").read_text()
    assert "overflow-x: auto" in style
    assert "system-ui" in style
    assert "@import" not in style and "url(" not in style and "expression(" not in style
    assert style.count("{") == style.count("}")


# -- login -------------------------------------------------------------------------------------


def test_login_page() -> None:
    root, _ = parse(login_page(None, '/ui/task/1?a=1&b="2"'))
    form = root.by_id("login")
    assert (form.attrs["method"], form.attrs["action"]) == ("post", "/ui/login")
    token = form.one("input", name="token")
    assert token.attrs["type"] == "password"
    assert token.attrs["autocomplete"] == "current-password"
    name = form.one("input", name="name")
    assert "required" not in name.attrs
    assert form.one("input", name="next").attrs == {
        "type": "hidden", "name": "next", "value": '/ui/task/1?a=1&b="2"'}
    assert root.by_id("login-submit").attrs["type"] == "submit"
    labels = {label.attrs["for"]: label.text() for label in root.find_all("label")}
    assert labels[token.attrs["id"]].strip() == "Coordinator token"
    assert labels[name.attrs["id"]].strip() == "Your name (for the audit record)"
    assert not root.find_all(role="alert")


def test_login_error_is_shown_escaped() -> None:
    page = login_page("wrong token " + XSS, "/ui")
    root, _ = parse(page)
    alert = root.one(role="alert")
    assert "error" in alert.attrs["class"].split()
    assert alert.text() == "wrong token " + XSS
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


# -- overview ----------------------------------------------------------------------------------


def test_overview_structure() -> None:
    root = overview()
    for element_id in ("counts", "workers", "queues", "tasks", "filters", "apply-filters",
                       "notifications"):
        root.by_id(element_id)
    assert root.one("h1").text() == "Coordinator"
    assert root.by_id("version").text() == "0.9.1"
    assert root.by_id("instance").text() == "ai-core-b"  # the instance that answered
    generated = root.by_id("generated-at").one("time")
    assert generated.attrs["datetime"] == "2026-12-01T19:21:00+00:00"
    assert generated.text() == "2026-12-01 19:21:00"
    for table in root.find_all("table"):  # every table scrolls sideways on a phone
        assert table.attrs["id"]
    assert len(root.find_all("div", class_="scroll")) == len(root.find_all("table")) == 5
    assert not root.find_all(id="more")
    assert not root.find_all(role="status")


def notification(**extra: object) -> dict:
    return {"subject": "dead:gpu-1", "problem": True, "message": "gpu-1 is dead " + XSS,
            "created_at": "2026-12-01T19:20:00+00:00", "delivered_at": None, "attempts": 3,
            "error": "ntfy.sh not reachable: timed out", "pending": True} | extra


def test_overview_notifications_say_whether_each_was_delivered_and_why_not() -> None:
    rows = [notification(),
            notification(error="ntfy.sh answered HTTP 403 Forbidden", pending=False),
            notification(delivered_at="2026-12-01T19:20:05+00:00", error=None, pending=False)]
    table = overview(view(notifications=rows)).by_id("notifications")
    cells = [[td.text() for td in tr.find_all("td")] for tr in table.find_all("tr")[1:]]
    assert [c[3] for c in cells] == [
        "not delivered: ntfy.sh not reachable: timed out (retried)",
        "not delivered: ntfy.sh answered HTTP 403 Forbidden (given up)",
        "2026-12-01 19:20:05"]
    assert cells[0][1:3] == ["dead:gpu-1", "gpu-1 is dead " + XSS]  # escaped: shown as text
    assert "no notifications" in overview().by_id("notifications").text()


def test_overview_logout_form_carries_csrf() -> None:
    root = overview()
    logout = root.one("form", action="/ui/logout")
    assert logout.attrs["method"] == "post"
    assert logout.one("input", name="csrf").attrs["value"] == FORM.csrf
    assert logout.one("button").text() == "Log out"


def test_overview_notice() -> None:
    root = overview(notice="Task 0b7e2f4c… retried " + XSS)
    status = root.one(role="status")
    assert status.attrs["class"] == "notice"
    assert status.text() == "Task 0b7e2f4c… retried " + XSS


def test_counts_every_number_and_total() -> None:
    root = overview()
    table = root.by_id("counts")
    rows = table.find_all("tr", data_task_type=None)
    assert [(r.attrs["data-task-type"], r.attrs["data-status"]) for r in rows] == [
        ("chat", "done"), ("chat", "failed"), ("web_search", "done"), ("web_search", "queued")]
    assert [th.text() for th in table.one("thead").find_all("th")] == [
        "Task type", "Status", "Last hour", "All time", "Fallback, last hour",
        "Fallback, all time"]
    cells = [[td.text() for td in r.find_all("td")] for r in rows]
    assert cells[0] == ["chat", "done", "7", "1234", "0", "0"]
    total = root.by_id("counts-total")
    assert [td.text() for td in total.find_all("td")] == ["15", "1339", "2", "3"]


def test_fallback_answers_are_counted_beside_the_done_ones_in_a_warning_colour() -> None:
    table = overview().by_id("counts")
    web_done = table.one("tr", data_task_type="web_search", data_status="done")
    assert [td.text() for td in web_done.find_all("td")] == [
        "web_search", "done", "5", "40", "2", "3"]
    assert [span.text() for span in web_done.find_all("span", class_="warn")] == ["2", "3"]
    # None where there is none, so the colour means something.
    chat_done = table.one("tr", data_task_type="chat", data_status="done")
    assert chat_done.find_all("span", class_="warn") == []


def test_counts_empty() -> None:
    root = overview(view(counts=[]))
    assert "no tasks yet" in root.by_id("counts").one("tr", class_="empty").text()
    assert [td.text() for td in root.by_id("counts-total").find_all("td")] == [
        "0", "0", "0", "0"]


def test_worker_rows() -> None:
    workers = [worker("gpu-1", "alive"),
               worker('we"ird<id>', "dead", last_error="heartbeat lost: " + XSS,
                      db_write_failures=4, seconds_since_heartbeat=7300.0, os=None,
                      device=None, models=[])]
    page = overview_page(view(workers=workers), NO_FILTERS, CHOICES, FORM)
    root, _ = parse(page)
    rows = root.by_id("workers").find_all("tr", data_worker_id=None)
    assert [(r.attrs["data-worker-id"], r.attrs["data-state"]) for r in rows] == [
        ("gpu-1", "alive"), ('we"ird<id>', "dead")]
    assert rows[0].one("span", class_="state").attrs["class"] == "state state-alive"
    assert rows[1].one("span", class_="state").attrs["class"] == "state state-dead"
    assert "3.2 s" in rows[0].text() and "2 h" in rows[1].text()
    assert "llama3:8b, qwen2:7b" in rows[0].text()
    head = [th.text() for th in root.by_id("workers").one("thead").find_all("th")]
    cells = dict(zip(head, [td.text() for td in rows[1].find_all("td")], strict=True))
    assert (cells["OS"], cells["Device"], cells["Models"]) == ("—", "—", "—")
    assert cells["DB write failures"] == "4"
    assert not rows[0].find_all(class_="error")
    assert rows[1].one(class_="error").text() == "heartbeat lost: " + XSS
    # The quote of the id cannot end the attribute early, nor its < open a tag.
    assert 'data-worker-id="we&#34;ird&lt;id&gt;"' in page
    assert "we\"ird<id>" not in page


def test_each_workers_last_probe_is_shown_with_its_reason() -> None:
    workers = [worker("ok"), worker("never", probe_at=None, probe_ok=None, probe_seconds=None),
               worker("bad", probe_ok=False, probe_seconds=121.0,
                      probe_error="took no probe for 121 s " + XSS)]
    root = overview(view(workers=workers))
    head = [th.text() for th in root.by_id("workers").one("thead").find_all("th")]
    shown = {r.attrs["data-worker-id"]: dict(zip(head, [td.text() for td in r.find_all("td")],
                                                  strict=True))
             for r in root.by_id("workers").find_all("tr", data_worker_id=None)}
    assert [(shown[w]["Last probe"], shown[w]["Probe"]) for w in ("ok", "never", "bad")] == [
        ("2026-12-01 19:15:00", "ok in 0.4 s"), ("—", "not probed yet"),
        ("2026-12-01 19:15:00", "failed: took no probe for 121 s " + XSS)]
    bad = root.by_id("workers").find_all("tr", data_worker_id=None)[2]
    assert bad.one("td", class_="probe").one(class_="error").text() == (
        "failed: took no probe for 121 s " + XSS)


@pytest.mark.parametrize(("state", "expected"), [
    ("alive", "drain"), ("duplicate", "drain"), ("draining", "undrain"), ("drained", "undrain"),
    ("dead", None), ("stopped", None),
])
def test_worker_actions_by_state(state: str, expected: str | None) -> None:
    root = overview(view(workers=[worker('gpu&"1', state)]))
    links = action_links(root.by_id("workers"))
    if expected is None:
        assert links == []
    else:
        assert links == [(expected, {"action": [expected], "target": ['gpu&"1']})]
        label = root.by_id("workers").one("a", class_="action").text()
        assert label == expected.capitalize()


def test_workers_empty() -> None:
    root = overview(view(workers=[]))
    assert "no workers registered" in root.by_id("workers").one("tr", class_="empty").text()


def test_queues() -> None:
    root = overview()
    rows = root.by_id("queues").find_all("tr", data_queue=None)
    assert [r.attrs["data-queue"] for r in rows] == ["tasks:web", "tasks:rag"]
    assert [td.text() for td in rows[0].find_all("td")] == ["tasks:web", "4", "1", "2 min"]
    assert rows[1].find_all("td")[3].text() == "—"
    assert root.by_id("waiting").one("strong").text() == "3"


def test_task_rows() -> None:
    tasks = [task("t-queued", "queued", worker_id=None, worker_host=None, finished_at=None),
             task("t-running", "running"),
             task("t-failed", "failed", error=XSS, fallback=False),
             task(TASK_ID, "done", fallback=True, answered_model=None)]
    page = overview_page(view(tasks=tasks), NO_FILTERS, CHOICES, FORM)
    root, _ = parse(page)
    rows = root.by_id("tasks").find_all("tr", data_task_id=None)
    assert [(r.attrs["data-task-id"], r.attrs["data-status"]) for r in rows] == [
        ("t-queued", "queued"), ("t-running", "running"), ("t-failed", "failed"),
        (TASK_ID, "done")]
    # The id (its first cell) links to the task's page.
    assert [r.find_all("td")[0].one("a").attrs["href"] for r in rows] == [
        "/ui/task/t-queued", "/ui/task/t-running", "/ui/task/t-failed", f"/ui/task/{TASK_ID}"]
    assert rows[3].find_all("td")[0].text() == TASK_ID[:8] + "…"
    # The error of the failed task is in its row, escaped; the page holds no raw tag from it.
    assert rows[2].one(class_="error").text() == XSS
    assert XSS not in page
    assert not rows[1].find_all(class_="error") and not rows[3].find_all(class_="error")
    # Fallback is a visible badge, on that row only.
    assert rows[3].one("span", class_="fallback").text() == "fallback"
    assert not any(r.find_all(class_="fallback") for r in rows[:3])
    # Full ISO value kept, compact value shown.
    created = rows[3].find_all("time")[0]
    assert created.attrs["datetime"] == "2026-12-01T19:20:05.123456+00:00"
    assert created.text() == "2026-12-01 19:20:05"


def test_task_actions_by_status() -> None:
    tasks = [task("q", "queued"), task("r", "running"), task("f", "failed", error="boom"),
             task("d", "done")]
    root = overview(view(tasks=tasks))
    by_row = {r.attrs["data-task-id"]: action_links(r)
              for r in root.by_id("tasks").find_all("tr", data_task_id=None)}
    assert by_row == {"q": [("cancel", {"action": ["cancel"], "target": ["q"]})],
                      "r": [],
                      "f": [("retry", {"action": ["retry"], "target": ["f"]})],
                      "d": []}


def test_task_id_in_urls_is_encoded() -> None:
    odd = 'a/b?c&d="e"'
    root = overview(view(tasks=[task(odd, "failed")]))
    row = root.by_id("tasks").one("tr", data_task_id=odd)
    link = row.find_all("a")[0].attrs["href"]
    assert link == "/ui/task/a%2Fb%3Fc%26d%3D%22e%22"
    assert action_links(row) == [("retry", {"action": ["retry"], "target": [odd]})]


def test_tasks_empty_and_more() -> None:
    root = overview(view(tasks=[], more=False))
    assert root.by_id("tasks").one("tr", class_="empty").text() == "no tasks match"
    assert not root.by_id("tasks").find_all("tr", data_task_id=None)
    root = overview(view(tasks=[task("a"), task("b")], more=True))
    assert root.by_id("more").text() == "showing the newest 2"
    assert not root.by_id("tasks").find_all("tr", class_="empty")


def test_filters_form_selects_current_values() -> None:
    filters = {"status": "failed", "task_type": None, "worker": "gpu-1", "since": "24h"}
    root = overview(filters=filters)
    form = root.by_id("filters")
    assert (form.attrs["method"], form.attrs["action"]) == ("get", "/ui")
    selected = {}
    for select in form.find_all("select"):
        options = select.find_all("option")
        chosen = [o.attrs["value"] for o in options if "selected" in o.attrs]
        assert len(chosen) == 1, select.attrs["name"]
        selected[select.attrs["name"]] = chosen[0]
        if select.attrs["name"] != "since":
            assert (options[0].attrs["value"], options[0].text()) == ("", "any")
    assert selected == {"status": "failed", "task_type": "", "worker": "gpu-1", "since": "24h"}
    since = form.one("select", name="since").find_all("option")
    assert [(o.attrs["value"], o.text()) for o in since] == [
        ("1h", "last hour"), ("24h", "last day"), ("7d", "last week"), ("", "all time")]
    statuses = [o.attrs["value"] for o in form.one("select", name="status").find_all("option")]
    assert statuses == ["", "queued", "running", "done", "failed"]
    assert form.one("a", href="/ui").text() == "clear"
    assert form.by_id("apply-filters").attrs["type"] == "submit"


def test_filter_value_not_offered_stays_selected_and_escaped() -> None:
    gone = 'old"<worker>'
    root = overview(filters=NO_FILTERS | {"worker": gone})
    options = root.by_id("filters").one("select", name="worker").find_all("option")
    assert [o.attrs["value"] for o in options if "selected" in o.attrs] == [gone]


def test_refresh_link_keeps_filters() -> None:
    root = overview(filters={"status": "failed", "task_type": "", "worker": "a&b",
                             "since": "7d"})
    url = urlsplit(root.by_id("refresh").attrs["href"])
    assert url.path == "/ui"
    assert parse_qs(url.query) == {"status": ["failed"], "worker": ["a&b"], "since": ["7d"]}
    assert overview().by_id("refresh").attrs["href"] == "/ui"
    # "all time" is an explicit since=, not the absence of a since.
    all_time = overview(filters=NO_FILTERS | {"since": ""}).by_id("refresh").attrs["href"]
    assert all_time == "/ui?since="


# -- one task ----------------------------------------------------------------------------------


PROMPT = "Tell me about <b>bold</b> & co"


def full_task(status: str = "failed", **extra: object) -> dict:
    return task(status=status, result=None,
                requested_worker="gpu-1", started_at="2026-12-01T19:20:06+00:00",
                error="worker gpu-1 died: " + XSS if status == "failed" else None) | extra


TIMELINE = [
    {"at": "2026-12-01T19:20:05+00:00", "event": "created", "status": "queued",
     "worker_id": None, "queue": "tasks:cuda:gpu-1", "reason": None},
    {"at": "2026-12-01T19:20:06+00:00", "event": "claimed", "status": "running",
     "worker_id": "gpu-1", "queue": None, "reason": None},
    {"at": "2026-12-01T19:20:09+00:00", "event": "failed", "status": "failed",
     "worker_id": None, "queue": None, "reason": "heartbeat lost " + XSS},
]
AUDIT = [{"at": "2026-12-01T19:30:00+00:00", "actor": 'ann "admin"', "action": "retry",
          "target": TASK_ID, "result": "ok"}]


def test_task_page_fields_and_escaping() -> None:
    options = {"temperature": 0, "seed": 42, "stop": ["<b>"]}
    page = task_page(full_task(options=options), PROMPT, TIMELINE, AUDIT)
    root, _ = parse(page)
    dl = root.by_id("task")
    fields = dict(zip([dt.text() for dt in dl.find_all("dt")],
                      [dd for dd in dl.find_all("dd")], strict=True))
    for label in ("ID", "Status", "Error", "Type", "Fallback", "Model", "Answered model",
                  "Options", "Worker", "Requested worker", "Worker id", "Worker host", "Queue",
                  "Attempts", "Created", "Started", "Finished"):
        assert label in fields, label
    assert json.loads(root.by_id("task-options").text()) == options
    assert fields["ID"].text() == TASK_ID
    assert fields["Attempts"].text() == "1 of 3"
    assert fields["Started"].one("time").attrs["datetime"] == "2026-12-01T19:20:06+00:00"
    assert root.by_id("task-error").text() == "worker gpu-1 died: " + XSS
    assert "error" in root.by_id("task-error").attrs["class"].split()
    assert root.one("pre", id="prompt").text() == "Tell me about <b>bold</b> & co"
    assert not root.find_all("b")
    assert XSS not in page
    assert root.by_id("result").text() == "no result"
    assert root.by_id("back").attrs["href"] == "/ui"


def test_task_page_result_in_pre() -> None:
    root, _ = parse(task_page(full_task("done", result="<i>answer</i>\nline 2"), PROMPT, [], []))
    result = root.by_id("result")
    assert result.tag == "pre" and result.text() == "<i>answer</i>\nline 2"
    assert not root.find_all("i")
    assert not root.find_all(id="task-error")


@pytest.mark.parametrize(("status", "expected"), [
    ("failed", ["retry"]), ("queued", ["cancel"]), ("running", []), ("done", []),
])
def test_task_page_actions(status: str, expected: list[str]) -> None:
    root, _ = parse(task_page(full_task(status), PROMPT, [], []))
    links = action_links(root)
    assert [action for action, _ in links] == expected
    for _, query in links:
        assert query["target"] == [TASK_ID]


def test_task_page_timeline() -> None:
    root, _ = parse(task_page(full_task(), PROMPT, TIMELINE, []))
    items = root.by_id("timeline").find_all("li")
    assert [li.attrs["data-event"] for li in items] == ["created", "claimed", "failed"]
    assert items[0].one("time").attrs["datetime"] == "2026-12-01T19:20:05+00:00"
    assert "worker gpu-1" in items[1].text()
    assert "heartbeat lost " + XSS in items[2].text()


def test_task_page_empty_timeline_and_no_audit() -> None:
    root, _ = parse(task_page(full_task(), PROMPT, [], []))
    assert root.by_id("timeline").text() == (
        "no transitions recorded (older than the retention, or recorded before this version)")
    assert not root.find_all("li")
    assert not root.find_all(id="audit")


def test_task_page_audit() -> None:
    page = task_page(full_task(), PROMPT, [], AUDIT)
    root, _ = parse(page)
    rows = root.by_id("audit").one("tbody").find_all("tr")
    cells = [td.text() for td in rows[0].find_all("td")]
    assert cells == ["2026-12-01 19:30:00", 'ann "admin"', "retry", TASK_ID, "ok"]
    assert "ann &#34;admin&#34;" in page


# -- confirmation and result -------------------------------------------------------------------


def test_confirm_page() -> None:
    page = confirm_page("retry", 'id"1<', "Retry failed task 1234…?", FORM, "/ui?status=failed")
    root, _ = parse(page)
    assert root.by_id("question").text() == "Retry failed task 1234…?"
    form = root.by_id("confirm-form")
    assert (form.attrs["method"], form.attrs["action"]) == ("post", "/ui/action")
    hidden = {i.attrs["name"]: i.attrs["value"] for i in form.find_all("input", type="hidden")}
    assert hidden == {"action": "retry", "target": 'id"1<', "csrf": FORM.csrf,
                      "idempotency_key": "idem-123"}
    button = root.by_id("confirm")
    assert (button.tag, button.attrs["type"], button.text()) == ("button", "submit", "Retry")
    cancel = root.by_id("cancel")
    assert (cancel.attrs["href"], cancel.text()) == ("/ui?status=failed", "Go back")
    assert 'value="csrf-&#34;tok&#34;&amp;&lt;x&gt;"' in page


@pytest.mark.parametrize("back", ["https://evil.example/", "//evil.example/x", "/\\evil",
                                  "javascript:alert(1)"])
def test_back_links_stay_on_the_site(back: str) -> None:
    root, _ = parse(confirm_page("drain", "gpu-1", "Drain gpu-1?", FORM, back))
    assert root.by_id("cancel").attrs["href"] == "/ui"
    root, _ = parse(result_page("Done", "ok", True, back))
    assert root.by_id("back").attrs["href"] == "/ui"


def test_confirm_button_is_the_action_capitalised() -> None:
    root, _ = parse(confirm_page("undrain", "gpu-1", "Undrain gpu-1?", FORM, "/ui"))
    assert root.by_id("confirm").text() == "Undrain"


def test_result_page_ok_and_not() -> None:
    root, _ = parse(result_page("Retried", "Task 1234… is queued again", True, "/ui/task/1"))
    assert root.one("h1").text() == "Retried"
    message = root.one(role="status")
    assert (message.attrs["class"], message.text()) == ("notice", "Task 1234… is queued again")
    assert not root.find_all(role="alert")
    assert root.by_id("back").attrs["href"] == "/ui/task/1"
    page = result_page("Not retried " + XSS, "the task is running " + XSS, False, "/ui")
    root, _ = parse(page)
    alert = root.one(role="alert")
    assert (alert.attrs["class"], alert.text()) == ("error", "the task is running " + XSS)
    assert not root.find_all(role="status")
    assert root.one("h1").text() == "Not retried " + XSS
    assert re.search(r"<title>[^<]*&lt;script&gt;", page)
