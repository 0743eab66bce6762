"""`logkeel reassign`'s plans, pure: Kafka's JSON formats, the balanced rack-aware proposal,
the replacement of lost replicas, the throttled-replica lists."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from logkeel.cli.reassign_plan import (
    Broker,
    PlanError,
    parse_plan,
    parse_topics,
    plan_json,
    propose,
    replace_lost,
    throttled_replicas,
)
from logkeel.storage.topic_partition import TopicPartition as TP

KAFKA_PLAN = (
    '{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[2,3],'
    '"log_dirs":["any","any"]},{"topic":"foo","partition":1,"replicas":[3,1]}]}'
)


def test_kafkas_plan_and_topics_files_are_read_and_written() -> None:
    plan = parse_plan(KAFKA_PLAN)
    assert plan == {TP("foo", 0): (2, 3), TP("foo", 1): (3, 1)}
    assert parse_plan(plan_json(plan)) == plan
    assert json.loads(plan_json(plan))["version"] == 1
    assert parse_topics('{"version":1,"topics":[{"topic":"foo"},{"topic":"bar"}]}') == [
        "foo",
        "bar",
    ]
    for bad in ("[]", "{}", '{"partitions":[{"topic":"t"}]}',
                '{"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}',
                '{"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/d"]}]}'):  # fmt: skip
        with pytest.raises(PlanError):
            parse_plan(bad)


def _counts(plan: dict[TP, tuple[int, ...]]) -> Counter[int]:
    return Counter(r for rs in plan.values() for r in rs)


def test_adding_a_broker_gives_it_its_share_and_moves_no_more() -> None:
    current = {TP("t", p): ((1, 2) if p % 2 else (2, 1)) for p in range(6)}
    plan = propose(current, [Broker(1), Broker(2), Broker(3)], {})
    assert _counts(plan) == {1: 4, 2: 4, 3: 4}
    moved = sum(len(set(plan[tp]) - set(current[tp])) for tp in current)
    assert moved == 4  # exactly broker 3's share
    for tp in current:
        assert len(set(plan[tp])) == 2
        if plan[tp][0] in current[tp]:
            assert plan[tp][0] == current[tp][0] or current[tp][0] not in plan[tp]


def test_removing_a_broker_moves_only_its_replicas() -> None:
    current = {TP("t", p): rs for p, rs in enumerate([(1, 2), (2, 3), (3, 1), (1, 3)])}
    plan = propose(current, [Broker(1), Broker(2)], {})
    assert all(3 not in rs for rs in plan.values())
    assert plan[TP("t", 0)] == (1, 2)  # untouched


def test_replicas_go_to_distinct_racks_and_bytes_break_ties() -> None:
    brokers = [Broker(1, "a"), Broker(2, "a"), Broker(3, "b"), Broker(4, "b")]
    current = {TP("t", p): (1, 2) for p in range(4)}
    plan = propose(current, brokers, {TP("t", 0): 10**9})
    for rs in plan.values():
        assert {dict(a=1, b=2)[b.rack] for b in brokers if b.id in rs} == {1, 2}  # type: ignore[index]
    assert _counts(plan) == {1: 2, 2: 2, 3: 2, 4: 2}
    with pytest.raises(PlanError, match="only 1 brokers"):
        propose({TP("t", 0): (1, 2)}, [Broker(1)], {})


def test_lost_replicas_are_recreated_on_other_brokers() -> None:
    current = {TP("t", 0): (1, 2), TP("t", 1): (2, 3)}
    plan = replace_lost(current, {TP("t", 0): [2]},
                        [Broker(1), Broker(2), Broker(3), Broker(4)], {})  # fmt: skip
    assert plan == {TP("t", 0): (1, 4)}  # 4 holds nothing; 3 holds a replica already
    with pytest.raises(PlanError, match="no live broker"):
        replace_lost({TP("t", 0): (1, 2)}, {TP("t", 0): [2]}, [Broker(1), Broker(2)], {})


def test_a_throttled_move_lists_the_current_and_the_new_replicas() -> None:
    current = {TP("t", 0): (1, 2), TP("t", 1): (2, 3), TP("u", 0): (1,)}
    plan = {TP("t", 0): (1, 3), TP("t", 1): (3, 2), TP("u", 0): (1,)}
    assert throttled_replicas(current, plan) == {"t": ("0:1,0:2", "0:3")}
