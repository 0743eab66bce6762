"""Attacks on a broker secured as a careful operator would: a SASL_SSL listener (SCRAM-SHA-256,
SCRAM-SHA-512 and PLAIN), an SSL listener that requires client certificates, the ACL authorizer
deny-by-default with ``super.users=User:admin``. admin (PLAIN) sets up SCRAM users alice and
carol and gives alice ALL on topics ``alice-*``, her group and her transactional id; carol has
no ACL. Everything here is sent from outside, as carol, as alice overstepping, or anonymously
before logging in, with raw kio frames and real clients (confluent-kafka, kafka-python,
aiokafka). Each test asserts the refusal that holds; an attack that succeeds is an
``xfail(strict=True)`` test naming the hole.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime as dt
import socket
import ssl
import struct
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
)
from kio.static.primitive import Records

from logkeel.cluster.scram import ScramClientExchange
from logkeel.records.builder import build_batch
from logkeel.server.protocol import (
    decode_response,
    encode_request,
    request_schema,
    response_schema,
)
from logkeel.testing.certs import Certificates, make_certificates

from ..brokerproc import BrokerProcess, free_port

SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS = 17, 36, 18
AUTH_ERRORS = {
    ErrorCode.topic_authorization_failed,
    ErrorCode.group_authorization_failed,
    ErrorCode.cluster_authorization_failed,
    ErrorCode.transactional_id_authorization_failed,
}
SHORT_SESSION_MS = 1500
ADMIN_TOPIC, ADMIN_GROUP = "admin-only", "admin-group"
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_carol="carol-plain";'
)
ALICE_TOPIC, ALICE_HIDDEN, ALICE_GROUP, ALICE_TXN = (
    "alice-orders",
    "alice-secret-plans",
    "alice-group",
    "alice-txn",
)


# -- the broker ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Secured:
    broker: BrokerProcess
    certs: Certificates
    sasl_port: int
    ssl_port: int
    short_port: int  # SASL_PLAINTEXT with short sessions
    topic_ids: dict[str, uuid.UUID]

    def sasl_conf(
        self, user: str, password: str, mechanism: str = "SCRAM-SHA-512"
    ) -> dict[str, Any]:
        return {
            "bootstrap.servers": f"127.0.0.1:{self.sasl_port}",
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.certs.ca),
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
        }

    def admin(self) -> AdminClient:
        return AdminClient(self.sasl_conf("admin", "admin-secret", "PLAIN"))

    def tls(self, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.certs.ca))
        if cert is not None:
            ctx.load_cert_chain(str(cert), str(key))
        return ctx


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    work = tmp_path_factory.mktemp("secured")
    certs = make_certificates(work / "certs")
    sasl_port, ssl_port, short_port = free_port(), free_port(), free_port()
    overrides = {
        # SHORT: SASL sessions of 1.5 s, to see an expired one refused.
        "listeners": f"SASL_SSL://127.0.0.1:{sasl_port},SSL://127.0.0.1:{ssl_port},"
        f"SHORT://127.0.0.1:{short_port}",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,SSL:SSL,SHORT:SASL_PLAINTEXT",
        "listener.name.short.connections.max.reauth.ms": str(SHORT_SESSION_MS),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.server),
        "ssl.truststore.location": str(certs.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=(.*?),.*$/$1/,DEFAULT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.connections.max.reauth.ms": "60000",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": "User:admin",
        "auto.create.topics.enable": "true",
    }
    with BrokerProcess(work, port=sasl_port, overrides=overrides) as broker:
        s = Secured(broker, certs, sasl_port, ssl_port, short_port, {})
        admin = s.admin()
        upserts = [
            UserScramCredentialUpsertion(
                user, ScramCredentialInfo(mech, 4096), f"{user}-secret".encode()
            )
            for user in ("alice", "carol", "dave", "erin")
            for mech in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
        ]
        for f in admin.alter_user_scram_credentials(upserts).values():
            f.result(15)
        topics = [
            NewTopic(ALICE_TOPIC, 2, 1),
            NewTopic(ALICE_HIDDEN, 1, 1),
            NewTopic(ADMIN_TOPIC, 1, 1),
        ]
        for f in admin.create_topics(topics).values():
            f.result(15)
        allow = AclPermissionType.ALLOW
        acls = [
            AclBinding(ResourceType.TOPIC, "alice-", ResourcePatternType.PREFIXED,
                       "User:alice", "*", AclOperation.ALL, allow),
            AclBinding(ResourceType.GROUP, ALICE_GROUP, ResourcePatternType.LITERAL,
                       "User:alice", "*", AclOperation.ALL, allow),
            AclBinding(ResourceType.TRANSACTIONAL_ID, ALICE_TXN, ResourcePatternType.LITERAL,
                       "User:alice", "*", AclOperation.ALL, allow),
            # dave: WRITE on dave-* topics, every one of them denied again by a wider prefix.
            AclBinding(ResourceType.TOPIC, "dave-", ResourcePatternType.PREFIXED,
                       "User:dave", "*", AclOperation.WRITE, allow),
            AclBinding(ResourceType.TOPIC, "dave", ResourcePatternType.PREFIXED,
                       "User:dave", "*", AclOperation.WRITE, AclPermissionType.DENY),
            # erin: WRITE on her one topic, allowed and denied by the same LITERAL pattern.
            AclBinding(ResourceType.TOPIC, "erin-t", ResourcePatternType.LITERAL,
                       "User:erin", "*", AclOperation.WRITE, allow),
            AclBinding(ResourceType.TOPIC, "erin-t", ResourcePatternType.LITERAL,
                       "User:erin", "*", AclOperation.WRITE, AclPermissionType.DENY),
        ]  # fmt: skip
        for f in admin.create_acls(acls).values():
            f.result(15)
        alice = s.sasl_conf("alice", "alice-secret")
        producer = Producer(alice)
        producer.produce(ALICE_TOPIC, b"alice-private-1", partition=0)
        assert producer.flush(15) == 0
        consumer = Consumer({**alice, "group.id": ALICE_GROUP, "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition(ALICE_TOPIC, 0, 1)], asynchronous=False)
        consumer.close()
        # admin's offsets of a topic alice may not see, in her group and in one of admin's.
        admin_conf = s.sasl_conf("admin", "admin-secret", "PLAIN")
        for group in (ALICE_GROUP, ADMIN_GROUP):
            consumer = Consumer({**admin_conf, "group.id": group, "enable.auto.commit": False})
            consumer.commit(offsets=[TopicPartition(ADMIN_TOPIC, 0, 7)], asynchronous=False)
            consumer.close()
        with Raw.login(s, "admin", "admin-secret", "PLAIN") as raw:
            meta = raw.call(_metadata(12, None))
            s.topic_ids.update({t.name: t.topic_id for t in meta.topics})
        yield s


# -- raw frames ----------------------------------------------------------------------------------


class Raw:
    """One TLS connection speaking kio-encoded frames."""

    def __init__(self, port: int, ctx: ssl.SSLContext | None) -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock = sock if ctx is None else ctx.wrap_socket(sock, server_hostname="localhost")
        self.correlation = 0

    @classmethod
    def login(cls, s: Secured, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> Raw:
        raw = cls(s.sasl_port, s.tls())
        answer = raw.authenticate(mechanism, user, password)
        assert answer is not None and answer.error_code == ErrorCode.none, answer
        return raw

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, request: Any) -> None:
        self.correlation += 1
        self.sock.sendall(encode_request(request, self.correlation, "attacker"))

    def recv(self, request: Any) -> Any:
        """The response to ``request``, or None when the broker closed the connection."""
        prefix = self.exact(4)
        if prefix is None:
            return None
        body = self.exact(struct.unpack(">i", prefix)[0])
        if body is None:
            return None
        schema = response_schema(request.__api_key__, request.__version__)
        return decode_response(schema, body)[1]

    def call(self, request: Any) -> Any:
        self.send(request)
        return self.recv(request)

    def exact(self, n: int) -> bytes | None:
        out = b""
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except (OSError, ssl.SSLError):
                return None
            if not chunk:
                return None
            out += chunk
        return out

    def handshake(self, mechanism: str, version: int = 1) -> Any:
        return self.call(req(SASL_HANDSHAKE, version, mechanism=mechanism))

    def token(self, data: bytes) -> Any:
        return self.call(req(SASL_AUTHENTICATE, 2, auth_bytes=data))

    def authenticate(self, mechanism: str, user: str, password: str) -> Any:
        answer = self.handshake(mechanism)
        if answer is None or answer.error_code != ErrorCode.none:
            return answer
        if mechanism == "PLAIN":
            return self.token(b"\0" + user.encode() + b"\0" + password.encode())
        exchange = ScramClientExchange(mechanism, user, password)
        answer = self.token(exchange.first())
        if answer is None or answer.error_code != ErrorCode.none:
            return answer
        return self.token(exchange.step(answer.auth_bytes))


def req(api_key: int, version: int, **values: Any) -> Any:
    schema = request_schema(api_key, version)
    assert schema is not None
    return schema(**values)


def _metadata(version: int, topics: Any, auto_create: bool = False) -> Any:
    schema = request_schema(3, version)
    assert schema is not None
    values = {
        "topics": topics,
        "allow_auto_topic_creation": auto_create,
        "include_topic_authorized_operations": True,
        "include_cluster_authorized_operations": True,
    }
    names = {f.name for f in dataclasses.fields(schema)}
    return schema(**{k: v for k, v in values.items() if k in names})


def _metadata_topic(version: int, name: str | None, topic_id: uuid.UUID | None = None) -> Any:
    module = __import__(f"kio.schema.metadata.v{version}.request", fromlist=["x"])
    return module.MetadataRequestTopic(topic_id=topic_id, name=name)


def _leaves(obj: Any, path: str = "") -> list[tuple[str, Any]]:
    if dataclasses.is_dataclass(obj):
        out: list[tuple[str, Any]] = []
        for f in dataclasses.fields(obj):
            out += _leaves(getattr(obj, f.name), f"{path}.{f.name}")
        return out
    if isinstance(obj, tuple):
        return [leaf for i, x in enumerate(obj) for leaf in _leaves(x, f"{path}[{i}]")]
    return [(path, obj)]


def _codes(response: Any) -> set[ErrorCode]:
    return {v for p, v in _leaves(response) if p.endswith("error_code")}


def _admin_topics(s: Secured) -> set[str]:
    with Raw.login(s, "admin", "admin-secret", "PLAIN") as raw:
        return {t.name for t in raw.call(_metadata(12, None)).topics}


def _alice_log(s: Secured) -> bytes:
    """The raw record batches of alice's topic, both partitions, fetched as alice."""
    fetch = __import__("kio.schema.fetch.v12.request", fromlist=["x"])
    partitions = tuple(
        fetch.FetchPartition(
            partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20,
        )
        for p in (0, 1)
    )  # fmt: skip
    with Raw.login(s, "alice", "alice-secret") as raw:
        answer = raw.call(fetch.FetchRequest(
            cluster_id=None, replica_id=-1, max_wait=timedelta(milliseconds=10), min_bytes=0,
            max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
            topics=(fetch.FetchTopic(topic=ALICE_TOPIC, partitions=partitions),),
            forgotten_topics_data=(), rack_id="",
        ))  # fmt: skip
    assert _codes(answer) == {ErrorCode.none}
    log = b"".join(bytes(p.records or b"") for t in answer.responses for p in t.partitions)
    assert b"alice-private-1" in log  # records are uncompressed: their values show as bytes
    return log


