"""Elections an operator can trust, on three real brokers and a real ZooKeeper (issue 10, the
index-corruption incident): a replica that comes back with its storage wiped is never elected,
not even as the last in-sync replica; an unclean election waits for the replicas to report and
picks the longest log, not the first broker back; an operator can designate any replica; Kafka's
ElectLeaders (confluent-kafka's AdminClient) runs preferred elections."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.storage.topic_partition import TopicPartition as Tp
from tests.cluster.test_cluster_brokers import (
    PROBE_ERRORS,
    SESSION_TIMEOUT_MS,
    Cluster,
    three_brokers,
)
from tests.waiting import wait_until

TOPIC = "incident"


@pytest.fixture
def fresh(
    zookeeper: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    overrides = getattr(request, "param", None)
    with three_brokers(zookeeper, tmp_path, f"/elections_{tmp_path.name}", overrides) as c:
        yield c


def produce(cluster: Cluster, first: int, count: int) -> None:
    p = Producer({"bootstrap.servers": ",".join(b.bootstrap for b in cluster.live()),
                  "acks": "all", "enable.idempotence": True})  # fmt: skip
    failed: list[str] = []
    for i in range(first, first + count):
        p.produce(TOPIC, str(i).encode(), partition=0,
                  on_delivery=lambda err, _m: failed.append(str(err)) if err else None)  # fmt: skip
    assert p.flush(30) == 0
    assert failed == []


def consume_all(cluster: Cluster) -> list[int]:
    c = Consumer({"bootstrap.servers": ",".join(b.bootstrap for b in cluster.live()),
                  "group.id": f"check-{time.monotonic_ns()}", "enable.auto.commit": False})  # fmt: skip
    c.assign([TopicPartition(TOPIC, 0, 0)])
    out: list[int] = []
    idle = time.monotonic() + 8
    try:
        while time.monotonic() < idle:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append(int(msg.value()))
            idle = time.monotonic() + 3
    finally:
        c.close()
    return out


def registered(cluster: Cluster) -> set[int]:
    """The ids under /brokers/ids."""
    zk = ZkMetadataClient(cluster.connect).start()
    try:
        return set(zk.brokers())
    finally:
        zk.close()


def reported_end(cluster: Cluster, broker: int) -> int:
    """The log end offset ``broker`` last reported for the partition (-1: none)."""
    zk = ZkMetadataClient(cluster.connect).start()
    try:
        _gen, logs = zk.replica_logs().get(broker, (0, {}))
    finally:
        zk.close()
    report = logs.get(Tp(TOPIC, 0))
    return -1 if report is None else report.log_end_offset


def leader(cluster: Cluster) -> int:
    part = cluster.partitions(TOPIC).get(0)
    return -1 if part is None else int(part.leader_id)


def stays_offline(cluster: Cluster, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert leader(cluster) == -1
        time.sleep(0.25)
    return True


def elect(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "logkeel", "elect", "--topic", TOPIC, "--partition", "0",
         "--bootstrap-server", cluster.live()[0].bootstrap, *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def replicas_in_isr_order(cluster: Cluster) -> tuple[int, int, int]:
    """(leader, a follower, the other follower) once all three are in sync."""

    def in_sync() -> object | None:
        part = cluster.partitions(TOPIC).get(0)  # the broker asked may not know it yet
        return part if part is not None and len(part.isr_nodes) == 3 else None

    part: object = wait_until(in_sync, 30, "all three in sync", retry_on=PROBE_ERRORS)
    lead = int(part.leader_id)  # type: ignore[attr-defined]
    f1, f2 = (int(r) for r in part.replica_nodes if int(r) != lead)  # type: ignore[attr-defined]
    return lead, f1, f2


def test_a_wiped_last_isr_member_is_never_elected_and_an_operator_designates_the_good_copy(
    fresh: Cluster,
) -> None:
    admin = AdminClient({"bootstrap.servers": fresh.live()[0].bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(20)
    lead, f1, f2 = replicas_in_isr_order(fresh)
    produce(fresh, 0, 200)
    # Reports are refreshed every few seconds; the evidence that the partition held data must
    # be in ZooKeeper before the brokers go.
    wait_until(
        lambda: all(reported_end(fresh, b) == 200 for b in (lead, f1, f2)),
        20,
        "reports",
        retry_on=PROBE_ERRORS,
    )
    fresh.brokers[f1].stop()  # controlled shutdown: leaves the ISR at once
    produce(fresh, 200, 100)
    fresh.brokers[f2].stop()
    produce(fresh, 300, 100)  # acked by the leader alone (min.insync.replicas=1)
    fresh.brokers[lead].stop()  # the last in-sync replica: the partition goes offline

    # The incident: the last in-sync replica comes back with an empty disk.
    for d in fresh.brokers[lead].log_dirs:
        shutil.rmtree(d)
    fresh.brokers[lead].start(60)
    assert stays_offline(fresh, 6)
    fresh.brokers[f1].start(60)
    fresh.brokers[f2].start(60)
    assert stays_offline(fresh, 4)  # unclean elections are off: only an operator may choose

    refused = elect(fresh, "--replica", str(lead))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    # The table wraps the reason over lines: compare its words.
    assert "lost acknowledged data" in " ".join(refused.stdout.replace("│", " ").split())
    chosen = elect(fresh, "--replica", str(f2))
    assert chosen.returncode == 0, chosen.stdout + chosen.stderr
    wait_until(lambda: leader(fresh) == f2, 15, "the designated leader", retry_on=PROBE_ERRORS)
    # The good copy is served; the wiped broker and the shorter follower catch up from it.
    assert consume_all(fresh) == list(range(300))
    wait_until(
        lambda: len(fresh.partitions(TOPIC)[0].isr_nodes) == 3,
        40,
        "all back in sync",
        retry_on=PROBE_ERRORS,
    )


@pytest.mark.parametrize(
    "fresh",
    [{"unclean.leader.election.enable": "true", "unclean.leader.election.wait.ms": "8000"}],
    indirect=True,
)
def test_an_unclean_election_waits_for_the_longer_log_that_starts_later(fresh: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": fresh.live()[0].bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(20)
    lead, f1, f2 = replicas_in_isr_order(fresh)
    produce(fresh, 0, 100)
    fresh.brokers[f1].stop()
    produce(fresh, 100, 100)
    fresh.brokers[f2].stop()
    produce(fresh, 200, 50)
    fresh.brokers[lead].kill()  # the leader's disk is gone for good
    wait_until(
        lambda: lead not in registered(fresh),
        SESSION_TIMEOUT_MS / 1000 + 15,
        "the killed leader's registration gone (its session expired)",
        interval=0.25,
    )

    fresh.brokers[f1].start(60)  # 100 records, back first
    time.sleep(1.5)
    fresh.brokers[f2].start(60)  # 200 records, a little later
    chosen = wait_until(lambda: leader(fresh) if leader(fresh) not in (-1, lead) else None, 30, "an unclean leader", retry_on=PROBE_ERRORS)  # fmt: skip
    assert chosen == f2
    assert consume_all(fresh) == list(range(200))


@pytest.mark.parametrize("fresh", [{"auto.leader.rebalance.enable": "false"}], indirect=True)
def test_preferred_election_through_kafkas_elect_leaders(fresh: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": fresh.live()[0].bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(20)
    lead, _f1, _f2 = replicas_in_isr_order(fresh)
    preferred = int(fresh.partitions(TOPIC)[0].replica_nodes[0])
    assert lead == preferred
    fresh.brokers[lead].stop()
    wait_until(lambda: leader(fresh) not in (-1, lead), 20, "another leader", retry_on=PROBE_ERRORS)
    fresh.brokers[lead].start(60)
    wait_until(
        lambda: len(fresh.partitions(TOPIC)[0].isr_nodes) == 3,
        30,
        "back in sync",
        retry_on=PROBE_ERRORS,
    )
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(TOPIC, 0)]).result(30)
    assert all(err is None for err in result.values()), result
    wait_until(
        lambda: leader(fresh) == preferred, 10, "the preferred leader", retry_on=PROBE_ERRORS
    )
    again = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(TOPIC, 0)]).result(30)
    [(tp, err)] = again.items()
    assert err is not None and "ELECTION_NOT_NEEDED" in err.name()
