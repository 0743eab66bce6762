"""Partition identity and the directory naming Kafka uses for it."""

from __future__ import annotations

import re
import uuid
from typing import NamedTuple

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
# The longest file name Linux filesystems take (NAME_MAX; topic names are ASCII, so bytes).
MAX_NAME_BYTES = 255
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
# Dirs that do not hold a replica's data: being deleted, moved in, or set aside.
NOT_DATA_DIR_SUFFIXES = (DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)


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
        for suffix in NOT_DATA_DIR_SUFFIXES:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                name = name.rsplit(".", 1)[0]  # <tp>.<uniqueId>-delete
        topic, _, part = name.rpartition("-")
        if not topic or not part.isdigit():
            raise ValueError(f"not a partition directory name: {name!r}")
        return cls(topic, int(part))


def partition_dirs_fit(topic: str, partitions: int) -> str | None:
    """Why ``partitions`` partitions of ``topic`` cannot have dirs (``<topic>-<n>`` longer
    than ``MAX_NAME_BYTES``), or None when they can. Only the longest names are limited: a
    249-character topic can have up to 100,000 partitions."""
    longest = TopicPartition(topic, partitions - 1).dir_name
    if len(longest.encode()) <= MAX_NAME_BYTES:
        return None
    return (
        f"the dir of partition {partitions - 1} ({len(longest)} characters) would be longer "
        f"than the {MAX_NAME_BYTES} a file name may have"
    )


def set_aside_dir_name(tp: TopicPartition, suffix: str) -> str:
    """``<topic>-<partition>.<uniqueId><suffix>`` (Kafka's ``logDirNameWithSuffixCappedLength``),
    with the topic cut so the name fits in ``MAX_NAME_BYTES`` for every legal topic name: the
    partition and the unique id are kept, the topic is only there for a reader's benefit."""
    tail = f"-{tp.partition}.{uuid.uuid4().hex}{suffix}"
    return tp.topic[: max(0, MAX_NAME_BYTES - len(tail))] + tail


def delete_dir_name(tp: TopicPartition) -> str:
    """The name a partition dir is renamed to when its log is deleted."""
    return set_aside_dir_name(tp, DELETE_DIR_SUFFIX)


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
