"""`logkeel console`'s answer for a partition that lost every in-sync replica, over three real
brokers: of its two replicas, the follower b is SIGKILLed after 5 records, the leader a takes 5
more alone and is SIGKILLed too. The partition has no leader, and the console names a (the
audit's ranking of the replicas' last reports: 10 records against 5), down, to be started
first, with the `logkeel elect --replica a` command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.storage.topic_partition import TopicPartition
from tests.cluster.test_cluster_brokers import FAILOVER_BOUND_S, PROBE_ERRORS, three_brokers
from tests.console.test_console_app import client_of, get
from tests.waiting import wait_until

TOPIC = "leaderless"


# A broker that has not learnt the new topic yet lists none of its partitions.
NOT_SHOWN_YET = (*PROBE_ERRORS, KeyError)


def test_the_console_names_the_replica_to_designate(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    chroot = f"/designate_{tmp_path.name}"
    # The leader drops the killed follower from the ISR after replica.lag.time.max.ms.
    with three_brokers(zookeeper, tmp_path, chroot, {"replica.lag.time.max.ms": "3000"}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.brokers[3].bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 2, config={"min.insync.replicas": "1"})])[
            TOPIC
        ].result(30)
        part = wait_until(lambda: (p := cluster.partitions(TOPIC, via=3)[0]) and len(p.isr_nodes) == 2 and p,
                          30, "both replicas in sync", retry_on=NOT_SHOWN_YET)  # fmt: skip
        # The one that keeps the partition to the end (a), the one that stops first (b).
        a, b = int(part.leader_id), next(int(r) for r in part.replica_nodes if r != part.leader_id)
        via = next(i for i in cluster.brokers if i not in (a, b))
        zk = ZkMetadataClient(zookeeper.connect_string + chroot, session_timeout_ms=10_000)
        zk.start()
        try:

            def reported(broker: int, end: int) -> bool:
                found = zk.replica_logs_of(broker)
                report = found[1].get(TopicPartition(TOPIC, 0)) if found else None
                return report is not None and report.log_end_offset == end

            def send(values: range) -> None:
                p = Producer({"bootstrap.servers": cluster.brokers[via].bootstrap, "acks": "all"})
                for i in values:
                    p.produce(TOPIC, f"v{i}".encode(), partition=0)
                assert p.flush(30) == 0

            send(range(5))
            wait_until(lambda: reported(b, 5), 20, f"broker {b}'s report of 5 records")
            cluster.brokers[b].kill()
            wait_until(lambda: list(cluster.partitions(TOPIC, via=via)[0].isr_nodes) == [a],
                       30, f"broker {a} alone in sync", retry_on=NOT_SHOWN_YET)  # fmt: skip
            send(range(5, 10))
            wait_until(lambda: reported(a, 10), 20, f"broker {a}'s report of 10 records")
            cluster.brokers[a].kill()
        finally:
            zk.close()
        wait_until(lambda: cluster.partitions(TOPIC, via=via)[0].leader_id == -1,
                   FAILOVER_BOUND_S, "the partition without a leader", retry_on=NOT_SHOWN_YET)  # fmt: skip

        with client_of(cluster.brokers[via].bootstrap) as console:

            def designated() -> Any:
                found = [p for p in get(console, "/api/partitions")["partitions"]
                         if p["topic"] == TOPIC]  # fmt: skip
                return found and found[0]["offline"] and found[0].get("designate")

            answer = wait_until(designated, 30, "the console's replica to designate")
        assert answer["broker"] == a
        assert sorted(
            (r["broker"], r["log_end_offset"], r["live"]) for r in answer["replicas"]
        ) == sorted(
            [
                (a, 10, False),
                (b, 5, False),
            ]
        )
        assert answer["elect_command"].startswith(
            f"logkeel elect --topic {TOPIC} --partition 0 --replica {a} --bootstrap-server "
        )
        assert "start it" in answer["note"]
