"""What the group coordinator is configured with and answers: its settings (broker configs),
the offsets it commits and fetches, the groups it lists and describes, and the error a client
is told when a coordinator write fails."""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from logkeel.config import BrokerConfig
from logkeel.server.group.consumer_group import ConsumerGroupSettings

__all__ = [
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
    "CommitOffset",
    "CoordinatorSettings",
    "DescribedGroup",
    "DescribedMember",
    "FetchedOffset",
    "ListedGroup",
    "store_error_to_response_error",
]

# Kafka's group.classic.new.member.join.timeout.ms (not a broker config in Kafka 3.x either).
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


@dataclass(frozen=True, slots=True)
class CoordinatorSettings:
    """The broker configs the coordinator uses, with Kafka's names in the comments."""

    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    max_group_size: int = 2**31 - 1  # group.max.size
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_retention_ms: int = 10080 * 60_000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS
    consumer: ConsumerGroupSettings = ConsumerGroupSettings()  # group.consumer.*

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> CoordinatorSettings:
        return cls(
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            max_group_size=config.group_max_size,
            offset_metadata_max_bytes=config.offset_metadata_max_bytes,
            offsets_retention_ms=config.offsets_retention_minutes * 60_000,
            offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
            consumer=ConsumerGroupSettings(
                session_timeout_ms=config.group_consumer_session_timeout_ms,
                heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
                max_size=config.group_consumer_max_size,
                migration_policy=config.group_consumer_migration_policy,
                assignors=tuple(config.group_consumer_assignors),
                session_timeout_bounds_ms=(
                    config.group_consumer_min_session_timeout_ms,
                    config.group_consumer_max_session_timeout_ms,
                ),
                heartbeat_interval_bounds_ms=(
                    config.group_consumer_min_heartbeat_interval_ms,
                    config.group_consumer_max_heartbeat_interval_ms,
                ),
            ),
        )


@dataclass(frozen=True, slots=True)
class CommitOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error: ErrorCode
    state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedMember, ...] = ()
    error_message: str | None = None


def store_error_to_response_error(code: ErrorCode) -> ErrorCode:
    """What a client is told when a coordinator write fails (Kafka's mapping of append errors)."""
    if code in (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
    ):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if code in (
        ErrorCode.message_too_large,
        ErrorCode.record_list_too_large,
        ErrorCode.invalid_fetch_size,
    ):
        return ErrorCode.unknown_server_error
    return code
