"""``python -m coordinator status`` (run from ``files/``): the Coordinator's workers, queues and
latest failures in a terminal, read from its API (``GET /workers``, ``/queues``, ``/tasks``).

The address is ``--url``, else ``COORDINATOR_URL``, else this host's Coordinator as its own
environment (``COORDINATOR_BIND``, ``COORDINATOR_PORT``) or the defaults of ``config``
describe it; with a CA file (``--ca-file`` or ``COORDINATOR_CA_FILE``) over HTTPS, its
certificate verified against that CA. The token is read from ``COORDINATOR_TOKEN`` or
``--token-file`` (a file holding the token, or the service's environment file with its
``COORDINATOR_TOKEN=`` line), never from the command line, where ``ps`` would show it. Only
the standard library is used.

Formatting (``format_*``) is pure and separate from the requests (``fetch_status``). A
failure prints one line on stderr saying what to do and exits 1; bad arguments exit 2.
"""

from __future__ import annotations

import argparse
import http.client
import json
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from coordinator_contract import (
    COORDINATOR_CA_FILE_ENV,
    coordinator_tls_problem,
    coordinator_url_problem,
    first_line,
)

from .config import DEFAULT, split_addresses
from .pages import age, probe_outcome, when

PROG = "python -m coordinator status"
DASH = "-"
ERROR_WIDTH = 60  # a worker's last error and last probe, in the workers table
FAILURE_WIDTH = 100  # a failed task's error, the last column of its table
MAX_FAILURES = 500  # GET /tasks's own limit
WILDCARD_BINDS = ("", "0.0.0.0", "::", "[::]")

Row = Mapping[str, Any]


class StatusError(Exception):
    """A request that did not give an answer to show; the message is one line."""


# -- formatting (pure) -------------------------------------------------------------------------


def clean(value: object) -> str:
    """``value`` as one line of printable text (a dash for None): an error text or a worker's
    name must not move the terminal's cursor or break the table."""
    if value is None:
        return DASH
    text = " ".join(str(value).split())
    return "".join(c if c.isprintable() else "?" for c in text) or DASH


def cut(text: str, width: int) -> str:
    """``text`` of at most ``width`` characters, ending in ``...`` when it was cut."""
    if len(text) <= width:
        return text
    return text[:max(0, width - 3)].rstrip() + "..."


