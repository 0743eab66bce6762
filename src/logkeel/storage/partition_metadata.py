"""A partition dir's `partition.metadata`: the topic id Kafka records next to the log.

Kafka writes it in every partition dir (``version: 0`` then ``topic_id: <base64 Uuid>``); a
dir taken over from a Kafka broker names its topic's id there. logkeel reads it when it adopts
such a dir (see ``cluster.adoption``).
"""

from __future__ import annotations

from pathlib import Path

from logkeel.storage.log_dir import uuid_from_text

PARTITION_METADATA_FILE = "partition.metadata"
# Kafka's Uuid.ZERO_UUID: no topic id.
_ZERO_ID = "AAAAAAAAAAAAAAAAAAAAAA"


def parse_topic_id(text: str) -> str | None:
    """The topic id of a `partition.metadata` text; None when it has none, names the zero id
    or is not one Kafka would write (unknown version, malformed id)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    topic_id = fields.get("topic_id")
    if fields.get("version") != "0" or not topic_id or topic_id == _ZERO_ID:
        return None
    try:
        uuid_from_text(topic_id)
    except ValueError:
        return None
    return topic_id


def read_topic_id(partition_dir: Path) -> str | None:
    """The topic id in ``partition_dir``'s `partition.metadata`; None when the file is missing
    or holds none. Raises OSError for a file that cannot be read."""
    try:
        text = (partition_dir / PARTITION_METADATA_FILE).read_text(errors="replace")
    except FileNotFoundError:
        return None
    return parse_topic_id(text)
