"""The one way tests wait: poll a condition until it holds, bounded, and say what never happened."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    timeout: float = 30.0,
    what: str = "",
    interval: float = 0.05,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Returns the first truthy value of ``condition()``; raises AssertionError naming ``what``
    after ``timeout`` seconds. Exceptions listed in ``retry_on`` count as "not yet" (a broker
    busy electing); any other propagates at once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except retry_on:
            value = None  # type: ignore[assignment]
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout}s: {what or condition}")
        time.sleep(interval)
