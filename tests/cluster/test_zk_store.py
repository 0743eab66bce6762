"""`ZkMetadataStore` and `Controller` in this process, two brokers' worth, against the real
ZooKeeper: the caches follow the controller's decisions, admin writes wait for them, a leader's
ISR change is conditional on the partition epoch, and a broker registers again after its
session expired."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest

from logkeel.cluster import zk_data as zd
from logkeel.cluster.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from logkeel.cluster.controller import Controller
from logkeel.cluster.controller_context import ControllerContext
from logkeel.cluster.metadata import MetadataError, TopicState
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_data import LeaderIsr, TopicAssignment
from logkeel.cluster.zk_store import ZkMetadataStore
from logkeel.storage.topic_partition import TopicPartition
from tests.cluster.test_zk_client import WAIT, expire_session, registration
from tests.waiting import wait_until


class Node:
    def __init__(self, connect: str, broker_id: int, rebalance_s: float | None = None) -> None:
        client = ZkMetadataClient(connect, session_timeout_ms=6000, connection_timeout_ms=10_000)
        self.store = ZkMetadataStore(client, broker_id, rack=None)
        self.controller = Controller(client, broker_id, rebalance_interval_s=rebalance_s)
        # As `ClusterNode` wires them: the controller's writes reach its own broker at once.
        self.handed: list[tuple[TopicPartition, LeaderIsr]] = []

        def handed(states: list[tuple[TopicPartition, LeaderIsr]]) -> None:
            self.handed.extend(states)
            self.store.states_written(states)

        self.controller.on_states_written = handed
        self.events: list[tuple[str, TopicState | None]] = []
        self.store.add_listener(lambda name, state: self.events.append((name, state)))
        self.store.start()
        self.store.register("127.0.0.1", 9000 + broker_id, [f"dir-{broker_id}"])
        self.controller.start()

    def close(self) -> None:
        self.controller.stop()
        self.store.close()


@pytest.fixture
def nodes(zk_connect: str) -> Iterator[Callable[[int], Node]]:
    made: list[Node] = []

    def make(broker_id: int, rebalance_s: float | None = None) -> Node:
        made.append(Node(zk_connect, broker_id, rebalance_s))
        return made[-1]

    yield make
    for node in made:
        node.close()


def test_caches_follow_the_controller_and_admin_writes_wait(nodes) -> None:
    a, b = nodes(1), nodes(2)
    wait_until(
        lambda: len(a.store.brokers()) == 2 and len(b.store.brokers()) == 2, WAIT, "both live"
    )
    assert a.store.cluster_id == b.store.cluster_id
    wait_until(lambda: a.store.controller_id in (1, 2), WAIT, "a controller")

    with pytest.raises(MetadataError) as refused:
        a.store.create_topic("wide", 1, 3, {})
    assert refused.value.error_name == "INVALID_REPLICATION_FACTOR"

    created = a.store.create_topic("t", 2, 2, {"retention.ms": "1000"})
    assert [p.leader for p in created.partitions.values()] == [
        p.replicas[0] for p in created.partitions.values()
    ]
    wait_until(lambda: b.store.topic("t") == a.store.topic("t"), WAIT, "b to see the same topic")
    assert ("t", b.store.topic("t")) in b.events

    grown = b.store.create_partitions("t", 3)
    assert sorted(grown.partitions) == [0, 1, 2]
    assert b.store.set_topic_configs("t", {"retention.ms": "5"}).configs == {"retention.ms": "5"}

    # A leader drops its follower from the ISR (AlterPartition semantics).
    p0 = a.store.partition(created.partitions[0].tp)
    assert p0 is not None
    follower = next(r for r in p0.replicas if r != p0.leader)
    shrunk = type(p0)(
        p0.topic, 0, p0.replicas, p0.leader, p0.leader_epoch, [p0.leader], p0.partition_epoch + 1
    )
    a.store.update_partition(shrunk)
    wait_until(
        lambda: (s := b.store.partition(p0.tp)) is not None and s.isr == [p0.leader],
        WAIT,
        "the shrunk ISR everywhere",
    )
    with pytest.raises(MetadataError) as stale:
        a.store.update_partition(shrunk)  # made against the epoch that is now gone
    assert stale.value.error_name == "INVALID_UPDATE_VERSION"
    assert follower not in b.store.partition(p0.tp).isr  # type: ignore[union-attr]

    a.store.delete_topic("t")
    wait_until(lambda: b.store.topic("t") is None, WAIT, "the deletion everywhere")
    assert ("t", None) in b.events


def test_registration_returns_after_session_expiry(nodes) -> None:
    a, b = nodes(1), nodes(2)
    wait_until(lambda: len(b.store.brokers()) == 2, WAIT, "both live")
    before = b.store.registrations()[1].broker_epoch
    started = time.monotonic()
    expire_session(a.store.client)

    def registered_again() -> bool:
        reg = b.store.registrations().get(1)
        return reg is not None and reg.broker_epoch != before

    wait_until(registered_again, WAIT, "a to register again, with a new broker epoch")
    assert time.monotonic() - started < 15
    wait_until(lambda: a.store.controller_id in (1, 2), WAIT, "a controller again")


def test_leadership_returns_to_the_preferred_replica(nodes) -> None:
    a, b = nodes(1, 0.2), nodes(2, 0.2)
    wait_until(lambda: len(a.store.brokers()) == 2, WAIT, "both live")
    created = a.store.create_topic("r", 2, 2, {})
    preferred_by_b = next(p for p in created.partitions.values() if p.replicas[0] == 2)
    b.close()
    wait_until(
        lambda: (s := a.store.partition(preferred_by_b.tp)) is not None and s.leader == 1,
        WAIT,
        "broker 1 to take over",
    )
    nodes(2, 0.2)
    current = a.store.partition(preferred_by_b.tp)
    assert current is not None and current.isr == [1]
    # The leader takes the returned follower back into the ISR (replication does this).
    a.store.update_partition(
        type(current)(
            current.topic,
            current.partition,
            current.replicas,
            1,
            current.leader_epoch,
            [1, 2],
            current.partition_epoch + 1,
        )
    )
    wait_until(
        lambda: (s := a.store.partition(preferred_by_b.tp)) is not None and s.leader == 2,
        WAIT,
        "the auto leader rebalance to give it back",
    )


def test_replicas_of_a_failed_log_dir_lose_leadership(nodes) -> None:
    a, b = nodes(1), nodes(2)
    wait_until(lambda: len(a.store.brokers()) == 2, WAIT, "both live")
    created = a.store.create_topic("disk", 2, 2, {})
    led_by_a = [p.tp for p in created.partitions.values() if p.leader == 1]
    assert led_by_a
    a.store.report_offline_replicas(led_by_a, ["dir-1"])

    def moved() -> bool:
        states = [b.store.partition(tp) for tp in led_by_a]
        return all(s is not None and s.leader == 2 and s.isr == [2] for s in states)

    wait_until(moved, WAIT, "the controller to move leadership off the failed dir")
    wait_until(
        lambda: b.store.registrations()[1].offline_log_dir_ids == ("dir-1",),
        WAIT,
        "the offline dir in broker 1's registration",
    )
    wait_until(
        lambda: all(1 in b.store.partition(tp).offline_replicas for tp in led_by_a),
        WAIT,
        "broker 1 listed as an offline replica",
    )


def test_manual_assignments_are_kept_and_checked(nodes) -> None:
    a, _ = nodes(1), nodes(2)
    wait_until(lambda: len(a.store.brokers()) == 2, WAIT, "both live")
    created = a.store.create_topic("manual", 2, 2, {}, assignment={0: [2, 1], 1: [1, 2]})
    assert {p: (s.replicas, s.leader) for p, s in created.partitions.items()} == {
        0: ([2, 1], 2),
        1: ([1, 2], 1),
    }
    grown = a.store.create_partitions("manual", 3, assignment={2: [2, 1]})
    assert grown.partitions[2].replicas == [2, 1]
    with pytest.raises(MetadataError) as unknown:
        a.store.create_topic("bad", 1, 2, {}, assignment={0: [1, 7]})
    assert unknown.value.error_name == "INVALID_REPLICA_ASSIGNMENT"


def test_acls_written_through_one_broker_apply_on_the_other(nodes) -> None:
    a, b = nodes(1), nodes(2)
    read = AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:alice", "*",
                      AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
    deny = AclBinding(ResourceType.TOPIC, "t-", PatternType.PREFIXED, "User:*", "*",
                      AclOperation.WRITE, AclPermissionType.DENY)  # fmt: skip
    a.store.alter_acls([read], [])
    b.store.alter_acls([deny], [])  # applied on top of a's write, not over it
    wait_until(lambda: set(a.store.acl_bindings()) == {read, deny} == set(b.store.acl_bindings()), WAIT, "both brokers see both ACLs")  # fmt: skip
    b.store.alter_acls([], [read])
    wait_until(
        lambda: a.store.acl_bindings() == (deny,), WAIT, "the removal reaches the other broker"
    )


def test_group_configs_written_through_one_broker_apply_on_the_other(nodes) -> None:
    a, b = nodes(1), nodes(2)
    a.store.alter_group_configs({"g1": {"consumer.session.timeout.ms": "50000"}})
    b.store.alter_group_configs({"g2": {"consumer.heartbeat.interval.ms": "6000"}})
    both = {
        "g1": {"consumer.session.timeout.ms": "50000"},
        "g2": {"consumer.heartbeat.interval.ms": "6000"},
    }
    wait_until(
        lambda: a.store.group_configs() == both == b.store.group_configs(), WAIT, "both groups"
    )
    b.store.alter_group_configs({"g1": {}})
    wait_until(
        lambda: "g1" not in a.store.group_configs(), WAIT, "the removal reaches the other broker"
    )


def test_a_controlled_shutdown_is_answered_by_the_controller_and_fences_writes(
    nodes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="logkeel.cluster.controller")
    a, b = nodes(1), nodes(2)
    wait_until(lambda: len(a.store.brokers()) == 2, WAIT, "both live")
    wait_until(lambda: a.store.controller_id in (1, 2), WAIT, "a controller")
    created = a.store.create_topic("leaving", 4, 2, {})
    assert {p.leader for p in created.partitions.values()} == {1, 2}
    assert a.store.write_fence.why_fenced() is None
    assert a.store.controlled_shutdown(WAIT)
    # The controller's answer, for this incarnation of broker 1: nothing left to move.
    data, _stat = a.store.client.zk.get(zd.controlled_shutdown_path(1))
    assert zd.decode_controlled_shutdown(data) == (a.store.broker_epoch, 0)
    wait_until(
        # Broker 2's own cache may not show the topic yet on a loaded machine (CI: None).
        lambda: (
            (t := b.store.topic("leaving")) is not None
            and all(p.leader == 2 for p in t.partitions.values())
        ),
        WAIT,
        "broker 2 to lead every partition",
    )
    assert "shutting down" in (a.store.write_fence.why_fenced() or "")
    # Written in one transaction right behind the leaderships' writes, conditional on them.
    assert "broker 1: 0 leaderships left to move (answered behind the writes)" in caplog.text


def test_a_controlled_shutdown_waits_for_the_controllers_answer_not_its_own_view(
    zk_connect: str,
) -> None:
    """A broker whose own view shows it leading nothing still waits for the controller's
    answer while a controller is elected: its view can lag the leaderships just given to it
    (a topic being created), and leaving on that view left nine behind in an attack test. It
    refuses writes from the answer on, though its view may still show it leading. With no
    controller to answer, its view decides."""
    client = ZkMetadataClient(zk_connect, session_timeout_ms=6000, connection_timeout_ms=10_000)
    store = ZkMetadataStore(client, 2, rack=None)
    store.start()
    store.register("127.0.0.1", 9002, ["dir-2"])
    # A controller (its own session) that has not answered yet.
    other = ZkMetadataClient(zk_connect, session_timeout_ms=6000).start()
    path = zd.controlled_shutdown_path(2)

    def answer_after(delay_s: float) -> threading.Timer:
        answer = threading.Timer(
            delay_s,
            lambda: other.zk.set(path, zd.encode_controlled_shutdown(store.broker_epoch, 0)),
        )
        answer.start()
        return answer

    try:
        ctl = other.try_become_controller(7)
        assert ctl is not None
        wait_until(lambda: store.controller_id == 7, WAIT, "the controller seen")
        started = time.monotonic()
        assert not store.controlled_shutdown(1.5)  # on the code before: True at once
        assert time.monotonic() - started >= 1.5
        assert store.write_fence.why_fenced() is None  # unanswered: it still takes writes

        # Answered while its view shows it leading (the move never seen here): fenced from
        # the answer on; it waits for its view until the bound.
        other.register_broker(registration(3))
        other.create_topic(TopicAssignment("led", "id", {0: (2, 3)}), {})
        other.create_partition_states(ctl, "led", {0: LeaderIsr(2, 0, (2, 3), ctl.epoch, 0)})
        wait_until(
            lambda: (t := store.topic("led")) is not None and t.partitions[0].leader == 2,
            WAIT,
            "broker 2 shown leading",
        )
        answer = answer_after(0.3)
        assert not store.controlled_shutdown(1.5)
        answer.join()
        assert "shutting down" in (store.write_fence.why_fenced() or "")

        # Leading nothing: done once answered.
        other.zk.delete(zd.topic_path("led"), recursive=True)
        wait_until(lambda: store.topic("led") is None, WAIT, "the topic gone")
        answer = answer_after(0.5)
        started = time.monotonic()
        assert store.controlled_shutdown(WAIT)
        assert time.monotonic() - started >= 0.4
        answer.join()

        # Without a controller, nothing will answer: its own view (nothing led) decides.
        other.close()
        wait_until(lambda: store.controller_id == -1, WAIT, "the controller gone")
        started = time.monotonic()
        assert store.controlled_shutdown(WAIT)
        assert time.monotonic() - started < 1.0
    finally:
        other.close()
        store.close()


def test_the_controllers_own_broker_takes_the_states_it_wrote(nodes) -> None:
    """The controller hands each answered transaction's states to its own broker's store; what
    it hands is what ZooKeeper holds, and a state older than the store's is never taken."""
    a = nodes(1)
    wait_until(lambda: a.store.controller_id == 1, WAIT, "broker 1 the controller")
    b = nodes(2)
    wait_until(lambda: len(a.store.brokers()) == 2, WAIT, "both live")
    created = a.store.create_topic("t", 6, 2, {})
    led_by_b = {p.tp for p in created.partitions.values() if p.leader == 2}
    assert led_by_b
    b.close()  # its session ends: the controller moves its leaderships to broker 1
    wait_until(lambda: {tp for tp, _ in a.handed} >= led_by_b, WAIT, "the moves handed over")
    zk = a.store.client.zk
    for tp, state in a.handed:
        data, stat = zk.get(zd.partition_state_path(tp.topic, tp.partition))
        written = zd.decode_partition_state(data, stat.version)
        if written.zk_version == state.zk_version:  # not changed again since
            assert (written.leader, written.leader_epoch, written.isr) == (
                state.leader, state.leader_epoch, state.isr,
            )  # fmt: skip
    wait_until(
        lambda: all(a.store.partition(tp).leader == 1 for tp in led_by_b),  # type: ignore[union-attr]
        WAIT,
        "broker 1 leading what broker 2 led",
    )
    # A state older than the one the store holds (a watch brought a newer one first) is
    # dropped: the store keeps the newer.
    tp = sorted(led_by_b)[0]
    held = a.store.partition(tp)
    assert held is not None
    data, stat = zk.get(zd.partition_state_path(tp.topic, tp.partition))
    older = zd.decode_partition_state(data, stat.version - 1)
    a.store.states_written([(tp, LeaderIsr(2, 0, (2,), older.controller_epoch,
                                           zk_version=older.zk_version))])  # fmt: skip
    # A config change rebuilds the whole topic from the cached states once it is seen.
    assert a.store.set_topic_configs("t", {"retention.ms": "5"}).configs == {"retention.ms": "5"}
    assert a.store.partition(tp) == held


