"""A part of the Coordinator that runs one asyncio task while the service runs (the Reaper,
the task-event listener): started after start-up, cancelled and awaited at shutdown."""

from __future__ import annotations

import asyncio
import contextlib
from typing import ClassVar


class Background:
    task_name: ClassVar[str]
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.task_name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        raise NotImplementedError
