"""The controller's state notices (`zk_data.STATE_NOTICES`): each transaction of partition
states also overwrites one of a few slot znodes with those states and their new versions, and
every broker takes them from one read of the slot instead of waiting for its watches' re-reads
of each state. Pure pieces first, then against a real ZooKeeper: what a transaction leaves in
its slot, a missing slot turning notices off without losing a write, and brokers that are not
the controller taking a moved leadership from the notice."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from logkeel.cluster import controller as controller_module
from logkeel.cluster import zk_data as zd
from logkeel.cluster.controller import Controller, _notice_slots_ready
from logkeel.cluster.controller_context import ControllerContext
from logkeel.cluster.controller_decisions import state_notice
from logkeel.cluster.partition_state import Decision, PartitionRegistration
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_controller import ControllerEpoch
from logkeel.cluster.zk_data import LeaderIsr, TopicAssignment
from logkeel.cluster.zk_store import noticed_states
from logkeel.storage.topic_partition import TopicPartition
from tests.cluster.test_controller_writes import client  # noqa: F401 - fixture
from tests.cluster.test_zk_client import WAIT
from tests.cluster.test_zk_store import Node, nodes  # noqa: F401 - fixture
from tests.waiting import wait_until

TOPIC = "n"
REG = PartitionRegistration((1, 2, 3), 1, 0, (1, 2, 3))
DECISION = Decision(REG, "test", changed=True)


def test_a_notice_gives_each_state_the_version_its_write_makes() -> None:
    tp0, tp1 = TopicPartition("a", 0), TopicPartition("b", 3)
    before0 = LeaderIsr(1, 4, (1, 2), 7, zk_version=11)
    before1 = LeaderIsr(2, 0, (2,), 7, zk_version=0)
    after0 = LeaderIsr(2, 5, (2,), 8, zk_version=11, leader_broker_epoch=42)
    after1 = LeaderIsr(2, 0, (2, 3), 8, zk_version=0)
    writes = [(tp0, before0, after0, DECISION, REG), (tp1, before1, after1, DECISION, REG)]
    notice = state_notice(writes, {"a": "id-a"})
    assert notice == [
        (tp0, "id-a", replace(after0, zk_version=12)),
        (tp1, None, replace(after1, zk_version=1)),  # a topic without an id is named as such
    ]
    decoded = zd.decode_state_notice(zd.encode_state_notice(notice))
    assert decoded == notice
    assert decoded[0][2].leader_broker_epoch == 42
    assert zd.decode_state_notice(zd.encode_state_notice(())) == []


def test_a_broker_takes_only_states_of_the_topic_it_knows_by_id() -> None:
    """A notice read late may name a topic deleted and created again under its name (its
    state znodes' versions start over): such a state, or one of a topic without an id, or of
    a topic the broker does not know, is left to the watches."""
    known = {"t": TopicAssignment("t", "id-new", {0: (1, 2)}),
             "old": TopicAssignment("old", None, {0: (1, 2)})}  # fmt: skip
    s = LeaderIsr(2, 1, (2,), 3, zk_version=5)
    notice = [
        (TopicPartition("t", 0), "id-new", s),
        (TopicPartition("t", 0), "id-gone", replace(s, zk_version=9)),
        (TopicPartition("old", 0), None, s),
        (TopicPartition("unknown", 0), "id-x", s),
    ]
    assert noticed_states(notice, known) == [(TopicPartition("t", 0), s)]


def _office(
    client: ZkMetadataClient,  # noqa: F811
) -> tuple[ControllerEpoch, Controller, list[Any]]:
    """Three partitions led by 1, a controller in office with its slots, and the writes that
    move each leadership to 2."""
    client.create_topic(TopicAssignment(TOPIC, "id-n", {p: (1, 2, 3) for p in range(3)}), {})
    ctl = client.try_become_controller(1)
    assert ctl is not None
    first = LeaderIsr(1, 0, (1, 2, 3), ctl.epoch, 0)
    moved = LeaderIsr(2, 1, (2, 3), ctl.epoch, 0)
    client.create_partition_states(ctl, TOPIC, {p: first for p in range(3)})
    controller = Controller(client, 1)
    assert _notice_slots_ready(controller._create_notice_slots())
    return (
        ctl,
        controller,
        [(TopicPartition(TOPIC, p), first, moved, DECISION, REG) for p in range(3)],
    )


def test_each_transaction_leaves_its_states_in_the_next_slot(client: ZkMetadataClient) -> None:  # noqa: F811
    ctl, controller, writes = _office(client)
    ctx = ControllerContext(client.zk, lambda _kind, _tps: None)
    assert ctx.load(10)
    controller._notice_slot = zd.STATE_NOTICE_SLOTS - 1  # the last slot, then back to the first
    controller._write_states(ctl, ctx, writes[:2])
    controller._write_states(ctl, ctx, writes[2:])
    last = zd.decode_state_notice(client.zk.get(zd.state_notice_path(zd.STATE_NOTICE_SLOTS - 1))[0])
    wrapped = zd.decode_state_notice(client.zk.get(zd.state_notice_path(0))[0])
    assert [tp.partition for tp, _id, _s in last] == [0, 1]
    assert [tp.partition for tp, _id, _s in wrapped] == [2]
    for tp, topic_id, state in last + wrapped:
        assert topic_id == "id-n"
        held = client.partition_state(tp.topic, tp.partition)
        assert held == state  # the leader, ISR, epochs and version ZooKeeper holds
        assert held.zk_version == 1
    ctx.close()


def test_a_missing_slot_turns_notices_off_and_the_states_are_still_written(
    client: ZkMetadataClient,  # noqa: F811
) -> None:
    ctl, controller, writes = _office(client)
    client.zk.delete(zd.state_notice_path(0))  # removed by hand
    ctx = ControllerContext(client.zk, lambda _kind, _tps: None)
    assert ctx.load(10)
    controller._write_states(ctl, ctx, writes)
    assert not controller._notices
    assert [client.partition_state(TOPIC, p).leader for p in range(3)] == [2, 2, 2]
    assert not controller._touched  # nothing left to decide again
    ctx.close()


def test_brokers_out_of_office_take_moved_leaderships_from_the_notices(
    nodes: Callable[[int], Node],  # noqa: F811
) -> None:
    """Broker 3 is not the controller: what the notices hand it is what ZooKeeper holds, and
    it leads what it was given once broker 2 leaves."""
    a = nodes(1)
    wait_until(lambda: a.store.controller_id == 1, WAIT, "broker 1 the controller")
    b, c = nodes(2), nodes(3)
    wait_until(lambda: len(a.store.brokers()) == 3, WAIT, "three live")
    created = a.store.create_topic("t", 6, 3, {})
    led_by_b = {p.tp for p in created.partitions.values() if p.leader == 2}
    assert led_by_b
    wait_until(lambda: all(c.store.partition(tp) is not None for tp in led_by_b), WAIT,
               "broker 3 knows the topic")  # fmt: skip
    noticed: list[tuple[TopicPartition, LeaderIsr]] = []
    take = c.store.states_written

    def spy(states: list[tuple[TopicPartition, LeaderIsr]]) -> None:
        noticed.extend(states)
        take(states)

    c.store.states_written = spy  # type: ignore[method-assign]
    b.close()
    wait_until(lambda: {tp for tp, s in noticed if s.leader != 2} >= led_by_b, WAIT,
               "broker 3 told of the moves by notices")  # fmt: skip
    zk = a.store.client.zk
    for tp, state in noticed:
        data, stat = zk.get(zd.partition_state_path(tp.topic, tp.partition))
        if stat.version == state.zk_version:  # not changed again since
            assert zd.decode_partition_state(data, stat.version) == state
    wait_until(
        lambda: all(c.store.partition(tp).leader not in (2, -1) for tp in led_by_b),  # type: ignore[union-attr]
        WAIT,
        "broker 3 shows the new leaders",
    )


def test_a_standby_decodes_reports_on_its_owners_thread_and_never_an_older_over_a_newer(
    client: ZkMetadataClient,  # noqa: F811
) -> None:
    """A standby context (quiet) keeps each report as read, undecoded, until its owner catches
    up or takes office (decoding them on kazoo's one callback thread held up the broker's
    state deliveries); what it decodes is the newest report, and the active context decodes
    as it reads."""
    tp = TopicPartition(TOPIC, 0)

    def report(leo: int) -> dict[TopicPartition, zd.ReplicaLogReport]:
        return {tp: zd.ReplicaLogReport("id-n", 0, leo, 1)}

    client.set_replica_logs(7, 1, report(10))
    standby = ControllerContext(client.zk, lambda _kind, _tps: None)
    standby.start_loading()
    standby.quiet()
    assert standby.wait_loaded(10)
    # Read before it went quiet, or deferred: either way the first catch-up has it decoded.
    standby.catch_up()
    assert standby.reports[7][1][tp].log_end_offset == 10

    def raw_end() -> int | None:
        kept = standby._raw_reports.get(7)
        if kept is None:
            return None
        return zd.decode_replica_logs(kept[3][0])[1][tp].log_end_offset

    writer = ZkMetadataClient(client.connect, session_timeout_ms=6000).start()
    try:
        writer.set_replica_logs(7, 1, report(20))
        wait_until(lambda: raw_end() == 20, WAIT, "the new report read, undecoded")
        assert standby.reports[7][1][tp].log_end_offset == 10  # not decoded yet
        writer.set_replica_logs(7, 1, report(30))
        wait_until(lambda: raw_end() == 30, WAIT, "the newest report read, undecoded")
        # An earlier delivery's read finishing late is dropped, not decoded over the newer.
        standby._report_read(7, 1, 1, {}, [zd.encode_replica_logs(0, report(5))])
        standby.take_office(lambda: None)  # decoded now, and from now on as read
        assert standby.reports[7][1][tp].log_end_offset == 30
        assert not standby._raw_reports
        writer.set_replica_logs(7, 1, report(40))
        wait_until(lambda: standby.reports[7][1][tp].log_end_offset == 40, WAIT, "decoded as read")
    finally:
        writer.close()
        standby.close()


def test_a_standby_controller_decodes_a_report_as_it_comes_not_at_its_next_catch_up(
    client: ZkMetadataClient,  # noqa: F811
    monkeypatch: Any,
) -> None:
    """Left to the standby's catch-up (every 2 s) or to taking office, the reports read since
    took 0.2-0.55 s of a failover at 10,000 partitions before its first write: a standby
    controller decodes each one on its own thread as it is read. The catch-up and the idle
    wake-up are put off here for longer than the test waits, so only the report's own event
    can decode it."""
    monkeypatch.setattr(controller_module, "_STANDBY_CATCH_UP_S", 3600.0)
    monkeypatch.setattr(controller_module, "_IDLE_RECONCILE_S", 3600.0)
    tp = TopicPartition(TOPIC, 0)
    office = client.try_become_controller(1)  # another broker holds the office
    assert office is not None
    writer = ZkMetadataClient(client.connect, session_timeout_ms=6000).start()
    standby = Controller(writer, 2)
    standby.start()
    try:
        wait_until(lambda: standby._standby is not None and standby._standby.wait_loaded(0),
                   WAIT, "the standby context loaded")  # fmt: skip
        ctx = standby._standby
        assert ctx is not None
        for leo in (10, 20):
            client.set_replica_logs(7, 1, {tp: zd.ReplicaLogReport("id-n", 0, leo, 1)})
            wait_until(
                lambda leo=leo: (
                    (r := ctx.reports.get(7)) is not None and r[1][tp].log_end_offset == leo
                ),
                WAIT,
                f"the report of log end {leo} decoded",
            )
        assert standby.epoch is None and standby._standby is ctx  # still a standby, the same
    finally:
        standby.stop()
        writer.close()
