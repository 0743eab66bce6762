"""The replica to designate from the brokers' reports: the audit's ranking (log end, then last
leader epoch), reports of another topic of the same name left out, and what the operator is
told when the best copy is down or a replica never reported."""

from __future__ import annotations

from logkeel.cluster.designation import replica_to_designate
from logkeel.cluster.zk_data import ReplicaLogReport


def report(end: int, epoch: int, topic_id: str = "id-1") -> ReplicaLogReport:
    return ReplicaLogReport(topic_id, epoch, end, 3)


def designate(reports: dict[int, ReplicaLogReport], live: set[int]) -> dict[str, object]:
    return replica_to_designate("t", 0, [1, 2, 3], reports, topic_id="id-1", live=live,
                                bootstrap="h:9092")  # fmt: skip


def test_the_longest_log_wins_then_the_later_epoch() -> None:
    answer = designate({1: report(5, 9), 2: report(8, 2), 3: report(8, 4)}, {1, 2, 3})
    assert answer["broker"] == 3
    assert answer["elect_command"] == (
        "logkeel elect --topic t --partition 0 --replica 3 --bootstrap-server h:9092"
    )
    assert answer["note"] == "" and answer["unreported"] == []


def test_a_report_of_a_topic_made_again_is_left_out() -> None:
    answer = designate({1: report(5, 1), 2: report(50, 7, topic_id="old")}, {1, 2, 3})
    assert answer["broker"] == 1
    assert answer["unreported"] == [2, 3] and "may hold more" in str(answer["note"])


def test_a_best_copy_on_a_dead_broker_is_named_with_start_it_first() -> None:
    answer = designate({1: report(5, 1), 2: report(9, 1)}, {1, 3})
    assert answer["broker"] == 2 and "start it" in str(answer["note"])


def test_no_report_no_answer_but_the_audit() -> None:
    answer = designate({}, {1, 2, 3})
    assert answer["broker"] is None and answer["elect_command"] is None
    assert "logkeel audit" in str(answer["note"])
