"""The option conventions of Kafka's tools that `logkeel topics|groups|configs` keep: exactly one
action flag per run (``--list``, ``--describe``, ...), and config lists written as
``k1=v1,k2=[a,b]`` (kafka-configs' ``--add-config``: brackets hold a list value's commas); and
their tables, which fold long cells rather than cut them."""

from __future__ import annotations

import os
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = [
    "ConfigListError",
    "error_text",
    "one_action",
    "parse_config_list",
    "parse_key_value",
    "table",
]


def console() -> Console:
    """Where the tables go: a terminal's width, or 200 columns for a pipe (rich's 80 would
    fold member ids and config values into unreadable columns); COLUMNS overrides."""
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(width=200 if wide else None)


def table(*columns: str, title: str | None = None) -> Table:
    """A table whose first column (a name) never wraps and whose other cells fold."""
    shown = Table(title=title)
    for i, column in enumerate(columns):
        shown.add_column(column, no_wrap=i == 0, overflow="fold")
    return shown


class ConfigListError(ValueError):
    """A config list that does not parse; the message says where."""


def one_action(actions: dict[str, bool]) -> str | None:
    """The one action flag given (its option name), or None when none or several were:
    the caller says which it expects."""
    given = [name for name, on in actions.items() if on]
    return given[0] if len(given) == 1 else None


def parse_key_value(text: str) -> tuple[str, str]:
    """``key=value`` (the value may hold ``=``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigListError(f"{text!r} is not KEY=VALUE")
    return key.strip(), value


def parse_config_list(text: str) -> dict[str, str]:
    """``k1=v1,k2=[a,b]`` as {k1: v1, k2: "a,b"}, as kafka-configs reads ``--add-config``."""
    entries: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ConfigListError(f"nested '[' in {text!r}")
            continue
        if ch == "]":
            if depth == 0:
                raise ConfigListError(f"']' without '[' in {text!r}")
            depth -= 1
            continue
        if ch == "," and depth == 0:
            entries.append("".join(current))
            current = []
            continue
        current.append(ch)
    if depth:
        raise ConfigListError(f"'[' not closed in {text!r}")
    entries.append("".join(current))
    configs: dict[str, str] = {}
    for entry in entries:
        if not entry.strip():
            continue
        key, value = parse_key_value(entry)
        if key in configs:
            raise ConfigListError(f"{key} is given twice in {text!r}")
        configs[key] = value
    return configs


def error_text(result: Any) -> str:
    """A result entry's error: Kafka's name, and the broker's message when it gave one."""
    name = result.error_code.name.upper()
    return f"{name}: {result.error_message}" if result.error_message else name
