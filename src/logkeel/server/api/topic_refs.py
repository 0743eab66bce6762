"""Topic names and ids as the admin and metadata APIs see them (the id conversions are
``cluster.metadata``'s ``topic_uuid`` / ``topic_id_text``), and the entry error a refused topic
operation becomes."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from logkeel.cluster.metadata import INTERNAL_TOPICS, MetadataError
from logkeel.server.api.responses import EntryError
from logkeel.server.errors import error_code_named
from logkeel.storage.topic_partition import validate_topic_name

__all__ = [
    "BROKER_OWNED_TOPICS",
    "WRITE_PROTECTED_TOPICS",
    "ZERO_UUID",
    "check_topic_name",
    "entry_error_for",
    "refuse_internal_change",
    "refuse_internal_creation",
]

# The id a request carries when it names a topic by name only.
ZERO_UUID = uuid.UUID(int=0)
# Only Kafka's own admin client may produce to these (the share-group state topic included).
WRITE_PROTECTED_TOPICS = INTERNAL_TOPICS | {"__share_group_state"}
# Topics only the broker creates, deletes or resizes: the coordinators' topics (their partition
# counts are offsets.topic.num.partitions / transaction.state.log.num.partitions, and a group's
# partition is hash(group) mod that count) and Kafka's own metadata log.
BROKER_OWNED_TOPICS = INTERNAL_TOPICS | {"__cluster_metadata"}


def refuse_internal_creation(name: str) -> None:
    """INVALID_REQUEST for a CreateTopics of a broker-owned topic: the answer Kafka's
    controller gives for its own metadata topic (ControllerApis.createTopics: "Creation of
    internal topic __cluster_metadata is prohibited.")."""
    if name in BROKER_OWNED_TOPICS:
        raise EntryError(
            ErrorCode.invalid_request, f"Creation of internal topic {name} is prohibited."
        )


def refuse_internal_change(name: str, change: str) -> None:
    """TOPIC_AUTHORIZATION_FAILED for a client's delete or resize of a broker-owned topic: what
    Kafka answers a DeleteTopics or CreatePartitions the caller is not authorized for (clients
    never are, here); ZooKeeper-era Kafka refused deleting internal topics outright
    (KAFKA-1961)."""
    if name in BROKER_OWNED_TOPICS:
        raise EntryError(
            ErrorCode.topic_authorization_failed,
            f"Topic {name} is internal to the broker; clients cannot {change} it.",
        )


def check_topic_name(name: str | None) -> None:
    """INVALID_TOPIC_EXCEPTION for a name Kafka would not accept."""
    problem = validate_topic_name(name or "")
    if problem is not None:
        raise EntryError(ErrorCode.invalid_topic_exception, problem)


def entry_error_for(exc: MetadataError) -> EntryError:
    """The metadata store's refusal as the entry error Kafka's controller would answer."""
    try:
        code = error_code_named(exc.error_name)
    except ValueError:
        code = ErrorCode.unknown_server_error
    return EntryError(code, str(exc))
