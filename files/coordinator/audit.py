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

ACTIONS = ("retry", "cancel", "drain", "undrain")

INSERT = (
    "INSERT INTO audit (actor, action, target, idempotency_key)"
    " VALUES (%(actor)s, %(action)s, %(target)s, %(key)s)"
    " ON CONFLICT (idempotency_key) DO NOTHING RETURNING id"
)
EARLIER = "SELECT action, target, ok, result FROM audit WHERE idempotency_key = %(key)s"
FINISH = "UPDATE audit SET ok = %(ok)s, result = %(result)s WHERE id = %(id)s"
#: The transaction-local settings the timeline triggers read (schema version 4).
SET_TRANSITION = ("SELECT set_config('coordinator.reason', %(reason)s, true),"
                  " set_config('coordinator.event', %(event)s, true)")


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
        cur = await conn.execute(INSERT, params)
        row = await cur.fetchone()
        if row is None:
            cur = await conn.execute(EARLIER, params)
            earlier = await cur.fetchone()
            if earlier[:2] != (action, target):
                raise KeyReused(f"the idempotency key {key!r} was used for {earlier[0]} "
                                f"{earlier[1]}: send a new key for each action")
            return Outcome(bool(earlier[2]), f"done once already: {earlier[3]}",
                           repeated=True)
        audit_id = row[0]
        try:
            async with conn.transaction():
                done = await effect(conn)
        except NotFound:
            await conn.execute(FINISH, {"ok": False, "result": "no such target",
                                        "id": audit_id})
            return None
        await conn.execute(FINISH, {"ok": done.changed, "result": done.message,
                                    "id": audit_id})
    return Outcome(done.changed, done.message, done.pushes)


async def set_transition(conn: psycopg.AsyncConnection, reason: str | None,
                         event: str | None = None) -> None:
    """Name the reason (and the event) the timeline records for this transaction's next
    transitions."""
    await conn.execute(SET_TRANSITION, {"reason": reason or "", "event": event or ""})
