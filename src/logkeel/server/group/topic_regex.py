"""Topic regexes of consumer-protocol subscriptions (``subscribed_topic_regex``).

Kafka matches them with RE2/J, whose time is linear in the topic name. Python's ``re``
backtracks, so a pattern such as ``(a+)+b`` would take exponential time on a long topic name
and stall the broker's event loop: the constructs that backtrack that way (a repeat inside a
repeat, an alternation inside a repeat) are refused, as are those RE2 does not have at all
(backreferences, lookaround), so a refused pattern is answered INVALID_REGULAR_EXPRESSION
with the reason. What remains (classes, ``.*``, anchors, alternation outside repeats, bounded
repeats) behaves alike in both engines for topic names.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

__all__ = ["TopicRegexError", "compile_topic_regex"]

# The parser behind ``re`` (no public API gives the parsed pattern).
_parser: Any = importlib.import_module("re._parser")

_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}


class TopicRegexError(ValueError):
    pass


def compile_topic_regex(pattern: str) -> re.Pattern[str]:
    """The compiled pattern, or TopicRegexError saying why it is refused."""
    try:
        compiled = re.compile(pattern)
        parsed = _parser.parse(pattern)
    except re.error as exc:
        raise TopicRegexError(str(exc)) from None
    _check(list(parsed), inside_repeat=False)
    return compiled


def _check(items: list[Any], inside_repeat: bool) -> None:
    for op, av in items:
        name = str(op)
        if name in ("GROUPREF", "GROUPREF_EXISTS"):
            raise TopicRegexError("backreferences are not supported (RE2 has none)")
        if name in ("ASSERT", "ASSERT_NOT"):
            raise TopicRegexError("lookaround is not supported (RE2 has none)")
        if name in _REPEATS:
            _low, high, sub = av
            repeats = str(high) == "MAXREPEAT" or int(high) > 1
            if repeats and inside_repeat:
                raise TopicRegexError(
                    "a repeat inside a repeat is refused: it backtracks exponentially here"
                )
            _check(list(sub), inside_repeat or repeats)
        elif name == "SUBPATTERN":
            _check(list(av[3]), inside_repeat)
        elif name == "ATOMIC_GROUP":
            _check(list(av), inside_repeat)
        elif name == "BRANCH":
            if inside_repeat:
                raise TopicRegexError(
                    "an alternation inside a repeat is refused: it backtracks exponentially here"
                )
            for branch in av[1]:
                _check(list(branch), inside_repeat)
