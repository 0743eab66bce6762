"""The controller's batched partition-state writes against a real ZooKeeper: one transaction per
batch, a partition changed meanwhile refused alone (the rest written, it decided again), and
a controller whose epoch moved on writes nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss

from logkeel.cluster import controller as controller_module
from logkeel.cluster import zk_data as zd
from logkeel.cluster.controller import Controller, _notice_slots_ready
from logkeel.cluster.controller_context import ControllerContext
from logkeel.cluster.partition_state import Decision, PartitionRegistration
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_controller import ControllerMoved
from logkeel.cluster.zk_data import ElectionLoss, LeaderIsr, TopicAssignment
from logkeel.storage.topic_partition import TopicPartition
from tests.cluster.test_cluster_brokers import PROBE_ERRORS
from tests.cluster.test_zk_client import registration
from tests.waiting import wait_until

TOPIC = "w"


@pytest.fixture
def client(zk_connect: str) -> Iterator[ZkMetadataClient]:
    c = ZkMetadataClient(zk_connect, session_timeout_ms=6000, connection_timeout_ms=10_000).start()
    yield c
    c.close()


def test_a_stale_partition_is_refused_alone_and_a_moved_controller_writes_nothing(
    client: ZkMetadataClient,
) -> None:
    client.create_topic(TopicAssignment(TOPIC, "id", {p: (1, 2, 3) for p in range(3)}), {})
    ctl = client.try_become_controller(1)
    assert ctl is not None
    first = LeaderIsr(1, 0, (1, 2, 3), ctl.epoch, 0)
    client.create_partition_states(ctl, TOPIC, {p: first for p in range(3)})
    # A leader's own ISR change to partition 1 after the controller decided on version 0.
    client.leader_update_partition_state(TOPIC, 1, replace(first, isr=(1, 2)), 0)
    controller = Controller(client, 1)
    ctx = ControllerContext(client.zk, lambda _kind, _tps: None)
    assert ctx.load(10)
    moved = LeaderIsr(2, 1, (2, 3), ctl.epoch, 1)
    reg = PartitionRegistration((1, 2, 3), 1, 0, (1, 2, 3))
    decision = Decision(reg, "test", changed=True)
    writes = [(TopicPartition(TOPIC, p), first, moved, decision, reg) for p in range(3)]
    controller._write_states(ctl, ctx, writes)
    states = {p: client.partition_state(TOPIC, p) for p in range(3)}
    assert all(states[p].leader == 2 and states[p].zk_version == 1 for p in (0, 2)), states
    assert (states[1].leader, states[1].isr) == (1, (1, 2))  # the leader's change stands
    assert controller._touched == {TopicPartition(TOPIC, 1)}  # decided again on its new state
    assert ctx.states[TopicPartition(TOPIC, 0)].zk_version == 1

    # Another controller took office: the old one's writes are refused, all of them.
    assert client.try_become_controller(2) is None  # /controller is still held by 1 ...
    client.resign_controller(ctl)
    assert client.try_become_controller(2) is not None  # ... until it resigned
    again = [(TopicPartition(TOPIC, 0), replace(moved, zk_version=1), first, decision, reg)]
    with pytest.raises(ControllerMoved):
        controller._write_states(ctl, ctx, again)
    assert client.partition_state(TOPIC, 0).leader == 2
    ctx.close()


def test_the_context_keeps_each_partitions_newest_election_loss(
    client: ZkMetadataClient,
) -> None:
    """Issue 20's acknowledged mark counts reports only after a partition's last recorded loss:
    the controller's context has it from its watch, loaded and then as new ones are recorded."""
    tp, other = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)

    def loss(at: TopicPartition, epoch: int, offset: int) -> ElectionLoss:
        return ElectionLoss(at, 2, epoch, offset, {1: 5}, "unclean", 0)

    client.record_election_loss(loss(tp, 3, 40))
    client.record_election_loss(loss(tp, 5, 70))
    client.record_election_loss(loss(other, 1, 9))
    touched: list[TopicPartition] = []
    ctx = ControllerContext(client.zk, lambda _kind, tps: touched.extend(tps))
    try:
        assert ctx.load(10)
        with ctx.lock:
            assert ctx.live_brokers().losses == {tp: (5, 70), other: (1, 9)}
        client.record_election_loss(loss(tp, 7, 90))

        def newest() -> bool:
            with ctx.lock:
                return ctx.live_brokers().losses.get(tp) == (7, 90)

        wait_until(newest, 10, "the new loss", retry_on=PROBE_ERRORS)
        assert tp in touched  # the partition is decided again with it
    finally:
        ctx.close()


