"""Partition reassignment (KIP-455) on three real brokers and a real ZooKeeper, driven by a real
client (kafka-python's AlterPartitionReassignments / ListPartitionReassignments): a move under
an acks=all idempotent producer checked by the history checker (nothing acked lost), leadership
moved off removed replicas and their logs deleted, a move that a SIGKILL of the adding broker
or of the controller interrupts and that completes anyway, cancellation, and refused requests.

A move is held "mid-way" for certain by freezing (SIGSTOP) the broker being added before the
request: it cannot fetch, so it cannot join the ISR, so the move cannot complete."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTP
from kafka.admin import NewTopic
from kafka.errors import (
    InvalidReplicationAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from kio.schema.errors import ErrorCode

from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.testing.history import History
from tests.cluster.test_cluster_brokers import Cluster, three_brokers
from tests.cluster.test_cluster_history import TOPIC, Reader, Writer, final_logs
from tests.server.test_admin_wire import Wire
from tests.server.test_clients_matrix import consume, produce, sample
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with three_brokers(zookeeper, tmp_path_factory.mktemp("reassign"), "/cluster_reassign") as c:
        yield c


@pytest.fixture
def running(cluster: Cluster) -> Iterator[Cluster]:
    for b in cluster.brokers.values():
        if b.alive():
            b.thaw()  # a failed test may leave one frozen
    cluster.ensure_all_running()
    yield cluster


@pytest.fixture
def admin(running: Cluster) -> Iterator[KafkaAdminClient]:
    a = KafkaAdminClient(bootstrap_servers=[b.bootstrap for b in running.brokers.values()],
                         request_timeout_ms=60000)  # fmt: skip
    yield a
    a.close()


def create(cluster: Cluster, topic: str, assignment: list[list[int]], **configs: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=[b.bootstrap for b in cluster.live()])
    try:
        admin.create_topics([NewTopic(topic, -1, -1, dict(enumerate(assignment)), configs)])
    finally:
        admin.close()
    wait_until(lambda: all(p.leader_id > 0 for p in cluster.partitions(topic).values()),
               30, f"leaders of {topic}", retry_on=(OSError, ValueError))  # fmt: skip


def placed(cluster: Cluster, topic: str, partition: int, replicas: list[int]) -> Any:
    """The partition once every live broker shows exactly ``replicas`` (in order), all of them
    in the ISR, and a leader among them; else None."""
    seen = []
    for i, b in cluster.brokers.items():
        if b.alive():
            p = cluster.partitions(topic, i)[partition]
            seen.append(p)
            if (
                list(p.replica_nodes) != replicas
                or sorted(p.isr_nodes) != sorted(replicas)
                or p.leader_id not in replicas
            ):
                return None
    return seen[0]


def views(cluster: Cluster, topic: str) -> dict[int, Any]:
    """Each live broker's replicas, ISR and leader of partition 0, for messages."""
    out: dict[int, Any] = {}
    for i, b in cluster.brokers.items():
        if b.alive():
            p = cluster.partitions(topic, i).get(0)
            out[i] = p and (list(p.replica_nodes), list(p.isr_nodes), p.leader_id)
    return out


def has_log(cluster: Cluster, broker: int, topic: str, partition: int) -> bool:
    return any((d / f"{topic}-{partition}").exists() for d in cluster.brokers[broker].log_dirs)


def controller(cluster: Cluster) -> int:
    return int(cluster.metadata().controller_id)


def roles(cluster: Cluster) -> tuple[int, int, int]:
    """(the controller, another broker, the third): a move from [controller, other] to
    [other, third] takes the controller's replica (and its leadership) away."""
    c = controller(cluster)
    other, third = sorted(set(cluster.brokers) - {c})
    return c, other, third


