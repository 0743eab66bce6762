"""Three real `logkeel serve --zookeeper` processes on the real ZooKeeper of the session: broker
registration, topic creation through the controller, leader election after SIGKILL, leadership
moving away on SIGTERM, controller failover. Metadata and leadership only: data replication has
its own tests. Every wait is bounded."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.ports import free_port
from logkeel.testing.broker_process import serve_command
from tests.brokerproc import BrokerProcess
from tests.server.test_admin_wire import Wire
from tests.server.test_clients_matrix import Msg, consume, produce
from tests.waiting import wait_until

SESSION_TIMEOUT_MS = 6000
# A dead broker's session expires after the timeout; the controller then needs a moment.
FAILOVER_BOUND_S = SESSION_TIMEOUT_MS / 1000 + 6.0
T = TypeVar("T")
NO_PARTITION = SimpleNamespace(leader_id=-1)
# What a probe may raise while a broker starts or elects: asked again (wait_until's retry_on).
PROBE_ERRORS = (OSError, AssertionError)


class Cluster:
    def __init__(
        self,
        base: Path,
        connect: str,
        overrides: dict[str, str] | None = None,
        log_dirs: dict[int, list[Path]] | None = None,
        per_broker: dict[int, dict[str, str]] | None = None,
    ) -> None:
        """``per_broker``: overrides of one broker's own (its broker.rack), over ``overrides``."""
        self.connect = connect
        self.brokers = {
            i: BrokerProcess(
                base / f"b{i}",
                overrides={
                    "zookeeper.connect": connect,
                    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                    **(overrides or {}),
                    **(per_broker or {}).get(i, {}),
                },
                log_dirs=(log_dirs or {}).get(i),
                extra_args=["--node-id", str(i)],
            )
            for i in (1, 2, 3)
        }

    def live(self) -> list[BrokerProcess]:
        return [b for b in self.brokers.values() if b.alive()]

    def metadata(self, via: int | None = None, topics: list[str] | None = None) -> Any:
        broker = self.brokers[via] if via is not None else self.live()[0]
        wire = Wire(broker.port)
        try:
            return wire.metadata(topics, version=12)
        finally:
            wire.close()

    def partitions(self, topic: str, via: int | None = None) -> dict[int, Any]:
        [t] = self.metadata(via, [topic]).topics
        return {p.partition_index: p for p in t.partitions}

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in self.live())})

    def create_topic(self, name: str, partitions: int, replication: int) -> None:
        """Creates the topic (one a rerun's first attempt created on a module's cluster is
        taken as it is) and waits until every live broker shows every partition led: the
        brokers' caches learn it a moment after the controller wrote it."""
        admin = self.admin()  # kept alive: a collected client cancels its futures
        try:
            admin.create_topics([NewTopic(name, partitions, replication)])[name].result(60)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        for broker in [i for i, b in self.brokers.items() if b.alive()]:
            wait_until(
                lambda via=broker: (
                    len(parts := self.partitions(name, via)) == partitions
                    and all(p.leader_id >= 0 for p in parts.values())
                ),
                30,
                f"{name}'s partitions led as broker {broker} sees them",
                retry_on=PROBE_ERRORS,
            )

    def ensure_all_running(self) -> None:
        """Restarts brokers an earlier test stopped, and waits until all three are registered."""
        stopped = [b for b in self.brokers.values() if not b.alive()]
        with ThreadPoolExecutor(3) as pool:
            timeout = SESSION_TIMEOUT_MS / 1000 + 20
            for started in [pool.submit(b.start, timeout) for b in stopped]:
                started.result()
        for i in self.brokers:
            wait_until(
                lambda i=i: len(self.metadata(i).brokers) == 3,
                15.0,
                f"broker {i} to see all three",
                retry_on=PROBE_ERRORS,
            )


@contextmanager
def three_brokers(
    zookeeper: ZooKeeperServer,
    base: Path,
    chroot: str,
    overrides: dict[str, str] | None = None,
    log_dirs: dict[int, list[Path]] | None = None,
    start_timeout: float = 90.0,
    per_broker: dict[int, dict[str, str]] | None = None,
) -> Iterator[Cluster]:
    """Three broker processes under a fresh ``chroot``, SIGKILLed at the end (``log_dirs``:
    a broker's own list instead of one dir in its work dir)."""
    root = KazooClient(hosts=zookeeper.connect_string, timeout=10.0)
    root.start(timeout=10.0)
    if root.exists(chroot):
        root.delete(chroot, recursive=True)
    root.ensure_path(chroot)
    root.stop()
    root.close()
    c = Cluster(base, zookeeper.connect_string + chroot, overrides, log_dirs, per_broker)
    try:
        with ThreadPoolExecutor(3) as pool:
            # A generous bound: on a loaded machine an import alone took 10 s.
            for started in [pool.submit(b.start, start_timeout) for b in c.brokers.values()]:
                started.result()
        yield c
    finally:
        for broker in c.brokers.values():
            if broker.alive():
                broker.kill()


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with three_brokers(zookeeper, tmp_path_factory.mktemp("cluster"), "/cluster_brokers") as c:
        yield c


