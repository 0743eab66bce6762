"""(work in progress)"""

from __future__ import annotations

from typing import Any

from logkeel.server.handlers import HandlerRegistry


def register(registry: HandlerRegistry, broker: Any) -> None:
    pass
