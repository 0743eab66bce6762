"""The client matrix beyond confluent-kafka (which test_security.py runs on every listener), on
that module's secure broker (its own instance): kafka-python, aiokafka and kcat over SSL,
mutual TLS, SASL_PLAINTEXT with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, and SASL_SSL; and a
client certificate that has expired, refused like an untrusted one."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context

from logkeel.testing.certs import expired_client_certificate
from tests.server.test_security import (
    BOB_PASSWORD,
    SecureBroker,
    _auth_failure,
    client_config,
    produce_and_consume,
    secure,
)

__all__ = ["secure"]  # the module's own broker, from test_security's fixture

USERS = {"PLAIN": ("alice", "alice-secret"), "SCRAM-SHA-256": ("bob", BOB_PASSWORD),
         "SCRAM-SHA-512": ("bob", BOB_PASSWORD)}  # fmt: skip


def _kafka_python_settings(
    secure: SecureBroker, listener: str, mechanism: str | None
) -> dict[str, Any]:
    settings: dict[str, Any] = {"bootstrap_servers": secure.bootstrap(listener),
                                "security_protocol": "SSL" if listener == "MTLS" else listener}  # fmt: skip
    if "SSL" in settings["security_protocol"]:
        settings["ssl_cafile"] = str(secure.certs.ca)
    if listener == "MTLS":
        settings["ssl_certfile"] = str(secure.certs.client_cert)
        settings["ssl_keyfile"] = str(secure.certs.client_key)
    if mechanism is not None:
        user, password = USERS[mechanism]
        settings.update(sasl_mechanism=mechanism, sasl_plain_username=user,
                        sasl_plain_password=password)  # fmt: skip
    return settings


@pytest.mark.parametrize(
    ("listener", "mechanism"),
    [("SSL", None), ("MTLS", None), ("SASL_PLAINTEXT", "PLAIN"),
     ("SASL_PLAINTEXT", "SCRAM-SHA-256"), ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
     ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_SSL", "PLAIN")],
)  # fmt: skip
def test_kafka_python(secure: SecureBroker, listener: str, mechanism: str | None) -> None:
    import kafka

    settings = _kafka_python_settings(secure, listener, mechanism)
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    producer = kafka.KafkaProducer(**settings)
    for i in range(5):
        producer.send(topic, b"k%d" % i)
    producer.flush(30)
    producer.close()
    consumer = kafka.KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=10_000, **settings
    )
    assert [m.value for m in consumer] == [b"k%d" % i for i in range(5)]
    consumer.close()


@pytest.mark.parametrize(
    ("listener", "mechanism"),
    [("SSL", None), ("MTLS", None), ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
     ("SASL_PLAINTEXT", "SCRAM-SHA-512"), ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "PLAIN")],
)  # fmt: skip
def test_aiokafka(secure: SecureBroker, listener: str, mechanism: str | None) -> None:
    settings: dict[str, Any] = {"bootstrap_servers": secure.bootstrap(listener),
                                "security_protocol": "SSL" if listener == "MTLS" else listener}  # fmt: skip
    if "SSL" in settings["security_protocol"]:
        mutual = listener == "MTLS"
        settings["ssl_context"] = create_ssl_context(
            cafile=str(secure.certs.ca),
            certfile=str(secure.certs.client_cert) if mutual else None,
            keyfile=str(secure.certs.client_key) if mutual else None,
        )
    if mechanism is not None:
        user, password = USERS[mechanism]
        settings.update(sasl_mechanism=mechanism, sasl_plain_username=user,
                        sasl_plain_password=password)  # fmt: skip

    async def run() -> list[bytes]:
        topic = f"aio-{uuid.uuid4().hex[:8]}"
        producer = AIOKafkaProducer(**settings)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, b"a%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **settings)
        await consumer.start()
        try:
            got: list[bytes] = []
            while len(got) < 5:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 20)
                got += [m.value for msgs in batch.values() for m in msgs]
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [b"a%d" % i for i in range(5)]


@pytest.mark.parametrize(
    ("listener", "mechanism"),
    [("SSL", None), ("MTLS", None), ("SASL_PLAINTEXT", "PLAIN"),
     ("SASL_PLAINTEXT", "SCRAM-SHA-256"), ("SASL_SSL", "SCRAM-SHA-512")],
)  # fmt: skip
def test_kcat(secure: SecureBroker, listener: str, mechanism: str | None) -> None:
    conf = client_config(secure, listener, mechanism, *(USERS[mechanism] if mechanism else ()))
    args = ["-b", conf.pop("bootstrap.servers")]
    for key, value in conf.items():
        args += ["-X", f"{key}={value}"]
    topic = f"kcat-{uuid.uuid4().hex[:8]}"
    produced = subprocess.run(["kcat", *args, "-P", "-t", topic], input=b"one\ntwo\n",
                              timeout=60, capture_output=True)  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(
        ["kcat", *args, "-C", "-t", topic, "-o", "beginning", "-c", "2", "-e"],
        timeout=60, capture_output=True,
    )  # fmt: skip
    assert consumed.stdout.split() == [b"one", b"two"], consumed.stderr


def test_an_expired_client_certificate_is_refused(secure: SecureBroker) -> None:
    import kafka
    import kafka.errors

    cert, key = expired_client_certificate(secure.certs)
    expired = {**client_config(secure, "MTLS"), "ssl.certificate.location": str(cert),
               "ssl.key.location": str(key)}  # fmt: skip
    assert "Broker transport failure" in _auth_failure(expired)
    settings = {**_kafka_python_settings(secure, "MTLS", None), "ssl_certfile": str(cert),
                "ssl_keyfile": str(key), "request_timeout_ms": 5000}  # fmt: skip
    with pytest.raises(kafka.errors.KafkaError):
        # A fixed version: probing for one would retry the handshake for 30 s first.
        producer = kafka.KafkaProducer(**settings, api_version=(2, 8), max_block_ms=5000)
        producer.send("late", b"x").get(timeout=5)
    assert "CN=late" not in secure.broker.output()  # never became a principal
    assert secure.broker.alive()
    assert produce_and_consume(client_config(secure, "MTLS"), 2) == [b"m0", b"m1"]
