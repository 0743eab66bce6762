"""A follower whose newest leader epoch holds no record (it became leader and appended nothing
before it lost the office: a freeze right after an election) drops that epoch when it truncates
to the new leader's answer, even though no record goes. Found by the soak: kept, the epoch made
every fetch diverge again, and the broker never rejoined the ISR."""

from __future__ import annotations

import time
from pathlib import Path

from logkeel.records.builder import build_batch
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

TP = TopicPartition("t", 0)


def test_truncating_at_the_log_end_drops_an_epoch_without_records(tmp_path: Path) -> None:
    manager = LogManager([tmp_path / "logs"])
    manager.startup(start_background=False)
    try:
        plog = manager.get_or_create_log(TP)
        now = int(time.time() * 1000)
        plog.append_as_leader(build_batch([(now, None, b"v", ())] * 3), 0)
        plog.leader_epochs.assign(1, plog.log_end_offset)  # leader of epoch 1, nothing written
        assert plog.leader_epochs.latest_epoch == 1
        # The new leader (epoch 2) answers the end of epoch 0 at 3: nothing to remove.
        assert plog.truncate_to(3) == 0
        assert plog.leader_epochs.latest_epoch == 0 and plog.log_end_offset == 3
    finally:
        manager.shutdown()