@pytest.fixture
def running(cluster: Cluster) -> Cluster:
    cluster.ensure_all_running()
    return cluster


def test_every_broker_lists_all_three_and_topics_spread_leaders(running: Cluster) -> None:
    for i in running.brokers:
        response = running.metadata(i)
        assert sorted(b.node_id for b in response.brokers) == [1, 2, 3]
        assert {b.port for b in response.brokers} == {b.port for b in running.brokers.values()}
        assert response.controller_id in (1, 2, 3)

    running.create_topic("spread", 6, 3)
    for i in running.brokers:  # every broker's cache has the controller's decisions

        def complete(i: int = i) -> dict[int, Any] | None:
            parts = running.partitions("spread", i)
            return parts if len(parts) == 6 else None

        parts = wait_until(
            complete, 15.0, f"broker {i} to know all six partitions", retry_on=PROBE_ERRORS
        )
        for p in parts.values():
            assert sorted(p.replica_nodes) == [1, 2, 3]
            assert sorted(p.isr_nodes) == [1, 2, 3]
            assert p.leader_id == p.replica_nodes[0]  # the preferred replica leads first
    assert {p.leader_id for p in running.partitions("spread").values()} == {1, 2, 3}


def test_without_a_replica_selector_no_consumer_is_sent_elsewhere(running: Cluster) -> None:
    """KIP-392 is off by default (no replica.selector.class): a leader names no other replica
    to a consumer giving its rack. A follower still serves a consumer's Fetch v11+ (Kafka's
    rule: a consumer with stale metadata, or sent there during a rolling config change), and
    refuses one below v11."""
    from dataclasses import replace

    from tests.server.test_produce_api import RawClient, fetch_request

    running.create_topic("leaders-only", 1, 3)
    p = wait_until(
        lambda: (p := running.partitions("leaders-only")[0]).leader_id > 0 and p,
        15.0,
        "a leader",
        retry_on=PROBE_ERRORS,
    )
    request = replace(fetch_request(12, "leaders-only", {0: 0}), rack_id="r1")
    old = fetch_request(10, "leaders-only", {0: 0})
    for node in p.replica_nodes:
        with RawClient(running.brokers[node].port) as client:
            (t,) = client.call(request).responses
            (before_v11,) = client.call(old).responses
        (answer,) = t.partitions
        assert (answer.error_code, answer.preferred_read_replica) == (ErrorCode.none, -1), node
        expected = ErrorCode.none if node == p.leader_id else ErrorCode.not_leader_or_follower
        assert before_v11.partitions[0].error_code == expected, node


def test_bad_replication_factor_or_assignment_is_refused(running: Cluster) -> None:
    admin = running.admin()
    future = admin.create_topics([NewTopic("too-many", 1, 4)])["too-many"]
    with pytest.raises(Exception, match="INVALID_REPLICATION_FACTOR"):
        future.result(20)
    assert "too-many" not in {t.name for t in running.metadata().topics}

    wire = Wire(running.brokers[1].port)
    try:
        [unknown, manual] = wire.create_topics(
            [
                {"name": "unknown-broker", "assignments": {0: [1, 9]}},
                {"name": "manual", "assignments": {0: [3, 1], 1: [2, 3]}},
            ]
        )
    finally:
        wire.close()
    assert unknown.error_code == ErrorCode.invalid_replica_assignment
    assert manual.error_code == ErrorCode.none
    parts = running.partitions("manual")
    assert [(list(p.replica_nodes), p.leader_id) for _, p in sorted(parts.items())] == [
        ([3, 1], 3),
        ([2, 3], 2),
    ]


def test_sigkill_of_a_leader_elects_another_from_the_isr(running: Cluster) -> None:
    running.create_topic("killed", 1, 3)
    before = running.partitions("killed")[0]
    victim = before.leader_id
    started = time.monotonic()
    running.brokers[victim].kill()
    survivor = next(i for i in running.brokers if i != victim)

    def new_leader() -> Any:
        p = running.partitions("killed", survivor)[0]
        return p if p.leader_id not in (-1, victim) else None

    after = wait_until(new_leader, FAILOVER_BOUND_S, "a new leader", retry_on=PROBE_ERRORS)
    elapsed = time.monotonic() - started
    assert after.leader_id in before.isr_nodes
    assert victim not in after.isr_nodes
    assert victim in after.offline_replicas
    assert after.leader_epoch > before.leader_epoch
    print(f"new leader {after.leader_id} in metadata {elapsed:.2f}s after SIGKILL of {victim}")