def test_a_broker_taking_office_is_told_at_once_that_its_contexts_read_failed(
    client: ZkMetadataClient,
) -> None:
    """A read of the context that fails (a lost connection on a loaded ZooKeeper; here a
    registration that does not decode) never delivers: waiting for the load then ran out
    its whole timeout (60 s for the controller) while the cluster had no controller, the
    "reload" it asked for queued behind the wait. The wait ends at once instead, and the
    controller's pass fails so that the next one reads a context of its own."""
    client.zk.create(zd.broker_path(7), b"{not json", makepath=True)
    kinds: list[str] = []
    ctx = ControllerContext(client.zk, lambda kind, _tps: kinds.append(kind))
    started = time.monotonic()
    assert not ctx.load(30)
    assert time.monotonic() - started < 10, "the load waited out its timeout"
    assert ctx.failed
    wait_until(lambda: "reload" in kinds, 10, "the context asking to be read anew")
    ctx.close()
    ctl = client.try_become_controller(1)
    assert ctl is not None
    controller = Controller(client, 1)
    controller.epoch = ctl
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="failed"):
        controller._take_office()
    assert time.monotonic() - started < 10, "taking office waited out the load timeout"
    # Gone, the next pass's context loads.
    client.zk.delete(zd.broker_path(7))
    assert controller._take_office() is not None
    controller._leave_office()


