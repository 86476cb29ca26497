"""The Coordinator's status page: HTML rendering only, no I/O.

Each ``*_page`` function takes plain data (dicts, lists, ISO-8601 strings) that the handlers
have already queried and returns one complete HTML5 document. The page is served under a CSP
of ``default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self';
frame-ancestors 'none'``, so nothing here uses JavaScript, inline ``style=`` attributes or
anything from another origin: the one stylesheet is ``STYLE``, served at ``/ui/style.css``.
Every action (drain, retry, cancel, …) is a plain link to ``/ui/confirm``, whose page posts a
form carrying the session's CSRF token and a fresh idempotency key (``Form``).

Every value that comes from data goes through ``_e`` (``html.escape(str(v), quote=True)``),
in text and in attributes alike; URLs built from data have their parts percent-encoded first.
The ``id`` and ``data-*`` attributes are stable hooks for the browser tests.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode


@dataclass(frozen=True)
class Form:
    """What every action form carries: the CSRF token of the session and a fresh idempotency key."""

    csrf: str
    idempotency_key: str


STYLE = """\
:root {
  color-scheme: light dark;
  --fg: #1b1b1b; --bg: #ffffff; --muted: #555555; --line: #cfcfcf; --head: #f2f2f2;
  --link: #0b57d0; --err: #9f1111; --err-bg: #fdecea; --ok: #0b5d1e; --ok-bg: #e3f3e7;
  --warn: #5a4300; --warn-bg: #fff1c2; --idle: #3d3d3d; --idle-bg: #e7e7e7;
  --info: #0b3d91; --info-bg: #e3ecfb;
}
@media (prefers-color-scheme: dark) {
  :root {
    --fg: #e9e9e9; --bg: #121212; --muted: #b0b0b0; --line: #3b3b3b; --head: #1f1f1f;
    --link: #8ab4f8; --err: #ffb4ab; --err-bg: #3c1414; --ok: #a6dcb3; --ok-bg: #10301b;
    --warn: #ffe08a; --warn-bg: #3a2f00; --idle: #d6d6d6; --idle-bg: #333333;
    --info: #b6ccf7; --info-bg: #152a4d;
  }
}
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; text-size-adjust: 100%; }
body {
  margin: 0; padding: 0.75rem; color: var(--fg); background: var(--bg);
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
    "Noto Sans", sans-serif;
  font-size: 1rem; line-height: 1.45;
}
main { max-width: 90rem; margin: 0 auto; }
h1 { font-size: 1.5rem; margin: 0.25rem 0 0.5rem; }
h2 { font-size: 1.2rem; margin: 1.5rem 0 0.5rem; }
a { color: var(--link); }
code, pre, .id { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
pre {
  white-space: pre-wrap; overflow-wrap: anywhere; margin: 0; padding: 0.5rem;
  background: var(--head); border: 1px solid var(--line); border-radius: 4px;
  max-height: 30rem; overflow-y: auto;
}
header.top {
  display: flex; flex-wrap: wrap; align-items: baseline; gap: 0.25rem 1rem;
  border-bottom: 1px solid var(--line); padding-bottom: 0.5rem;
}
header.top h1 { margin: 0; }
.meta, .muted, .note { color: var(--muted); }
.note { font-size: 0.9rem; }
.scroll { overflow-x: auto; -webkit-overflow-scrolling: touch; max-width: 100%; }
table { border-collapse: collapse; width: 100%; font-size: 0.92rem; }
th, td {
  text-align: left; vertical-align: top; padding: 0.35rem 0.5rem;
  border-bottom: 1px solid var(--line); white-space: nowrap;
}
thead th { background: var(--head); }
td.wrap { white-space: normal; min-width: 14rem; max-width: 32rem; overflow-wrap: anywhere; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.total th, tr.total td { font-weight: 600; border-top: 2px solid var(--line); }
tr.empty td { color: var(--muted); font-style: italic; }
.error {
  color: var(--err); background: var(--err-bg); border-radius: 4px; padding: 0.1rem 0.35rem;
  overflow-wrap: anywhere;
}
p.error, p.notice, div.error { padding: 0.5rem 0.75rem; margin: 0.5rem 0; }
td .error { display: block; margin-top: 0.2rem; white-space: normal; }
.notice { color: var(--ok); background: var(--ok-bg); border-radius: 4px; }
.warn { color: var(--warn); background: var(--warn-bg); border-radius: 4px; padding: 0 0.3rem; }
.state, .status, .fallback {
  display: inline-block; padding: 0.05rem 0.45rem; border-radius: 999px; font-size: 0.85rem;
  font-weight: 600; color: var(--idle); background: var(--idle-bg);
}
.state-alive, .status-done { color: var(--ok); background: var(--ok-bg); }
.state-dead, .status-failed { color: var(--err); background: var(--err-bg); }
.state-duplicate, .state-draining, .fallback { color: var(--warn); background: var(--warn-bg); }
.status-running, .status-queued { color: var(--info); background: var(--info-bg); }
a.action, button {
  display: inline-block; padding: 0.3rem 0.75rem; min-height: 2.25rem; border-radius: 4px;
  border: 1px solid var(--link); color: var(--link); background: transparent;
  font: inherit; text-decoration: none; cursor: pointer;
}
button[type=submit] { background: var(--link); color: var(--bg); }
form.inline { display: inline; margin: 0; }
form.inline button { background: transparent; color: var(--link); }
form#filters { display: flex; flex-wrap: wrap; align-items: end; gap: 0.5rem 0.75rem; }
form#filters label { display: flex; flex-direction: column; font-size: 0.85rem; }
select, input {
  font: inherit; padding: 0.3rem; min-height: 2.25rem; color: var(--fg); background: var(--bg);
  border: 1px solid var(--line); border-radius: 4px; max-width: 100%;
}
form.stack { display: flex; flex-direction: column; gap: 0.75rem; max-width: 24rem; }
form.stack label { display: flex; flex-direction: column; gap: 0.2rem; }
dl#task { display: grid; grid-template-columns: max-content 1fr; gap: 0.3rem 1rem; }
dl#task dt { font-weight: 600; }
dl#task dd { margin: 0; overflow-wrap: anywhere; }
@media (max-width: 32rem) {
  dl#task { grid-template-columns: 1fr; }
  dl#task dd { margin-bottom: 0.4rem; }
}
ol#timeline { padding-left: 1.5rem; }
ol#timeline li { margin-bottom: 0.3rem; }
.actions { margin: 0.75rem 0; display: flex; flex-wrap: wrap; gap: 0.5rem; align-items: center; }
"""

#: The overview's filters, in the order they appear in the form and in URLs.
FILTER_KEYS = ("status", "task_type", "worker", "since")
_FILTER_LABELS = {"status": "Status", "task_type": "Task type", "worker": "Worker",
                  "since": "Since"}
#: Worker states whose worker can be drained; a dead or stopped one has nothing to drain.
_DRAINABLE = frozenset(("alive", "duplicate"))
_DRAINED = frozenset(("draining", "drained"))
#: A task error is shown whole on the task's page; in the overview row a long one is cut.
_ROW_ERROR_CHARS = 240
_DASH = "—"


# -- small helpers ---------------------------------------------------------------------------


def _e(value: object) -> str:
    """``value`` escaped for HTML text and (double-quoted) attribute values alike."""
    return html.escape(str(value), quote=True)


def _v(value: object) -> str:
    """A table cell's text: the escaped value, or a dash for none (so empty cells read as such)."""
    return _DASH if value is None or value == "" else _e(value)


def _attrs(attrs: Mapping[str, object]) -> str:
    return "".join(f' {name}="{_e("" if value is None else value)}"'
                   for name, value in attrs.items())


def _local(url: str) -> str:
    """``url`` if it is a path on this site, else ``/ui``.

    A back link is often built from what the browser sent; a full URL or ``//host`` there would
    make the page an open redirect, so only a same-site path is linked.
    """
    if url.startswith("/") and not url.startswith(("//", "/\\")):
        return url
    return "/ui"


def _short(task_id: object) -> str:
    """The first 8 characters of an id: enough to tell tasks apart in a table on a phone."""
    text = str(task_id)
    return text if len(text) <= 9 else text[:8] + "…"


def age(seconds: float | None) -> str:
    """A duration, compactly: ``3.2 s``, ``4 min``, ``2 h``, ``3 d``; a dash for none."""
    if seconds is None:
        return _DASH
    seconds = max(0.0, float(seconds))  # clock skew between hosts must not show "-0.3 s"
    if seconds < 59.95:  # so 59.97 s does not round to "60.0 s"
        return f"{seconds:.1f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours = round(seconds / 3600)
    if hours < 48:
        return f"{hours} h"
    return f"{round(seconds / 86400)} d"


def when(iso: str | None) -> str:
    """An ISO-8601 timestamp as ``YYYY-MM-DD HH:MM:SS`` in UTC; a dash for none.

    A naive timestamp is taken as UTC (PostgreSQL's timestamptz always carries an offset).
    Text that is not ISO-8601 is returned as it is, so nothing is silently lost.
    """
    if not iso:
        return _DASH
    try:
        moment = datetime.fromisoformat(str(iso))
    except ValueError:
        return str(iso)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _time(iso: str | None) -> str:
    """A ``<time>`` element: the compact form shown, the full ISO value kept in ``datetime``."""
    if not iso:
        return _DASH
    return f'<time datetime="{_e(iso)}">{_e(when(iso))}</time>'


def _page(title: str, body: str) -> str:
    return ("<!doctype html>\n"
            '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            '<meta name="referrer" content="same-origin">\n'
            f"<title>{_e(title)} · Coordinator</title>\n"
            '<link rel="stylesheet" href="/ui/style.css">\n'
            f"</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n")


def _message(text: str | None, ok: bool) -> str:
    if not text:
        return ""
    if ok:
        return f'<p class="notice" role="status">{_e(text)}</p>'
    return f'<p class="error" role="alert">{_e(text)}</p>'


def _table(table_id: str, head: Sequence[str | tuple[str, str]], rows: Iterable[str],
           empty: str, foot: str = "") -> str:
    """A table in a horizontally scrolling wrapper; one ``empty`` row when there are no rows.

    ``head`` items are a label or (label, class) for numeric columns.
    """
    body = list(rows)
    if not body:
        body = [f'<tr class="empty"><td colspan="{len(head)}">{_e(empty)}</td></tr>']
    cells = []
    for item in head:
        label, cls = (item, "") if isinstance(item, str) else item
        cells.append(f'<th scope="col"{_attrs({"class": cls}) if cls else ""}>{_e(label)}</th>')
    return (f'<div class="scroll"><table id="{_e(table_id)}">\n'
            f"<thead><tr>{''.join(cells)}</tr></thead>\n"
            f"<tbody>\n{chr(10).join(body)}\n</tbody>{foot}\n</table></div>")


def _action_link(action: str, target: object, label: str) -> str:
    url = "/ui/confirm?" + urlencode({"action": action, "target": str(target)})
    return f'<a class="action" data-action="{_e(action)}" href="{_e(url)}">{_e(label)}</a>'


def _task_action(task: Mapping[str, Any]) -> str:
    """Retry for a failed task, Cancel for a queued one; a running or done task has none."""
    status = task.get("status")
    if status == "failed":
        return _action_link("retry", task["task_id"], "Retry")
    if status == "queued":
        return _action_link("cancel", task["task_id"], "Cancel")
    return ""


def _worker_action(worker: Mapping[str, Any]) -> str:
    state = worker.get("state")
    if state in _DRAINED:
        return _action_link("undrain", worker["worker_id"], "Undrain")
    if state in _DRAINABLE:
        return _action_link("drain", worker["worker_id"], "Drain")
    return ""


def _task_url(task_id: object) -> str:
    return "/ui/task/" + quote(str(task_id), safe="")


def _status_badge(status: object) -> str:
    return f'<span class="status status-{_e(status)}">{_e(status)}</span>'


def _fallback_badge(task: Mapping[str, Any]) -> str:
    return ' <span class="fallback">fallback</span>' if task.get("fallback") else ""


def _cut(text: str, limit: int) -> str:
    # Cut before escaping, so an entity is never cut in half.
    return text if len(text) <= limit else text[:limit - 1] + "…"


def overview_url(filters: Mapping[str, object]) -> str:
    """``/ui`` with the current filters: the refresh link.

    An empty status, task type or worker means "any" and is left out; an empty ``since`` is
    kept (``since=``), as it means "all time", which need not be the default of no ``since``.
    """
    params = []
    for key in FILTER_KEYS:
        value = filters.get(key)
        if value is None or (value == "" and key != "since"):
            continue
        params.append((key, str(value)))
    return "/ui?" + urlencode(params) if params else "/ui"


# -- login -------------------------------------------------------------------------------------


def login_page(error: str | None, next_path: str) -> str:
    body = f"""<h1>Coordinator</h1>
{_message(error, ok=False)}
<form id="login" class="stack" method="post" action="/ui/login">
<label for="token">Coordinator token
<input type="password" id="token" name="token" autocomplete="current-password" required></label>
<label for="name">Your name (for the audit record)
<input type="text" id="name" name="name" autocomplete="name" maxlength="100"></label>
<input type="hidden" name="next" value="{_e(next_path)}">
<button type="submit" id="login-submit">Log in</button>
</form>"""
    return _page("Log in", body)


# -- overview ----------------------------------------------------------------------------------


def _header(view: Mapping[str, Any], filters: Mapping[str, object], form: Form) -> str:
    return f"""<header class="top">
<h1>Coordinator</h1>
<span class="meta">version <span id="version">{_e(view.get("version", ""))}</span> ·
generated <span id="generated-at">{_time(view.get("generated_at"))}</span> UTC</span>
<a id="refresh" href="{_e(overview_url(filters))}">refresh</a>
<form id="logout" class="inline" method="post" action="/ui/logout">
<input type="hidden" name="csrf" value="{_e(form.csrf)}">
<button type="submit">Log out</button>
</form>
</header>"""


#: The counts' number columns (queries.TASK_COUNTS): key and heading. Fallback answers are
#: done tasks whose answer is not the model's (docs/design.md, tasks.fallback).
_COUNT_COLUMNS = (("last_hour", "Last hour"), ("all_time", "All time"),
                  ("fallbacks_last_hour", "Fallback, last hour"),
                  ("fallbacks_all_time", "Fallback, all time"))


def _count_cell(key: str, value: int) -> str:
    # A fallback answer is not the model's: worth a warning colour when there is one.
    if value and key.startswith("fallbacks_"):
        return f'<td class="num"><span class="warn">{value}</span></td>'
    return f'<td class="num">{value}</td>'


def _counts_table(counts: Sequence[Mapping[str, Any]]) -> str:
    rows = [f'<tr{_attrs({"data-task-type": c["task_type"], "data-status": c["status"]})}>'
            f'<td>{_e(c["task_type"])}</td><td>{_status_badge(c["status"])}</td>'
            + "".join(_count_cell(key, int(c[key])) for key, _ in _COUNT_COLUMNS) + "</tr>"
            for c in counts]
    totals = "".join(_count_cell(key, sum(int(c[key]) for c in counts))
                     for key, _ in _COUNT_COLUMNS)
    foot = (f'\n<tfoot><tr class="total" id="counts-total"><th scope="row" colspan="2">Total</th>'
            f"{totals}</tr></tfoot>")
    return _table("counts", ["Task type", "Status",
                             *((label, "num") for _, label in _COUNT_COLUMNS)],
                  rows, "no tasks yet", foot)


def _worker_row(w: Mapping[str, Any]) -> str:
    state = w.get("state", "")
    failures = int(w.get("db_write_failures") or 0)
    failures_html = (f'<span class="warn">{failures}</span>' if failures else "0")
    error = w.get("last_error")
    error_html = f'<span class="error">{_e(error)}</span>' if error else _DASH
    models = ", ".join(str(m) for m in w.get("models") or ())
    cells = [
        f'<td class="id">{_e(w["worker_id"])}</td>',
        f'<td><span class="state state-{_e(state)}">{_e(state)}</span></td>',
        # The action next to the state, so it is on screen without scrolling.
        f"<td>{_worker_action(w)}</td>",
        f'<td>{_v(w.get("host"))}</td>',
        f'<td>{_v(w.get("kind"))}</td>',
        f'<td class="num">{_e(age(w.get("seconds_since_heartbeat")))} ago</td>',
        f'<td class="num">{_e(w.get("in_flight", 0))}</td>',
        f'<td class="wrap">{_v(models)}</td>',
        f'<td>{_v(w.get("device"))}</td>',
        f'<td>{_v(w.get("os"))}</td>',
        f'<td>{_v(w.get("version"))}</td>',
        f'<td class="num">{failures_html}</td>',
        f'<td>{_time(w.get("drain_requested_at"))}</td>',
        f'<td class="wrap">{error_html}</td>',
    ]
    attrs = _attrs({"data-worker-id": w["worker_id"], "data-state": state})
    return f"<tr{attrs}>{''.join(cells)}</tr>"


def _workers_table(workers: Sequence[Mapping[str, Any]]) -> str:
    head = ["Worker", "State", "Action", "Host", "Kind", ("Heartbeat", "num"),
            ("In flight", "num"), "Models", "Device", "OS", "Version",
            ("DB write failures", "num"), "Drain requested", "Last error"]
    return _table("workers", head, (_worker_row(w) for w in workers), "no workers registered")


def _queues_table(queues: Sequence[Mapping[str, Any]], waiting: int) -> str:
    rows = [f'<tr{_attrs({"data-queue": q["queue"]})}>'
            f'<td class="id">{_e(q["queue"])}</td>'
            f'<td class="num">{_e(q.get("depth", 0))}</td>'
            f'<td class="num">{_e(q.get("in_flight", 0))}</td>'
            f'<td class="num">{_e(age(q.get("oldest_waiting_seconds")))}</td></tr>'
            for q in queues]
    # Waiting tasks have no alive worker to go to: worth a warning colour, not just a number.
    waiting_cls = ' class="warn"' if waiting else ""
    return (f'<p id="waiting">Tasks waiting for any alive worker: '
            f"<strong{waiting_cls}>{_e(waiting)}</strong></p>\n"
            + _table("queues", ["Queue", ("Depth", "num"), ("In flight", "num"),
                                ("Oldest waiting", "num")], rows, "no queues"))


def _select(name: str, options: Sequence[tuple[str, str]], current: object) -> str:
    selected = "" if current is None else str(current)
    if selected not in {value for value, _ in options}:
        # A current value no longer offered (a worker gone since) stays visible and selected,
        # so pressing Apply does not silently widen the filter.
        options = [*options, (selected, selected)]
    items = "".join(f'<option value="{_e(value)}"{" selected" if value == selected else ""}>'
                    f"{_e(label)}</option>" for value, label in options)
    return (f'<label for="filter-{name}">{_e(_FILTER_LABELS[name])}'
            f'<select id="filter-{name}" name="{name}">{items}</select></label>')


def _filters_form(filters: Mapping[str, object], choices: Mapping[str, Any]) -> str:
    selects = []
    for key in FILTER_KEYS:
        offered = choices.get(key) or ()
        if key == "since":
            options = [(str(value), str(label)) for value, label in offered]
        else:
            options = [(str(value), str(value)) for value in offered if str(value) != ""]
        if "" not in {value for value, _ in options}:
            options.insert(0, ("", "any"))
        selects.append(_select(key, options, filters.get(key)))
    return (f'<form id="filters" method="get" action="/ui">\n{chr(10).join(selects)}\n'
            '<button type="submit" id="apply-filters">Apply</button>\n'
            '<a id="clear-filters" href="/ui">clear</a>\n</form>')


def _task_row(t: Mapping[str, Any]) -> str:
    status = t.get("status", "")
    status_html = _status_badge(status) + _fallback_badge(t)
    status_cls = ' class="wrap"' if status == "failed" else ""  # room for the error text
    if status == "failed" and t.get("error"):
        status_html += f'<span class="error">{_e(_cut(str(t["error"]), _ROW_ERROR_CHARS))}</span>'
    if t.get("worker_id"):
        worker = _e(t["worker_id"])
        if t.get("worker_host"):
            worker += f' <span class="muted">on {_e(t["worker_host"])}</span>'
    else:
        worker = f'<span class="muted">{_v(t.get("worker"))}</span>'
    model = _v(t.get("model"))
    answered = t.get("answered_model")
    if answered and answered != t.get("model"):
        model += f' <span class="muted">→ {_e(answered)}</span>'
    cells = [
        f'<td class="id"><a href="{_e(_task_url(t["task_id"]))}">'
        f'{_e(_short(t["task_id"]))}</a></td>',
        f'<td>{_v(t.get("task_type"))}</td>',
        f"<td{status_cls}>{status_html}</td>",
        f"<td>{_task_action(t)}</td>",
        f"<td>{worker}</td>",
        f"<td>{model}</td>",
        f'<td class="num">{_e(t.get("attempts", ""))}/{_e(t.get("max_attempts", ""))}</td>',
        f'<td>{_v(t.get("queue"))}</td>',
        f'<td>{_time(t.get("created_at"))}</td>',
        f'<td>{_time(t.get("finished_at"))}</td>',
    ]
    attrs = _attrs({"data-task-id": t["task_id"], "data-status": status})
    return f"<tr{attrs}>{''.join(cells)}</tr>"


def _tasks_table(tasks: Sequence[Mapping[str, Any]]) -> str:
    head = ["Task", "Type", "Status", "Action", "Worker", "Model", ("Attempts", "num"),
            "Queue", "Created", "Finished"]
    return _table("tasks", head, (_task_row(t) for t in tasks), "no tasks match")


def overview_page(view: dict[str, Any], filters: dict[str, Any], choices: dict[str, Any],
                  form: Form, notice: str | None = None) -> str:
    tasks = view.get("tasks") or []
    more = (f'<p id="more" class="note">showing the newest {len(tasks)}</p>\n'
            if view.get("more") else "")
    body = f"""{_header(view, filters, form)}
{_message(notice, ok=True)}
<section id="workers-section">
<h2>Workers</h2>
{_workers_table(view.get("workers") or [])}
</section>
<section id="queues-section">
<h2>Queues</h2>
{_queues_table(view.get("queues") or [], int(view.get("waiting") or 0))}
</section>
<section id="counts-section">
<h2>Tasks by type and status</h2>
{_counts_table(view.get("counts") or [])}
</section>
<section id="tasks-section">
<h2>Tasks</h2>
{_filters_form(filters, choices)}
{more}{_tasks_table(tasks)}
</section>"""
    return _page("Overview", body)


# -- one task ----------------------------------------------------------------------------------


def _timeline(timeline: Sequence[Mapping[str, Any]]) -> str:
    if not timeline:
        return ('<p id="timeline" class="muted">no transitions recorded (older than the '
                "retention, or recorded before this version)</p>")
    items = []
    for entry in timeline:
        details = [f"{label} {_e(entry[key])}"
                   for key, label in (("status", "status"), ("worker_id", "worker"),
                                      ("queue", "queue"))
                   if entry.get(key)]
        if entry.get("reason"):
            details.append(f"reason: {_e(entry['reason'])}")
        detail = f' <span class="muted">{" · ".join(details)}</span>' if details else ""
        items.append(f'<li{_attrs({"data-event": entry.get("event", "")})}>'
                     f'{_time(entry.get("at"))} <strong>{_e(entry.get("event", ""))}</strong>'
                     f"{detail}</li>")
    return f'<ol id="timeline">\n{chr(10).join(items)}\n</ol>'


def _audit(audit: Sequence[Mapping[str, Any]]) -> str:
    if not audit:
        return ""
    rows = [f'<tr><td>{_time(a.get("at"))}</td><td>{_v(a.get("actor"))}</td>'
            f'<td>{_v(a.get("action"))}</td><td class="id">{_v(a.get("target"))}</td>'
            f'<td class="wrap">{_v(a.get("result"))}</td></tr>' for a in audit]
    table = _table("audit", ["At", "Actor", "Action", "Target", "Result"], rows, "")
    return f'<section id="audit-section">\n<h2>Audit</h2>\n{table}\n</section>'


def task_page(task: dict[str, Any], prompt: str, timeline: list[dict[str, Any]],
              audit: list[dict[str, Any]]) -> str:
    # The actions here are links to the confirmation page, whose form carries the Form.
    error = task.get("error")
    entries: list[tuple[str, str]] = [
        ("ID", f'<code>{_e(task["task_id"])}</code>'),
        ("Status", _status_badge(task.get("status", ""))),
    ]
    if error:
        # Right under the status, where a failure is looked for first.
        entries.append(("Error", f'<pre class="error" id="task-error">{_e(error)}</pre>'))
    entries += [
        ("Type", _v(task.get("task_type"))),
        ("Fallback", '<span class="fallback">fallback</span>' if task.get("fallback") else "no"),
        ("Model", _v(task.get("model"))),
        ("Answered model", _v(task.get("answered_model"))),
        ("Worker", _v(task.get("worker"))),
        ("Requested worker", _v(task.get("requested_worker"))),
        ("Worker id", _v(task.get("worker_id"))),
        ("Worker host", _v(task.get("worker_host"))),
        ("Queue", _v(task.get("queue"))),
        ("Attempts",
         f'{_e(task.get("attempts", ""))} of {_e(task.get("max_attempts", ""))}'),
        ("Created", _time(task.get("created_at"))),
        ("Started", _time(task.get("started_at"))),
        ("Finished", _time(task.get("finished_at"))),
    ]
    fields = "\n".join(f"<dt>{_e(label)}</dt><dd>{value}</dd>" for label, value in entries)
    action = _task_action(task)
    result = task.get("result")
    result_html = (f'<pre id="result">{_e(result)}</pre>' if result is not None
                   else '<p id="result" class="muted">no result</p>')
    body = f"""<header class="top">
<h1>Task <code>{_e(_short(task["task_id"]))}</code></h1>
<a id="back" href="/ui">back to the overview</a>
</header>
<div class="actions">{_status_badge(task.get("status", ""))}{_fallback_badge(task)}
{action}</div>
<dl id="task">
{fields}
</dl>
<section id="prompt-section">
<h2>Prompt</h2>
<pre id="prompt">{_e(prompt)}</pre>
</section>
<section id="result-section">
<h2>Result</h2>
{result_html}
</section>
<section id="timeline-section">
<h2>Timeline</h2>
{_timeline(timeline)}
</section>
{_audit(audit)}"""
    return _page(f"Task {_short(task['task_id'])}", body)


# -- confirmation and result -------------------------------------------------------------------


def confirm_page(action: str, target: str, question: str, form: Form, back: str) -> str:
    body = f"""<h1>Confirm</h1>
<p id="question">{_e(question)}</p>
<form id="confirm-form" method="post" action="/ui/action">
<input type="hidden" name="action" value="{_e(action)}">
<input type="hidden" name="target" value="{_e(target)}">
<input type="hidden" name="csrf" value="{_e(form.csrf)}">
<input type="hidden" name="idempotency_key" value="{_e(form.idempotency_key)}">
<div class="actions">
<button type="submit" id="confirm">{_e(action.capitalize())}</button>
<a id="cancel" href="{_e(_local(back))}">Go back</a>
</div>
</form>"""
    return _page("Confirm", body)


def result_page(title: str, message: str, ok: bool, back: str) -> str:
    body = f"""<h1>{_e(title)}</h1>
{_message(message or _DASH, ok)}
<p><a id="back" href="{_e(_local(back))}">Go back</a></p>"""
    return _page(title, body)