def table(headers: Sequence[str], rows: Sequence[Sequence[str]],
          right: Sequence[int] = ()) -> str:
    """Columns two spaces apart, each as wide as its widest cell; the columns whose indexes
    are in ``right`` (numbers) are right-aligned. No trailing spaces."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])


def heartbeat_age(seconds: float | None) -> str:
    return DASH if seconds is None else f"{age(seconds)} ago"


def format_workers(rows: Sequence[Row]) -> str:
    """The workers table (GET /workers' ``workers``)."""
    if not rows:
        return "no worker has registered"
    headers = ("id", "host", "kind", "state", "heartbeat", "in flight", "version",
               "last probe (UTC)", "probe", "last error")
    cells = [(clean(w.get("worker_id")), clean(w.get("host")), clean(w.get("kind")),
              clean(w.get("state")), heartbeat_age(w.get("seconds_since_heartbeat")),
              clean(w.get("in_flight")), clean(w.get("version")), moment(w.get("probe_at")),
              cut(clean(first_line(probe_outcome(w), DASH)), ERROR_WIDTH),
              cut(clean(first_line(w.get("last_error"), DASH)), ERROR_WIDTH)) for w in rows]
    return table(headers, cells, right=(5,))


def format_queues(answer: Mapping[str, Any]) -> str:
    """The queues table and the count of tasks waiting for a worker (GET /queues)."""
    rows = answer.get("queues") or []
    waiting = answer.get("waiting", 0)
    note = (f"waiting for a worker (no queue yet): {waiting}" if waiting
            else "waiting for a worker (no queue yet): none")
    if not rows:
        return "no queue\n" + note
    cells = [(clean(r.get("queue")), clean(r.get("depth")), clean(r.get("in_flight")),
              clean(r.get("queued"))) for r in rows]
    return table(("queue", "depth", "in flight", "queued"), cells, right=(1, 2, 3)) + \
        "\n" + note


def moment(iso: str | None) -> str:
    """A timestamp as ``YYYY-MM-DD HH:MM:SS`` UTC (as the status page shows it); a dash."""
    return clean(when(iso)) if iso else DASH


def short_id(task_id: object) -> str:
    """The first group of a task's UUID: enough to tell recent tasks apart."""
    return clean(task_id).split("-")[0]


def format_failures(answer: Mapping[str, Any]) -> str:
    """The most recent failed tasks, newest first (GET /tasks?status=failed)."""
    rows = answer.get("tasks") or []
    if not rows:
        return "no failed task"
    cells = [(moment(t.get("finished_at") or t.get("created_at")), short_id(t.get("task_id")),
              clean(t.get("task_type")),
              clean(t.get("worker_id") or t.get("worker")),
              f"{clean(t.get('attempts'))}/{clean(t.get('max_attempts'))}",
              cut(clean(first_line(t.get("error"), DASH)), FAILURE_WIDTH)) for t in rows]
    text = table(("time (UTC)", "id", "type", "worker", "attempts", "error"), cells)
    if answer.get("more"):
        text += "\n(older failures exist: GET /tasks?status=failed or the status page /ui)"
    return text


def format_summary(url: str, workers: Mapping[str, Any]) -> str:
    """One line: where, and how many workers in each state."""
    rows = workers.get("workers") or []
    states = Counter(clean(w.get("state")) for w in rows)
    by_state = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    ttl = workers.get("heartbeat_ttl")
    ttl_text = f"; heartbeat TTL {ttl:g} s" if isinstance(ttl, int | float) else ""
    return (f"Coordinator at {clean(url)}: {len(rows)} worker(s)"
            f"{f' ({by_state})' if by_state else ''}{ttl_text}")


def format_status(url: str, answers: Mapping[str, Mapping[str, Any]]) -> str:
    """The whole view: summary, workers, queues, and (if asked for) the failures."""
    parts = [format_summary(url, answers["workers"]), "",
             "WORKERS", format_workers(answers["workers"].get("workers") or []), "",
             "QUEUES", format_queues(answers["queues"])]
    if "tasks" in answers:
        parts += ["", "RECENT FAILURES (newest first)", format_failures(answers["tasks"])]
    return "\n".join(parts)


# -- requests ----------------------------------------------------------------------------------


def default_url(environ: Mapping[str, str]) -> str:
    """This host's Coordinator: as its environment binds it, else as ``config.DEFAULT`` does
    (a wildcard bind is reached on the loopback address); https:// when it serves HTTPS or a
    CA file to verify it is given."""
    addresses = split_addresses((environ.get("COORDINATOR_BIND") or "").strip() or DEFAULT.bind)
    # A loopback address when the service listens on one, else the first.
    bind = next((a for a in addresses if a.startswith("127.") or a == "::1"), addresses[0])
    if bind in WILDCARD_BINDS:
        bind = "127.0.0.1"
    if ":" in bind and not bind.startswith("["):
        bind = f"[{bind}]"
    port = (environ.get("COORDINATOR_PORT") or "").strip()
    scheme = ("https" if (environ.get("COORDINATOR_TLS_CERT") or "").strip()
              or (environ.get(COORDINATOR_CA_FILE_ENV) or "").strip() else "http")
    return f"{scheme}://{bind}:{port if port.isdigit() else DEFAULT.port}"


def check_url(url: str) -> str:
    """``url`` without a trailing slash, or StatusError when it is no http(s) address."""
    example = default_url({})
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
    except ValueError as exc:
        raise StatusError(f"invalid Coordinator URL {url!r} ({exc}): use e.g. {example} "
                          "(--url or COORDINATOR_URL)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise StatusError(f"invalid Coordinator URL {url!r}: use e.g. {example} "
                          "(--url or COORDINATOR_URL)")
    return url.rstrip("/")


def read_token_file(path: str) -> str:
    """The token in ``path``: its ``COORDINATOR_TOKEN=`` line (the service's environment
    file, systemd quoting), else the whole file. ValueError says what is wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    for line in text.splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name.strip() == "COORDINATOR_TOKEN":
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
            token = value
            break
    else:
        token = text.strip()
    if not token:
        raise ValueError(f"{path} holds no token")
    return token


def tls_context(ca_file: str | None) -> ssl.SSLContext | None:
    """The context that verifies the Coordinator's certificate against ``ca_file``; None
    (the system's CA store) without one. StatusError when the file cannot be read."""
    if not ca_file:
        return None
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        why = getattr(exc, "strerror", None) or clean(exc)
        raise StatusError(f"cannot read the CA file {ca_file} ({why}): use the cluster CA's "
                          f"ca.crt (--ca-file or {COORDINATOR_CA_FILE_ENV}, docs/tls.md)"
                          ) from None


def get_json(url: str, path: str, token: str | None, timeout: float,
             ca_file: str | None = None) -> Any:
    """GET ``url + path``; the decoded JSON answer, or StatusError with the line to print."""
    headers = {"Accept": "application/json", "User-Agent": "coordinator-status"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url + path, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout,
                                    context=tls_context(ca_file)) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        raise StatusError(http_error_line(exc.code, exc.reason, exc.read(), path)) from None
    except urllib.error.URLError as exc:
        raise StatusError(unreachable(url, exc.reason, ca_file)) from None
    except (OSError, http.client.HTTPException) as exc:  # timeouts, resets while reading
        raise StatusError(unreachable(url, exc, ca_file)) from None
    except ValueError as exc:  # http.client.InvalidURL and the like
        raise StatusError(f"invalid Coordinator URL {url!r} ({exc}): use e.g. "
                          f"{default_url({})} (--url or COORDINATOR_URL)") from None
    try:
        return json.loads(body)
    except ValueError:
        raise StatusError(
            f"{url}{path} did not answer JSON ({clean(body[:60].decode('utf-8', 'replace'))!r}"
            "): check that COORDINATOR_URL (or --url) is the Coordinator's address") from None


def unreachable(url: str, reason: object, ca_file: str | None = None) -> str:
    why = getattr(reason, "strerror", None) or clean(reason) or type(reason).__name__
    fix = (coordinator_tls_problem(url, f"{why} {reason!r}", ca_file)
           or "check COORDINATOR_URL (or --url) and that the service runs")
    return f"coordinator not reachable at {url} ({why}): {fix}"


def http_error_line(status: int, reason: object, body: bytes, path: str) -> str:
    if status == 401:
        return ("the Coordinator refused the token (401): set COORDINATOR_TOKEN or "
                "--token-file to its token")
    try:
        message = json.loads(body).get("error")
    except (ValueError, AttributeError):
        message = None
    if not message:
        text = body.decode("utf-8", "replace")
        message = clean(first_line(text, DASH)) if body.strip() else clean(reason)
    return f"GET {path} answered {status}: {cut(clean(first_line(message, DASH)), 300)}"


def fetch_status(url: str, token: str | None, failures: int, timeout: float,
                 ca_file: str | None = None) -> dict[str, Any]:
    """The answers of GET /workers, /queues and (unless ``failures`` is 0) the newest
    ``failures`` failed tasks, by name."""
    problem = coordinator_url_problem(url, ca_file)
    if problem:
        raise StatusError(problem)
    tls_context(ca_file)  # a CA file that cannot be read says so before any request
    answers = {"workers": get_json(url, "/workers", token, timeout, ca_file),
               "queues": get_json(url, "/queues", token, timeout, ca_file)}
    if failures:
        answers["tasks"] = get_json(url, f"/tasks?status=failed&limit={failures}", token,
                                    timeout, ca_file)
    return answers


# -- command line ------------------------------------------------------------------------------


def failure_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value <= MAX_FAILURES:
        raise argparse.ArgumentTypeError(f"use 0 to {MAX_FAILURES} (0: none), not {value}")
    return value


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"use more than 0 seconds, not {text}")
    return value


def parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False,  # no --token: a token must not be an argument
        description="Show the Coordinator's workers, queues and latest failures.",
        epilog="The token comes from COORDINATOR_TOKEN or --token-file, never from the "
               "command line (ps would show it).")
    p.add_argument("--url", help="the Coordinator's address (default: COORDINATOR_URL, else "
                                 f"{default_url(environ)})")
    p.add_argument("--token-file", metavar="PATH",
                   help="file with the token, or the service's environment file "
                        "(its COORDINATOR_TOKEN= line); default: COORDINATOR_TOKEN")
    p.add_argument("--ca-file", metavar="PATH",
                   default=environ.get(COORDINATOR_CA_FILE_ENV) or None,
                   help="CA certificate to verify an https:// Coordinator against (the "
                        f"cluster CA's ca.crt; default: {COORDINATOR_CA_FILE_ENV})")
    p.add_argument("--failures", metavar="N", type=failure_count, default=5,
                   help="how many of the newest failed tasks to show (default 5; 0: none)")
    p.add_argument("--json", action="store_true",
                   help="print the API's answers as one JSON object instead")
    p.add_argument("--timeout", metavar="SECONDS", type=positive_seconds, default=10.0,
                   help="of each request (default 10)")
    return p


def main(argv: list[str], environ: Mapping[str, str], out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    """Run ``python -m coordinator status`` with ``argv`` (after ``status``); the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    p = parser(environ)
    args = p.parse_args(argv)
    token = environ.get("COORDINATOR_TOKEN") or None
    if args.token_file is not None:
        try:
            token = read_token_file(args.token_file)
        except ValueError as exc:
            p.error(f"argument --token-file: {exc}")
    url = (args.url or environ.get("COORDINATOR_URL", "").strip()
           or default_url({**environ, **({COORDINATOR_CA_FILE_ENV: args.ca_file}
                                         if args.ca_file else {})}))
    try:
        url = check_url(url)
        answers = fetch_status(url, token, args.failures, args.timeout, args.ca_file)
    except StatusError as exc:
        print(f"coordinator status: {exc}", file=err)
        return 1
    if args.json:
        print(json.dumps(answers, indent=2, ensure_ascii=False), file=out)
    else:
        print(format_status(url, answers), file=out)
    return 0
