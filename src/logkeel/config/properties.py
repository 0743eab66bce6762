"""Java ``.properties`` syntax, as ``java.util.Properties.load`` reads it.

Kafka reads ``server.properties`` with that loader, so we follow its rules rather than an
ini-like approximation: ``#``/``!`` comment lines, ``key=value``, ``key: value`` and
``key value``, odd trailing backslashes continuing a line (the next line's leading blanks are
dropped), and the escapes ``\\t \\n \\r \\f \\uXXXX`` (any other escaped character stands for
itself). A later duplicate key wins. The corner cases (empty continued lines, a comment right
after a bare continuation, a backslash at end of input) follow Java's LineReader too; the tests
compare this parser with ``java.util.Properties`` on thousands of generated inputs.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from logkeel.config.types import ConfigError, ConfigProblem

_NEWLINE = re.compile(r"\r\n|\r|\n")
_BLANKS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Parse properties text; raise ConfigError listing every malformed line."""
    result: dict[str, str] = {}
    problems: list[ConfigProblem] = []
    lines = _NEWLINE.split(text)
    i = 0
    while i < len(lines):
        first_line_no = i + 1
        line = lines[i].lstrip(_BLANKS)
        i += 1
        # Comments are recognised only at the start of a logical line, never inside a
        # continuation, and a comment never continues onto the next line.
        if not line or line[0] in "#!":
            continue
        parts: list[str] = []
        continued_into_eof = False
        while _continues(line):
            parts.append(line[:-1])
            # Java checks for end of input right after the line break of a continuation (when
            # that break is one character), and then keeps the line even if it is empty.
            at_end = i == len(lines) - 1 and not lines[i] and not text.endswith("\r\n")
            if i >= len(lines) or at_end:
                line, continued_into_eof = "", True
                break
            line = lines[i].lstrip(_BLANKS)
            i += 1
            if line[:1] in ("#", "!") and not any(parts):
                # Java decides "comment" while the logical line is still empty, so a comment
                # after a bare continuation is still a comment (and ends the logical line).
                parts, line = [], ""
                break
        parts.append(line)
        logical = "".join(parts)
        # Java drops a line left empty once continuations are joined, except at end of input,
        # where a lone trailing backslash still yields the entry ""="" (its LineReader quirk).
        if not logical and not continued_into_eof:
            continue
        key_raw, value_raw = _split_key_value(logical)
        try:
            result[_unescape(key_raw)] = _unescape(value_raw)
        except ValueError as exc:
            problems.append(ConfigProblem(f"{source}:{first_line_no}", key_raw, str(exc)))
    if problems:
        raise ConfigError(problems)
    return result


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read and parse a properties file; an unreadable file is a ConfigError naming it."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"Cannot read config file {os.fspath(path)}: {exc.strerror or exc}"
        ) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        # Java's InputStream loader reads ISO-8859-1; files written for it may not be UTF-8.
        text = data.decode("latin-1")
    return parse_properties(text, source=os.fspath(path))


def _continues(line: str) -> bool:
    """An odd number of trailing backslashes continues the line; an even number is escaped text."""
    stripped = line.rstrip("\\")
    return (len(line) - len(stripped)) % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    """Split at the first unescaped '=', ':' or blank; a blank may be followed by '=' or ':'."""
    end = len(line)
    value_start = end
    has_separator = False
    j = 0
    while j < end:
        c = line[j]
        if c == "\\":
            j += 2
            continue
        if c in "=:":
            value_start, has_separator = j + 1, True
            break
        if c in _BLANKS:
            value_start = j + 1
            break
        j += 1
    key = line[: min(j, end)]
    while value_start < end:
        c = line[value_start]
        if c not in _BLANKS:
            if not has_separator and c in "=:":
                has_separator = True
            else:
                break
        value_start += 1
    return key, line[value_start:]


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    j = 0
    while j < len(text):
        c = text[j]
        j += 1
        if c != "\\" or j >= len(text):
            if c != "\\":
                out.append(c)
            continue
        c = text[j]
        j += 1
        if c == "u":
            digits = text[j : j + 4]
            if not _HEX4.fullmatch(digits):
                raise ValueError(f"malformed \\uxxxx escape: \\u{digits}")
            out.append(chr(int(digits, 16)))
            j += 4
        else:
            out.append(_ESCAPES.get(c, c))
    result = "".join(out)
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in result):
        # \uXXXX escapes are UTF-16 code units; pair escaped surrogates into one character.
        result = result.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return result


def escape_property(text: str, is_key: bool = False) -> str:
    """Escape a key or value so ``parse_properties`` (and Java) reads it back unchanged."""
    out: list[str] = []
    for index, c in enumerate(text):
        if c == "\\":
            out.append("\\\\")
        elif c in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[c])
        elif c in "=:#!" or (c == " " and (is_key or index == 0)):
            out.append("\\" + c)
        elif ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out)
