"""Task events: one LISTEN connection, in-memory asyncio waiters for long-polls.

A long-poll subscribes a future for its task id, reads the row, and if the task is not final
awaits the future with a timeout, holding neither a database connection nor a thread. The
listener resolves futures when the ``task_events`` trigger fires. After a (re)connection
every waiter is woken to read its row again, so a notification lost while the connection was
down costs one extra read, never a missed result.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

import psycopg

from .background import Background
from .schema import TASK_EVENTS_CHANNEL

log = logging.getLogger("coordinator.events")

EventHandler = Callable[[dict], None]


class TaskEvents(Background):
    task_name = "task-events-listener"

    def __init__(self, dsn: str, application_name: str, on_event: EventHandler | None = None
                 ) -> None:
        self._dsn = dsn
        self._application_name = application_name
        self._on_event = on_event
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self.connected = asyncio.Event()

    # -- waiters -------------------------------------------------------------------------------
    def subscribe(self, task_id: str) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(task_id, set()).add(fut)
        return fut

    def unsubscribe(self, task_id: str, fut: asyncio.Future[None]) -> None:
        waiters = self._waiters.get(task_id)
        if waiters is not None:
            waiters.discard(fut)
            if not waiters:
                del self._waiters[task_id]

    @property
    def waiting(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    def _wake(self, task_id: str) -> None:
        for fut in self._waiters.pop(task_id, ()):
            if not fut.done():
                fut.set_result(None)

    def wake_all(self) -> None:
        for task_id in list(self._waiters):
            self._wake(task_id)

    def handle(self, payload: str) -> None:
        try:
            event = json.loads(payload)
            task_id = str(event["id"])
        except (ValueError, KeyError, TypeError):
            log.warning("ignored a malformed %s notification: %.200s", TASK_EVENTS_CHANNEL,
                        payload)
            return
        self._wake(task_id)
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:  # a metrics problem must not stop the listener
                log.exception("task event handler failed")

    # -- the listening connection --------------------------------------------------------------
    async def stop(self) -> None:
        await super().stop()
        self.wake_all()

    async def _run(self) -> None:
        delay = 0.2
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._dsn, autocommit=True, application_name=self._application_name,
                    connect_timeout=5,
                )
            except psycopg.Error as exc:
                self.connected.clear()
                log.warning("cannot LISTEN for task events (%s); retrying in %.1f s",
                            str(exc).strip().splitlines()[0] if str(exc).strip() else exc,
                            delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            try:
                async with conn:
                    await conn.execute(f"LISTEN {TASK_EVENTS_CHANNEL}")
                    self.connected.set()
                    delay = 0.2
                    # Anything that finished while we were not listening: read again.
                    self.wake_all()
                    async for notify in conn.notifies():
                        self.handle(notify.payload)
            except psycopg.Error as exc:
                self.connected.clear()
                self.wake_all()
                log.warning("task event listener lost its connection (%s); reconnecting",
                            str(exc).strip().splitlines()[0] if str(exc).strip() else exc)
                await asyncio.sleep(delay)