def test_an_election_attempt_that_failed_is_made_again(
    client: ZkMetadataClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller's office is empty (its broker crashed) and this broker's attempts to
    take it fail (ZooKeeper slow: the requests are lost): it tries again on its retry,
    instead of leaving the cluster without a controller until some other event comes. The
    first three fail: start-up asks for at most three elections (its own, the /controller
    watch's first call, the session's CONNECTED), so only a retry can take office."""
    real = client.try_become_controller
    attempts = [0]

    def flaky(broker_id: int) -> Any:
        attempts[0] += 1
        if attempts[0] <= 3:
            raise ConnectionLoss("injected: the request was lost")
        return real(broker_id)

    monkeypatch.setattr(client, "try_become_controller", flaky)
    controller = Controller(client, 1)
    controller.start()
    try:
        wait_until(lambda: controller.active, 15, "broker 1 the controller after failed attempts")
        assert attempts[0] == 4
    finally:
        controller.stop()


def controller_over(
    client: ZkMetadataClient, n: int, replicas: tuple[int, ...], leader: Any
) -> tuple[Any, Controller, ControllerContext]:
    """Brokers 1-3 registered, a topic of ``n`` partitions on ``replicas`` (all in the ISR),
    partition p led by ``leader(p)``, broker 1 the controller with its context loaded."""
    for broker in (1, 2, 3):
        client.register_broker(registration(broker))
    client.create_topic(TopicAssignment(TOPIC, "id", {p: replicas for p in range(n)}), {})
    ctl = client.try_become_controller(1)
    assert ctl is not None
    client.create_partition_states(
        ctl, TOPIC, {p: LeaderIsr(leader(p), 0, replicas, ctl.epoch, 0) for p in range(n)}
    )
    ctx = ControllerContext(client.zk, lambda _kind, _tps: None)
    assert ctx.load(10)
    return ctl, Controller(client, 1), ctx


def test_a_broker_that_starts_leaving_mid_pass_has_its_leaderships_moved_before_the_rest(
    client: ZkMetadataClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass writing many ISR-only changes (here: a broker that is not registered dropped from
    1,200 ISRs) used to finish them before anything else: at 10,000 partitions that took 9 s,
    and a controlled shutdown asked meanwhile waited for all of it, its leaderships not even
    decided in that pass. Now they are moved between two chunks of those writes."""
    n = 1_200
    # Broker 2 leads every third partition; broker 4 (never registered) is in every ISR.
    ctl, controller, ctx = controller_over(
        client, n, (1, 2, 3, 4), lambda p: 2 if p % 3 == 0 else 1
    )
    touched = {TopicPartition(TOPIC, p) for p in range(n)}
    isr_chunks: list[int] = []
    write_states = controller._write_states

    def writes(ctl: Any, ctx: Any, batch: list[Any], **kwargs: Any) -> None:
        # The first chunk of ISR-only changes: broker 2 asks for a controlled shutdown.
        if batch and all(w[2].leader == w[1].leader for w in batch) and not isr_chunks:
            client.request_controlled_shutdown(2, client.broker(2).broker_epoch, lambda *_: None)
            wait_until(lambda: 2 in ctx.shutting_down, 10, "the context to see broker 2 leaving")
        if batch and all(w[2].leader == w[1].leader for w in batch):
            isr_chunks.append(len(batch))
        write_states(ctl, ctx, batch, **kwargs)

    monkeypatch.setattr(controller, "_write_states", writes)
    controller._reconcile_partitions(ctl, ctx, touched, set())

    states = {p: client.partition_state(TOPIC, p) for p in range(n)}
    led_by_2 = [p for p in range(n) if p % 3 == 0]
    assert all(states[p].leader != 2 for p in led_by_2), "broker 2 still leads"
    stats = {p: client.zk.exists(zd.partition_state_path(TOPIC, p)) for p in range(n)}
    moved_last = max(stats[p].mzxid for p in led_by_2)
    isr_last = max(stats[p].mzxid for p in range(n) if p % 3)
    assert moved_last < isr_last, "the leaderships waited for every ISR-only write"
    assert len(isr_chunks) > 1, isr_chunks
    ctx.close()


def test_a_leaving_brokers_first_leaderships_are_written_while_the_rest_are_decided(
    client: ZkMetadataClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deciding 3,333 leaderships took 2 s on a loaded 10,000-partition cluster before the
    first of them was sent. Now each chunk's moves are sent as soon as it is decided: the
    first are in ZooKeeper while a later chunk is still being decided."""
    n = 1_200
    ctl, controller, ctx = controller_over(client, n, (2, 1, 3), lambda _p: 2)
    controller._notices = _notice_slots_ready(
        controller._create_notice_slots()
    )  # as taking office does
    client.request_controlled_shutdown(2, client.broker(2).broker_epoch, lambda *_: None)
    wait_until(lambda: 2 in ctx.shutting_down, 10, "the context to see broker 2 leaving")
    decide = controller._decide_partitions
    decide_calls: list[int] = []

    def deciding(ctl: Any, ctx: Any, touched: set[TopicPartition], preferred: Any) -> Any:
        if decide_calls:  # a later chunk: the first chunk's moves reach ZooKeeper meanwhile
            wait_until(
                lambda: client.partition_state(TOPIC, 0).leader != 2,
                10,
                "the first chunk's moves in ZooKeeper while a later chunk is decided",
            )
        decide_calls.append(len(touched))
        return decide(ctl, ctx, touched, preferred)

    monkeypatch.setattr(controller, "_decide_partitions", deciding)
    controller._reconcile_partitions(ctl, ctx, {TopicPartition(TOPIC, p) for p in range(n)}, set())
    assert decide_calls[:3] == [500, 500, 200], decide_calls
    assert all(client.partition_state(TOPIC, p).leader != 2 for p in range(n))
    ctx.close()


def test_a_pass_moves_every_leadership_of_a_leaving_broker_even_untouched(
    client: ZkMetadataClient,
) -> None:
    """A pass can take its partitions after the watch set a broker leaving but before the
    partitions that shutdown touches were handed over: at 10,000 partitions such a pass moved
    none of its leaderships and wrote 3,334 ISR changes for 16 s while the broker waited."""
    n = 30
    ctl, controller, ctx = controller_over(client, n, (1, 2, 3), lambda p: 2 if p % 3 == 0 else 1)
    client.request_controlled_shutdown(2, client.broker(2).broker_epoch, lambda *_: None)
    wait_until(lambda: 2 in ctx.shutting_down, 10, "the context to see broker 2 leaving")
    # Touched: only partitions broker 1 leads (another event's).
    touched = {TopicPartition(TOPIC, p) for p in range(n) if p % 3}
    controller._reconcile_partitions(ctl, ctx, touched, set())
    assert all(client.partition_state(TOPIC, p).leader != 2 for p in range(n))
    ctx.close()


def test_a_topic_created_while_a_broker_starts_leaving_gets_no_first_leader_on_it(
    client: ZkMetadataClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """First states are created 500 at a time. A controlled shutdown asked after the first
    batch (an attack, with 1,000 partitions) got the rest's first leaderships on the leaving
    broker, moved again later, and waited for the whole creation. Now the first batch's
    leaderships are moved before the next batch, which is decided again without it."""
    n = 1_200
    for broker in (1, 2, 3):
        client.register_broker(registration(broker))
    client.create_topic(TopicAssignment(TOPIC, "id", {p: (2, 1, 3) for p in range(n)}), {})
    ctl = client.try_become_controller(1)
    assert ctl is not None
    controller = Controller(client, 1)
    ctx = ControllerContext(client.zk, lambda _kind, _tps: None)
    assert ctx.load(10)
    controller._notices = _notice_slots_ready(
        controller._create_notice_slots()
    )  # as taking office does
    create = client.create_partition_states
    batches: list[int] = []

    def creating(ctl: Any, topic: str, states: dict[int, LeaderIsr]) -> None:
        create(ctl, topic, states)
        batches.append(len(states))
        if len(batches) == 1:
            client.request_controlled_shutdown(2, client.broker(2).broker_epoch, lambda *_: None)
            wait_until(lambda: 2 in ctx.shutting_down, 10, "the context to see broker 2 leaving")

    monkeypatch.setattr(client, "create_partition_states", creating)
    controller._reconcile_partitions(ctl, ctx, {TopicPartition(TOPIC, p) for p in range(n)}, set())
    assert batches == [500, 500, 200], batches
    stats = {p: client.zk.exists(zd.partition_state_path(TOPIC, p)) for p in range(n)}
    states = {p: client.partition_state(TOPIC, p) for p in range(n)}
    on_2 = sorted(p for p, s in states.items() if s.leader != 1)
    assert not on_2, f"first leaderships left on broker 2: {on_2[:5]}... ({len(on_2)})"
    # The first batch's leaderships (created on broker 2) moved before the next was created.
    moved_last = max(stats[p].mzxid for p in range(500))
    assert moved_last < min(stats[p].czxid for p in range(500, n))
    # The later batches were created on broker 1 directly: never written again.
    assert all(stats[p].version == 0 for p in range(500, n))
    ctx.close()


def test_the_first_leader_rebalance_waits_a_while_after_taking_office(
    client: ZkMetadataClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A controller taking office after a failover moved, in its first pass, a third of the
    live leader's partitions back to their preferred leader (a broker back from a restart)
    along with the dead controller's: 1,666 more leaderships moved in the failover's own pass
    at 10,000 partitions. As Kafka's, the first rebalance check comes a while after taking
    office."""
    monkeypatch.setattr(controller_module, "_FIRST_REBALANCE_DELAY_S", 0.5, raising=False)
    n = 30
    for broker in (1, 2, 3):
        client.register_broker(registration(broker))
    replicas = {p: tuple((p + i) % 3 + 1 for i in range(3)) for p in range(n)}
    client.create_topic(TopicAssignment(TOPIC, "id", replicas), {})
    ctl = client.try_become_controller(1)
    assert ctl is not None
    # Broker 1 leads every partition, preferred leader of a third of them.
    client.create_partition_states(
        ctl, TOPIC, {p: LeaderIsr(1, 0, replicas[p], ctl.epoch, 0) for p in range(n)}
    )
    controller = Controller(client, 1, rebalance_interval_s=300)
    try:
        controller.reconcile(ctl, {"idle"})
        assert {client.partition_state(TOPIC, p).leader for p in range(n)} == {1}
        time.sleep(0.6)  # past the first check's delay
        controller.reconcile(ctl, {"idle"})
        leaders = {p: client.partition_state(TOPIC, p).leader for p in range(n)}
        assert leaders == {p: replicas[p][0] for p in range(n)}, leaders
    finally:
        controller._leave_office()


def test_a_loss_of_a_topic_deleted_and_created_again_is_not_the_new_topics(
    client: ZkMetadataClient,
) -> None:
    """Losses are recorded per partition name: one of an earlier topic of the same name would
    cap the new topic's acknowledged mark (its epochs start over below the loss's). Each loss
    carries its topic's id; the context counts only those of the topic as it is now (a loss
    recorded without an id still counts)."""
    tp, other = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
    client.create_topic(TopicAssignment(TOPIC, "new-id", {0: (1, 2), 1: (1, 2)}), {})
    client.record_election_loss(ElectionLoss(tp, 2, 9, 500, {1: 5}, "unclean", 0, "old-id"))
    client.record_election_loss(ElectionLoss(other, 2, 4, 60, {1: 5}, "unclean", 0, None))
    ctx = ControllerContext(client.zk, lambda _kind, _tps: None)
    try:
        assert ctx.load(10)
        with ctx.lock:
            assert ctx.live_brokers().losses == {other: (4, 60)}
        client.record_election_loss(ElectionLoss(tp, 2, 1, 30, {1: 5}, "unclean", 0, "new-id"))

        def counted() -> bool:
            with ctx.lock:
                return ctx.live_brokers().losses.get(tp) == (1, 30)

        wait_until(counted, 10, "the new topic's own loss", retry_on=PROBE_ERRORS)
    finally:
        ctx.close()


def test_a_broker_stays_leaving_until_its_registration_goes_whichever_watch_fires_first(
    client: ZkMetadataClient,
) -> None:
    """A broker's shutdown request and its registration go together, with its session, but
    the request's watch may fire first: the broker was then live and not leaving in the
    context, and got first leaderships of a topic being created as it exited (an attack
    test: 1,000 of 1,500, all moved again once it was gone). It stays leaving until the
    registration that asked is seen gone; a new incarnation is not leaving."""
    ctx = ControllerContext(client.zk, lambda _kind, _tps: None)
    assert ctx.load(10)
    data = zd.encode_broker(registration(2))
    ctx._on_broker(2, data, SimpleNamespace(czxid=105))
    ctx._on_shutting_down(["2"])
    assert ctx.live_brokers().shutting_down == {2}
    ctx._on_shutting_down([])  # the request's watch first
    live = ctx.live_brokers()
    assert 2 in live.live and live.shutting_down == {2}  # on the code before: frozenset()
    ctx._on_broker(2, None, None)
    assert 2 not in ctx.live_brokers().live and ctx.shutting_down == set()
    # Back as a new incarnation: not leaving; asking again, leaving; a request seen before
    # the registration counts once the registration arrives.
    ctx._on_broker(2, data, SimpleNamespace(czxid=200))
    assert ctx.shutting_down == set()
    ctx._on_shutting_down(["3"])
    ctx._on_broker(3, zd.encode_broker(registration(3)), SimpleNamespace(czxid=201))
    ctx._on_shutting_down([])
    assert ctx.shutting_down == {3}
    ctx._on_broker(3, zd.encode_broker(registration(3)), SimpleNamespace(czxid=300))
    assert ctx.shutting_down == set()  # a new incarnation of 3, which never asked
    ctx.close()


def test_a_topics_first_leaders_skip_a_broker_that_asks_to_leave_during_its_creation(
    client: ZkMetadataClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first states are written batch by batch; each batch is decided against the context
    and the shutdown requests read just before it. Deciding again only when the read found a
    request the context did not hold, a batch went to the leaving broker when the context's
    watch landed between the two looks (1,000 partitions in an attack test)."""
    monkeypatch.setattr(controller_module, "_CREATE_BATCH", 5)
    for b in (1, 2, 3):
        client.register_broker(registration(b))
    client.create_topic(TopicAssignment(TOPIC, "id", {p: (2, 1, 3) for p in range(10)}), {})
    ctl = client.try_become_controller(1)
    assert ctl is not None
    ctx = ControllerContext(client.zk, lambda _kind, _tps: None)
    assert ctx.load(10)
    controller = Controller(client, 1)
    with ctx.lock:
        cluster = ctx.live_brokers()
    states = {p: controller_module._first_state(ctl, cluster, (2, 1, 3)) for p in range(10)}
    looks = 0

    def between() -> bool:
        nonlocal looks
        looks += 1
        if looks == 2:  # broker 2 asks to leave; the watch lands right after this look
            epoch = cluster.epochs[2]
            client.zk.create(
                zd.controlled_shutdown_path(2), zd.encode_controlled_shutdown(epoch), makepath=True
            )
            ctx._on_shutting_down(["2"])
        return False

    controller._create_first_states(ctl, ctx, TOPIC, states, between)
    leaders = {p: client.partition_state(TOPIC, p).leader for p in range(10)}
    assert {leaders[p] for p in range(5)} == {2}  # decided before the request
    assert {leaders[p] for p in range(5, 10)} == {1}, leaders  # on the code before: 2
    ctx.close()


def test_in_office_written_states_are_read_back_after_the_pass_and_others_changes_decided(
    client: ZkMetadataClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A controller in office read each state it had just written back as its watch fired, on
    the one connection, between its own writes (3,333 after a SIGKILL at 10,000 partitions).
    Now a fired state watch is only noted in office: its state is read at the start of the
    next pass. A state someone else changed is still decided at once: the note wakes a pass."""
    # No idle pass would read the noted change in the test's time: only the note's own wake-up.
    monkeypatch.setattr(controller_module, "_IDLE_RECONCILE_S", 120.0)
    n = 300
    for b in (1, 2, 3):
        client.register_broker(registration(b))
    client.create_topic(TopicAssignment(TOPIC, "id", {p: (2, 1, 3) for p in range(n)}), {})
    controller = Controller(client, 1)
    noted_in_pass: list[int] = []
    write_states = controller._write_states

    def writes(ctl: Any, ctx: Any, batch: list[Any], **kwargs: Any) -> None:
        write_states(ctl, ctx, batch, **kwargs)
        if kwargs.get("sent"):  # the moves of a leaving broker's leaderships, answered
            deferred = ctx._watches._deferred
            wait_until(lambda: deferred, 10, "the written states' watches noted")
            noted_in_pass.append(len(deferred))

    monkeypatch.setattr(controller, "_write_states", writes)
    controller.start()
    try:
        wait_until(
            lambda: all(
                (s := client.partition_state(TOPIC, p)) and s.leader == 2 for p in range(n)
            ),  # fmt: skip
            20,
            "the first leaders",
        )
        client.request_controlled_shutdown(2, client.broker(2).broker_epoch, lambda *_: None)
        wait_until(
            lambda: all(client.partition_state(TOPIC, p).leader == 1 for p in range(n)),
            20,
            "broker 2's leaderships moved",
        )
        assert noted_in_pass, "no pass moved the leaderships"
        ctx = controller._context
        assert ctx is not None
        # Read back once the pass was over: the view holds what ZooKeeper holds.
        wait_until(lambda: not ctx._watches._deferred, 10, "the noted states read")
        tp = TopicPartition(TOPIC, 7)
        assert ctx.states[tp].zk_version == client.partition_state(TOPIC, 7).zk_version
        # Someone else's change (a leader no longer registered): noted, then decided at once.
        current = client.partition_state(TOPIC, 7)
        client.zk.set(
            zd.partition_state_path(TOPIC, 7),
            zd.encode_partition_state(replace(current, leader=4, isr=(4, 1, 3))),
            version=current.zk_version,
        )
        wait_until(
            lambda: client.partition_state(TOPIC, 7).leader in (1, 3),
            10,
            "the unregistered leader replaced",
        )
    finally:
        controller.stop()
