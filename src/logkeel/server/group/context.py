"""What the parts of the group coordinator share: the groups, the clock, the settings, and the
coordinator's services (is a group's partition loaded here, write records to its partition,
run a task). Membership, rebalance and offsets get this instead of the coordinator itself."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.server.group.consumer_groups import ConsumerGroups
from logkeel.server.group.results import CoordinatorSettings
from logkeel.server.group.state import ClassicGroup
from logkeel.server.group.timers import Timer

__all__ = ["CoordinatorPart", "GroupContext"]


@dataclass(frozen=True, slots=True)
class GroupContext:
    groups: dict[str, ClassicGroup]
    timer: Timer
    settings: CoordinatorSettings
    # NONE if the group's ``__consumer_offsets`` partition is loaded here, else the error to answer.
    check_group: Callable[[str], ErrorCode]
    # Creates ``__consumer_offsets`` on first use.
    ensure_offsets_topic: Callable[[], Awaitable[ErrorCode]]
    # Appends records to the group's partition (a transactional batch for a producer, see
    # txn_offsets); NONE once they are in the log.
    write: Callable[..., Awaitable[ErrorCode]]
    spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]]
    is_active: Callable[[], bool]
    # The consumer-protocol (KIP-848) groups, whose offsets are kept with the classic ones.
    consumer: ConsumerGroups | None = None


class CoordinatorPart:
    """Base of the coordinator's parts: the shared context, unpacked."""

    def __init__(self, ctx: GroupContext) -> None:
        self._groups = ctx.groups
        self._timer = ctx.timer
        self.settings = ctx.settings
        self._check_group = ctx.check_group
        self.ensure_offsets_topic = ctx.ensure_offsets_topic
        self._write = ctx.write
        self._spawn = ctx.spawn
        self._is_active = ctx.is_active
        self._consumer = ctx.consumer