def test_a_move_under_an_idempotent_producer_loses_nothing(
    running: Cluster, admin: KafkaAdminClient
) -> None:
    create(running, TOPIC, [[1, 2], [2, 3]], **{"min.insync.replicas": "2"})
    bootstrap = ",".join(b.bootstrap for b in running.brokers.values())
    history = History()
    writer, reader = Writer(bootstrap, history), Reader(bootstrap, history)
    writer.start()
    reader.start()
    try:
        wait_until(lambda: len(history.acked) > 300, 30, "first acks")
        # Both leaders (1 of partition 0, 2 of partition 1) are among the replicas removed.
        answer = admin.alter_partition_reassignments({KTP(TOPIC, 0): [2, 3], KTP(TOPIC, 1): [3, 1]})
        assert answer == {KTP(TOPIC, 0): None, KTP(TOPIC, 1): None}
        wait_until(lambda: placed(running, TOPIC, 0, [2, 3]) and placed(running, TOPIC, 1, [3, 1]),
                   60, "both moves complete", retry_on=(OSError,))  # fmt: skip
        assert admin.list_partition_reassignments() == {}
        wait_until(lambda: not has_log(running, 1, TOPIC, 0) and not has_log(running, 2, TOPIC, 1),
                   30, "the removed replicas' logs deleted")  # fmt: skip
        acked = len(history.acked)
        wait_until(lambda: len(history.acked) > acked + 300, 60, "acks after the moves")
    finally:
        writer.stop.set()
        writer.join(150)
        reader.stop.set()
        reader.join(30)
    anomalies = history.check(final_logs(bootstrap))
    assert not writer.is_alive()
    assert history.failed_sends == 0, writer.errors[:5]
    assert len(history.acked) == writer.sent
    assert anomalies == [], anomalies[:20]


def _start_held_move(
    cluster: Cluster, admin: KafkaAdminClient, topic: str
) -> tuple[int, int, int, list[Any]]:
    """A topic on [controller, other] with records, and a move to [other, third] started while
    the third is frozen: it stays in progress."""
    c, other, third = roles(cluster)
    create(cluster, topic, [[c, other]], **{"min.insync.replicas": "1"})
    msgs = sample(50, topic)
    produce("confluent", cluster.brokers[other].bootstrap, topic, msgs, idempotent=True)
    # The client learns the controller now: it must not ask the frozen broker for it.
    assert admin.list_partition_reassignments() == {}
    cluster.brokers[third].freeze()
    answer = admin.alter_partition_reassignments({KTP(topic, 0): [other, third]})
    assert answer == {KTP(topic, 0): None}
    ongoing = admin.list_partition_reassignments()
    assert ongoing == {
        KTP(topic, 0): {"replicas": [other, third, c], "adding_replicas": [third],
                        "removing_replicas": [c]}
    }  # fmt: skip
    return c, other, third, msgs


def _read_back(cluster: Cluster, topic: str, msgs: list[Any]) -> None:
    bootstrap = ",".join(b.bootstrap for b in cluster.live())
    got = consume("confluent", bootstrap, {topic: len(msgs)}, timeout=60)
    assert [g.value for g in got] == [m.value for m in msgs]


def test_a_move_survives_a_sigkill_of_the_broker_being_added(
    running: Cluster, admin: KafkaAdminClient
) -> None:
    topic = "moved-kill-adding"
    c, other, third, msgs = _start_held_move(running, admin, topic)
    running.brokers[third].kill()
    assert KTP(topic, 0) in admin.list_partition_reassignments()
    running.brokers[third].start(60)
    wait_until(lambda: placed(running, topic, 0, [other, third]), 60, "the move complete",
               retry_on=(OSError,))  # fmt: skip
    wait_until(lambda: not has_log(running, c, topic, 0), 30, "the removed replica's log deleted")
    assert has_log(running, third, topic, 0)
    _read_back(running, topic, msgs)


def test_a_new_controller_completes_a_move_the_old_one_started(
    running: Cluster, admin: KafkaAdminClient
) -> None:
    topic = "moved-kill-controller"
    c, other, third, msgs = _start_held_move(running, admin, topic)
    running.brokers[c].kill()  # the controller, the leader and the replica leaving
    running.brokers[third].thaw()
    wait_until(lambda: placed(running, topic, 0, [other, third]), 60,
               "the move complete under the new controller", retry_on=(OSError,))  # fmt: skip
    assert controller(running) != c
    # Back, the old controller finds it no longer holds a replica: its log goes.
    running.brokers[c].start(60)
    wait_until(lambda: not has_log(running, c, topic, 0), 30, "the removed replica's log deleted")
    _read_back(running, topic, msgs)


