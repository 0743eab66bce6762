"""The background tasks of a coordinator: kept referenced while they run, their failures
logged, and finished (then cancelled) when the coordinator stops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

__all__ = ["BackgroundTasks"]


class BackgroundTasks:
    def __init__(self, owner: str, logger: logging.Logger) -> None:
        self._owner = owner
        self._log = logger
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._log.error("%s task failed", self._owner, exc_info=task.exception())

    async def finish(self, timeout: float) -> None:
        """Waits up to ``timeout`` seconds for the running tasks, then cancels the rest."""
        running = [t for t in self._tasks if not t.done()]
        if running:
            await asyncio.wait(running, timeout=timeout)
        for t in list(self._tasks):
            t.cancel()
