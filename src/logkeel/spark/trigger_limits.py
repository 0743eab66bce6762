"""``minOffsetsPerTrigger`` and ``maxTriggerDelay``: when a streaming trigger waits for more
records, with Spark's Kafka source semantics (a pure decision; the reader keeps the clock).

A trigger that finds fewer than ``minOffsetsPerTrigger`` new records (over all partitions) is
skipped, unless ``maxTriggerDelay`` has passed since the last trigger that ran a batch; the
first trigger of a query always runs. PySpark's ReadMinRows carries no delay, so the reader
applies both options itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from logkeel.spark.options import OptionError

DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # Spark: "15m"

# Spark's JavaUtils.timeStringAsMs suffixes; a bare number is milliseconds.
_UNITS_MS = {
    "us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
    "d": 86_400_000,
}  # fmt: skip
_DURATION = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$")


def duration_ms(name: str, value: str) -> int:
    match = _DURATION.match(value.lower())
    if match is None or match[2] not in ("", *_UNITS_MS):
        raise OptionError(
            f"option '{name}' must be a duration such as 15m, 30s or 500ms, not {value!r}"
        )
    return int(int(match[1]) * _UNITS_MS.get(match[2], 1))


@dataclass
class MinTrigger:
    """The state of ``minOffsetsPerTrigger``: when a batch last ran (0: never)."""

    min_offsets: int
    max_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    last_trigger_ms: int = 0

    def skip(self, new_records: int, now_ms: int) -> bool:
        """Whether this trigger waits for more records (and if not, it counts as run)."""
        if now_ms - self.last_trigger_ms < self.max_delay_ms and new_records < self.min_offsets:
            return True
        self.last_trigger_ms = now_ms
        return False
