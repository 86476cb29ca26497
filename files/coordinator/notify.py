"""Notifications without Prometheus: a JSON POST to the one URL the user sets
(COORDINATOR_NOTIFY_URL), in the shape COORDINATOR_NOTIFY_FORMAT names (ntfy, discord, slack
or json), when a worker fails its last two probes, when a shared queue (``tasks:web``) has no
alive consumer, when a worker is dead, and once again when each recovers.

The Notifier reads what the Reaper (``workers.dead``) and the Prober (the probe rows) recorded
in PostgreSQL, never the task path. A pass runs every few seconds in each Coordinator and
decides only where it holds ``pg_try_advisory_xact_lock``; the ``notifications`` table is the
record: a subject's last row says what was last sent about it, so a notification is written
once whatever the number of instances, and a row is claimed for a lease before it is sent, so
no two instances send it. This is simpler than electing a sender: any instance may die, the
next pass of another one goes on from the rows. A subject's problem is sent at most once per
COORDINATOR_NOTIFY_GAP (its recovery then follows once, whenever it comes); a failed send is
retried with exponential backoff, and its error shown on the status page.

The URL holds the secret (an ntfy topic, a webhook's token): it is logged by host only, and
no body carries a token, password or DSN (the messages name workers, hosts and queues).
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from coordinator_contract import PROBE_TYPE, SHARED_QUEUES
from coordinator_sql import SQL, parameters
from psycopg.rows import class_row

from . import queries as q
from .background import Background
from .errors import first_line

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

    from .config import Config

log = logging.getLogger("coordinator.notify")

#: ``pg_try_advisory_xact_lock`` key: a pass decides only where it holds it.
NOTIFY_LOCK_KEY = 0x6E6F74696679  # "notify"
#: Rows kept besides each subject's last (which says what was last sent about it).
NOTIFICATIONS_KEPT = 200
#: How long a claimed row is another instance's: longer than a send with its timeout.
LEASE = 60.0
SEND_TIMEOUT = 10.0
#: Sends of a row before it is given up (the status page shows its last error).
MAX_SENDS = 8


@dataclass(frozen=True)
class Condition:
    """A problem present now (a row of ``SQL.NOTIFY_CONDITIONS``)."""

    what: str  # dead | unhealthy | no_consumer
    target: str  # the worker id, or the queue
    host: str | None
    kind: str | None
    detail: str | None

    @property
    def subject(self) -> str:
        return f"{self.what}:{self.target}"

    @property
    def message(self) -> str:
        worker = f"{self.kind} worker '{self.target}' on host '{self.host}'"
        if self.what == "dead":
            return f"{worker} is dead: it has sent no heartbeat since {self.detail}"
        if self.what == "unhealthy":
            return f"{worker} failed its last two probes: {self.detail}"
        return (f"no alive worker consumes {self.target}: its tasks wait, then fail; "
                "start its worker")


@dataclass(frozen=True)
class Last:
    """What was last written about a subject (a row of ``SQL.LAST_NOTIFICATIONS``)."""

    subject: str
    problem: bool
    message: str
    age: float  # seconds since it was written


@dataclass(frozen=True)
class Notification:
    """A notification to send (a row of ``SQL.CLAIM_NOTIFICATIONS``)."""

    notification_id: int
    subject: str
    problem: bool
    message: str
    created_at: datetime
    attempts: int


def decide(conditions: Iterable[Condition], last: Mapping[str, Last],
           gap: float) -> list[tuple[str, bool, str]]:
    """The notifications to write, (subject, problem, message): a problem not sent yet
    (unless one of the subject was sent within ``gap`` seconds), and a recovery of each
    problem sent that is gone."""
    now = {c.subject: c for c in conditions}
    new = [(s, True, c.message) for s, c in sorted(now.items())
           if s not in last or (not last[s].problem and last[s].age >= gap)]
    recovered = [(s, False, f"recovered: {sent.message}") for s, sent in sorted(last.items())
                 if sent.problem and s not in now]
    return new + recovered


def body(fmt: str, url: str, notification: Notification) -> dict[str, Any]:
    """The JSON a receiver of ``fmt`` takes (docs/operating.md shows each)."""
    title = ("Cluster problem" if notification.problem else "Cluster recovered")
    text = f"{title}: {notification.message}"
    if fmt == "ntfy":
        # ntfy takes JSON at the server's root, its topic in the body: the URL's last part.
        topic = urllib.parse.urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1]
        return {"topic": topic, "title": title, "message": notification.message,
                "tags": ["warning" if notification.problem else "white_check_mark"],
                "priority": 4 if notification.problem else 3}
    if fmt == "discord":
        return {"content": text[:2000]}  # Discord refuses a longer content
    if fmt == "slack":
        return {"text": text}
    return {"subject": notification.subject,
            "state": "problem" if notification.problem else "recovered",
            "message": notification.message, "at": notification.created_at.isoformat()}


def target(fmt: str, url: str) -> str:
    """Where the POST goes: ntfy's JSON API is the server's root (the topic's parent, for a
    server under a path), the others the URL."""
    if fmt == "ntfy":
        parts = urllib.parse.urlsplit(url)
        root = parts.path.rstrip("/").rsplit("/", 1)[0] + "/"
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, root, "", ""))
    return url


def host_of(url: str) -> str:
    """The URL's host, the only part of it logged or shown (the rest may be the secret)."""
    return urllib.parse.urlsplit(url).hostname or "(no host)"


