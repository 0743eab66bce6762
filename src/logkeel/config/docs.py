"""Render the definition table as Markdown, for the README and ``logkeel`` help output."""

from __future__ import annotations

from logkeel.config.types import ConfigDef, ConfigKey, format_value


def is_logkeel_specific(key: ConfigKey) -> bool:
    """Settings Kafka does not have, or whose default differs from Kafka's."""
    return key.doc.startswith("logkeel") or "logkeel:" in key.doc


def config_reference(definition: ConfigDef, only_logkeel: bool = False) -> str:
    """A Markdown table of name, type, default, valid values and doc of every key."""
    rows = ["| Name | Type | Default | Valid values | Description |", "|---|---|---|---|---|"]
    for key in definition.values():
        if only_logkeel and not is_logkeel_specific(key):
            continue
        default = format_value(key.type, key.default)
        valid = key.validator.describe() if key.validator is not None else ""
        if key.unsupported is not None:
            valid = f"not supported yet: {key.accepted()}"
        cells = [
            f"`{key.name}`",
            key.type.name.lower(),
            "null" if default is None else f"`{default}`" if default else '""',
            valid,
            key.doc,
        ]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"
