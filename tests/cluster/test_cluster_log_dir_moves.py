"""Replica moves between log dirs (KIP-113) on a leader and on a follower of a three-broker
cluster, under an acks=all producer: nothing acknowledged is lost (history checker), the moved
follower stays in the ISR's reach and rejoins it, and both replicas end in their new dirs."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from confluent_kafka.admin import NewTopic

from logkeel.cli.main import cli
from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.testing.history import History
from tests.cluster.test_cluster_brokers import PROBE_ERRORS, three_brokers
from tests.cluster.test_cluster_history import PARTITIONS, TOPIC, Writer, final_logs
from tests.waiting import wait_until


def test_a_leader_and_a_follower_move_dirs_under_an_acks_all_producer(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    dirs = {i: [tmp_path / f"b{i}" / "d1", tmp_path / f"b{i}" / "d2"] for i in (1, 2, 3)}
    overrides = {"replica.alter.log.dirs.io.max.bytes.per.second": "100000"}
    with three_brokers(zookeeper, tmp_path, "/log_dir_moves", overrides, dirs) as cluster:
        admin = cluster.admin()  # kept alive: a collected client cancels its futures
        created = admin.create_topics(
            [NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})]
        )
        created[TOPIC].result(20)
        wait_until(lambda: all(p.leader_id > 0 for p in cluster.partitions(TOPIC).values()), 15.0, "leaders", retry_on=PROBE_ERRORS)  # fmt: skip
        part = cluster.partitions(TOPIC)[0]
        leader = part.leader_id
        follower = next(r for r in part.replica_nodes if r != leader)
        history = History()
        writer = Writer(cluster.brokers[1].bootstrap, history)
        writer.start()
        moved: dict[int, tuple[Path, Path]] = {}
        try:
            wait_until(lambda: len(history.acked) > 2000, 60, "data to copy", retry_on=PROBE_ERRORS)
            for broker in (leader, follower):
                a, b = dirs[broker]
                source, target = (a, b) if (a / f"{TOPIC}-0").is_dir() else (b, a)
                moved[broker] = (source, target)
                args = ["log-dirs", "move", "--bootstrap-server", cluster.brokers[broker].bootstrap,
                        "--broker", str(broker), "--topic", TOPIC, "--partition", "0",
                        "--to", str(target), "--no-wait"]  # fmt: skip
                started = CliRunner().invoke(cli, args)
                assert started.exit_code == 0, started.output
            for broker, (source, target) in moved.items():
                wait_until(lambda s=source, t=target: (t / f"{TOPIC}-0").is_dir()
                           and not (s / f"{TOPIC}-0").exists(), 90, f"broker {broker}'s swap", retry_on=PROBE_ERRORS)  # fmt: skip
            at_swap = len(history.acked)
            wait_until(
                lambda: len(history.acked) > at_swap + 200,
                15.0,
                "writes after the swaps",
                retry_on=PROBE_ERRORS,
            )
            wait_until(lambda: len(cluster.partitions(TOPIC)[0].isr_nodes) == 3, 30, "a full ISR", retry_on=PROBE_ERRORS)  # fmt: skip
        finally:
            writer.stop.set()
            writer.join(150)
        assert writer.errors == []
        assert history.check(final_logs(cluster.brokers[1].bootstrap)) == []
        for _, target in moved.values():
            assert not any(p.name.endswith("-future") for p in target.iterdir())
