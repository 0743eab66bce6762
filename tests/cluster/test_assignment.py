from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logkeel.cluster.assignment import assign_replicas, rack_alternated, validate_assignment
from logkeel.cluster.metadata import MetadataError


def test_rack_unaware_matches_kafkas_documented_layout() -> None:
    a = assign_replicas({b: None for b in range(5)}, 10, 3)
    assert a[0] == (0, 1, 2) and a[4] == (4, 0, 1)
    assert a[5] == (0, 2, 3) and a[9] == (4, 1, 2)  # second round: followers shifted by one


def test_rack_alternated_order_matches_kafkas_example() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]


def test_rack_aware_spreads_each_partition_over_racks() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    for p, replicas in assign_replicas(racks, 12, 3, start_index=2, shift=1).items():
        assert len({racks[r] for r in replicas}) == 3, (p, replicas)


def test_refusals_use_kafkas_error_names() -> None:
    brokers = {1: None, 2: None}
    with pytest.raises(MetadataError) as e:
        assign_replicas(brokers, 1, 3)
    assert e.value.error_name == "INVALID_REPLICATION_FACTOR" and "2 available" in str(e.value)
    with pytest.raises(MetadataError) as e:
        assign_replicas(brokers, 0, 1)
    assert e.value.error_name == "INVALID_PARTITIONS"
    with pytest.raises(MetadataError, match="broker.rack"):
        assign_replicas({1: "a", 2: None}, 1, 1)


def test_manual_assignment_validation() -> None:
    validate_assignment({0: [1, 2], 1: [2, 3]}, [1, 2, 3])
    validate_assignment({3: [1]}, [1], first_partition=3)
    for bad, why in [
        ({0: [1, 9]}, "unknown"),
        ({0: [1, 1]}, "repeats"),
        ({0: [1], 1: [1, 2]}, "same"),
        ({1: [1]}, "numbered"),
        ({}, "no partition"),
    ]:
        with pytest.raises(MetadataError, match=why) as e:
            validate_assignment(bad, [1, 2, 3])
        assert e.value.error_name == "INVALID_REPLICA_ASSIGNMENT"


@st.composite
def clusters(draw):
    ids = draw(st.lists(st.integers(0, 50), min_size=1, max_size=9, unique=True))
    racked = draw(st.booleans())
    brokers = {b: (draw(st.sampled_from("abcd")) if racked else None) for b in ids}
    rf = draw(st.integers(1, len(ids)))
    return brokers, rf


@given(clusters(), st.integers(1, 40), st.integers(0, 20), st.integers(0, 20), st.integers(0, 5))
def test_assignment_properties(cluster, partitions, start, shift, first) -> None:
    brokers, rf = cluster
    a = assign_replicas(
        brokers, partitions, rf, start_index=start, shift=shift, first_partition=first
    )
    assert sorted(a) == list(range(first, first + partitions))
    validate_assignment(a, list(brokers), first_partition=first)
    assert all(len(r) == rf for r in a.values())
    racks = set(brokers.values())
    if None not in racks:
        for replicas in a.values():
            assert len({brokers[r] for r in replicas}) == min(rf, len(racks))
    leaders = Counter(r[0] for r in a.values())
    if partitions >= len(brokers):
        assert max(leaders.values()) - min(leaders[b] for b in brokers) <= 1
