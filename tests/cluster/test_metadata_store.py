"""The embedded metadata store's refusals and its record of pending topic deletions."""

from __future__ import annotations

from pathlib import Path

import pytest

from logkeel.cluster.metadata import EmbeddedMetadataStore, MetadataError
from logkeel.storage.topic_partition import TopicPartition

LONGEST = "t" * 249


def test_partition_counts_whose_dirs_would_not_fit_are_refused(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    store = EmbeddedMetadataStore([tmp_path / "d"], 0, "127.0.0.1", 9092)
    with pytest.raises(MetadataError) as info:
        store.create_topic(LONGEST, 100_001, 1, {}, validate_only=True)
    assert info.value.error_name == "INVALID_PARTITIONS" and "255" in str(info.value)
    assert store.create_topic(LONGEST, 100_000, 1, {}, validate_only=True)
    store.create_topic(LONGEST, 1, 1, {})
    with pytest.raises(MetadataError) as info:
        store.create_partitions(LONGEST, 100_001, validate_only=True)
    assert info.value.error_name == "INVALID_PARTITIONS"
    assert store.create_partitions(LONGEST, 100_000, validate_only=True)


def test_a_deletion_stays_pending_until_the_broker_has_removed_the_dirs(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    store = EmbeddedMetadataStore([tmp_path / "d"], 0, "127.0.0.1", 9092)
    store.create_topic("gone", 2, 1, {})
    store.create_topic("again", 1, 1, {})
    store.delete_topic("gone")
    store.delete_topic("again")
    store.create_topic("again", 1, 1, {})  # its new dirs are not the old topic's leftovers
    reopened = EmbeddedMetadataStore([tmp_path / "d"], 0, "127.0.0.1", 9092)
    assert reopened.pending_deletions() == [TopicPartition("gone", 0), TopicPartition("gone", 1)]
    reopened.forget_deletions(["gone"])
    assert EmbeddedMetadataStore([tmp_path / "d"], 0, "127.0.0.1", 9092).pending_deletions() == []
