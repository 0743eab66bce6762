"""Transactions on three real brokers: the transaction coordinator is the leader of the
transactional id's ``__transaction_state`` partition, it writes the markers of partitions led by
other brokers with WriteTxnMarkers, and when its broker is SIGKILLed mid-transaction the new
leader loads the partition, so the producer's next InitProducerId there aborts the open
transaction and fences the old incarnation."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.server.group.records import partition_for
from logkeel.server.txn.records import TRANSACTION_STATE_TOPIC
from tests.cluster.test_cluster_brokers import (
    FAILOVER_BOUND_S,
    PROBE_ERRORS,
    Cluster,
    three_brokers,
)
from tests.waiting import wait_until

STATE_PARTITIONS = 3
TOPIC = "txns"
CONSUME_BOUND_S = 30.0


@pytest.fixture(scope="module")
def txn_cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    overrides = {
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        "transaction.state.log.num.partitions": str(STATE_PARTITIONS),
    }
    base = tmp_path_factory.mktemp("txns")
    with three_brokers(zookeeper, base, "/cluster_txns", overrides) as c:
        c.ensure_all_running()
        c.create_topic(TOPIC, 3, 3)
        yield c


def producer(cluster: Cluster, txn_id: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": ",".join(b.bootstrap for b in cluster.live()),
            "transactional.id": txn_id,
            "transaction.timeout.ms": 60000,
            "linger.ms": 5,
        }
    )


def read_committed(cluster: Cluster, count: int) -> list[str]:
    """Every record of TOPIC a read_committed consumer sees within the bound (at least
    ``count``, then one more poll to catch extras)."""
    c = Consumer(
        {
            "bootstrap.servers": ",".join(b.bootstrap for b in cluster.live()),
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    got: list[str] = []
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + CONSUME_BOUND_S
        while len(got) < count and time.monotonic() < deadline:
            got += [m.value().decode() for m in c.consume(500, 1.0) if m.error() is None]
        got += [m.value().decode() for m in c.consume(500, 2.0) if m.error() is None]
    finally:
        c.close()
    return got


def send(p: Producer, tag: str, n: int) -> None:
    for i in range(n):
        # Keys spread the records over the three partitions, led by different brokers.
        p.produce(TOPIC, key=str(i).encode(), value=f"{tag}-{i}".encode())
    p.flush(20)


def state_leader(cluster: Cluster, txn_id: str, via: int | None = None) -> int:
    p = partition_for(txn_id, STATE_PARTITIONS)
    return int(cluster.partitions(TRANSACTION_STATE_TOPIC, via)[p].leader_id)


def test_commit_and_abort_across_brokers_and_coordinator_killed(txn_cluster: Cluster) -> None:
    leaders = {int(p.leader_id) for p in txn_cluster.partitions(TOPIC).values()}
    assert len(leaders) > 1, f"the topic's partitions are all led by {leaders}"
    txn_id = f"tx-{uuid.uuid4().hex[:6]}"
    p = producer(txn_cluster, txn_id)
    p.init_transactions(30)
    for p_meta in txn_cluster.partitions(TRANSACTION_STATE_TOPIC).values():
        assert sorted(p_meta.replica_nodes) == [1, 2, 3]

    p.begin_transaction()
    send(p, "committed", 30)
    p.commit_transaction(30)
    p.begin_transaction()
    send(p, "aborted", 30)
    p.abort_transaction(30)

    # Mid-transaction, the coordinator's broker dies.
    p.begin_transaction()
    send(p, "open", 30)
    victim = state_leader(txn_cluster, txn_id)
    txn_cluster.brokers[victim].kill()
    survivor = next(i for i in txn_cluster.brokers if i != victim)
    wait_until(
        lambda: state_leader(txn_cluster, txn_id, survivor) not in (-1, victim),
        FAILOVER_BOUND_S,
        "a new leader of the id's __transaction_state partition",
        retry_on=PROBE_ERRORS,
    )
    # The producer's next incarnation, on the new coordinator: the open transaction is aborted.
    q = producer(txn_cluster, txn_id)
    q.init_transactions(60)
    q.begin_transaction()
    send(q, "after", 30)
    q.commit_transaction(30)
    # The old incarnation is fenced.
    with pytest.raises(KafkaException) as fenced:
        p.commit_transaction(30)
    assert fenced.value.args[0].code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ), fenced.value

    got = read_committed(txn_cluster, 60)
    expected = {f"committed-{i}" for i in range(30)} | {f"after-{i}" for i in range(30)}
    assert sorted(got) == sorted(expected), (
        f"{len(got)} records; extra {sorted(set(got) - expected)[:5]}, "
        f"missing {sorted(expected - set(got))[:5]}"
    )