def test_a_topic_created_again_before_its_deletion_was_seen_takes_its_new_states(
    zk_connect: str,
) -> None:
    """A topic deleted and created again under the same name, both in one transaction, so
    neither a broker's cache nor the controller's view ever reads the topic gone: the new
    topic's states start their versions over, and must replace the old topic's (higher)
    ones, not be taken for stale."""
    client = ZkMetadataClient(zk_connect, session_timeout_ms=6000, connection_timeout_ms=10_000)
    store = ZkMetadataStore(client, 1, rack=None).start()
    writer = ZkMetadataClient(zk_connect).start()
    zk = writer.zk
    view = ControllerContext(zk, lambda _kind, _tps: None)
    tp = TopicPartition("again", 0)
    try:
        old = zd.TopicAssignment("again", "AAAAAAAAAAAAAAAAAAAAAA", {0: (1, 2)})
        zk.create(zd.topic_path("again"), zd.encode_topic(old), makepath=True)
        state = zd.partition_state_path("again", 0)
        zk.create(state, zd.encode_partition_state(LeaderIsr(1, 0, (1, 2), 1)), makepath=True)
        for epoch in (1, 2, 3):  # the old topic's state reaches version 3
            zk.set(state, zd.encode_partition_state(LeaderIsr(1, epoch, (1, 2), 1)))

        def leader_epoch() -> int | None:
            topic = store.topics().get("again")
            p = topic.partitions.get(0) if topic is not None else None
            return p.leader_epoch if p is not None else None

        wait_until(lambda: leader_epoch() == 3, WAIT, "the old topic's state in the cache")
        assert view.load(WAIT)
        assert view.states[tp].leader_epoch == 3
        new = zd.TopicAssignment("again", "BBBBBBBBBBBBBBBBBBBBBB", {0: (2, 1)})
        txn = zk.transaction()
        txn.delete(state)
        txn.delete(zd.partition_path("again", 0))
        txn.delete(zd.partitions_path("again"))
        txn.delete(zd.topic_path("again"))
        txn.create(zd.topic_path("again"), zd.encode_topic(new))
        txn.create(zd.partitions_path("again"))
        txn.create(zd.partition_path("again", 0))
        txn.create(state, zd.encode_partition_state(LeaderIsr(2, 0, (2, 1), 1)))
        assert not any(isinstance(r, Exception) for r in txn.commit())
        wait_until(
            lambda: (t := store.topics().get("again")) is not None
            and t.topic_id == new.topic_id and 0 in t.partitions
            and t.partitions[0].leader == 2 and t.partitions[0].leader_epoch == 0,
            WAIT, "the new topic's state in the cache",
        )  # fmt: skip
        wait_until(
            lambda: (s := view.states.get(tp)) is not None and (s.leader, s.leader_epoch) == (2, 0),
            WAIT, "the new topic's state in the controller's view",
        )  # fmt: skip
    finally:
        view.close()
        writer.close()
        store.close()


