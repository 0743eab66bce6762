"""Brokers that talk TLS to each other (inter.broker.listener.name), on the real ZooKeeper of
the session, with an authorizer on: three `logkeel serve` processes whose follower fetchers
log in to the leaders' INTERNAL listener with SCRAM-SHA-512 over TLS (SASL_SSL), or with their
own certificate (SSL, client certificates required), while clients use the CLIENT listener. A broker with a wrong inter-broker password stays out of the ISR, says why in
its log, and nothing crashes. Every wait is bounded."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from logkeel.ports import free_port
from logkeel.server.protocol import ApiKey
from logkeel.testing.certs import Certificates, make_certificates
from tests.brokerproc import BrokerProcess
from tests.server.test_security import _call, consume
from tests.waiting import wait_until

T = TypeVar("T")
SCRAM_JAAS = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="{}" password="{}";'
)
BROKER_PASSWORD = "broker-secret"
ADMIN_PASSWORD = "admin-secret"


def add_user(zk_connect: str, name: str, password: str) -> None:
    """The brokers' own user must exist before they start: written straight to ZooKeeper."""
    done = subprocess.run(
        [sys.executable, "-m", "logkeel", "users", "add", name, "--password", password,
         "--mechanism", "SCRAM-SHA-512", "--zookeeper", zk_connect],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def inter_broker_settings(protocol: str, password: str) -> dict[str, str]:
    """The INTERNAL listener: SASL_SSL with SCRAM-SHA-512 as user broker, or SSL requiring a
    client certificate (each broker's own, CN=localhost, mapped to User:localhost)."""
    if protocol == "SSL":
        return {
            "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:SSL",
            "listener.name.internal.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=(.*?),.*$/$1/,DEFAULT",
        }
    return {
        "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": SCRAM_JAAS.format(
            "broker", password
        ),
    }


class SecureCluster:
    def __init__(self, base: Path, zk_connect: str, certs: Certificates,
                 passwords: dict[int, str], inter_broker: str) -> None:  # fmt: skip
        self.certs = certs
        self.inter_broker = inter_broker
        self.brokers: dict[int, BrokerProcess] = {}
        self.internal_ports: dict[int, int] = {}
        for i in (1, 2, 3):
            client_port = free_port()
            internal_port = self.internal_ports[i] = free_port()
            self.brokers[i] = BrokerProcess(
                base / f"b{i}",
                port=client_port,
                overrides={
                    "zookeeper.connect": zk_connect,
                    "zookeeper.session.timeout.ms": "6000",
                    "listeners": f"CLIENT://127.0.0.1:{client_port},"
                    f"INTERNAL://127.0.0.1:{internal_port}",
                    "inter.broker.listener.name": "INTERNAL",
                    "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                    **inter_broker_settings(inter_broker, passwords[i]),
                    "ssl.keystore.location": str(certs.server),
                    "ssl.truststore.location": str(certs.ca),
                    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                    "super.users": "User:broker;User:localhost;User:admin",
                    "replica.lag.time.max.ms": "3000",
                    "default.replication.factor": "3",
                },
                extra_args=["--node-id", str(i)],
            )

    def client_config(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.brokers[1].bootstrap,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.certs.ca),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "admin",
            "sasl.password": ADMIN_PASSWORD,
        }

    def admin(self) -> AdminClient:
        return AdminClient(self.client_config())

    def partitions(self, topic: str) -> dict[int, Any]:
        md = self.admin().list_topics(topic, timeout=10)
        return dict(md.topics[topic].partitions)

    def segment_sizes(self, topic: str, partition: int) -> list[int]:
        sizes = []
        for broker in self.brokers.values():
            segment = broker.log_dirs[0] / f"{topic}-{partition}" / f"{0:020d}.log"
            sizes.append(segment.stat().st_size if segment.exists() else -1)
        return sizes


@contextmanager
def secure_cluster(base: Path, zk_connect: str, passwords: dict[int, str] | None = None,
                   inter_broker: str = "SASL_SSL") -> Iterator[SecureCluster]:  # fmt: skip
    add_user(zk_connect, "broker", BROKER_PASSWORD)
    add_user(zk_connect, "admin", ADMIN_PASSWORD)
    certs = make_certificates(base / "certs")
    passwords = passwords or dict.fromkeys((1, 2, 3), BROKER_PASSWORD)
    cluster = SecureCluster(base, zk_connect, certs, passwords, inter_broker)
    try:
        for broker in cluster.brokers.values():
            broker.start(timeout=45)
        admin = cluster.admin()
        wait_until(
            lambda: len(admin.list_topics(timeout=10).brokers) == 3,
            30.0,
            "three brokers",
            retry_on=(confluent_kafka.KafkaException,),
        )
        yield cluster
    finally:
        for broker in cluster.brokers.values():
            if broker.alive():
                broker.stop(timeout=20)