# -- before authentication -----------------------------------------------------------------------


def _advertised(s: Secured) -> list[tuple[int, int, int]]:
    with Raw(s.sasl_port, s.tls()) as raw:
        answer = raw.call(
            req(API_VERSIONS, 3, client_software_name="a", client_software_version="1")
        )
    return [(int(k.api_key), int(k.min_version), int(k.max_version)) for k in answer.api_keys]


def test_every_api_before_sasl_login_closes_the_connection(secured: Secured) -> None:
    served = []
    for key, low, top in _advertised(secured):
        if key in (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE):
            continue
        for version in sorted({low, top}):
            with Raw(secured.sasl_port, secured.tls()) as raw:
                request = _attack_request(key, version, secured)
                if raw.call(request) is not None:
                    served.append((key, version))
    assert served == []


def test_a_large_frame_before_sasl_login_closes_the_connection(secured: Secured) -> None:
    with Raw(secured.sasl_port, secured.tls()) as raw:
        raw.sock.sendall(struct.pack(">i", 1_000_000) + b"\0" * 65536)
        raw.sock.settimeout(5)
        try:
            closed = raw.sock.recv(1) == b""
        except TimeoutError:
            closed = False  # still waiting for the rest of the megabyte
        except (ConnectionResetError, ssl.SSLError):
            closed = True
        assert closed


