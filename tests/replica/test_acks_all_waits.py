"""What acks=all waits for, on a real Partition and log. The high watermark while a follower's
joining of the ISR is proposed but not yet written: the joiner counts at once (Kafka's maximal
ISR). Found by the soak: a leader acked records past a joiner's log end, the change landed, the
leader died, the controller elected the joiner, and the acked records were gone (librdkafka:
'sequence desynchronization', a fatal error). A retried batch already in the log waits for the
high watermark like the original."""

from __future__ import annotations

import time
from pathlib import Path

from kio.schema.errors import ErrorCode

from logkeel.cluster.metadata import PartitionState
from logkeel.cluster.partition_state import PartitionRegistration
from logkeel.records.builder import build_batch
from logkeel.server.replica import partition_reads
from logkeel.server.replica.delayed import DelayedProduce
from logkeel.server.replica.partition import Partition
from logkeel.server.replica.results import FetchPartitionRequest, PartitionAppendResult
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

TP = TopicPartition("t", 0)


def test_a_joining_follower_holds_the_high_watermark_until_it_has_the_records(
    tmp_path: Path,
) -> None:
    manager = LogManager([tmp_path / "logs"])
    manager.startup(start_background=False)
    proposals: list[PartitionRegistration] = []
    p = Partition(
        TP, "topic-id", 1, isr_change_requested=lambda proposal: proposals.append(proposal.state)
    )
    try:
        p.log = manager.get_or_create_log(TP)
        p.apply_state(PartitionState("t", 0, [1, 2, 3], 1, 1, [1, 3], 1))
        p.become_leader_or_follower()

        def append(n: int) -> None:
            now = int(time.time() * 1000)
            p.append_as_leader(build_batch([(now, None, b"v", ())] * n), origin_is_client=True)

        def fetch(replica: int, offset: int) -> None:
            result, _ = partition_reads.read(
                p, FetchPartitionRequest(TP, offset, 1 << 20, 1), replica, 1 << 20, 0, True
            )
            if result.records is not None:
                result.records.close()

        append(10)
        fetch(3, 10)
        assert p.high_watermark == 10
        fetch(2, 10)  # caught up with the high watermark: its joining is proposed
        assert [s.isr for s in proposals] == [(1, 3, 2)]
        append(10)
        fetch(3, 20)
        assert p.high_watermark == 10  # not past what follower 2 holds
        fetch(2, 20)
        assert p.high_watermark == 20
    finally:
        manager.shutdown()


class _Lookup:
    def __init__(self, p: Partition) -> None:
        self.p = p

    def partition(self, tp: TopicPartition) -> Partition | None:
        return self.p if tp == self.p.tp else None


def test_an_acks_all_retry_of_a_batch_in_the_log_waits_for_the_high_watermark(
    tmp_path: Path,
) -> None:
    """An idempotent producer's retry that finds its batch already appended (the first request
    timed out) is acknowledged only once the original batch is replicated, as Kafka does."""
    manager = LogManager([tmp_path / "logs"])
    manager.startup(start_background=False)
    p = Partition(TP, "topic-id", 1)
    try:
        p.log = manager.get_or_create_log(TP)
        p.apply_state(PartitionState("t", 0, [1, 2], 1, 1, [1, 2], 1))
        p.become_leader_or_follower()
        now = int(time.time() * 1000)
        batch = build_batch([(now, None, b"v", ())] * 5, producer_id=7, producer_epoch=0,
                            base_sequence=0)  # fmt: skip
        first = p.append_as_leader(batch, origin_is_client=True)
        retry = p.append_as_leader(batch, origin_is_client=True)
        assert retry.duplicate and (retry.first_offset, retry.last_offset) == (0, 4)
        result = PartitionAppendResult(ErrorCode.none, base_offset=retry.first_offset,
                                       last_offset=retry.last_offset, duplicate=True)  # fmt: skip
        op = DelayedProduce(_Lookup(p), 30_000, {TP: result})
        assert first.last_offset == 4 and not op.try_complete()  # follower 2 has nothing yet
        request = FetchPartitionRequest(TP, 5, 1 << 20, 1)
        response, _ = partition_reads.read(p, request, 2, 1 << 20, 0, True)
        assert response.records is None and p.high_watermark == 5
        assert op.try_complete() and result.error == ErrorCode.none
    finally:
        manager.shutdown()
