"""Partition identity and the directory naming Kafka uses for it."""

from __future__ import annotations

import re
from typing import NamedTuple

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def dir_name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @classmethod
    def parse_dir_name(cls, name: str) -> TopicPartition:
        """Inverse of ``dir_name``; ignores the suffixes of deleted or future dirs."""
        for suffix in ("-delete", "-future", "-stray"):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                name = name.rsplit(".", 1)[0]  # <tp>.<uniqueId>-delete
        topic, _, part = name.rpartition("-")
        if not topic or not part.isdigit():
            raise ValueError(f"not a partition directory name: {name!r}")
        return cls(topic, int(part))


def validate_topic_name(name: str) -> str | None:
    """Returns why ``name`` is not a legal Kafka topic name, or None if it is."""
    if name in ("", ".", ".."):
        return f"topic name {name!r} is illegal"
    if not _LEGAL_TOPIC.match(name):
        return (
            f"topic name {name!r} is illegal: only ASCII alphanumerics, '.', '_' and '-', "
            "at most 249 characters"
        )
    return None
