"""The adoption decision (``cluster.adoption.plan_adoption``): which logs on disk a single
node registers as topics, and why the others are left alone."""

from __future__ import annotations

import itertools

from logkeel.cluster.adoption import plan_adoption
from logkeel.storage.partition_metadata import parse_topic_id
from logkeel.storage.topic_partition import TopicPartition

ID_A = "3Zbq1mK4RZ2u5nZ2wVZ5Jg"
ID_B = "xxsQVUyFSAykQQDZUsOdeQ"
COORDINATORS = ("__consumer_offsets", "__transaction_state")


def plan(strays, *, known=None, pending=(), deleted=None):
    ids = (f"new-{i}" for i in itertools.count())
    return plan_adoption(
        {TopicPartition(t, p): i for (t, p), i in strays.items()},
        known=known or {},
        pending_deletions=pending,
        deleted=deleted or {},
        coordinator_topics=COORDINATORS,
        new_id=lambda: next(ids),
    )


def test_a_topic_is_adopted_with_its_partitions_and_the_id_on_disk():
    adopted, refused = plan({("t", 0): ID_A, ("t", 1): ID_A, ("u", 0): None})
    assert refused == []
    t, u = adopted
    assert (t.topic, t.partitions, t.topic_id, t.id_from_disk, t.missing) == (
        "t",
        2,
        ID_A,
        True,
        (),
    )
    assert (u.topic, u.partitions, u.topic_id, u.id_from_disk) == ("u", 1, "new-0", False)
    assert not t.internal and "topic id " + ID_A in t.describe()


def test_gaps_keep_the_numbering_and_are_named():
    (a,), _ = plan({("t", 0): None, ("t", 3): None})
    assert (a.partitions, a.present, a.missing) == (4, (0, 3), (1, 2))
    assert "partitions [1, 2] have no log here" in a.describe()


def test_deletions_pending_or_done_are_never_adopted():
    adopted, refused = plan(
        {("p", 0): None, ("d", 0): None, ("i", 0): ID_A, ("j", 0): ID_B},
        pending=["p"],
        deleted={"d": ID_A, "i": ID_A, "j": ID_A},
    )
    # 'j' has the name of a deleted topic but another topic's id: not the deleted one.
    assert [a.topic for a in adopted] == ["j"]
    reasons = {r.topic: r.reason for r in refused}
    assert reasons["p"] == "its deletion is pending"
    assert "was deleted" in reasons["d"] and "was deleted" in reasons["i"]


def test_known_topics_ids_names_and_the_kraft_log_are_left_alone():
    adopted, refused = plan(
        {
            ("known", 5): None,
            ("__cluster_metadata", 0): None,
            ("mixed", 0): ID_A,
            ("mixed", 1): ID_B,
            ("stolen", 0): ID_B,
            ("a.b", 0): None,
            ("bad name", 0): None,
        },
        known={"known": ID_A, "other": ID_B, "a_b": "x"},
    )
    assert adopted == []
    reasons = {r.topic: r.reason for r in refused}
    assert "exists" in reasons["known"]
    assert "KRaft" in reasons["__cluster_metadata"]
    assert "different topic ids" in reasons["mixed"]
    assert "belongs to topic 'other'" in reasons["stolen"]
    assert "collides with topic 'a_b'" in reasons["a.b"]
    assert "illegal" in reasons["bad name"]


def test_coordinator_topics_only_without_gaps():
    adopted, refused = plan(
        {
            **{("__consumer_offsets", p): None for p in range(7)},
            ("__transaction_state", 0): None,
            ("__transaction_state", 2): None,
        }
    )
    (offsets,) = adopted
    assert (offsets.topic, offsets.partitions, offsets.internal) == ("__consumer_offsets", 7, True)
    (txn,) = refused
    assert txn.topic == "__transaction_state" and "partitions [1] are missing" in txn.reason


def test_partition_metadata_topic_ids():
    assert parse_topic_id(f"version: 0\ntopic_id: {ID_A}\n") == ID_A
    assert parse_topic_id("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n") is None
    assert parse_topic_id(f"version: 1\ntopic_id: {ID_A}\n") is None
    assert parse_topic_id("version: 0\ntopic_id: not-an-id\n") is None
    assert parse_topic_id("") is None