def test_sasl_authenticate_without_handshake_is_refused_and_closed(secured: Secured) -> None:
    with Raw(secured.sasl_port, secured.tls()) as raw:
        answer = raw.token(b"\0carol\0carol-plain")
        assert answer.error_code == ErrorCode.illegal_sasl_state
        assert raw.call(_metadata(12, None)) is None


# -- every API at every version as carol ---------------------------------------------------------

# Kafka lets anyone call these; what they show carol is checked below to hold nothing of alice's.
_ANSWER_ANYONE = {3, 16, 35, 60, 66}


ALICE_NAMES = (ALICE_TOPIC, ALICE_GROUP, ALICE_TXN)
ABSENT_NAMES = ("nobodys-topic", "nobodys-group", "nobodys-txn")


def _value(kind: str, field: str, s: Secured, names: tuple[str, str, str]) -> Any:
    topic, group, txn = names
    if kind == "string":
        if "group" in field or field == "key":
            return group
        if "transactional" in field:
            return txn
        return topic
    if kind == "uuid":
        return s.topic_ids[ALICE_TOPIC]
    return {
        "int8": 0, "int16": 0, "int32": -1, "int64": -1, "uint16": 0, "float64": 0.0,
        "bool": True, "bytes": b"", "records": Records(build_batch([(0, None, b"carol", ())])),
        "error_code": ErrorCode.none, "timedelta_i32": timedelta(seconds=1),
        "timedelta_i64": timedelta(seconds=1), "datetime_i64": datetime.fromtimestamp(0, UTC),
    }[kind]  # fmt: skip