def leaders_unlisted(store: ZkMetadataStore) -> list[str]:
    """Filled, from now on, with each moment a published partition names a leader neither
    listed to clients (`advertised_brokers`) nor offline: a leader a client cannot find."""
    broken: list[str] = []

    def check(when: str) -> None:
        listed = {b.node_id for b in store.advertised_brokers()}
        for topic in store._snapshot.values():
            for p in topic.partitions.values():
                if p.leader >= 0 and p.leader not in p.offline_replicas and p.leader not in listed:
                    broken.append(f"after {when}: {p.topic}-{p.partition} led by {p.leader}, "
                                  f"brokers {sorted(listed)}")  # fmt: skip

    for name in ("_publish", "_set_brokers"):
        original = getattr(store, name)

        def wrapper(*args: Any, _original: Any = original, _name: str = name, **kw: Any) -> Any:
            result = _original(*args, **kw)
            check(_name)
            return result

        setattr(store, name, wrapper)
    return broken


@contextmanager
def departure(
    zk_connect: str, linger_s: float, assignment: zd.TopicAssignment, leaders: dict[int, int]
) -> Iterator[tuple[ZkMetadataStore, Any, dict[int, ZkMetadataClient]]]:
    """Broker 1's store (not started: a test wraps it first), brokers 2 and 3 registered by
    their own sessions (close one to make it depart), and the topic written with ISR (3, 2):
    yields the store, a ZooKeeper client to write with, and the peers."""
    client = ZkMetadataClient(zk_connect, session_timeout_ms=6000, connection_timeout_ms=10_000)
    store = ZkMetadataStore(client, 1, rack=None, departed_linger_s=linger_s)
    writer = ZkMetadataClient(zk_connect).start()
    peers = {b: ZkMetadataClient(zk_connect).start() for b in (2, 3)}
    zk = writer.zk
    try:
        for b, peer in peers.items():
            peer.register_broker(
                zd.BrokerRegistration(b, (zd.EndPoint("PLAINTEXT", "127.0.0.1", 9000 + b),))
            )
        zk.create(zd.topic_path(assignment.topic), zd.encode_topic(assignment), makepath=True)
        for p, leader in leaders.items():
            zk.create(zd.partition_state_path(assignment.topic, p),
                      zd.encode_partition_state(LeaderIsr(leader, 0, (3, 2), 1)), makepath=True)  # fmt: skip
        yield store, zk, peers
    finally:
        for peer in peers.values():
            peer.close()
        writer.close()
        store.close()