def test_sigterm_moves_leaderships_before_the_broker_exits(running: Cluster) -> None:
    running.create_topic("moved", 3, 3)
    leaders = {p.leader_id for p in running.partitions("moved").values()}
    assert leaders == {1, 2, 3}
    leaving = 2
    started = time.monotonic()
    assert running.brokers[leaving].stop(timeout=30) == 0
    stopped_in = time.monotonic() - started
    # Moved by the controlled shutdown, not by the session expiring after the exit.
    assert "controlled shutdown: leaderships moved" in running.brokers[leaving].output()
    # The controller answered it (the broker need not wait for its own view to catch up).
    answer = f"controlled shutdown of broker {leaving}: 0 leaderships left to move"
    assert any(answer in b.output() for b in running.brokers.values())
    assert stopped_in < SESSION_TIMEOUT_MS / 1000
    for p in running.partitions("moved", 1).values():
        assert p.leader_id in (1, 3)
        assert leaving not in p.isr_nodes


def test_controller_failover(running: Cluster) -> None:
    old = running.metadata().controller_id
    running.brokers[old].kill()
    survivor = next(i for i in running.brokers if i != old)

    def new_controller() -> int | None:
        controller = running.metadata(survivor).controller_id
        return controller if controller not in (-1, old) else None

    new = wait_until(new_controller, FAILOVER_BOUND_S, "a new controller", retry_on=PROBE_ERRORS)
    assert new != old
    # The new controller acts: it elects first leaders of a new topic over the live brokers.
    running.create_topic("after-failover", 2, 2)
    parts = running.partitions("after-failover", survivor)
    assert all(p.leader_id in running.brokers and p.leader_id != old for p in parts.values())


def test_unreachable_zookeeper_is_a_clear_error_and_exit_code(tmp_path: Path) -> None:
    connect = f"127.0.0.1:{free_port()}"
    proc = subprocess.run(
        serve_command(
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--log-dirs",
            str(tmp_path / "logs"),
            "--zookeeper",
            connect,
            "--override",
            "zookeeper.connection.timeout.ms=1000",
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert f"could not connect to ZooKeeper at {connect}" in proc.stderr


def test_cluster_up_and_status_json(tmp_path: Path) -> None:
    port = free_port(count=2)
    up = subprocess.Popen(
        [
            *serve_command()[:-1],
            "cluster",
            "up",
            "--brokers",
            "2",
            "--dir",
            str(tmp_path),
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert up.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while not any("bootstrap servers" in line for line in lines):
            assert time.monotonic() < deadline and up.poll() is None, "".join(lines)
            lines.append(up.stdout.readline())
        bootstrap = re.search(r"bootstrap servers: (\S+)", "".join(lines)).group(1)  # type: ignore[union-attr]
        assert bootstrap == f"127.0.0.1:{port},127.0.0.1:{port + 1}"

        def status() -> dict[str, Any] | None:
            out = subprocess.run(
                [
                    *serve_command()[:-1],
                    "cluster",
                    "status",
                    "--bootstrap-server",
                    f"127.0.0.1:{port}",
                    "--json",
                ],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout
            doc = json.loads(out)
            return doc if len(doc["brokers"]) == 2 and doc["controller"] in (1, 2) else None

        doc = wait_until(status, 30, "both brokers in cluster status", retry_on=PROBE_ERRORS)
        assert [b["id"] for b in doc["brokers"]] == [1, 2]
        assert all(
            len(b["log_dirs_online"]) == 1 and not b["log_dirs_offline"] for b in doc["brokers"]
        )
        table = subprocess.run(
            [*serve_command()[:-1], "cluster", "status", "--bootstrap-server", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        assert "controller" in table and f"127.0.0.1:{port + 1}" in table
    finally:
        up.terminate()
        rest, _ = up.communicate(timeout=60)
    assert up.returncode == 0, rest
    assert "cluster stopped" in rest


@pytest.mark.parametrize(
    ("producer", "consumer"), [("kafka-python", "kcat"), ("kcat", "kafka-python")]
)
def test_kafka_python_and_kcat_follow_leaders_across_brokers(
    running: Cluster, producer: str, consumer: str
) -> None:
    """Three single-partition topics led by different brokers, each client bootstrapped from
    broker 1 only: it must find every leader through the cluster's metadata."""
    # Placement is random (as Kafka's): create topics until one is led by each broker.
    by_leader: dict[int, str] = {}
    for i in range(30):
        if len(by_leader) == 3:
            break
        name = f"{producer}-{consumer}-{i}"
        running.create_topic(name, 1, 3)
        # A new topic shows in the cache once each of its partitions has its first leader.
        leader = wait_until(lambda n=name: max(running.partitions(n).get(0, NO_PARTITION).leader_id, 0), 15.0, f"a leader of {name}", retry_on=PROBE_ERRORS)  # fmt: skip
        by_leader.setdefault(leader, name)
    assert sorted(by_leader) == [1, 2, 3]
    topics = list(by_leader.values())
    bootstrap = running.brokers[1].bootstrap
    sent = {t: [Msg(f"k{i}".encode(), f"{t}-{i}".encode()) for i in range(20)] for t in topics}
    for t in topics:
        produce(producer, bootstrap, t, sent[t])
    got = consume(consumer, bootstrap, {t: 20 for t in topics})
    for t in topics:
        assert [(g.key, g.value) for g in got if g.topic == t] == [
            (m.key, m.value) for m in sent[t]
        ]
