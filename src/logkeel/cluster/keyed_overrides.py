"""Overrides kept per entity (client quotas per user/client id, group configs per group): the
one way an alteration replaces entities' overrides in the metadata stores' copy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

__all__ = ["replaced_overrides"]

V = TypeVar("V")


def replaced_overrides(
    current: Mapping[str, Mapping[str, V]], changes: Mapping[str, Mapping[str, V]]
) -> dict[str, dict[str, V]]:
    """``current`` with each entity of ``changes`` replaced (one with no overrides removed)."""
    out = {k: dict(v) for k, v in current.items() if k not in changes}
    out.update({k: dict(v) for k, v in changes.items() if v})
    return out
