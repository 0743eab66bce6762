"""Listeners, TLS and SASL with real clients: one `logkeel serve` process with a PLAINTEXT,
SSL, SASL_PLAINTEXT, SASL_SSL and a mutual-TLS listener (certificates made by the test), and
confluent-kafka producing and consuming through them (kafka-python, aiokafka and kcat:
test_security_clients.py).
Every failed attempt (wrong password, unknown user, untrusted certificate, plaintext on a TLS
port, skipping or garbling authentication) must fail clearly while the broker keeps serving."""

from __future__ import annotations

import json
import socket
import ssl
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from cryptography import x509
from kio.schema.errors import ErrorCode

from logkeel.server.protocol import ApiKey, decode_response, encode_request, request_schema
from logkeel.server.protocol import response_schema as response_schema_of
from logkeel.testing.broker_process import LogkeelBroker, free_port
from logkeel.testing.certs import Certificates, make_certificates, renew_server_certificate
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(240)

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_alice="alice-secret" user_admin="admin-secret";'
)
BOB_PASSWORD = "bob-scram-secret"
LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", "MTLS")


@dataclass
class SecureBroker:
    broker: LogkeelBroker
    ports: dict[str, int]
    certs: Certificates

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    work = tmp_path_factory.mktemp("secure")
    certs = make_certificates(work / "certs")
    ports = {name: free_port() for name in LISTENERS}
    overrides = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL",
        "ssl.keystore.location": str(certs.server),
        "ssl.truststore.location": str(certs.ca),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
    }
    broker = LogkeelBroker(work, port=ports["PLAINTEXT"], overrides=overrides).start()
    try:
        users = subprocess.run(
            [sys.executable, "-m", "logkeel", "users", "add", "bob", "--password", BOB_PASSWORD,
             "--bootstrap-server", f"127.0.0.1:{ports['PLAINTEXT']}"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert users.returncode == 0, users.stderr
        yield SecureBroker(broker, ports, certs)
    finally:
        broker.stop()


def client_config(secure: SecureBroker, listener: str, mechanism: str | None = None,
                  user: str = "alice", password: str = "alice-secret") -> dict[str, Any]:  # fmt: skip
    conf: dict[str, Any] = {"bootstrap.servers": secure.bootstrap(listener)}
    protocol = "SSL" if listener == "MTLS" else listener
    conf["security.protocol"] = protocol
    if "SSL" in protocol:
        conf["ssl.ca.location"] = str(secure.certs.ca)
    if listener == "MTLS":
        conf["ssl.certificate.location"] = str(secure.certs.client_cert)
        conf["ssl.key.location"] = str(secure.certs.client_key)
    if mechanism is not None:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    return conf


def produce_and_consume(conf: dict[str, Any], count: int = 20) -> list[bytes]:
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    producer = confluent_kafka.Producer(conf)
    for i in range(count):
        producer.produce(topic, value=b"m%d" % i)
    assert producer.flush(30) == 0
    return consume(conf, topic, count)


def consume(conf: dict[str, Any], topic: str, count: int, timeout: float = 30) -> list[bytes]:
    """Up to ``count`` values of ``topic`` from the start, read within ``timeout`` seconds."""
    consumer = confluent_kafka.Consumer(
        {**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize(
    ("listener", "mechanism", "user", "password"),
    [
        ("SSL", None, "", ""),
        ("MTLS", None, "", ""),
        ("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256", "bob", BOB_PASSWORD),
        ("SASL_PLAINTEXT", "SCRAM-SHA-512", "bob", BOB_PASSWORD),
        ("SASL_SSL", "SCRAM-SHA-512", "bob", BOB_PASSWORD),
        ("SASL_SSL", "PLAIN", "alice", "alice-secret"),
    ],
)
def test_confluent_produces_and_consumes(
    secure: SecureBroker, listener: str, mechanism: str | None, user: str, password: str
) -> None:
    conf = client_config(secure, listener, mechanism, user, password)
    assert produce_and_consume(conf) == [b"m%d" % i for i in range(20)]


def test_metadata_answers_the_endpoint_of_the_listener_used(secure: SecureBroker) -> None:
    for listener in ("PLAINTEXT", "SSL", "SASL_SSL"):
        conf = client_config(secure, listener, "PLAIN" if "SASL" in listener else None)
        brokers = AdminClient(conf).list_topics(timeout=15).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [
            ("127.0.0.1", secure.ports[listener])
        ]


def test_mutual_tls_records_the_certificate_subject(secure: SecureBroker) -> None:
    AdminClient(client_config(secure, "MTLS")).list_topics(timeout=15)
    wait_until(
        lambda: "principal User:CN=client,OU=apps,O=logkeel" in secure.broker.output(),
        10,
        "the certificate's subject in the broker's log",
    )


def _auth_failure(conf: dict[str, Any]) -> str:
    """What a client that cannot get in is told: its error callback's reports and the
    exception of the request it tried."""
    errors: list[str] = []
    quiet = {
        "socket.connection.setup.timeout.ms": 5000,
        "reconnect.backoff.ms": 1000,
        "log_level": 0,
        "error_cb": lambda err: errors.append(str(err)),
    }
    admin = AdminClient({**conf, **quiet})
    with pytest.raises(confluent_kafka.KafkaException) as err:
        admin.list_topics(timeout=6)
    admin.poll(1)  # the error callback runs here
    return " | ".join([*errors, str(err.value)])


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [
        ("PLAIN", "alice", "wrong"),
        ("PLAIN", "mallory", "alice-secret"),
        ("SCRAM-SHA-256", "bob", "wrong"),
        ("SCRAM-SHA-512", "mallory", BOB_PASSWORD),
    ],
)
def test_bad_credentials_fail_and_the_broker_keeps_serving(
    secure: SecureBroker, mechanism: str, user: str, password: str
) -> None:
    conf = client_config(secure, "SASL_PLAINTEXT", mechanism, user, password)
    message = _auth_failure(conf)
    assert "SASL authentication error: Authentication failed" in message, message
    assert password not in secure.broker.output()
    assert produce_and_consume(client_config(secure, "SASL_PLAINTEXT", "PLAIN"), 3) == [
        b"m0", b"m1", b"m2"
    ]  # fmt: skip


def test_untrusted_or_missing_client_certificate_is_refused(secure: SecureBroker) -> None:
    untrusted = {
        **client_config(secure, "MTLS"),
        "ssl.certificate.location": str(secure.certs.untrusted_cert),
        "ssl.key.location": str(secure.certs.untrusted_key),
    }
    no_certificate = client_config(secure, "SSL") | {"bootstrap.servers": secure.bootstrap("MTLS")}
    for conf in (untrusted, no_certificate):
        assert "Broker transport failure" in _auth_failure(conf)
    # Under TLS 1.3 the client finishes its side of the handshake first: the refusal shows
    # as the connection ending before any Kafka answer.
    ctx = ssl.create_default_context(cafile=str(secure.certs.ca))
    ctx.load_cert_chain(secure.certs.untrusted_cert, secure.certs.untrusted_key)
    raw = socket.create_connection(("127.0.0.1", secure.ports["MTLS"]), timeout=10)
    with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        try:
            tls.sendall(_frame(ApiKey.API_VERSIONS, 0))
            answer = tls.recv(4)
        except (ssl.SSLError, ConnectionResetError):
            answer = b""
        assert answer == b""
    assert "CN=intruder" not in secure.broker.output()
    assert produce_and_consume(client_config(secure, "MTLS"), 2) == [b"m0", b"m1"]


def _frame(api: ApiKey, version: int, **fields: Any) -> bytes:
    request_type = request_schema(api, version)
    assert request_type is not None
    return encode_request(request_type(**fields), 7, "raw-test")


def _read_frame(sock: socket.socket | ssl.SSLSocket) -> bytes | None:
    header = b""
    while len(header) < 4:
        chunk = sock.recv(4 - len(header))
        if not chunk:
            return None
        header += chunk
    (size,) = struct.unpack(">i", header)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _call(sock: socket.socket | ssl.SSLSocket, api: ApiKey, version: int, **fields: Any) -> Any:
    sock.sendall(_frame(api, version, **fields))
    answer = _read_frame(sock)
    assert answer is not None, f"{api.name} v{version}: connection closed"
    schema = response_schema_of(api, version)
    assert schema is not None
    return decode_response(schema, answer)[1]


def _login(
    sock: socket.socket | ssl.SSLSocket, user: str = "alice", password: str = "alice-secret"
) -> Any:
    shake = _call(sock, ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")
    assert shake.error_code == ErrorCode.none
    return _call(sock, ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=f"\0{user}\0{password}".encode())


def _closed(sock: socket.socket | ssl.SSLSocket) -> bool:
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True


def test_plaintext_client_on_a_tls_port_is_dropped(secure: SecureBroker) -> None:
    with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10) as sock:
        sock.sendall(_frame(ApiKey.API_VERSIONS, 0))
        assert _read_frame(sock) is None  # no Kafka answer: the TLS handshake failed
    assert AdminClient(client_config(secure, "SSL")).list_topics(timeout=15).brokers


def test_requests_before_authentication_close_the_connection(secure: SecureBroker) -> None:
    metadata = _frame(ApiKey.METADATA, 4, topics=None, allow_auto_topic_creation=False)
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=10) as s:
        s.sendall(metadata)
        assert _closed(s)
    assert "before SASL authentication" in secure.broker.output()


def test_garbage_during_the_sasl_exchange_fails_cleanly(secure: SecureBroker) -> None:
    handshake_type = response_schema_of(ApiKey.SASL_HANDSHAKE, 1)
    auth_type = response_schema_of(ApiKey.SASL_AUTHENTICATE, 2)
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=10) as s:
        s.sendall(_frame(ApiKey.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-256"))
        answer = _read_frame(s)
        assert answer is not None
        assert decode_response(handshake_type, answer)[1].error_code == ErrorCode.none
        s.sendall(_frame(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\xff\x00garbage"))
        answer = _read_frame(s)
        assert answer is not None
        auth = decode_response(auth_type, answer)[1]
        assert auth.error_code == ErrorCode.sasl_authentication_failed
        assert _closed(s)
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=10) as s:
        s.sendall(_frame(ApiKey.SASL_HANDSHAKE, 1, mechanism="GSSAPI"))
        answer = _read_frame(s)
        assert answer is not None
        shake = decode_response(handshake_type, answer)[1]
        assert shake.error_code == ErrorCode.unsupported_sasl_mechanism
        assert set(shake.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert secure.broker.alive()


def test_sasl_handshake_v0_then_raw_tokens(secure: SecureBroker) -> None:
    """Pre-KIP-152 clients: after SaslHandshake v0 the tokens are bare size-prefixed frames."""
    handshake_type = response_schema_of(ApiKey.SASL_HANDSHAKE, 0)
    metadata_type = response_schema_of(ApiKey.METADATA, 4)
    port = secure.ports["SASL_PLAINTEXT"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(_frame(ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN"))
        answer = _read_frame(s)
        assert answer is not None
        assert decode_response(handshake_type, answer)[1].error_code == ErrorCode.none
        token = b"\0alice\0alice-secret"
        s.sendall(struct.pack(">i", len(token)) + token)
        assert _read_frame(s) == b""  # PLAIN's empty server token
        s.sendall(_frame(ApiKey.METADATA, 4, topics=None, allow_auto_topic_creation=False))
        answer = _read_frame(s)
        assert answer is not None
        brokers = decode_response(metadata_type, answer)[1].brokers
        assert [b.port for b in brokers] == [port]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(_frame(ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN"))
        assert _read_frame(s) is not None
        token = b"\0alice\0wrong"
        s.sendall(struct.pack(">i", len(token)) + token)
        assert _closed(s)


def test_scram_users_are_managed_and_stored_salted(secure: SecureBroker) -> None:
    admin = AdminClient({"bootstrap.servers": secure.bootstrap("PLAINTEXT")})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("carol", info, b"carol-secret")]
    )
    for f in futures.values():
        f.result(30)
    described = {
        user: f.result(30)
        for user, f in admin.describe_user_scram_credentials(["carol", "bob"]).items()
    }
    assert described["carol"].scram_credential_infos[0].iterations == 8192
    assert {i.mechanism for i in described["bob"].scram_credential_infos} == {
        ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
    }  # fmt: skip
    conf = client_config(secure, "SASL_SSL", "SCRAM-SHA-512", "carol", "carol-secret")
    assert produce_and_consume(conf, 2) == [b"m0", b"m1"]

    stored = (secure.broker.workdir / "logs" / "logkeel-metadata.json").read_text()
    assert "carol-secret" not in stored and BOB_PASSWORD not in stored
    doc = json.loads(stored)["scram_credentials"]
    assert set(doc["carol"]["SCRAM-SHA-512"]) == {"salt", "iterations", "stored_key", "server_key"}

    cli = [sys.executable, "-m", "logkeel", "users"]
    bootstrap = ["--bootstrap-server", secure.bootstrap("PLAINTEXT")]
    listing = subprocess.run([*cli, "list", *bootstrap], capture_output=True, text=True, timeout=60)
    assert "carol: SCRAM-SHA-512 (iterations 8192)" in listing.stdout, listing.stderr
    deleted = subprocess.run(
        [*cli, "delete", "carol", *bootstrap], capture_output=True, text=True, timeout=60
    )
    assert deleted.returncode == 0, deleted.stderr
    assert "Authentication failed" in _auth_failure(conf)
    missing = subprocess.run(
        [*cli, "delete", "carol", *bootstrap], capture_output=True, text=True, timeout=60
    )
    assert missing.returncode == 1 and "does not exist" in missing.stderr


@pytest.mark.parametrize("listener", ["SASL_SSL", "SASL_PLAINTEXT", "SSL"])
def test_commands_reach_tls_and_sasl_listeners_with_a_command_config(
    secure: SecureBroker, tmp_path: Path, listener: str
) -> None:
    """`logkeel users` (and `logkeel acls`, `logkeel cluster status`, `logkeel elect`) take
    Kafka client properties, as kafka-configs.sh --command-config does: no PLAINTEXT listener
    needed."""
    jaas = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="bob" password="{BOB_PASSWORD}";')  # fmt: skip
    props = {"security.protocol": listener, "ssl.truststore.location": str(secure.certs.ca),
             "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": jaas}  # fmt: skip
    config = tmp_path / "client.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    command = [sys.executable, "-m", "logkeel", "users", "list",
               "--bootstrap-server", secure.bootstrap(listener), "--command-config", str(config)]  # fmt: skip
    listing = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0 and "bob: " in listing.stdout, listing.stderr
    status = subprocess.run(
        [sys.executable, "-m", "logkeel", "cluster", "status", "--json",
         "--bootstrap-server", secure.bootstrap(listener), "--command-config", str(config)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert status.returncode == 0, status.stderr
    [broker] = json.loads(status.stdout)["brokers"]
    assert broker["log_dirs_online"] and not broker["log_dirs_offline"]
    elect = [sys.executable, "-m", "logkeel", "elect",
             "--bootstrap-server", secure.bootstrap(listener), "--command-config", str(config)]  # fmt: skip
    preferred = subprocess.run([*elect, "--preferred"], capture_output=True, text=True, timeout=60)
    assert preferred.returncode == 0, preferred.stderr  # a single node: nothing to elect
    # --replica asks the broker for the cluster's zookeeper.connect: the broker answered.
    designated = subprocess.run(
        [*elect, "--topic", "t", "--partition", "0", "--replica", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert designated.returncode == 1, designated.stderr
    assert "is not a cluster member" in designated.stderr, designated.stderr
    if listener.startswith("SASL_"):
        config.write_text(config.read_text().replace(BOB_PASSWORD, "wrong"))
        refused = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1
        assert "SASL authentication (SCRAM-SHA-512) as bob" in refused.stderr, refused.stderr
        assert "wrong" not in refused.stderr


def test_tls_listener_without_a_key_refuses_to_start(tmp_path: Path) -> None:
    port = free_port()
    result = subprocess.run(
        [sys.executable, "-m", "logkeel", "serve", "--log-dirs", str(tmp_path / "logs"),
         "--override", f"listeners=SSL://127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "ssl.keystore.location" in result.stderr


def _served_serial(secure: SecureBroker) -> int:
    ctx = ssl.create_default_context(cafile=str(secure.certs.ca))
    raw = socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10)
    with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


def test_renewed_certificate_is_served_without_restart(secure: SecureBroker) -> None:
    # Last in the module: later tests would see the renewed certificate (same CA, so fine).
    before = _served_serial(secure)
    renewed = renew_server_certificate(secure.certs)
    assert renewed != before
    wait_until(
        lambda: _served_serial(secure) == renewed,
        30,
        "the renewed certificate served",
        interval=0.5,
    )
    assert "reloaded its TLS key and trust stores" in secure.broker.output()
    assert produce_and_consume(client_config(secure, "SSL"), 2) == [b"m0", b"m1"]