def test_a_broker_gone_while_leading_is_shown_as_leader_until_its_successor(
    zk_connect: str,
) -> None:
    """As Kafka's metadata cache: a broker whose registration went stays listed, and the leader
    of the partitions it led, until the controller's states name their new leaders (not
    leaderless in between); where none comes, until the linger ends. As a follower it reads
    offline at once."""
    assignment = zd.TopicAssignment(
        "gone", "CCCCCCCCCCCCCCCCCCCCCC", {0: (3, 2), 1: (2, 3), 2: (3, 2)}
    )
    with departure(zk_connect, 10.0, assignment, {0: 3, 1: 2, 2: 3}) as (store, zk, peers):
        broken = leaders_unlisted(store)
        store.start()

        def view(p: int) -> tuple[int, list[int]]:
            part = store.partition(TopicPartition("gone", p))
            assert part is not None
            return part.leader, part.offline_replicas

        def listed(brokers: list[Any]) -> set[int]:
            return {b.node_id for b in brokers}

        wait_until(lambda: store.topic("gone") is not None and listed(store.brokers()) == {2, 3},
                   WAIT, "the topic and brokers 2 and 3 in the cache")  # fmt: skip
        peers.pop(3).close()  # its registration goes with its session
        wait_until(lambda: 3 not in listed(store.brokers()), WAIT, "broker 3's registration gone")
        gone_at = time.monotonic()
        assert listed(store.advertised_brokers()) == {2, 3}
        assert view(0) == (3, []) and view(2) == (3, [])  # still its leader, not leaderless
        assert view(1) == (2, [3])  # a follower gone reads offline at once

        # The controller's successor for partition 0: shown with broker 3 offline, together.
        zk.set(
            zd.partition_state_path("gone", 0), zd.encode_partition_state(LeaderIsr(2, 1, (2,), 1))
        )
        wait_until(lambda: view(0)[0] == 2, WAIT, "partition 0's new leader")
        assert view(0) == (2, [3])
        assert time.monotonic() - gone_at < 10.0, "too slow to tell the linger apart"
        assert listed(store.advertised_brokers()) == {2, 3}  # still leads partition 2

        # No successor for partition 2: once the linger ends it is leaderless, 3 unlisted.
        wait_until(lambda: view(2) == (3, [3]), 20, "partition 2 offline after the linger")
        assert time.monotonic() - gone_at >= 9.5
        assert listed(store.advertised_brokers()) == {2}
        assert broken == []


