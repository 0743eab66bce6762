"""The Spark data sources on a standalone Spark cluster (a master and two workers, executors in
JVMs and Python workers of their own) against three `logkeel serve` brokers on the real
ZooKeeper: the topic source (batch, and streaming restarted from its checkpoint by a new driver),
the transactional sink, the segment reader, `logkeel audit --master spark://...`, and a SASL_SSL
listener whose credentials, given as options, reach the executors and are printed nowhere.

Each Spark application is a driver process of its own (tests/spark/standalone_jobs.py): one
SparkContext per process, and its output is what a user would see. One Spark cluster and one
broker cluster serve the whole module.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.ports import free_port
from logkeel.testing.certs import Certificates, make_certificates
from tests.brokerproc import BrokerProcess
from tests.cluster.conftest import zookeeper  # noqa: F401  (the session's real ZooKeeper)
from tests.cluster.test_cluster_security import SCRAM_JAAS, add_user
from tests.spark.kafka_util import produce, unique
from tests.spark.standalone import SparkCluster, spark_cluster
from tests.waiting import wait_until

# The module's shared fixtures start a Spark cluster, three brokers and two applications before
# the first test: over pytest's per-test 300 s on a loaded 2-core machine.
pytestmark = pytest.mark.timeout(1800)
JOBS = Path(__file__).with_name("standalone_jobs.py")
REPO = Path(__file__).parents[2]
JOB_TIMEOUT_S = 600  # an application waited 2m20s for its executors at load average 30
USER = "spark-user"
# Unusual characters on purpose: the JAAS value is quoted and escaped.
PASSWORD = f'pw-{uuid.uuid4().hex}-"q"'


class Brokers:
    """Three brokers; clients on CLIENT (PLAINTEXT) or SECURE (SASL_SSL, SCRAM-SHA-512)."""

    def __init__(self, base: Path, zk_connect: str, certs: Certificates) -> None:
        self.certs = certs
        self.zk_connect = zk_connect
        self.secure_ports: dict[int, int] = {}
        self.brokers: dict[int, BrokerProcess] = {}
        for i in (1, 2, 3):
            port, secure, internal = free_port(), free_port(), free_port()
            self.secure_ports[i] = secure
            self.brokers[i] = BrokerProcess(
                base / f"b{i}",
                port=port,
                overrides={
                    "zookeeper.connect": zk_connect,
                    "zookeeper.session.timeout.ms": "6000",
                    "listeners": f"CLIENT://127.0.0.1:{port},SECURE://127.0.0.1:{secure},"
                    f"INTERNAL://127.0.0.1:{internal}",
                    "listener.security.protocol.map": "CLIENT:PLAINTEXT,SECURE:SASL_SSL,"
                    "INTERNAL:PLAINTEXT",
                    "inter.broker.listener.name": "INTERNAL",
                    "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                    "ssl.keystore.location": str(certs.server),
                    "ssl.truststore.location": str(certs.ca),
                    "default.replication.factor": "3",
                    "transaction.state.log.num.partitions": "3",
                    "transaction.state.log.replication.factor": "3",
                    "offsets.topic.num.partitions": "3",
                    # The records carry 2023 timestamps (kafka_util.BASE_TS): keep them.
                    "log.retention.ms": "-1",
                },
                extra_args=["--node-id", str(i)],
            )

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    @property
    def secure_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.secure_ports.values())

    def log_dirs(self) -> list[str]:
        return [str(b.log_dirs[0]) for b in self.brokers.values()]

    def create_topic(self, partitions: int) -> str:
        topic = unique("standalone")
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(30)

        def complete() -> bool:
            md = admin.list_topics(topic, timeout=10).topics[topic]
            return len(md.partitions) == partitions and all(
                p.leader >= 0 and len(p.isrs) == 3 for p in md.partitions.values()
            )

        wait_until(complete, 30, f"{topic}'s leaders and full ISRs")
        return topic

    def replicated(self, topic: str, partitions: int, count: int) -> None:
        """Waits until every broker's copy has all ``count`` records (followers fetch after the
        leader acknowledged)."""

        def copies_complete() -> bool:
            for b in self.brokers.values():
                total = 0
                for p in range(partitions):
                    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": unique("hw")})
                    try:
                        low, high = c.get_watermark_offsets(KafkaTP(topic, p), timeout=10)
                    finally:
                        c.close()
                    total += high - low
                if total != count:
                    return False
            return True

        wait_until(copies_complete, 30, f"all replicas of {topic} to hold {count} records")


@pytest.fixture(scope="module")
def brokers(
    zookeeper: ZooKeeperServer,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Brokers]:
    chroot = f"/standalone-{uuid.uuid4().hex[:8]}"
    root = KazooClient(hosts=zookeeper.connect_string, timeout=10.0)
    root.start(timeout=10.0)
    try:
        root.ensure_path(chroot)
    finally:
        root.stop()
        root.close()
    connect = zookeeper.connect_string + chroot
    base = tmp_path_factory.mktemp("standalone-brokers")
    add_user(connect, USER, PASSWORD)
    cluster = Brokers(base, connect, make_certificates(base / "certs"))
    try:
        # Together: each takes a good part of a minute to import and start on a loaded machine.
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda b: b.start(timeout=90), cluster.brokers.values()))
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        wait_until(
            lambda: len(admin.list_topics(timeout=10).brokers) == 3,
            30,
            "three brokers registered",
            0.2,
        )
        yield cluster
    finally:
        for b in cluster.brokers.values():
            if b.alive():
                b.stop(timeout=20)


@pytest.fixture(scope="module")
def spark_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with spark_cluster(tmp_path_factory.mktemp("spark-standalone")) as cluster:
        yield cluster


def run_app(cluster: SparkCluster, jobs: list[tuple[str, dict[str, Any]]], log_level: str) -> App:
    """Runs one driver program with ``jobs``; returns what it reported and everything it
    printed."""
    env = dict(os.environ, PYTHONPATH=str(REPO), LOGKEEL_TEST_PASSWORD=PASSWORD)
    plan = {"master": cluster.url, "log_level": log_level, "jobs": jobs}
    done = subprocess.run(
        [sys.executable, str(JOBS), json.dumps(plan)],
        capture_output=True, text=True, timeout=JOB_TIMEOUT_S, env=env, cwd=REPO,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"driver of {[j for j, _ in jobs]} failed:\n{output[-6000:]}"
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(results) == 1, output[-3000:]
    result = json.loads(results[0][len("RESULT ") :])
    return App(dict(zip([j for j, _ in jobs], result["jobs"], strict=True)), result["executors"],
               output)  # fmt: skip


@dataclass
class App:
    results: dict[str, dict[str, Any]]
    executors: int
    output: str


@dataclass
class Scenario:
    """What the module's two plaintext-and-secure applications read and wrote."""

    batch_topic: str
    batch_where: dict[tuple[int, int], int]
    sink_topic: str
    stream_topic: str
    stream_where: dict[tuple[int, int], int]
    stream_dir: Path
    first: App
    last_batch_before_crash: int
    secure_topic: str
    ca: Path
    second: App


