"""The Coordinator's status page: HTML rendering only, no I/O.

Each ``*_page`` function takes plain data (tasks as ``api_models.Task`` or a mapping of the
same fields, dicts, ISO-8601 strings) that the handlers (``ui``) have already queried and
renders its Jinja2 template (``templates/``) into one complete HTML5 document. The
environment autoescapes every value, in text and in attributes alike; URLs built from data
have their parts percent-encoded first.

The pages are served under the CSP of ``ui.HEADERS``, so nothing here uses JavaScript, inline
``style=`` attributes or anything from another origin: the one stylesheet is
``static/style.css``, served by the app at ``STYLESHEET``. Every action (drain, retry, cancel,
…) is a plain link to ``/ui/confirm``, whose page posts a form carrying the session's CSRF
token and a fresh idempotency key (``Form``). The ``id`` and ``data-*`` attributes are stable
hooks for the browser tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2

#: Where the status page lives; every link of its pages starts with it.
PREFIX = "/ui"
HERE = Path(__file__).resolve().parent
#: The files ``ui`` serves as they are (the stylesheet), under STATIC_PATH.
STATIC = HERE / "static"
STATIC_PATH = f"{PREFIX}/static"
STYLESHEET = f"{STATIC_PATH}/style.css"

#: The overview's filters, in the order they appear in the form and in URLs.
FILTER_KEYS = ("status", "task_type", "worker", "since")
_FILTER_LABELS = {"status": "Status", "task_type": "Task type", "worker": "Worker",
                  "since": "Since"}
#: Worker states whose worker can be drained; a dead or stopped one has nothing to drain.
_DRAINABLE = frozenset(("alive", "duplicate"))
_DRAINED = frozenset(("draining", "drained"))
#: The counts' number columns (SQL.TASK_COUNTS): key and heading. Fallback answers are
#: done tasks whose answer is not the model's (docs/design.md, tasks.fallback).
COUNT_COLUMNS = (("last_hour", "Last hour"), ("all_time", "All time"),
                 ("fallbacks_last_hour", "Fallback, last hour"),
                 ("fallbacks_all_time", "Fallback, all time"))
DASH = "—"


@dataclass(frozen=True)
class Form:
    """What every action form carries: the CSRF token of the session and a fresh idempotency key."""

    csrf: str
    idempotency_key: str


# -- what the templates call -------------------------------------------------------------------


def age(seconds: float | None) -> str:
    """A duration, compactly: ``3.2 s``, ``4 min``, ``2 h``, ``3 d``; a dash for none."""
    if seconds is None:
        return DASH
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
        return DASH
    try:
        moment = datetime.fromisoformat(str(iso))
    except ValueError:
        return str(iso)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def probe_outcome(worker: Mapping[str, Any]) -> str:
    """A worker's last probe (GET /workers' ``probe_*``) in words: ``ok in 0.4 s``,
    ``failed: <why>``, or ``not probed yet``; its time is shown beside it."""
    ok = worker.get("probe_ok")
    if ok is None:
        return "not probed yet"
    if ok:
        return f"ok in {age(worker.get('probe_seconds'))}"
    return f"failed: {worker.get('probe_error') or 'no reason given'}"


def local(url: str) -> str:
    """``url`` if it is a path on this site, else ``/ui``.

    A back link is often built from what the browser sent; a full URL or ``//host`` there would
    make the page an open redirect, so only a same-site path is linked.
    """
    if url.startswith("/") and not url.startswith(("//", "/\\")):
        return url
    return PREFIX


def short(task_id: object) -> str:
    """The first 8 characters of an id: enough to tell tasks apart in a table on a phone."""
    text = str(task_id)
    return text if len(text) <= 9 else text[:8] + "…"


def cut(text: object, limit: int) -> str:
    """``text`` cut to ``limit`` characters, before escaping, so no entity is cut in half."""
    text = str(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def task_url(task_id: object) -> str:
    return f"{PREFIX}/task/" + quote(str(task_id), safe="")


def confirm_url(action: str, target: object) -> str:
    return f"{PREFIX}/confirm?" + urlencode({"action": action, "target": str(target)})


def task_action(task: Any) -> str | None:
    """Retry for a failed task, Cancel for a queued one; a running or done task has none."""
    return {"failed": "retry", "queued": "cancel"}.get(_field(task, "status"))


def worker_action(worker: Mapping[str, Any]) -> str | None:
    state = worker.get("state")
    if state in _DRAINED:
        return "undrain"
    return "drain" if state in _DRAINABLE else None


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
    return f"{PREFIX}?" + urlencode(params) if params else PREFIX


def transition_details(entry: Mapping[str, Any]) -> list[str]:
    """What a timeline entry says besides its event: its status, worker, queue and reason."""
    details = [f"{label} {entry[key]}" for key, label in (("status", "status"),
                                                          ("worker_id", "worker"),
                                                          ("queue", "queue")) if entry.get(key)]
    if entry.get("reason"):
        details.append(f"reason: {entry['reason']}")
    return details


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
    undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
)
ENV.filters.update(age=age, when=when, local=local, short=short, cut=cut, task_url=task_url,
                   probe_outcome=probe_outcome)
ENV.globals.update(
    ui=PREFIX, stylesheet=STYLESHEET, dash=DASH, confirm_url=confirm_url,
    task_action=task_action, worker_action=worker_action, overview_url=overview_url,
    transition_details=transition_details,
    count_columns=COUNT_COLUMNS, count_heads=[(label, "num") for _, label in COUNT_COLUMNS],
)


def _render(template: str, **context: Any) -> str:
    return ENV.get_template(template).render(**context)


# -- the pages ---------------------------------------------------------------------------------


def login_page(error: str | None, next_path: str) -> str:
    return _render("login.html", error=error, next_path=next_path)


def _filter_options(filters: Mapping[str, object], choices: Mapping[str, Any]
                    ) -> list[tuple[str, str, list[tuple[str, str]], str]]:
    """Each filter's (name, label, options as (value, label), the selected value)."""
    selects = []
    for key in FILTER_KEYS:
        offered = choices.get(key) or ()
        if key == "since":
            options = [(str(value), str(label)) for value, label in offered]
        else:
            options = [(str(value), str(value)) for value in offered if str(value) != ""]
        if "" not in {value for value, _ in options}:
            options.insert(0, ("", "any"))
        current = filters.get(key)
        selected = "" if current is None else str(current)
        if selected not in {value for value, _ in options}:
            # A current value no longer offered (a worker gone since) stays visible and
            # selected, so pressing Apply does not silently widen the filter.
            options.append((selected, selected))
        selects.append((key, _FILTER_LABELS[key], options, selected))
    return selects


def overview_page(view: dict[str, Any], filters: dict[str, Any], choices: dict[str, Any],
                  form: Form, notice: str | None = None) -> str:
    counts = view.get("counts") or []
    totals = {key: sum(int(c[key]) for c in counts) for key, _ in COUNT_COLUMNS}
    return _render("overview.html", view=view, filters=filters, form=form, notice=notice,
                   counts=counts, totals=totals, workers=view.get("workers") or [],
                   queues=view.get("queues") or [], waiting=int(view.get("waiting") or 0),
                   tasks=view.get("tasks") or [],
                   notifications=view.get("notifications") or [],
                   selects=_filter_options(filters, choices))


def task_page(task: Any, prompt: str, timeline: Sequence[Mapping[str, Any]],
              audit: Sequence[Mapping[str, Any]]) -> str:
    return _render("task.html", task=task, prompt=prompt, timeline=timeline, audit=audit)


def confirm_page(action: str, target: str, question: str, form: Form, back: str) -> str:
    return _render("confirm.html", action=action, target=target, question=question, form=form,
                   back=back)


def result_page(title: str, message: str, ok: bool, back: str) -> str:
    return _render("result.html", title=title, message=message or DASH, ok=ok, back=back)