def test_a_departed_leader_stays_listed_until_the_published_topic_names_its_successor(
    zk_connect: str,
) -> None:
    """The controller's new state for a departed broker's partition is handed over
    (`states_written`) after the store rebuilt that topic for the departure: cached at once,
    published in the next rebuild. The broker stays listed until then; at no moment does a
    published partition name a leader that is neither listed nor offline (CI once showed
    "solo-0 led by 3" with brokers [1, 2])."""
    tp0 = TopicPartition("moved", 0)
    assignment = zd.TopicAssignment("moved", "DDDDDDDDDDDDDDDDDDDDDD", {0: (3, 2), 1: (2, 3)})
    with departure(zk_connect, 30.0, assignment, {0: 3, 1: 2}) as (store, zk, peers):
        handed = threading.Event()
        decide = store._still_leading

        def hand_over_then_decide(departed: Any) -> Any:
            # Once 3 departed and its topic was rebuilt (the worker's end-of-batch decision),
            # the controller's state for partition 0 arrives, as from another thread.
            if 3 in store._departed and not handed.is_set():
                handed.set()
                new = LeaderIsr(2, 1, (2,), 1)
                stat = zk.set(zd.partition_state_path("moved", 0), zd.encode_partition_state(new))
                store.states_written([(tp0, replace(new, zk_version=stat.version))])
            return decide(departed)

        store._still_leading = hand_over_then_decide  # type: ignore[method-assign]
        broken = leaders_unlisted(store)
        store.start()
        wait_until(lambda: store.topic("moved") is not None
                   and {b.node_id for b in store.brokers()} == {2, 3},
                   WAIT, "the topic and brokers 2 and 3 in the cache")  # fmt: skip
        peers.pop(3).close()  # its registration goes with its session
        wait_until(handed.is_set, WAIT, "the new state handed over after the rebuild")
        wait_until(lambda: (p := store.partition(tp0)) is not None and p.leader == 2, WAIT,
                   "partition 0's new leader published")  # fmt: skip
        wait_until(lambda: {b.node_id for b in store.advertised_brokers()} == {2}, WAIT,
                   "broker 3 no longer listed once it leads nothing")  # fmt: skip
        assert broken == []