BATCH_COUNT = 1500
STREAM_COUNT, STREAM_MORE, MAX_PER_TRIGGER = 900, 300, 300
SECURE_COUNT = 400


@pytest.fixture(scope="module")
def scenario(
    spark_master: SparkCluster, brokers: Brokers, tmp_path_factory: pytest.TempPathFactory
) -> Scenario:
    """Two applications (each costs the start of its executors): the first reads a topic in batch,
    writes it back through the transactional sink, reads the brokers' segment files and runs a
    stream to its checkpoint; the driver then "dies" before committing its last micro-batch, and
    the second application restarts the stream from that checkpoint and runs the SASL_SSL job."""
    base = tmp_path_factory.mktemp("standalone-scenario")
    batch_topic, sink_topic = brokers.create_topic(3), brokers.create_topic(2)
    stream_topic, secure_topic = brokers.create_topic(3), brokers.create_topic(2)
    batch_where = produce(brokers.bootstrap, batch_topic, 0, BATCH_COUNT, 3)
    stream_where = produce(brokers.bootstrap, stream_topic, 0, STREAM_COUNT, 3)
    brokers.replicated(batch_topic, 3, BATCH_COUNT)
    stream = {
        "bootstrap": brokers.bootstrap,
        "topic": stream_topic,
        "checkpoint": str(base / "checkpoint"),
        "out": str(base / "out"),
        "max_per_trigger": MAX_PER_TRIGGER,
    }
    first = run_app(
        spark_master,
        [
            ("batch", {
                "bootstrap": brokers.bootstrap, "topic": batch_topic, "out_topic": sink_topic,
                "txn_prefix": unique("standalone-txn"), "log_dirs": brokers.log_dirs(),
            }),
            ("stream", stream),
        ],
        "WARN",
    )  # fmt: skip
    # The driver died after logging the last batch's offsets, before committing it.
    last = max(int(k) for k in first.results["stream"]["batches"])
    (base / "checkpoint" / "commits" / str(last)).unlink()
    (base / "checkpoint" / "commits" / f".{last}.crc").unlink(missing_ok=True)
    stream_where.update(produce(brokers.bootstrap, stream_topic, STREAM_COUNT, STREAM_MORE, 3))

    # The CA as a file only the driver has: the secure job deletes it after the first
    # micro-batch, before the executors read the next one.
    ca = base / "driver-only" / "ca.pem"
    ca.parent.mkdir()
    shutil.copy(brokers.certs.ca, ca)
    secure = {
        "bootstrap": brokers.secure_bootstrap, "topic": secure_topic, "user": USER,
        "jaas": SCRAM_JAAS.format(USER, PASSWORD.replace('"', '\\"')), "ca": str(ca),
        "count": SECURE_COUNT, "checkpoint": str(base / "secure-checkpoint"),
    }  # fmt: skip
    # INFO: the most a driver prints, all of it checked for the password.
    second = run_app(spark_master, [("stream", stream), ("secure", secure)], "INFO")
    return Scenario(batch_topic, batch_where, sink_topic, stream_topic, stream_where,
                    base / "out", first, last, secure_topic, ca, second)  # fmt: skip


