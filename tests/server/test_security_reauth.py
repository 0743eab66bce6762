"""Re-authentication (KIP-368, ``connections.max.reauth.ms``) on a real broker: SaslAuthenticate
v1+ tells the client its session lifetime; a connection that outlives its session without
re-authenticating is closed on its next request; one that re-authenticates keeps serving.
librdkafka (2.2+) re-authenticates on its own, so a producer running for several lifetimes
keeps its connection; the rest is checked at the wire level."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from kio.schema.errors import ErrorCode

from logkeel.ports import free_port
from logkeel.server.protocol import ApiKey
from logkeel.testing.broker_process import LogkeelBroker
from tests.server.test_security import PLAIN_JAAS, _call, _closed, _frame, _login, _read_frame

REAUTH_MS = 1500


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogkeelBroker]:
    work: Path = tmp_path_factory.mktemp("reauth")
    port = free_port()
    overrides = {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "connections.max.reauth.ms": str(REAUTH_MS),
    }
    b = LogkeelBroker(work, port=port, overrides=overrides, verbose=True).start()
    try:
        yield b
    finally:
        b.stop()


def _metadata(sock: socket.socket) -> None:
    sock.sendall(_frame(ApiKey.METADATA, 4, topics=None, allow_auto_topic_creation=False))


def test_the_session_lifetime_is_announced_and_an_expired_session_is_closed(
    broker: LogkeelBroker,
) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        auth = _login(s)
        assert auth.error_code == ErrorCode.none
        assert auth.session_lifetime.total_seconds() * 1000 == REAUTH_MS
        _metadata(s)
        assert _read_frame(s) is not None  # within the session
        time.sleep(REAUTH_MS / 1000 + 0.5)
        _metadata(s)
        assert _closed(s)
    assert "expired (connections.max.reauth.ms) without re-authentication" in broker.output()


def test_a_client_that_re_authenticates_keeps_its_connection(broker: LogkeelBroker) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        assert _login(s).error_code == ErrorCode.none
        for _ in range(3):  # three lifetimes, renewed at about half of each
            time.sleep(REAUTH_MS / 2000)
            again = _login(s)
            assert again.error_code == ErrorCode.none
            assert again.session_lifetime.total_seconds() * 1000 == REAUTH_MS
            _metadata(s)
            assert _read_frame(s) is not None


def test_re_authenticating_as_someone_else_fails_and_closes(broker: LogkeelBroker) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        assert _login(s).error_code == ErrorCode.none
        other = _login(s, "admin", "admin-secret")
        assert other.error_code == ErrorCode.sasl_authentication_failed
        assert "principal" in (other.error_message or "")
        assert _closed(s)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        assert _login(s).error_code == ErrorCode.none
        # KIP-368 re-authenticates with Kafka-framed requests only: v0's raw tokens cannot be.
        shake = _call(s, ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN")
        assert shake.error_code == ErrorCode.illegal_sasl_state
        assert _closed(s)
    assert broker.alive()


def test_librdkafka_re_authenticates_and_keeps_producing(broker: LogkeelBroker) -> None:
    before = len(broker.output(limit=50_000_000))
    producer = confluent_kafka.Producer({
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
        "acks": "all",
    })  # fmt: skip
    failures: list[Any] = []
    deadline = time.monotonic() + 4 * REAUTH_MS / 1000
    sent = 0
    while time.monotonic() < deadline:  # a steady trickle across four session lifetimes
        producer.produce("reauth", value=b"%d" % sent,
                         on_delivery=lambda err, _m: failures.append(err) if err else None)  # fmt: skip
        sent += 1
        producer.poll(0.1)
    assert producer.flush(30) == 0
    assert failures == []
    log = broker.output(limit=50_000_000)[before:]
    assert "without re-authentication" not in log
    logins: dict[str, int] = {}
    for connection in re.findall(r"authenticated on (\S+) as User:alice", log):
        logins[connection] = logins.get(connection, 0) + 1
    # The same connection logged in again and again: re-authentication, not reconnection.
    assert max(logins.values()) >= 3, logins
