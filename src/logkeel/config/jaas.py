"""Kafka's JAAS configuration strings (``sasl.jaas.config``), as far as a broker reads them:
one login module, its control flag, and its ``key="value"`` options.

``org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="secret";``
"""

from __future__ import annotations

import re

from logkeel.config.types import ConfigError, ConfigProblem

__all__ = ["parse_jaas_options", "plain_users"]

_HEAD = re.compile(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s*", re.IGNORECASE)
_OPTION = re.compile(r'\s*([\w.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))\s*')


def parse_jaas_options(text: str, key: str) -> dict[str, str]:
    """The options of the single login module in ``text``; ConfigError names ``key``."""
    head = _HEAD.match(text)
    if head is None:
        raise ConfigError([ConfigProblem(key, None, "expected '<LoginModule> required ...;'")])
    options: dict[str, str] = {}
    pos = head.end()
    while True:
        match = _OPTION.match(text, pos)
        if match is None:
            break
        quoted, bare = match.group(2), match.group(3)
        options[match.group(1)] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        pos = match.end()
    if text[pos:].strip() != ";":
        # The value is secret material: never echo it back.
        raise ConfigError(
            [ConfigProblem(key, None, f"cannot parse the JAAS options at character {pos}")]
        )
    return options


def plain_users(text: str, key: str) -> dict[str, str]:
    """PlainLoginModule's ``user_<name>="<password>"`` options as {name: password}."""
    return {
        name[len("user_") :]: value
        for name, value in parse_jaas_options(text, key).items()
        if name.startswith("user_") and len(name) > len("user_")
    }
