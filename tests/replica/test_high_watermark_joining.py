"""The high watermark while a follower's joining of the ISR is proposed but not yet written: the
joiner counts at once (Kafka's maximal ISR). Found by the soak: a leader acked records past a
joiner's log end, the change landed, the leader died, the controller elected the joiner, and
the acked records were gone (librdkafka: 'sequence desynchronization', a fatal error)."""

from __future__ import annotations

import time
from pathlib import Path

from logkeel.cluster.metadata import PartitionState
from logkeel.cluster.partition_state import PartitionRegistration
from logkeel.records.builder import build_batch
from logkeel.server.replica.partition import Partition
from logkeel.server.replica.results import FetchPartitionRequest
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

TP = TopicPartition("t", 0)


def test_a_joining_follower_holds_the_high_watermark_until_it_has_the_records(
    tmp_path: Path,
) -> None:
    manager = LogManager([tmp_path / "logs"])
    manager.startup(start_background=False)
    proposals: list[PartitionRegistration] = []
    p = Partition(TP, "topic-id", 1, isr_change_requested=lambda _tp, s, _why: proposals.append(s))
    try:
        p.log = manager.get_or_create_log(TP)
        p.apply_state(PartitionState("t", 0, [1, 2, 3], 1, 1, [1, 3], 1))
        p.become_leader_or_follower()

        def append(n: int) -> None:
            now = int(time.time() * 1000)
            p.append_as_leader(build_batch([(now, None, b"v", ())] * n), origin_is_client=True)

        def fetch(replica: int, offset: int) -> None:
            result, _ = p.read(FetchPartitionRequest(TP, offset, 1 << 20, 1), replica, 1 << 20,
                               0, True)  # fmt: skip
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