def _build(entity: type[Any], s: Secured, names: tuple[str, str, str]) -> Any:
    """An instance of ``entity`` naming ``names`` (topic, group, transactional id) everywhere,
    each array with one element."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(entity):
        kind = classify_field(field)
        if isinstance(kind, PrimitiveField | PrimitiveTupleField):
            one = _value(get_schema_field_type(field), field.name, s, names)
        else:
            one = _build(kind.type_, s, names)
        values[field.name] = (one,) if kind.is_array else one
    return entity(**values)


def _attack_request(
    key: int, version: int, s: Secured, names: tuple[str, str, str] = ALICE_NAMES
) -> Any:
    schema = request_schema(key, version)
    assert schema is not None
    return _build(schema, s, names)


def test_every_api_at_every_version_as_carol_is_refused(secured: Secured) -> None:
    before = _admin_topics(secured)
    unrefused, leaks = [], []
    raw: Raw | None = None
    for key, low, top in _advertised(secured):
        if key in (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE):
            continue
        for version in range(low, top + 1):
            if raw is None:
                raw = Raw.login(secured, "carol", "carol-secret")
            answer = raw.call(_attack_request(key, version, secured))
            if answer is None:
                raw.sock.close()
                raw = None
                continue  # closed: refused too
            if key in _ANSWER_ANYONE:
                shown = [
                    (p, v) for p, v in _leaves(answer)
                    if v in (ALICE_HIDDEN, ALICE_GROUP, ALICE_TXN, "__consumer_offsets")
                    or (p.endswith("partition_index") and v is not None)
                ]  # fmt: skip
                if shown:
                    leaks.append((key, version, shown))
            elif not _codes(answer) & (AUTH_ERRORS | {ErrorCode.invalid_request}):
                # INVALID_REQUEST: DeleteTopics v6 naming a topic by both name and id, as Kafka.
                unrefused.append((key, version, sorted(_codes(answer))))
    if raw is not None:
        raw.sock.close()
    assert unrefused == []
    assert leaks == []
    assert _admin_topics(secured) == before
    assert b"carol" not in _alice_log(secured)


def test_refusals_do_not_tell_whether_alices_resources_exist(secured: Secured) -> None:
    """Each API at its newest version, naming alice's topic, group and transactional id, then
    names nobody has: carol gets the same answer (names aside) either way."""
    rename = dict(zip(ABSENT_NAMES, ALICE_NAMES, strict=True))
    differ = []
    for key, _, top in _advertised(secured):
        if key in (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE):
            continue
        answers = []
        for names in (ALICE_NAMES, ABSENT_NAMES):
            with Raw.login(secured, "carol", "carol-secret") as raw:
                answer = raw.call(_attack_request(key, top, secured, names))
            leaves = None if answer is None else [
                (p, rename.get(v, v) if isinstance(v, str) else v) for p, v in _leaves(answer)
            ]  # fmt: skip
            answers.append(leaves)
        if answers[0] != answers[1]:
            differ.append((key, top, answers))
    assert differ == []


# -- topics --------------------------------------------------------------------------------------


def test_produce_acks_0_to_alices_topic_writes_nothing(secured: Secured) -> None:
    module = __import__("kio.schema.produce.v9.request", fromlist=["x"])
    batch = Records(build_batch([(0, None, b"carol-acks0", ())]))
    for acks in (0, 1, -1):
        request = module.ProduceRequest(
            transactional_id=None, acks=acks, timeout=timedelta(seconds=5),
            topic_data=(module.TopicProduceData(name=ALICE_TOPIC, partition_data=(
                module.PartitionProduceData(index=0, records=batch),)),),
        )  # fmt: skip
        with Raw.login(secured, "carol", "carol-secret") as raw:
            if acks == 0:
                raw.send(request)
                raw.sock.settimeout(2)
                assert raw.exact(1) is None  # nothing answers acks=0 (or it closed)
            else:
                codes = _codes(raw.call(request))
                assert codes == {ErrorCode.topic_authorization_failed}
    assert b"carol-acks0" not in _alice_log(secured)


@pytest.mark.parametrize(
    ("user", "transactional_id", "refusal"),
    [
        ("carol", ALICE_TXN, ErrorCode.transactional_id_authorization_failed),
        ("alice", "carol-txn", ErrorCode.transactional_id_authorization_failed),
        ("carol", None, ErrorCode.topic_authorization_failed),
    ],
)
def test_transactional_produce_needs_write_on_the_transactional_id(
    secured: Secured, user: str, transactional_id: str | None, refusal: ErrorCode
) -> None:
    module = __import__("kio.schema.produce.v9.request", fromlist=["x"])
    batch = build_batch(
        [(0, None, b"carol-txn", ())], producer_id=0, producer_epoch=0, base_sequence=0,
        is_transactional=True,
    )  # fmt: skip
    with Raw.login(secured, user, f"{user}-secret") as raw:
        answer = raw.call(module.ProduceRequest(
            transactional_id=transactional_id, acks=1, timeout=timedelta(seconds=5),
            topic_data=(module.TopicProduceData(name=ALICE_TOPIC, partition_data=(
                module.PartitionProduceData(index=0, records=Records(batch)),)),),
        ))  # fmt: skip
    assert _codes(answer) == {refusal}
    assert b"carol-txn" not in _alice_log(secured)


def test_metadata_v0_empty_list_means_every_topic_the_principal_may_see(secured: Secured) -> None:
    module = __import__("kio.schema.metadata.v0.request", fromlist=["x"])
    for user, expected in (("carol", set()), ("alice", {ALICE_TOPIC, ALICE_HIDDEN})):
        with Raw.login(secured, user, f"{user}-secret") as raw:
            answer = raw.call(module.MetadataRequest(topics=()))
        assert {t.name for t in answer.topics} == expected


def test_topic_ids_do_not_open_alices_topic(secured: Secured) -> None:
    tid = secured.topic_ids[ALICE_TOPIC]
    fetch = __import__("kio.schema.fetch.v13.request", fromlist=["x"])
    delete = __import__("kio.schema.delete_topics.v6.request", fromlist=["x"])
    with Raw.login(secured, "carol", "carol-secret") as raw:
        meta = raw.call(_metadata(12, (_metadata_topic(12, None, tid),)))
        assert [(t.name, t.error_code, t.partitions) for t in meta.topics] == [
            (None, ErrorCode.topic_authorization_failed, ())
        ]
        answer = raw.call(fetch.FetchRequest(
            cluster_id=None, replica_id=-1, max_wait=timedelta(milliseconds=10), min_bytes=0,
            max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
            topics=(fetch.FetchTopic(topic_id=tid, partitions=(fetch.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=1 << 20),)),),
            forgotten_topics_data=(), rack_id="",
        ))  # fmt: skip
        part = answer.responses[0].partitions[0]
        assert part.error_code == ErrorCode.topic_authorization_failed
        assert not part.records
        answer = raw.call(delete.DeleteTopicsRequest(
            topics=(delete.DeleteTopicState(name=None, topic_id=tid),), timeout=timedelta(seconds=5)
        ))  # fmt: skip
        assert answer.responses[0].error_code == ErrorCode.topic_authorization_failed
        assert answer.responses[0].name is None  # the name is not told
    assert ALICE_TOPIC in _admin_topics(secured)


@pytest.mark.parametrize("version", [1, 4, 9, 12])
def test_metadata_shows_carol_nothing_and_creates_nothing(secured: Secured, version: int) -> None:
    with Raw.login(secured, "carol", "carol-secret") as raw:
        assert raw.call(_metadata(version, None, auto_create=True)).topics == ()
        if version >= 1:
            assert raw.call(_metadata(version, (), auto_create=True)).topics == ()
        asked = tuple(
            _metadata_topic(version, n) if version >= 10 else _old_topic(version, n)
            for n in ("carol-auto", "alice-auto", ALICE_HIDDEN)
        )
        answer = raw.call(_metadata(version, asked, auto_create=True))
        assert {(t.name, t.error_code) for t in answer.topics} == {
            (n, ErrorCode.topic_authorization_failed)
            for n in ("carol-auto", "alice-auto", ALICE_HIDDEN)
        }
        assert all(t.partitions == () for t in answer.topics)
    assert {"carol-auto", "alice-auto"}.isdisjoint(_admin_topics(secured))


def _old_topic(version: int, name: str) -> Any:
    module = __import__(f"kio.schema.metadata.v{version}.request", fromlist=["x"])
    return module.MetadataRequestTopic(name=name)


def test_alice_cannot_fetch_as_a_follower(secured: Secured) -> None:
    fetch = __import__("kio.schema.fetch.v12.request", fromlist=["x"])
    epochs = __import__("kio.schema.offset_for_leader_epoch.v4.request", fromlist=["x"])
    with Raw.login(secured, "alice", "alice-secret") as raw:
        answer = raw.call(fetch.FetchRequest(
            cluster_id=None, replica_id=0, max_wait=timedelta(milliseconds=10), min_bytes=0,
            max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
            topics=(fetch.FetchTopic(topic=ALICE_TOPIC, partitions=(fetch.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=1 << 20),)),),
            forgotten_topics_data=(), rack_id="",
        ))  # fmt: skip
        assert _codes(answer) - {ErrorCode.none} == {ErrorCode.topic_authorization_failed}
        answer = raw.call(epochs.OffsetForLeaderEpochRequest(replica_id=0, topics=(
            epochs.OffsetForLeaderTopic(topic=ALICE_TOPIC, partitions=(
                epochs.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0),
            )),
        )))  # fmt: skip
        assert _codes(answer) == {ErrorCode.cluster_authorization_failed}


# -- groups and transactions ---------------------------------------------------------------------


def test_offset_fetch_v8_and_batched_find_coordinator_refuse_each_group(secured: Secured) -> None:
    fetch = __import__("kio.schema.offset_fetch.v8.request", fromlist=["x"])
    find = __import__("kio.schema.find_coordinator.v4.request", fromlist=["x"])
    with Raw.login(secured, "carol", "carol-secret") as raw:
        answer = raw.call(fetch.OffsetFetchRequest(groups=tuple(
            fetch.OffsetFetchRequestGroup(group_id=g, topics=None) for g in (ALICE_GROUP, "carol-group")
        ), require_stable=False))  # fmt: skip
        assert [(g.group_id, g.error_code, g.topics) for g in answer.groups] == [
            (ALICE_GROUP, ErrorCode.group_authorization_failed, ()),
            ("carol-group", ErrorCode.group_authorization_failed, ()),
        ]
        for key_type, keys, code in (
            (0, (ALICE_GROUP, "carol-group"), ErrorCode.group_authorization_failed),
            (1, (ALICE_TXN, "carol-txn"), ErrorCode.transactional_id_authorization_failed),
        ):
            answer = raw.call(find.FindCoordinatorRequest(key_type=key_type, coordinator_keys=keys))
            assert [(c.key, c.error_code, c.node_id) for c in answer.coordinators] == [
                (k, code, -1) for k in keys
            ]


def test_alice_sees_and_deletes_only_her_topics_offsets_in_her_group(secured: Secured) -> None:
    fetch = __import__("kio.schema.offset_fetch.v8.request", fromlist=["x"])
    delete = __import__("kio.schema.offset_delete.v0.request", fromlist=["x"])
    listing = __import__("kio.schema.list_groups.v4.request", fromlist=["x"])
    with Raw.login(secured, "alice", "alice-secret") as raw:
        answer = raw.call(fetch.OffsetFetchRequest(groups=(
            fetch.OffsetFetchRequestGroup(group_id=ALICE_GROUP, topics=None),
            fetch.OffsetFetchRequestGroup(group_id=ALICE_GROUP, topics=(
                fetch.OffsetFetchRequestTopics(name=ADMIN_TOPIC, partition_indexes=(0,)),)),
            fetch.OffsetFetchRequestGroup(group_id=ADMIN_GROUP, topics=None),
        ), require_stable=False))  # fmt: skip
        every, named, admins = answer.groups
        assert [t.name for t in every.topics] == [ALICE_TOPIC]  # admin-only left out
        assert [(p.error_code, p.committed_offset) for t in named.topics for p in t.partitions] == [
            (ErrorCode.topic_authorization_failed, -1)
        ]
        assert (admins.error_code, admins.topics) == (ErrorCode.group_authorization_failed, ())
        answer = raw.call(delete.OffsetDeleteRequest(group_id=ALICE_GROUP, topics=(
            delete.OffsetDeleteRequestTopic(name=ADMIN_TOPIC, partitions=(
                delete.OffsetDeleteRequestPartition(partition_index=0),)),
        )))  # fmt: skip
        assert _codes(answer) - {ErrorCode.none} == {ErrorCode.topic_authorization_failed}
        answer = raw.call(listing.ListGroupsRequest(states_filter=()))
        assert [g.group_id for g in answer.groups] == [ALICE_GROUP]
    with Raw.login(secured, "admin", "admin-secret", "PLAIN") as raw:
        answer = raw.call(fetch.OffsetFetchRequest(groups=(
            fetch.OffsetFetchRequestGroup(group_id=ALICE_GROUP, topics=(
                fetch.OffsetFetchRequestTopics(name=ADMIN_TOPIC, partition_indexes=(0,)),)),
        ), require_stable=False))  # fmt: skip
        assert [p.committed_offset for t in answer.groups[0].topics for p in t.partitions] == [7]


def test_alice_cannot_commit_her_transaction_into_someone_elses_group(secured: Secured) -> None:
    add = __import__("kio.schema.add_offsets_to_txn.v3.request", fromlist=["x"])
    commit = __import__("kio.schema.txn_offset_commit.v3.request", fromlist=["x"])
    with Raw.login(secured, "alice", "alice-secret") as raw:
        init = raw.call(req(22, 4, transactional_id=ALICE_TXN, transaction_timeout=timedelta(seconds=10),
                            producer_id=-1, producer_epoch=-1))  # fmt: skip
        assert init.error_code == ErrorCode.none
        pid, epoch = init.producer_id, init.producer_epoch
        answer = raw.call(add.AddOffsetsToTxnRequest(
            transactional_id=ALICE_TXN, producer_id=pid, producer_epoch=epoch, group_id=ADMIN_GROUP
        ))  # fmt: skip
        assert answer.error_code == ErrorCode.group_authorization_failed
        answer = raw.call(commit.TxnOffsetCommitRequest(
            transactional_id=ALICE_TXN, group_id=ADMIN_GROUP, producer_id=pid, producer_epoch=epoch,
            generation_id=-1, member_id="", group_instance_id=None,
            topics=(commit.TxnOffsetCommitRequestTopic(name=ALICE_TOPIC, partitions=(
                commit.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                    committed_metadata=""),)),),
        ))  # fmt: skip
        assert _codes(answer) == {ErrorCode.group_authorization_failed}


def test_carol_cannot_join_or_read_alices_group_with_kafka_python(secured: Secured) -> None:
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

    consumer = KafkaConsumer(
        ALICE_TOPIC, bootstrap_servers=f"127.0.0.1:{secured.sasl_port}", group_id=ALICE_GROUP,
        security_protocol="SASL_SSL", ssl_cafile=str(secured.certs.ca), sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="carol", sasl_plain_password="carol-secret",
        auto_offset_reset="earliest",
    )  # fmt: skip
    try:
        with pytest.raises((GroupAuthorizationFailedError, TopicAuthorizationFailedError)):
            consumer.poll(timeout_ms=5000)
            consumer.poll(timeout_ms=5000)
    finally:
        consumer.close()


def test_transactional_apis_with_alices_transactional_id_are_refused(secured: Secured) -> None:
    describe = __import__("kio.schema.describe_transactions.v0.request", fromlist=["x"])
    listing = __import__("kio.schema.list_transactions.v1.request", fromlist=["x"])
    with Raw.login(secured, "carol", "carol-secret") as raw:
        answer = raw.call(req(22, 4, transactional_id=ALICE_TXN,
                              transaction_timeout=timedelta(seconds=10), producer_id=-1, producer_epoch=-1))  # fmt: skip
        assert answer.error_code == ErrorCode.transactional_id_authorization_failed
        answer = raw.call(describe.DescribeTransactionsRequest(transactional_ids=(ALICE_TXN,)))
        assert _codes(answer) == {ErrorCode.transactional_id_authorization_failed}
        answer = raw.call(listing.ListTransactionsRequest(
            state_filters=(), producer_id_filters=(), duration_filter=-1
        ) if "duration_filter" in listing.ListTransactionsRequest.__dataclass_fields__ else
            listing.ListTransactionsRequest(state_filters=(), producer_id_filters=()))  # fmt: skip
        assert answer.transaction_states == ()


def test_idempotent_producer_id_without_an_idempotent_write_acl(secured: Secured) -> None:
    """carol has no ACL at all: InitProducerId without a transactional id is refused."""
    with Raw.login(secured, "carol", "carol-secret") as raw:
        answer = raw.call(req(22, 4, transactional_id=None, transaction_timeout=timedelta(seconds=10),
                              producer_id=-1, producer_epoch=-1))  # fmt: skip
        assert answer.error_code == ErrorCode.cluster_authorization_failed


@pytest.mark.parametrize("user", ["dave", "erin"])
def test_idempotent_producer_id_when_every_topic_write_is_denied(
    secured: Secured, user: str
) -> None:
    with Raw.login(secured, user, f"{user}-secret") as raw:
        answer = raw.call(req(22, 4, transactional_id=None, transaction_timeout=timedelta(seconds=10),
                              producer_id=-1, producer_epoch=-1))  # fmt: skip
        assert answer.error_code == ErrorCode.cluster_authorization_failed


# -- cluster: configs, ACLs, SCRAM users ---------------------------------------------------------


_ESCALATIONS = [
    (4, "0", "super.users", "User:admin;User:carol"),
    (4, "", "super.users", "User:carol"),
    (4, "0", "allow.everyone.if.no.acl.found", "true"),
    (4, "0", "authorizer.class.name", ""),
    (4, "0", "listener.name.sasl_ssl.plain.sasl.jaas.config", JAAS.replace("admin-secret", "x")),
    (4, "0", "listener.name.ssl.ssl.client.auth", "none"),
    (8, "0", "logkeel.server.authorization", "DEBUG"),
]


def test_carol_cannot_alter_broker_configs_by_any_api(secured: Secured) -> None:
    incremental = __import__("kio.schema.incremental_alter_configs.v1.request", fromlist=["x"])
    legacy = __import__("kio.schema.alter_configs.v2.request", fromlist=["x"])
    with Raw.login(secured, "carol", "carol-secret") as raw:
        for rtype, name, key, value in _ESCALATIONS:
            for validate_only in (False, True):
                answer = raw.call(incremental.IncrementalAlterConfigsRequest(resources=(
                    incremental.AlterConfigsResource(resource_type=rtype, resource_name=name, configs=(
                        incremental.AlterableConfig(name=key, config_operation=0, value=value),)),
                ), validate_only=validate_only))  # fmt: skip
                assert _codes(answer) == {ErrorCode.cluster_authorization_failed}, (key, answer)
                if rtype == 4:
                    answer = raw.call(legacy.AlterConfigsRequest(resources=(
                        legacy.AlterConfigsResource(resource_type=rtype, resource_name=name, configs=(
                            legacy.AlterableConfig(name=key, value=value),)),
                    ), validate_only=validate_only))  # fmt: skip
                    assert _codes(answer) == {ErrorCode.cluster_authorization_failed}, key
    # Nothing changed: carol is still nobody, and admin still logs in with the old password.
    with Raw.login(secured, "carol", "carol-secret") as raw:
        assert raw.call(_metadata(12, None)).topics == ()
    Raw.login(secured, "admin", "admin-secret", "PLAIN").sock.close()


def test_describe_configs_of_brokers_and_secrets(secured: Secured) -> None:
    describe = __import__("kio.schema.describe_configs.v4.request", fromlist=["x"])

    def ask(raw: Raw, rtype: int, name: str) -> Any:
        return raw.call(describe.DescribeConfigsRequest(resources=(
            describe.DescribeConfigsResource(resource_type=rtype, resource_name=name, configuration_keys=None),
        ), include_synonyms=True, include_documentation=False)).results[0]  # fmt: skip

    with Raw.login(secured, "carol", "carol-secret") as raw:
        for rtype, name in ((4, "0"), (4, ""), (8, "0"), (2, ALICE_TOPIC), (2, "no-such-topic")):
            result = ask(raw, rtype, name)
            expected = (
                ErrorCode.topic_authorization_failed
                if rtype == 2
                else ErrorCode.cluster_authorization_failed
            )
            assert (result.error_code, result.configs) == (expected, ())
    with Raw.login(secured, "admin", "admin-secret", "PLAIN") as raw:
        configs = ask(raw, 4, "0").configs
    assert configs, "admin describes the broker"
    passwords = [c for c in configs if c.is_sensitive]
    assert {c.name for c in passwords} >= {"ssl.keystore.password", "ssl.keystore.key"}
    assert all(c.value is None for c in passwords)
    assert all(s.value is None for c in passwords for s in c.synonyms)
    texts = " ".join(str(c.value) for c in configs) + " ".join(
        str(s.value) for c in configs for s in c.synonyms
    )
    assert "admin-secret" not in texts and "carol-plain" not in texts
    assert "PRIVATE KEY" not in texts


_ACL_MODULE = "kio.schema.{}.v3.request"


def _acl_creation(name: str, pattern: int, principal: str = "User:carol") -> Any:
    module = __import__(_ACL_MODULE.format("create_acls"), fromlist=["x"])
    return module.AclCreation(
        resource_type=4 if name == "kafka-cluster" else 2, resource_name=name,
        resource_pattern_type=pattern, principal=principal, host="*", operation=2, permission_type=3,
    )  # fmt: skip


def test_carol_cannot_create_delete_or_describe_acls(secured: Secured) -> None:
    create = __import__(_ACL_MODULE.format("create_acls"), fromlist=["x"])
    delete = __import__(_ACL_MODULE.format("delete_acls"), fromlist=["x"])
    describe = __import__(_ACL_MODULE.format("describe_acls"), fromlist=["x"])
    with Raw.login(secured, "carol", "carol-secret") as raw:
        creations = tuple(
            _acl_creation(name, pattern)
            for name in ("kafka-cluster", "*", "alice-", ALICE_TOPIC)
            for pattern in (1, 2, 3, 4)  # ANY, MATCH, LITERAL, PREFIXED
        )
        answer = raw.call(create.CreateAclsRequest(creations=creations))
        assert _codes(answer) == {ErrorCode.cluster_authorization_failed}
        everything = delete.DeleteAclsFilter(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1,
        )  # fmt: skip
        answer = raw.call(delete.DeleteAclsRequest(filters=(everything,)))
        assert _codes(answer) == {ErrorCode.cluster_authorization_failed}
        answer = raw.call(describe.DescribeAclsRequest(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1,
        ))  # fmt: skip
        assert answer.error_code == ErrorCode.cluster_authorization_failed
        assert answer.resources == ()
    admin = secured.admin()
    described = admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(15)  # fmt: skip
    assert {b.principal for b in described} == {"User:alice", "User:dave", "User:erin"}


def test_acls_with_match_or_any_pattern_are_refused_even_to_admin(secured: Secured) -> None:
    create = __import__(_ACL_MODULE.format("create_acls"), fromlist=["x"])
    with Raw.login(secured, "admin", "admin-secret", "PLAIN") as raw:
        for pattern in (1, 2):
            answer = raw.call(create.CreateAclsRequest(creations=(_acl_creation("x", pattern),)))
            assert answer.results[0].error_code == ErrorCode.invalid_request


def test_carol_cannot_see_or_change_scram_users(secured: Secured) -> None:
    describe = __import__("kio.schema.describe_user_scram_credentials.v0.request", fromlist=["x"])
    alter = __import__("kio.schema.alter_user_scram_credentials.v0.request", fromlist=["x"])
    with Raw.login(secured, "carol", "carol-secret") as raw:
        for users in (
            None,
            (),
            (describe.UserName(name="alice"),),
            (describe.UserName(name="carol"),),
        ):
            answer = raw.call(describe.DescribeUserScramCredentialsRequest(users=users))
            assert answer.error_code == ErrorCode.cluster_authorization_failed
            assert all(r.credential_infos == () for r in answer.results)
            assert "alice" not in {r.user for r in answer.results} - {u.name for u in users or ()}
        for user in ("admin", "alice", "carol"):
            answer = raw.call(alter.AlterUserScramCredentialsRequest(deletions=(), upsertions=(
                alter.ScramCredentialUpsertion(name=user, mechanism=1, iterations=4096, salt=b"s" * 16,
                                               salted_password=b"p" * 32),)))  # fmt: skip
            assert _codes(answer) == {ErrorCode.cluster_authorization_failed}
    # The credentials are intact.
    Raw.login(secured, "alice", "alice-secret").sock.close()
    Raw.login(secured, "carol", "carol-secret").sock.close()


def test_carol_with_aiokafka_admin(secured: Secured) -> None:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    from aiokafka.helpers import create_ssl_context

    async def attempt() -> tuple[Any, Any]:
        client = AIOKafkaAdminClient(
            bootstrap_servers=f"127.0.0.1:{secured.sasl_port}", security_protocol="SASL_SSL",
            ssl_context=create_ssl_context(cafile=str(secured.certs.ca)),
            sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="carol",
            sasl_plain_password="carol-secret",
        )  # fmt: skip
        await client.start()
        try:
            try:
                described: Any = await client.describe_configs(
                    [ConfigResource(ConfigResourceType.BROKER, "0")]
                )
            except Exception as exc:  # noqa: BLE001 - a refusal may come as an exception
                described = exc
            return described, await client.list_consumer_groups()
        finally:
            await client.close()

    described, groups = asyncio.run(asyncio.wait_for(attempt(), 60))
    text = repr(described)
    assert "super.users" not in text and "ssl.keystore" not in text
    assert "31" in text or "ClusterAuthorization" in text  # CLUSTER_AUTHORIZATION_FAILED
    assert groups == []


def test_carol_with_confluent_admin(secured: Secured) -> None:
    # Not describe_user_scram_credentials: librdkafka (confluent-kafka 2.16) frees a static or
    # stack string when that response carries a request-level error, and aborts -- against
    # Kafka too (rd_kafka_DescribeUserScramCredentialsResponse_parse); the raw test covers it.
    carol = AdminClient(secured.sasl_conf("carol", "carol-secret"))
    broker = ConfigResource(ConfigResource.Type.BROKER, "0")
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        carol.describe_configs([broker])[broker].result(15)
    grant = AclBinding(
        ResourceType.BROKER,
        "kafka-cluster",
        ResourcePatternType.LITERAL,
        "User:carol",
        "*",
        AclOperation.ALL,
        AclPermissionType.ALLOW,
    )
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        next(iter(carol.create_acls([grant]).values())).result(15)
    assert carol.list_topics(timeout=15).topics == {}
    assert ALICE_TOPIC in _admin_topics(secured)


# -- SASL ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mechanism", "token"),
    [("PLAIN", b"admin\0carol\0carol-plain"), ("SCRAM-SHA-256", b"n,a=admin,n=carol,r=abcdefgh")],
)
def test_someone_elses_authorization_id_is_refused(
    secured: Secured, mechanism: str, token: bytes
) -> None:
    with Raw(secured.sasl_port, secured.tls()) as raw:
        raw.handshake(mechanism)
        assert raw.token(token).error_code == ErrorCode.sasl_authentication_failed
        assert raw.call(_metadata(12, None)) is None


def test_unknown_scram_user_is_refused_like_a_wrong_password(secured: Secured) -> None:
    messages = []
    for user, password in (("nobody", "x"), ("carol", "wrong"), ("admin", "admin-secret")):
        with Raw(secured.sasl_port, secured.tls()) as raw:
            answer = raw.authenticate("SCRAM-SHA-512", user, password)
            assert answer.error_code == ErrorCode.sasl_authentication_failed
            messages.append(answer.error_message)
    assert len(set(messages)) == 1


def _server_first(s: Secured, mechanism: str, user: str) -> dict[str, str]:
    with Raw(s.sasl_port, s.tls()) as raw:
        raw.handshake(mechanism)
        answer = raw.token(ScramClientExchange(mechanism, user, "guess").first())
    return dict(a.split("=", 1) for a in answer.auth_bytes.decode().split(","))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_server_first_message_does_not_tell_unknown_users_apart(
    secured: Secured, mechanism: str
) -> None:
    known, unknown = (
        _server_first(secured, mechanism, "carol"),
        _server_first(secured, mechanism, "nobody"),
    )
    assert known["i"] == unknown["i"]
    assert len(base64.b64decode(known["s"])) == len(base64.b64decode(unknown["s"]))


def test_scram_with_a_tampered_nonce_is_refused(secured: Secured) -> None:
    with Raw(secured.sasl_port, secured.tls()) as raw:
        raw.handshake("SCRAM-SHA-256")
        exchange = ScramClientExchange("SCRAM-SHA-256", "carol", "carol-secret")
        first = raw.token(exchange.first()).auth_bytes.decode()
        nonce = dict(a.split("=", 1) for a in first.split(","))["r"]
        final = exchange.step(first.replace(nonce, nonce[:-4] + "AAAA").encode())
        assert raw.token(final).error_code == ErrorCode.sasl_authentication_failed
        assert raw.call(_metadata(12, None)) is None


def test_replayed_scram_messages_are_refused(secured: Secured) -> None:
    with Raw(secured.sasl_port, secured.tls()) as raw:
        raw.handshake("SCRAM-SHA-256")
        exchange = ScramClientExchange("SCRAM-SHA-256", "carol", "carol-secret")
        first = exchange.first()
        final = exchange.step(raw.token(first).auth_bytes)
        assert raw.token(final).error_code == ErrorCode.none
        # Again on the same connection: no exchange is under way.
        assert raw.token(final).error_code == ErrorCode.illegal_sasl_state
    with Raw(secured.sasl_port, secured.tls()) as raw:
        raw.handshake("SCRAM-SHA-256")
        raw.token(first)  # the server's nonce differs this time
        assert raw.token(final).error_code == ErrorCode.sasl_authentication_failed
        assert raw.call(_metadata(12, None)) is None


def test_reauthentication_as_another_user_closes_the_connection(secured: Secured) -> None:
    with Raw.login(secured, "carol", "carol-secret") as raw:
        raw.handshake("SCRAM-SHA-256")
        exchange = ScramClientExchange("SCRAM-SHA-256", "alice", "alice-secret")
        final = req(
            SASL_AUTHENTICATE, 2, auth_bytes=exchange.step(raw.token(exchange.first()).auth_bytes)
        )
        meta = _metadata(12, None)
        raw.send(final)
        raw.send(meta)  # pipelined behind the re-authentication: never served as alice
        assert raw.recv(final).error_code == ErrorCode.sasl_authentication_failed
        assert raw.recv(meta) is None


@pytest.mark.parametrize(
    ("mechanism", "version"), [("PLAIN", 1), ("SCRAM-SHA-512", 1), ("SCRAM-SHA-256", 0)]
)
def test_reauthentication_cannot_switch_mechanism_or_framing(
    secured: Secured, mechanism: str, version: int
) -> None:
    with Raw.login(secured, "carol", "carol-secret") as raw:
        assert raw.handshake(mechanism, version).error_code == ErrorCode.illegal_sasl_state
        assert raw.call(_metadata(12, None)) is None


def test_an_expired_session_is_closed_and_reauthentication_keeps_the_principal(
    secured: Secured,
) -> None:
    with Raw(secured.short_port, None) as raw:
        answer = raw.authenticate("SCRAM-SHA-256", "carol", "carol-secret")
        assert answer.error_code == ErrorCode.none
        lifetime = answer.session_lifetime.total_seconds()
        assert 0 < lifetime <= SHORT_SESSION_MS / 1000
        # Re-authenticating as carol renews the session; as alice it is refused.
        assert raw.authenticate("SCRAM-SHA-256", "carol", "carol-secret").error_code == 0
        assert raw.call(_metadata(12, None)).topics == ()
        answer = raw.authenticate("SCRAM-SHA-256", "alice", "alice-secret")
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert raw.call(_metadata(12, None)) is None
    with Raw(secured.short_port, None) as raw:
        assert raw.authenticate("SCRAM-SHA-256", "carol", "carol-secret").error_code == 0
        renewed = time.monotonic()
        # The session's end is the condition waited for: nothing to poll before it.
        time.sleep(max(0.0, renewed + lifetime + 0.2 - time.monotonic()))
        assert raw.call(_metadata(12, None)) is None


def test_handshake_in_the_middle_of_an_exchange_is_refused(secured: Secured) -> None:
    with Raw(secured.sasl_port, secured.tls()) as raw:
        raw.handshake("SCRAM-SHA-256")
        raw.token(ScramClientExchange("SCRAM-SHA-256", "alice", "guess").first())
        assert raw.handshake("PLAIN").error_code == ErrorCode.illegal_sasl_state
        assert raw.call(_metadata(12, None)) is None


def test_raw_v0_plain_token_with_authorization_id_is_refused(secured: Secured) -> None:
    with Raw(secured.sasl_port, secured.tls()) as raw:
        assert raw.handshake("PLAIN", 0).error_code == ErrorCode.none
        token = b"admin\0carol\0carol-plain"
        raw.sock.sendall(struct.pack(">i", len(token)) + token)
        assert raw.exact(4) is None


# -- TLS client certificates ---------------------------------------------------------------------


def _client_certificate(
    s: Secured, attrs: list[x509.NameAttribute], name: str
) -> tuple[Path, Path]:
    ca = x509.load_pem_x509_certificate(s.certs.ca.read_bytes())
    ca_key = serialization.load_pem_private_key(s.certs.ca_key.read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(x509.Name(attrs)).issuer_name(ca.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = (
        s.certs.ca.with_name(f"{name}-cert.pem"),
        s.certs.ca.with_name(f"{name}-key.pem"),
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ))  # fmt: skip
    return cert_path, key_path


@pytest.mark.parametrize(
    "common_name", ["admin,OU=x", "admin+OU=x", "admin\\", 'admin"', "admin;x", " admin"]
)
def test_crafted_certificate_names_do_not_map_to_admin(secured: Secured, common_name: str) -> None:
    attrs = [
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "logkeel"),
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
    ]
    cert, key = _client_certificate(secured, attrs, f"crafted-{abs(hash(common_name))}")
    with Raw(secured.ssl_port, secured.tls(cert, key)) as raw:
        assert raw.call(_metadata(12, None)).topics == ()  # a super user would see every topic


def test_ssl_listener_refuses_clients_without_a_trusted_certificate(secured: Secured) -> None:
    for cert, key in ((None, None), (secured.certs.untrusted_cert, secured.certs.untrusted_key)):
        with pytest.raises((ssl.SSLError, OSError)):
            raw = Raw(secured.ssl_port, secured.tls(cert, key))
            try:
                # TLS 1.3: the refusal of the client certificate arrives with the first read.
                answer = raw.call(
                    req(API_VERSIONS, 3, client_software_name="a", client_software_version="1")
                )
                if answer is None:
                    raise OSError("closed")
            finally:
                raw.sock.close()


def test_sasl_handshake_on_the_ssl_listener_is_refused(secured: Secured) -> None:
    with Raw(
        secured.ssl_port, secured.tls(secured.certs.client_cert, secured.certs.client_key)
    ) as raw:
        assert raw.handshake("PLAIN").error_code == ErrorCode.illegal_sasl_state
