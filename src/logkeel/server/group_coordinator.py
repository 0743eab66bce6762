"""The group coordinator (work in progress)."""

from __future__ import annotations

from typing import Any


class GroupCoordinator:
    def __init__(self, broker: Any) -> None:
        self._broker = broker

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None