def test_a_cancelled_move_reverts_to_the_original_replicas(
    running: Cluster, admin: KafkaAdminClient
) -> None:
    topic = "moved-cancel"
    c, other, third, msgs = _start_held_move(running, admin, topic)
    assert admin.alter_partition_reassignments({KTP(topic, 0): None}) == {KTP(topic, 0): None}
    assert admin.list_partition_reassignments() == {}
    running.brokers[third].thaw()
    try:
        # In the order of the full set (as Kafka: the original order is not kept).
        wait_until(lambda: placed(running, topic, 0, [other, c]), 30, "the original replicas",
                   retry_on=(OSError,))  # fmt: skip
    except AssertionError as e:
        raise AssertionError(f"{e}; as each broker sees it: {views(running, topic)}") from None
    assert not has_log(running, third, topic, 0)
    again = admin.alter_partition_reassignments({KTP(topic, 0): None})
    assert again == {KTP(topic, 0): NoReassignmentInProgressError}
    _read_back(running, topic, msgs)


def test_bad_reassignments_are_refused_and_change_nothing(
    running: Cluster, admin: KafkaAdminClient
) -> None:
    topic = "moved-refused"
    create(running, topic, [[1, 2]])
    answer = admin.alter_partition_reassignments({
        KTP(topic, 0): [1, 9], KTP("no-such-topic", 0): [1, 2], KTP(topic, 5): [1, 2],
    })  # fmt: skip
    assert answer == {
        KTP(topic, 0): InvalidReplicationAssignmentError,
        KTP("no-such-topic", 0): UnknownTopicOrPartitionError,
        KTP(topic, 5): UnknownTopicOrPartitionError,
    }
    assert admin.alter_partition_reassignments({KTP(topic, 0): [1, 1]}) == {
        KTP(topic, 0): InvalidReplicationAssignmentError
    }
    assert admin.list_partition_reassignments() == {}
    assert placed(running, topic, 0, [1, 2])


LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"


def _broker_configs(cluster: Cluster, broker: str) -> dict[str, Any]:
    a = cluster.admin()
    resource = ConfigResource(ResourceType.BROKER, broker)
    return dict(a.describe_configs([resource])[resource].result(30))


def _alter_broker(cluster: Cluster, broker: str, *entries: ConfigEntry) -> None:
    a = cluster.admin()
    resource = ConfigResource(ResourceType.BROKER, broker, incremental_configs=list(entries))
    a.incremental_alter_configs([resource])[resource].result(30)


def _alter_default(cluster: Cluster, op: int, value: str | None) -> None:
    """The cluster-wide default (an empty broker name, which neither confluent-kafka nor
    kafka-python lets one send), on the wire."""
    wire = Wire(cluster.brokers[1].port)
    try:
        [answer] = wire.incremental_alter([(4, "", [(FOLLOWER_RATE, op, value)])])
    finally:
        wire.close()
    assert answer.error_code == ErrorCode.none, answer