def create_topic(cluster: SecureCluster, partitions: int) -> str:
    topic = f"secure-{uuid.uuid4().hex[:6]}"
    admin = cluster.admin()  # kept alive: a collected client cancels its futures
    futures = admin.create_topics(
        [NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2"})]
    )
    futures[topic].result(30)
    wait_until(
        lambda: (
            len(cluster.partitions(topic)) == partitions
            and all(p.leader >= 0 for p in cluster.partitions(topic).values())
        ),
        30.0,
        f"{topic}'s leaders",
        retry_on=(confluent_kafka.KafkaException,),
    )
    return topic


def produce_all(cluster: SecureCluster, topic: str, count: int) -> None:
    producer = confluent_kafka.Producer(
        {**cluster.client_config(), "acks": "all", "enable.idempotence": True}
    )
    failures: list[Any] = []
    for i in range(count):
        producer.produce(
            topic, value=b"v%d" % i, key=b"k%d" % (i % 7),
            on_delivery=lambda err, _msg: failures.append(err) if err else None,
        )  # fmt: skip
    assert producer.flush(60) == 0
    assert failures == []


def consume_all(cluster: SecureCluster, topic: str, count: int) -> list[bytes]:
    return consume(cluster.client_config(), topic, count, timeout=60)


@pytest.mark.parametrize("inter_broker", ["SASL_SSL", "SSL"])
def test_brokers_replicate_over_tls_with_an_authorizer(
    tmp_path: Path, zk_connect: str, inter_broker: str
) -> None:
    """SASL_SSL: the followers log in as User:broker; SSL: the leaders require a client
    certificate and the followers' (CN=localhost) maps to User:localhost."""
    login = "as User:broker" if inter_broker == "SASL_SSL" else "principal User:localhost"
    with secure_cluster(tmp_path, zk_connect, inter_broker=inter_broker) as cluster:
        topic = create_topic(cluster, 3)
        produce_all(cluster, topic, 600)
        got = consume_all(cluster, topic, 600)
        assert sorted(got) == sorted(b"v%d" % i for i in range(600))

        # Clients are told each broker's CLIENT endpoint, not its INTERNAL one.
        brokers = cluster.admin().list_topics(timeout=10).brokers
        assert {b.port for b in brokers.values()} == {b.port for b in cluster.brokers.values()}

        wait_until(
            lambda: all(sorted(p.isrs) == [1, 2, 3] for p in cluster.partitions(topic).values()),
            30.0,
            "every partition's ISR to be all three brokers",
            retry_on=(confluent_kafka.KafkaException,),
        )
        # The followers' copies are the leader's, byte for byte: the data crossed SASL_SSL.
        for partition in range(3):
            sizes = wait_until(
                lambda partition=partition: (
                    (s := cluster.segment_sizes(topic, partition))
                    and len(set(s)) == 1
                    and s[0] > 0
                    and s
                ),
                30.0,
                f"partition {partition}'s replicas to match",
                retry_on=(confluent_kafka.KafkaException,),
            )
            assert sizes[0] > 0
        for i, broker in cluster.brokers.items():
            assert broker.alive(), f"broker {i} died:\n{broker.output_tail(20)}"
        # The leaders saw the followers log in on their INTERNAL listener.
        for i, port in cluster.internal_ports.items():
            if any(p.leader == i for p in cluster.partitions(topic).values()):
                logins = [
                    line for line in cluster.brokers[i].output(limit=50_000_000).splitlines()
                    if f" 127.0.0.1:{port}-" in line and ("authenticated on" in line
                                                          or "certificate principal" in line)
                ]  # fmt: skip
                assert logins and all(line.endswith(login) for line in logins)
        # An unknown SCRAM user gets the same decoy salt from every broker (the secret is the
        # cluster's, in ZooKeeper), as a real user's stored salt would be (issue 26).
        salts = {_decoy_salt(broker, cluster.certs) for broker in cluster.brokers.values()}
        assert len(salts) == 1


def _decoy_salt(broker: BrokerProcess, certs: Certificates) -> str:
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.check_hostname = False
    with context.wrap_socket(
        socket.create_connection(("127.0.0.1", broker.port), timeout=15)
    ) as sock:
        assert _call(sock, ApiKey.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-512").error_code == 0
        first = _call(sock, ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"n,,n=mallory,r=nonce")
    assert first.error_code == 0, first.error_message
    return dict(item.split("=", 1) for item in first.auth_bytes.decode().split(","))["s"]


def test_a_wrong_inter_broker_password_keeps_the_follower_out(
    tmp_path: Path, zk_connect: str
) -> None:
    passwords = {1: BROKER_PASSWORD, 2: BROKER_PASSWORD, 3: "not-the-password"}
    with secure_cluster(tmp_path, zk_connect, passwords) as cluster:
        topic = create_topic(cluster, 3)
        produce_all(cluster, topic, 100)  # acks=all goes on once broker 3 leaves the ISR

        def follower_3_out() -> dict[int, Any] | None:
            parts = cluster.partitions(topic)
            followed = {n: p for n, p in parts.items() if p.leader != 3}
            return followed if all(3 not in p.isrs for p in followed.values()) else None

        followed = wait_until(
            follower_3_out,
            30.0,
            "broker 3 to leave the ISRs it cannot fetch for",
            retry_on=(confluent_kafka.KafkaException,),
        )
        assert followed, "broker 3 leads every partition: nothing to check"
        for p in followed.values():
            assert sorted(p.isrs) == sorted(r for r in p.replicas if r != 3)
        # Partitions broker 3 leads replicate: its own listener takes the others' logins.
        for p in cluster.partitions(topic).values():
            if p.leader == 3:
                assert sorted(p.isrs) == [1, 2, 3]
        assert sorted(consume_all(cluster, topic, 100)) == sorted(b"v%d" % i for i in range(100))

        log3 = cluster.brokers[3].output(limit=50_000_000)
        assert "SASL authentication (SCRAM-SHA-512) as broker to SASL_SSL://127.0.0.1:" in log3
        assert "not-the-password" not in log3
        leaders_logs = cluster.brokers[1].output(limit=50_000_000) + cluster.brokers[2].output(
            limit=50_000_000
        )
        assert "failed authentication from" in leaders_logs
        for i, broker in cluster.brokers.items():
            assert broker.alive(), f"broker {i} died:\n{broker.output_tail(20)}"
        followed_again = follower_3_out()
        assert followed_again is not None  # still out: a failed login never rejoins the ISR
