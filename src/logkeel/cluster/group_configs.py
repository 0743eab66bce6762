"""Per-group config overrides (KIP-848's GROUP config resource) as the metadata stores keep
them: group id -> config name -> value, every value a string as AlterConfigs gives it. Which
names and values are valid is the group coordinator's business (server/group/group_configs)."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["changed_group_configs"]


def changed_group_configs(
    current: Mapping[str, Mapping[str, str]], changes: Mapping[str, Mapping[str, str]]
) -> dict[str, dict[str, str]]:
    """``current`` with each group of ``changes`` replaced (one with no overrides removed)."""
    out = {k: dict(v) for k, v in current.items() if k not in changes}
    out.update({k: dict(v) for k, v in changes.items() if v})
    return out