def post(url: str, payload: dict[str, Any]) -> None:
    """POST ``payload`` as JSON; raise ``OSError`` with a reason free of the URL."""
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "coordinator"})
    try:
        with urllib.request.urlopen(request, timeout=SEND_TIMEOUT) as answer:
            answer.read(1024)
    except urllib.error.HTTPError as exc:
        raise OSError(f"{host_of(url)} answered HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise OSError(f"{host_of(url)} not reachable: {reason}") from None


def retry_in(attempts: int, base: float) -> float | None:
    """Seconds before the next send of a row sent ``attempts`` times; None: given up."""
    return None if attempts >= MAX_SENDS else min(base * 2 ** (attempts - 1), 3600.0)


class Notifier(Background):
    task_name = "notifier"
    #: The first retry's delay (doubled at each); tests shorten it.
    retry_base = 10.0

    def __init__(self, cfg: Config, pool: psycopg_pool.AsyncConnectionPool) -> None:
        assert cfg.notify_url is not None
        self.cfg = cfg
        self.url: str = cfg.notify_url
        self.pool = pool
        self.tick = cfg.heartbeat_interval

    async def _run(self) -> None:
        log.info("notifications go to %s as %s", host_of(self.url), self.cfg.notify_format)
        while True:
            try:
                await self.run_once()
            except Exception as exc:
                log.warning("notification pass failed: %s: %s", type(exc).__name__,
                            first_line(exc))
            await asyncio.sleep(self.tick)

    async def run_once(self) -> list[Notification]:
        """Write what changed and claim what is due, under the lock; then send the claimed
        rows, outside any transaction. Answers the rows sent (or tried)."""
        async with self.pool.connection() as conn, conn.transaction():
            cur = conn.cursor(row_factory=class_row(q.Lock))
            await cur.execute(q.REAPER_LOCK, {"key": NOTIFY_LOCK_KEY})
            lock = await cur.fetchone()
            if lock is None or not lock.held:
                return []
            due = await self._decide(conn)
        # At once: the last send ends within one SEND_TIMEOUT, well inside its lease.
        await asyncio.gather(*(self._send(notification) for notification in due))
        return due

    async def _decide(self, conn: psycopg.AsyncConnection) -> list[Notification]:
        params = {"ttl": self.cfg.heartbeat_ttl, "probe_type": PROBE_TYPE,
                  "watched_queues": list(SHARED_QUEUES), "lease": LEASE,
                  "notifications_kept": NOTIFICATIONS_KEPT}

        async def run(statement: str, row: type) -> list:
            cur = conn.cursor(row_factory=class_row(row))
            await cur.execute(statement, {n: params[n] for n in parameters(statement)})
            return await cur.fetchall()

        conditions = await run(SQL.NOTIFY_CONDITIONS, Condition)
        last = {row.subject: row for row in await run(SQL.LAST_NOTIFICATIONS, Last)}
        for subject, problem, message in decide(conditions, last, self.cfg.notify_gap):
            await conn.execute(SQL.INSERT_NOTIFICATION,
                               {"subject": subject, "problem": problem, "message": message})
        await conn.execute(SQL.PRUNE_NOTIFICATIONS, params)
        return await run(SQL.CLAIM_NOTIFICATIONS, Notification)

    async def _send(self, notification: Notification) -> None:
        fmt = self.cfg.notify_format
        try:
            await asyncio.to_thread(post, target(fmt, self.url),
                                    body(fmt, self.url, notification))
        except OSError as exc:
            again = retry_in(notification.attempts, self.retry_base)
            log.warning("notification '%s' not delivered (send %d): %s; %s", notification.subject,
                        notification.attempts, exc,
                        f"retried in {again:g} s" if again is not None else "given up")
            params = {"notification_id": notification.notification_id, "error": str(exc),
                      "retry_in": again}
            statement = SQL.NOTIFICATION_FAILED
        else:
            log.info("notification '%s' delivered to %s", notification.subject,
                     host_of(self.url))
            params = {"notification_id": notification.notification_id}
            statement = SQL.NOTIFICATION_DELIVERED
        async with self.pool.connection() as conn:
            await conn.execute(statement, params)
