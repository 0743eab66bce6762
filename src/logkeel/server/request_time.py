"""The time a request's handler spends running on the event loop, for the request_percentage
quota: Kafka charges the time a request handler thread works on a request, not the time it
waits (a long-poll Fetch parked in purgatory costs nothing). A handler here is a coroutine;
``timed`` drives it step by step and adds up only the steps, so the waits in between (an
append on an IO thread, a delayed fetch, replication) are not charged. Work done on the IO
threads is not counted."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Coroutine, Generator
from datetime import timedelta
from typing import Any

from kio.static.primitive import i32Timedelta

__all__ = ["Timed", "with_throttle"]


class Timed:
    """``await Timed(coro)`` is ``await coro``; ``spent_s`` is then the time its steps ran."""

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self.spent_s = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        value: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                yielded = coro.throw(error) if error is not None else coro.send(value)
            except StopIteration as stop:
                return stop.value
            finally:
                self.spent_s += time.perf_counter() - started
            value, error = None, None
            try:
                value = yield yielded
            except BaseException as exc:  # noqa: BLE001 -- cancellation too: the handler sees it
                error = exc


def with_throttle(response: Any, throttle_ms: int) -> Any:
    """``response`` telling the client it is throttled for ``throttle_ms`` (if longer than
    what it already says); a response that encodes itself (Fetch's) wraps the kio one."""
    current = getattr(response, "throttle_time", None)
    if current is None or throttle_ms <= current / timedelta(milliseconds=1):
        return response
    throttle = i32Timedelta.parse(timedelta(milliseconds=throttle_ms))
    inner = getattr(response, "response", None)
    if inner is not None:
        response.response = dataclasses.replace(inner, throttle_time=throttle)
        response.throttle_time = throttle
        return response
    return dataclasses.replace(response, throttle_time=throttle)