def test_replication_throttles_are_dynamic_broker_and_topic_configs(running: Cluster) -> None:
    _alter_broker(running, "2", ConfigEntry(LEADER_RATE, "1048576",
                                            incremental_operation=AlterConfigOpType.SET))  # fmt: skip
    _alter_default(running, 0, "2097152")
    wait_until(lambda: FOLLOWER_RATE in _broker_configs(running, "2"), 15,
               "the default seen by broker 2")  # fmt: skip
    own = _broker_configs(running, "2")
    assert (own[LEADER_RATE].value, own[LEADER_RATE].source) == (
        "1048576", ConfigSource.DYNAMIC_BROKER_CONFIG.value)  # fmt: skip
    assert (own[FOLLOWER_RATE].value, own[FOLLOWER_RATE].source) == (
        "2097152", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)  # fmt: skip
    assert LEADER_RATE not in _broker_configs(running, "1")  # broker 2's own only
    with pytest.raises(KafkaException, match="LONG"):
        _alter_broker(running, "2", ConfigEntry(LEADER_RATE, "fast",
                                                incremental_operation=AlterConfigOpType.SET))  # fmt: skip
    with pytest.raises(KafkaException, match="static"):
        _alter_broker(running, "2", ConfigEntry("log.retention.ms", "1",
                                                incremental_operation=AlterConfigOpType.SET))  # fmt: skip
    _alter_broker(running, "2", ConfigEntry(LEADER_RATE, None,
                                            incremental_operation=AlterConfigOpType.DELETE))  # fmt: skip
    _alter_default(running, 1, None)
    # Written through broker 1: broker 2 sees the default go when its watch fires.
    wait_until(lambda: not {LEADER_RATE, FOLLOWER_RATE} & set(_broker_configs(running, "2")),
               15, "the throttles removed")  # fmt: skip
    # The topic-level lists take Kafka's format, and refuse anything else.
    create(running, "throttled", [[1, 2]],
           **{"follower.replication.throttled.replicas": "0:3",
              "leader.replication.throttled.replicas": "*"})  # fmt: skip
    a = running.admin()
    topic = ConfigResource(ResourceType.TOPIC, "throttled")
    described = a.describe_configs([topic])[topic].result(30)
    assert described["follower.replication.throttled.replicas"].value == "0:3"
    bad = ConfigResource(ResourceType.TOPIC, "throttled", incremental_configs=[ConfigEntry(
        "leader.replication.throttled.replicas", "0-1",
        incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
    with pytest.raises(KafkaException, match="partition:broker"):
        a.incremental_alter_configs([bad])[bad].result(30)


def reassign(cluster: Cluster, *args: str) -> str:
    """`logkeel reassign` against the live brokers; its output (exit status 0 asserted)."""
    bootstrap = ",".join(b.bootstrap for b in cluster.live())
    done = subprocess.run(
        [sys.executable, "-m", "logkeel", "reassign", "--bootstrap-server", bootstrap, *args],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _proposed(output: str) -> str:
    return output.split("Proposed partition reassignment configuration\n", 1)[1].strip()


def test_the_cli_scales_out_and_decommissions_with_a_throttle(
    running: Cluster, tmp_path: Path
) -> None:
    topic = "cli-moved"
    create(running, topic, [[1, 2], [2, 1], [1, 2], [2, 1]])
    msgs = sample(200, topic)
    produce("confluent", running.brokers[1].bootstrap, topic, msgs[:100], idempotent=True)
    # Scale-out: broker 3 (live, holding nothing of the topic) gets its share.
    plan = tmp_path / "out.json"
    plan.write_text(_proposed(reassign(running, "--generate", "--topic", topic,
                                       "--broker-list", "1,2,3")))  # fmt: skip
    placed = {p["partition"]: p["replicas"] for p in json.loads(plan.read_text())["partitions"]}
    assert sum(3 in rs for rs in placed.values()) in (2, 3)  # 8 replicas over 3 brokers
    out = reassign(running, "--execute", "--reassignment-json-file", str(plan),
                   "--throttle", "50000000")  # fmt: skip
    assert "Save this to use as the --reassignment-json-file option during rollback" in out
    assert "The inter-broker throttle limit was set to 50000000 B/s" in out
    verified = reassign(running, "--verify", "--wait", "--reassignment-json-file", str(plan))
    assert "Throttles removed." in verified
    for p, replicas in placed.items():
        assert placed_as(running, topic, p, replicas)
    assert "follower.replication.throttled.rate" not in _broker_configs(running, "3")
    # Decommission of broker 3: its replicas go back to 1 and 2.
    back = tmp_path / "back.json"
    back.write_text(_proposed(reassign(running, "--generate", "--topic", topic,
                                       "--remove-broker", "3")))  # fmt: skip
    reassign(running, "--execute", "--reassignment-json-file", str(back))
    reassign(running, "--verify", "--wait", "--reassignment-json-file", str(back))
    wait_until(lambda: not any(has_log(running, 3, topic, p) for p in placed), 30,
               "broker 3's replicas deleted")  # fmt: skip
    produce("confluent", running.brokers[1].bootstrap, topic, msgs[100:], idempotent=True)
    # Every acknowledged record is there after both moves.
    assert sum(_high_watermark(running, topic, p) for p in placed) == len(msgs)


def _high_watermark(cluster: Cluster, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": ",".join(b.bootstrap for b in cluster.live()),
                         "group.id": "reassign-check"})  # fmt: skip
    try:
        return int(consumer.get_watermark_offsets(CTP(topic, partition), timeout=20)[1])
    finally:
        consumer.close()


def placed_as(cluster: Cluster, topic: str, partition: int, replicas: list[int]) -> bool:
    return wait_until(lambda: placed(cluster, topic, partition, replicas), 30,
                      f"{topic}-{partition} on {replicas}", retry_on=(OSError,)) is not None  # fmt: skip
