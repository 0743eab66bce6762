"""A new topic's partitions on one broker (issue 19): their logs are created batch by batch,
and each batch is told (`progress`) as soon as its logs exist, so thousands of new partitions
start serving and being fetched batch by batch rather than after the last one."""

from __future__ import annotations

from pathlib import Path

import pytest

from logkeel.cluster.metadata import PartitionState, TopicState
from logkeel.server.replica import partition_table
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition
from logkeel.testing.partition_tables import partition_table_over


def topic(n: int) -> TopicState:
    return TopicState(
        "t",
        "id",
        {p: PartitionState("t", p, [1, 2, 3], [1, 2, 3][p % 3], 0, [1, 2, 3], 0) for p in range(n)},
    )


def test_new_partitions_serve_batch_by_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(partition_table, "CREATE_BATCH", 4)
    logs = LogManager([tmp_path])
    logs.startup(start_background=False)
    table = partition_table_over(logs, tmp_path)
    told: list[list[TopicPartition]] = []

    def progress(tps: list[TopicPartition]) -> None:
        # Every partition told is served already: its log exists and its leadership is set.
        for tp in tps:
            p = table.get(tp)
            assert p is not None and p.log is not None and p.state_error(leader_only=False) is None
        told.append(tps)

    try:
        rest = table.apply_topic("t", topic(10), progress=progress)
        assert [len(b) for b in told] == [4, 4, 2]
        assert sorted(tp.partition for b in told for tp in b) == list(range(10))
        assert rest == []  # all told through progress, none returned twice
        leader = table.get(TopicPartition("t", 0))
        assert leader is not None and leader.is_leader
        assert leader.log is not None and leader.log.leader_epochs.latest_epoch == 0
    finally:
        logs.shutdown()


def test_without_progress_new_partitions_are_returned(tmp_path: Path) -> None:
    logs = LogManager([tmp_path])
    logs.startup(start_background=False)
    table = partition_table_over(logs, tmp_path)
    try:
        changed = table.apply_topic("t", topic(6))
        assert sorted(tp.partition for tp in changed) == list(range(6))
        assert all(p.log is not None for p in table.all())
    finally:
        logs.shutdown()
