"""Overview: what the status page, ``GET /tasks`` and ``python -m coordinator status`` show,
read from PostgreSQL and Redis on every request (nothing is kept in memory, so a restarted
Coordinator shows the same)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg_pool
from coordinator_contract import TASK_TYPES
from coordinator_sql import SQL
from psycopg.rows import dict_row

from . import INSTANCE, __version__
from . import queries as q
from . import statemachine as sm
from .api_models import Task
from .stats import Stats
from .tasks import task_view
from .workers import Workers

#: ``since`` filter values, as the page offers them (value, label, seconds; None: all time).
SINCE = (("1h", "last hour", 3600), ("24h", "last day", 86400), ("7d", "last week", 604800),
         ("", "all time", None))
SINCE_SECONDS = {value: seconds for value, _, seconds in SINCE}
SINCE_VALUES = tuple(value for value in SINCE_SECONDS if value)
LIST_LIMIT = 100
#: The last notifications the status page shows.
NOTIFICATIONS_SHOWN = 10


@dataclass(frozen=True)
class TaskFilter:
    status: str | None = None
    task_type: str | None = None
    worker: str | None = None  # the worker that claimed it, or the one it is queued for
    since: str | None = None  # a key of SINCE_SECONDS

    def checked(self) -> tuple[TaskFilter, list[str]]:
        """The filter without its wrong parts, and what was wrong, one line each."""
        wrong = []
        status, task_type, since = self.status, self.task_type, self.since
        if status is not None and status not in sm.STATUSES:
            wrong.append(f"status {status!r} is not one of {', '.join(sm.STATUSES)}")
            status = None
        if task_type is not None and task_type not in TASK_TYPES:
            wrong.append(f"task_type {task_type!r} is not one of {', '.join(TASK_TYPES)}")
            task_type = None
        if since is not None and since not in SINCE_SECONDS:
            wrong.append(f"since {since!r} is not one of "
                         f"{', '.join(v for v in SINCE_SECONDS if v)} (or empty: all time)")
            since = None
        return TaskFilter(status, task_type, self.worker, since), wrong

    def params(self, limit: int) -> dict[str, Any]:
        return {"status": self.status, "task_type": self.task_type, "worker": self.worker,
                "seconds": SINCE_SECONDS.get(self.since or ""), "limit": limit + 1,
                **q.USERS_ONLY}

    def as_dict(self) -> dict[str, str | None]:
        return {"status": self.status, "task_type": self.task_type, "worker": self.worker,
                "since": self.since}


@dataclass(frozen=True)
class TaskInFull:
    """What the status page shows of one task: the task, its prompt, its timeline (oldest
    first) and the actions taken on it."""

    task: Task
    prompt: str
    timeline: list[dict[str, Any]]
    audit: list[dict[str, Any]]


class Overview:
    def __init__(self, pool: psycopg_pool.AsyncConnectionPool, stats: Stats,
                 workers: Workers) -> None:
        self.pool = pool
        self.stats = stats
        self.workers = workers

    async def cluster(self) -> dict[str, Any]:
        """Counts, workers and queues (the top of the page)."""
        queues = await self.stats.queues()
        async with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(SQL.TASK_COUNTS, q.USERS_ONLY)
            counts = await cur.fetchall()
            cur = await conn.execute(SQL.OLDEST_WAITING, q.USERS_ONLY)
            oldest = dict(await cur.fetchall())
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(SQL.RECENT_NOTIFICATIONS, {"limit": NOTIFICATIONS_SHOWN})
            notifications = [dict(r, created_at=q.iso(r["created_at"]),
                                  delivered_at=q.iso(r["delivered_at"]))
                             for r in await cur.fetchall()]
            now = await (await conn.execute("SELECT clock_timestamp()")).fetchone()
        return {
            "generated_at": q.iso(now[0]), "version": __version__, "instance": INSTANCE,
            "counts": counts,
            "workers": await self.workers.list(),
            "queues": [{"queue": queue["queue"], "depth": queue["depth"],
                        "in_flight": queue["in_flight"],
                        "oldest_waiting_seconds": oldest.get(queue["queue"])}
                       for queue in queues["queues"]],
            "waiting": queues["waiting"],
            "notifications": notifications,
        }

    async def tasks(self, where: TaskFilter, limit: int = LIST_LIMIT) -> tuple[list[Task], bool]:
        """The newest tasks that match, and whether there are more."""
        async with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(SQL.LIST_TASKS, where.params(limit))
            rows = await cur.fetchall()
        return [task_view(r) for r in rows[:limit]], len(rows) > limit

    async def task(self, task_id: uuid.UUID) -> TaskInFull | None:
        """One task in full, or None."""
        async with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(SQL.TASK_IN_FULL, {"id": task_id})
            row = await cur.fetchone()
            if row is None:
                return None
            await cur.execute(q.TIMELINE, {"id": task_id})
            timeline = [dict(r, at=q.iso(r["at"])) for r in await cur.fetchall()]
            await cur.execute(q.AUDIT_OF, {"target": str(task_id)})
            audit = [dict(r, at=q.iso(r["at"])) for r in await cur.fetchall()]
        return TaskInFull(task_view(row), row["prompt"], timeline, audit)
