"""The ZooKeeper metadata layer against a real ZooKeeper server (session fixture, chroot per test)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from logkeel.cluster import zk_data as zd
from logkeel.cluster.elections import elect_leader
from logkeel.cluster.partition_state import ReplicaView
from logkeel.cluster.zk_brokers import BrokerIdInUse
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_controller import ControllerMoved
from logkeel.cluster.zk_data import BrokerRegistration, EndPoint, LeaderIsr, TopicAssignment
from logkeel.cluster.zk_session import ZooKeeperUnavailable
from logkeel.cluster.zk_topics import StalePartitionState
from logkeel.ports import free_port
from logkeel.storage.topic_partition import TopicPartition
from tests.waiting import wait_until

WAIT = 15.0  # upper bound for anything ZooKeeper does asynchronously in these tests


@pytest.fixture
def clients(zk_connect: str) -> Iterator[Callable[[], ZkMetadataClient]]:
    made: list[ZkMetadataClient] = []

    def make() -> ZkMetadataClient:
        client = ZkMetadataClient(zk_connect, session_timeout_ms=6000, connection_timeout_ms=10_000)
        made.append(client.start())
        return client

    yield make
    for client in made:
        client.close()


def registration(broker_id: int) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id,
        (EndPoint("PLAINTEXT", "127.0.0.1", 9090 + broker_id),),
        rack=f"r{broker_id}",
        log_dir_ids=(f"dir{broker_id}",),
    )


def expire_session(client: ZkMetadataClient) -> None:
    """Expire a session for real: a second connection with the same session id and password
    closes it on the server, as an expiry would."""
    session_id, password = client.zk.client_id
    thief = KazooClient(hosts=client.connect, client_id=(session_id, password), timeout=6.0)
    thief.start(timeout=WAIT)
    thief.stop()
    thief.close()


def test_unreachable_zookeeper_is_a_clear_error() -> None:
    client = ZkMetadataClient(f"127.0.0.1:{free_port()}", connection_timeout_ms=1000)
    started = time.monotonic()
    with pytest.raises(ZooKeeperUnavailable, match="zookeeper.connection.timeout.ms=1000"):
        client.start()
    assert time.monotonic() - started < WAIT


def test_broker_registration_is_ephemeral_and_watched(clients) -> None:
    a, b = clients(), clients()
    seen: list[list[int]] = []
    assert a.brokers(watch=seen.append) == {}
    epoch = b.register_broker(registration(2))
    assert epoch > 0
    wait_until(lambda: seen and seen[-1] == [2], WAIT, "the watch to see broker 2")
    found = a.brokers()[2]
    assert found.broker_epoch == epoch and found.rack == "r2" and found.log_dir_ids == ("dir2",)
    with pytest.raises(BrokerIdInUse):
        a.register_broker(registration(2))
    # The session that registered it asking again (a retried create, a second request after a
    # session expiry) is told its own registration, not refused.
    assert b.register_broker(registration(2)) == epoch
    b.update_broker(dataclasses.replace(registration(2), offline_log_dir_ids=("dir2",)))
    assert a.broker(2).offline_log_dir_ids == ("dir2",)

    lost = threading.Event()
    b.add_session_listener(lambda state: state == "LOST" and lost.set())
    expire_session(b)
    assert lost.wait(WAIT), "the expired session was not reported as LOST"
    wait_until(lambda: seen[-1] == [], WAIT, "the watch to see broker 2 vanish")
    assert a.broker(2) is None
    # The broker id is free again for a new session, with a newer broker epoch.
    assert clients().register_broker(registration(2)) > epoch


def test_controller_election_fencing_and_failover(clients) -> None:
    a, b = clients(), clients()
    ctl_a = a.try_become_controller(1)
    assert ctl_a is not None and ctl_a.epoch == 1
    assert b.try_become_controller(2) is None
    assert b.controller() == 1 and b.controller_epoch()[0] == 1

    a.create_topic(
        TopicAssignment("t", "AAAAAAAAAAAAAAAAAAAAAA", {0: (1, 2)}), {"min.insync.replicas": "2"}
    )
    a.create_partition_states(ctl_a, "t", {0: LeaderIsr(1, 0, (1, 2), ctl_a.epoch)})

    controllers: list[int | None] = []
    b.controller(watch=controllers.append)
    expire_session(a)
    wait_until(lambda: controllers and controllers[-1] is None, WAIT, "/controller to vanish")
    ctl_b = b.try_become_controller(2)
    assert ctl_b is not None and ctl_b.epoch == 2 and b.controller() == 2

    # The old controller's session is gone; a new session of it still holds the stale epoch.
    stale = clients()
    with pytest.raises(ControllerMoved):
        stale.update_partition_state(
            ctl_a, "t", 0, LeaderIsr(2, 1, (2,), ctl_a.epoch), expected_version=0
        )
    assert b.partition_state("t", 0) == LeaderIsr(1, 0, (1, 2), 1, zk_version=0)
    b.resign_controller(ctl_b)
    assert b.controller() is None
    with pytest.raises(ControllerMoved):
        stale.resign_controller(ctl_a)


def test_partition_state_writes_are_conditional_on_the_partition_epoch(clients) -> None:
    zk = clients()
    ctl = zk.try_become_controller(1)
    assert ctl is not None
    zk.create_topic(TopicAssignment("t", None, {0: (1, 2, 3)}), {})
    zk.create_partition_states(ctl, "t", {0: LeaderIsr(1, 0, (1, 2, 3), ctl.epoch)})
    current = zd.registration_of(zk.topic_assignment("t").partitions[0], zk.partition_state("t", 0))
    assert current.partition_epoch == 0

    views = {1: ReplicaView(live=False), 2: ReplicaView(live=True), 3: ReplicaView(live=True)}
    decision = elect_leader(current, views)
    version = zk.update_partition_state(
        ctl,
        "t",
        0,
        zd.leader_isr_of(decision.state, ctl.epoch),
        expected_version=current.partition_epoch,
    )
    assert version == decision.state.partition_epoch == 1
    stored = zd.registration_of((1, 2, 3), zk.partition_state("t", 0))
    assert stored == decision.state and stored.leader == 2

    # A second decision made against the old epoch loses: nothing it decided is written.
    rival = elect_leader(current, {**views, 2: ReplicaView(live=False)})
    with pytest.raises(StalePartitionState):
        zk.update_partition_state(
            ctl, "t", 0, zd.leader_isr_of(rival.state, ctl.epoch), expected_version=0
        )
    assert zk.partition_state("t", 0).leader == 2


def test_topics_configs_and_deletion(clients) -> None:
    zk = clients()
    ctl = zk.try_become_controller(1)
    assert ctl is not None
    names: list[list[str]] = []
    zk.topics(watch=names.append)
    zk.create_topic(
        TopicAssignment("t", "AAAAAAAAAAAAAAAAAAAAAA", {0: (1,), 1: (1,)}), {"retention.ms": "1000"}
    )
    with pytest.raises(NodeExistsError):
        zk.create_topic(TopicAssignment("t", None, {0: (1,)}), {})
    zk.create_partition_states(ctl, "t", {p: LeaderIsr(1, 0, (1,), ctl.epoch) for p in (0, 1)})
    wait_until(lambda: names and names[-1] == ["t"], WAIT, "the topics watch")
    assert zk.topic_config("t") == {"retention.ms": "1000"}
    zk.set_topic_config("t", {"retention.ms": "2000"})
    assert zk.topic_config("t") == {"retention.ms": "2000"}
    assert zk.topic_assignment("t").topic_id == "AAAAAAAAAAAAAAAAAAAAAA"

    zk.request_topic_deletion("t")
    zk.request_topic_deletion("t")
    assert zk.topics_to_delete() == ["t"]
    zk.delete_topic(ctl, "t")
    assert zk.topics() == [] and zk.topics_to_delete() == [] and zk.topic_config("t") == {}
    wait_until(lambda: names[-1] == [], WAIT, "the topics watch to see the deletion")


def test_notifications_are_read_in_order_and_once(clients) -> None:
    broker, controller = clients(), clients()
    first = broker.notify_isr_change([TopicPartition("t", 0)])
    broker.notify_isr_change([TopicPartition("t", 1), TopicPartition("u", 0)])
    assert first.startswith("/isr_change_notification/isr_change_")
    assert controller.take_isr_changes() == {
        TopicPartition("t", 0),
        TopicPartition("t", 1),
        TopicPartition("u", 0),
    }
    assert controller.take_isr_changes() == set()

    failed = zd.LogDirEvent(3, "/d/a", reason="EIO", time_ms=5)
    broker.notify_log_dir_failure(failed)
    broker.notify_log_dir_failure(zd.LogDirEvent(1))
    assert controller.take_log_dir_failures() == [failed, zd.LogDirEvent(1)]

    # Thousands of ISR changes of a long-named topic: in parts under ZooKeeper's 1 MB.
    many = {TopicPartition("x" * 249, p) for p in range(2 * zd.ISR_CHANGE_CHUNK + 1)}
    broker.notify_isr_change(many)
    children = controller.zk.get_children(zd.ISR_CHANGE_NOTIFICATION)
    assert len(children) == 3
    sizes = [
        controller.zk.exists(f"{zd.ISR_CHANGE_NOTIFICATION}/{c}").data_length for c in children
    ]
    assert max(sizes) < 1_000_000
    assert controller.take_isr_changes() == many

    broker.request_preferred_election([TopicPartition("t", 0)])
    with pytest.raises(NodeExistsError):
        broker.request_preferred_election([TopicPartition("t", 1)])
    assert controller.take_preferred_election() == {TopicPartition("t", 0)}
    assert controller.take_preferred_election() == set()


def test_producer_id_blocks_never_overlap_across_brokers(
    clients: Callable[[], ZkMetadataClient],
) -> None:
    """Each broker hands out ids from blocks reserved in ZooKeeper: two brokers reserving at
    once still get disjoint blocks (an id given twice would make a new producer's batches look
    like an old one's retries)."""
    a, b = clients(), clients()
    blocks: list[tuple[int, int]] = []
    lock = threading.Lock()

    def reserve(client: ZkMetadataClient, broker: int) -> None:
        for _ in range(20):
            block = client.reserve_producer_ids(broker, 1000)
            with lock:
                blocks.append(block)

    threads = [threading.Thread(target=reserve, args=(c, i)) for i, c in ((1, a), (2, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    ids = sorted(blocks)
    assert len(ids) == 40 and ids[0] == (0, 1000)
    assert all(end == next_start for (_, end), (next_start, _) in zip(ids, ids[1:], strict=False))
    assert all(end - start == 1000 for start, end in ids)


def test_adding_partitions_is_conditional_on_the_assignment_read(
    clients: Callable[[], ZkMetadataClient],
) -> None:
    """Two brokers adding partitions at once: the second write, made against the assignment
    both read, is refused, so it cannot overwrite the first one's partitions."""
    a, b = clients(), clients()
    a.create_topic(TopicAssignment("t", None, {0: (1,)}), {})
    found_a, found_b = a.versioned_topic_assignment("t"), b.versioned_topic_assignment("t")
    assert found_a is not None and found_b is not None
    (current, version), (_, version_b) = found_a, found_b
    grown = dataclasses.replace(current, partitions={0: (1,), 1: (2,)})
    assert a.set_topic_assignment(grown, version)
    other = dataclasses.replace(current, partitions={0: (1,), 1: (3,), 2: (3,)})
    assert not b.set_topic_assignment(other, version_b)
    assert a.topic_assignment("t") == grown
    assert b.versioned_topic_assignment("t") == (grown, version + 1)


def test_replica_log_reports_are_stored_in_bounded_parts_rewritten_only_when_changed(
    clients,
) -> None:
    a = clients()
    report = zd.ReplicaLogReport("id", 0, 5, 0, 1)
    logs = {TopicPartition("big", p): report for p in range(250)}
    assert a.set_replica_logs(1, 0, logs) == 4  # three parts of at most 100, then the report
    parts = a.zk.get_children(zd.replica_logs_path(1))
    assert sorted(parts) == ["big.0", "big.1", "big.2"]
    assert all(len(a.zk.get(f"{zd.replica_logs_path(1)}/{p}")[0]) < 100 * 200 for p in parts)
    assert a.set_replica_logs(1, 0, logs) == 0  # nothing changed: nothing written
    changed = {**logs, TopicPartition("big", 120): zd.ReplicaLogReport("id", 1, 9, 1, 1)}
    assert a.set_replica_logs(1, 0, changed) == 2  # the one part, then the report
    assert a.set_replica_logs(1, 1, changed) == 1  # a new generation asked for: the report
    b = clients()  # another session (the controller) reads them whole
    generation, read = b.replica_logs()[1]
    assert generation == 1 and read == changed
    fewer = {tp: r for tp, r in changed.items() if tp.partition < 100}
    assert a.set_replica_logs(1, 1, fewer) == 3  # two parts removed, then the report
    assert b.replica_logs()[1] == (1, fewer)


def test_a_replica_log_report_whose_write_failed_is_written_again(clients) -> None:
    # An unchanged report is not even encoded again; one that did not reach ZooKeeper is
    # not unchanged.
    a, other = clients(), clients()
    report = zd.ReplicaLogReport("id", 0, 5, 0, 1)
    logs = {TopicPartition("big", p): report for p in range(250)}
    assert a.set_replica_logs(1, 0, logs) == 4
    other.zk.delete(f"{zd.replica_logs_path(1)}/big.1")  # its next set fails
    changed = {**logs, TopicPartition("big", 120): zd.ReplicaLogReport("id", 1, 9, 1, 1)}
    with pytest.raises(NoNodeError):
        a.set_replica_logs(1, 0, changed)
    assert a.set_replica_logs(1, 0, changed) == 4  # not known as written: every part again
    assert other.replica_logs()[1] == (0, changed)
    assert a.set_replica_logs(1, 0, changed) == 0


def test_offline_reasons_are_written_and_removed_all_at_once(clients) -> None:
    c = clients()
    a, b, gone = (TopicPartition("t", p) for p in range(3))
    c.set_offline_reasons({a: "waiting for 3", b: "no eligible replica", gone: None})
    assert c.offline_reasons() == {a: "waiting for 3", b: "no eligible replica"}
    c.set_offline_reasons({a: "waiting for 2", b: None})
    assert c.offline_reasons() == {a: "waiting for 2"}
