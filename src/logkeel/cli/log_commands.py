"""`logkeel log ...`: offline tools over log dirs and segment files."""

from __future__ import annotations

import click


@click.group("log")
def log_group() -> None:
    """Inspect, check and repair log dirs and segment files offline."""
