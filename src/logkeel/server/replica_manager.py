"""Partition state and the data path: appends, reads, high watermark, delayed operations."""

from __future__ import annotations

from typing import Any

__all__ = ["ReplicaManager"]


class ReplicaManager:
    def __init__(self, broker: Any) -> None:
        self._broker = broker

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass
