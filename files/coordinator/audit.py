"""Operator actions (retry, cancel, drain, undrain), each recorded in the ``audit`` table.

``perform`` runs an action's effect and its audit record in one transaction, so the record
says what happened or nothing happened. An idempotency key (the status page puts a fresh one
in every form; API clients may send ``Idempotency-Key``) makes a repeated request, such as a
double click, answer the first one's outcome without acting again: the key is unique in the
table, and a second insert of it waits for the first transaction, then finds its row. Without
a key, the effects are guarded updates, so a repeat finds nothing to do and says so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import psycopg
import psycopg_pool
from psycopg.rows import class_row

from . import queries as q

ACTIONS = ("retry", "cancel", "drain", "undrain")


class NotFound(Exception):
    """The action's target does not exist."""


class KeyReused(Exception):
    """The idempotency key was used for another action or target."""


@dataclass(frozen=True)
class Effect:
    changed: bool  # false: nothing needed doing (a repeat, or the state does not allow it)
    message: str  # one line for the person who asked, and the audit record's result
    pushes: Mapping[str, list[str]] = field(default_factory=dict)  # ids to push once committed


@dataclass(frozen=True)
class Outcome(Effect):
    repeated: bool = False  # the answer of an earlier request with the same key


async def perform(pool: psycopg_pool.AsyncConnectionPool, actor: str, action: str,
                  target: str, key: str | None,
                  effect: Callable[[psycopg.AsyncConnection], Awaitable[Effect]]
                  ) -> Outcome | None:
    """Run ``effect`` and record it; None when its target does not exist (recorded too)."""
    params = {"actor": actor, "action": action, "target": target, "key": key}
    async with pool.connection() as conn, conn.transaction():
        cur = conn.cursor(row_factory=class_row(q.AuditRecord))
        await cur.execute(q.RECORD_ACTION, params)
        record = await cur.fetchone()
        if record is None:
            cur = conn.cursor(row_factory=class_row(q.EarlierAction))
            await cur.execute(q.EARLIER_ACTION, params)
            earlier = await cur.fetchone()
            if (earlier.action, earlier.target) != (action, target):
                raise KeyReused(f"the idempotency key {key!r} was used for {earlier.action} "
                                f"{earlier.target}: send a new key for each action")
            return Outcome(bool(earlier.ok), f"done once already: {earlier.result}",
                           repeated=True)
        try:
            async with conn.transaction():
                done = await effect(conn)
        except NotFound:
            await conn.execute(q.FINISH_ACTION, {"ok": False, "result": "no such target",
                                                 "id": record.id})
            return None
        await conn.execute(q.FINISH_ACTION, {"ok": done.changed, "result": done.message,
                                             "id": record.id})
    return Outcome(done.changed, done.message, done.pushes)


async def set_transition(conn: psycopg.AsyncConnection, reason: str | None,
                         event: str | None = None) -> None:
    """Name the reason (and the event) the timeline records for this transaction's next
    transitions."""
    await conn.execute(q.SET_TRANSITION, {"reason": reason or "", "event": event or ""})
