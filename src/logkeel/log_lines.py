"""One event, one line of valid UTF-8 in the broker's log, whatever clients send.

Client ids, topic and group names and the like reach log messages as clients wrote them: a
newline in a client id would forge a log line, a lone surrogate (an undecodable byte kept by
a lenient decoder) would make the log file invalid UTF-8. ``SafeFormatter`` escapes, in each
message, every character that could do either; tracebacks, which the broker writes itself,
keep their lines.
"""

from __future__ import annotations

import logging
import re

__all__ = ["SafeFormatter", "escape"]

# C0 controls but tab, DEL and C1 controls, the Unicode line and paragraph separators, and
# surrogates (which cannot be encoded as UTF-8).
_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str) -> str:
    """``text`` with every character that could break a log line or its encoding escaped
    (``\\x0a``, ``\\udcff``)."""
    return _UNSAFE.sub(_escaped, text)


class SafeFormatter(logging.Formatter):
    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape(super().formatMessage(record))
