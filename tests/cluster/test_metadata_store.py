"""The embedded metadata store's refusals and its record of pending topic deletions."""

from __future__ import annotations

from pathlib import Path

import pytest

from logkeel.cluster.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
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


def test_acl_bindings_are_persisted_and_removed(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    store = EmbeddedMetadataStore(dirs, 0, "127.0.0.1", 9092)
    read = AclBinding(
        ResourceType.TOPIC,
        "t",
        PatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    deny = AclBinding(
        ResourceType.GROUP,
        "g-",
        PatternType.PREFIXED,
        "User:*",
        "*",
        AclOperation.ALL,
        AclPermissionType.DENY,
    )
    store.alter_acls([read, deny, read], [])
    assert store.acl_bindings() == (read, deny)
    assert EmbeddedMetadataStore(dirs, 0, "127.0.0.1", 9092).acl_bindings() == (read, deny)
    store.alter_acls([], [read])
    assert EmbeddedMetadataStore(dirs, 0, "127.0.0.1", 9092).acl_bindings() == (deny,)