def executor_stderr_by_worker(cluster: SparkCluster) -> list[str]:
    """Each worker's executors' stderr, all applications together."""
    logs = cluster.executor_logs()
    return [
        "".join(
            text for path, text in logs.items() if path.name == "stderr" and work in path.parents
        )
        for work in cluster.work_dirs
    ]


def values(rows: list[list[Any]]) -> list[str]:
    return sorted(r[2] for r in rows)


def test_batch_source_transactional_sink_and_segment_reader(
    spark_master: SparkCluster, brokers: Brokers, scenario: Scenario
) -> None:
    result = scenario.first.results["batch"]
    assert scenario.first.executors == 2
    # Both workers' executors ran tasks: the reads happened in separate JVMs, not the driver.
    for stderr in executor_stderr_by_worker(spark_master):
        assert "Finished task" in stderr
    expected = sorted([p, o, f"value-{i}"] for (p, o), i in scenario.batch_where.items())
    assert result["read"] == expected

    # The segment reader read each broker's copy from its log dir: three of every record.
    assert sorted(n for _, n in result["segments_by_dir"]) == [BATCH_COUNT] * 3
    assert result["segments"] == sorted(expected * 3)

    # The transactional sink's records are committed: a read_committed consumer sees them all.
    c = Consumer(
        {
            "bootstrap.servers": brokers.bootstrap,
            "group.id": unique("check"),
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    c.subscribe([scenario.sink_topic])
    got: list[bytes] = []
    try:
        wait_until(
            lambda: (
                got.extend(m.value() for m in c.consume(500, 0.5) if not m.error())
                or len(got) >= BATCH_COUNT
            ),
            60,
            "the sink's committed records",
        )
    finally:
        c.close()
    assert sorted(got) == sorted(b"value-%d" % i for i in range(BATCH_COUNT))


def test_stream_restarted_from_its_checkpoint_by_a_new_driver(scenario: Scenario) -> None:
    sizes = {int(k): v for k, v in scenario.first.results["stream"]["batches"].items()}
    assert sum(sizes.values()) == STREAM_COUNT
    assert max(sizes.values()) <= MAX_PER_TRIGGER and len(sizes) >= 3
    last = scenario.last_batch_before_crash
    again = {int(k): v for k, v in scenario.second.results["stream"]["batches"].items()}
    assert again[last] == sizes[last]  # the new driver re-read exactly the planned range
    assert sum(again.values()) == sizes[last] + STREAM_MORE

    table = pq.read_table(scenario.stream_dir).to_pylist()
    got = sorted((r["partition"], r["offset"]) for r in table)
    where = scenario.stream_where
    assert got == sorted(where)  # every record exactly once
    assert all(r["value"] == b"value-%d" % where[(r["partition"], r["offset"])] for r in table)


def test_logkeel_audit_on_the_cluster(
    spark_master: SparkCluster, brokers: Brokers, tmp_path: Path
) -> None:
    topic = brokers.create_topic(1)
    produce(brokers.bootstrap, topic, 0, 500, 1)
    brokers.replicated(topic, 1, 500)
    # Copies of the three replicas, one of them cut in half (the brokers keep theirs).
    copies = []
    for i, log_dir in enumerate(brokers.log_dirs(), 1):
        copy = tmp_path / f"broker{i}" / f"{topic}-0"
        shutil.copytree(Path(log_dir) / f"{topic}-0", copy)
        copies.append(copy)
    segment = copies[0] / f"{0:020d}.log"
    os.truncate(segment, segment.stat().st_size // 2)

    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-m", "logkeel", "audit", "--json", "--master", spark_master.url,
         # Spark's default executor memory (1g) is more than these workers offer: without it
         # the application would wait for executors forever.
         "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=2",
         "--conf", "spark.driver.host=127.0.0.1", *map(str, copies)],
        capture_output=True, text=True, timeout=JOB_TIMEOUT_S, env=env, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    master_log = spark_master.daemons[0].log.read_text()
    assert "Registering app logkeel audit" in master_log  # it ran on the cluster
    [report] = json.loads(done.stdout)
    assert (report["topic"], report["partition"]) == (topic, 0)
    ends = {Path(r["path"]).parent.name: r["log_end_offset"] for r in report["replicas"]}
    assert ends["broker2"] == ends["broker3"] == 500
    assert ends["broker1"] < 500
    assert Path(report["best_replica"]).parent.name in ("broker2", "broker3")


def test_sasl_ssl_credentials_reach_the_executors_and_are_never_printed(
    spark_master: SparkCluster, scenario: Scenario
) -> None:
    second = scenario.second
    assert not scenario.ca.exists()  # deleted between micro-batches; the next ones still read
    streamed = second.results["secure"]["streamed"]
    assert values(streamed) == sorted(f"secure-{i}" for i in range(2 * SECURE_COUNT))
    assert "== Physical Plan ==" in second.output  # the plan was printed: it is among the checked

    printed = {"driver": second.output}
    printed.update({str(p): text for p, text in spark_master.executor_logs().items()})
    printed.update({d.name: d.log.read_text(errors="replace") for d in spark_master.daemons})
    assert any("Finished task" in text for text in printed.values())
    secret = PASSWORD.split("-")[1]  # the unguessable part, however it was quoted
    leaked = [where for where, text in printed.items() if secret in text]
    assert leaked == []


def test_fail_on_data_loss_names_the_election_that_truncated(
    brokers: Brokers,
    zookeeper: ZooKeeperServer,  # noqa: F811
) -> None:
    """A stream planned up to offset 60 finds the partition's log at 40: the error names the
    election loss the controller recorded (written here through the controller's own client
    API, as the election attack tests provoke for real)."""
    from logkeel.cluster import zk_data
    from logkeel.cluster.zk_client import ZkMetadataClient
    from logkeel.spark.kafka_client import DataLossError
    from logkeel.spark.kafka_source import KafkaStreamReader
    from logkeel.spark.schema import kafka_schema
    from logkeel.storage.topic_partition import TopicPartition

    topic = brokers.create_topic(1)
    produce(brokers.bootstrap, topic, 0, 40, 1)
    client = ZkMetadataClient(brokers.zk_connect, session_timeout_ms=10_000)
    client.start()
    try:
        client.record_election_loss(zk_data.ElectionLoss(
            TopicPartition(topic, 0), leader=2, leader_epoch=3, from_offset=40, truncated={1: 20},
            reason="unclean election: no in-sync replica alive", time_ms=1_790_000_000_000,
        ))  # fmt: skip
    finally:
        client.close()
    options = {"kafka.bootstrap.servers": brokers.bootstrap, "subscribe": topic}
    reader = KafkaStreamReader(options, kafka_schema())
    try:
        with pytest.raises(DataLossError) as failure:
            reader.partitions({topic: {"0": 60}}, {topic: {"0": 40}})
    finally:
        reader.stop()
    message = str(failure.value)
    assert f"the offset of {topic}-0 went back from 60 to 40" in message
    assert "made broker 2 leader at epoch 3 from offset 40" in message
    assert "broker 1 held 20 more" in message and "no in-sync replica alive" in message

    # Without failOnDataLoss the range is skipped, as Spark's source does.
    tolerant = KafkaStreamReader({**options, "failondataloss": "false"}, kafka_schema())
    try:
        assert tolerant.partitions({topic: {"0": 60}}, {topic: {"0": 40}}) == []
    finally:
        tolerant.stop()
