"""SASL/OAUTHBEARER (KIP-255, KIP-768) on a real broker: a test identity provider on loopback
(http.server) hands out JWTs signed with its RSA and EC keys and serves its JWKS; the broker
checks tokens against that JWKS (over HTTP on the SASL_PLAINTEXT listener, from a file on the
SASL_SSL one). confluent-kafka's OIDC client produces and consumes through both with ACLs
for the token's principal; raw SaslAuthenticate frames carry the tokens that must be refused
(expired, wrong audience or issuer, bad signature, unsigned, HMAC) and get RFC 7628's error
challenge, then SASL_AUTHENTICATION_FAILED."""

from __future__ import annotations

import base64
import json
import math
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import confluent_kafka
import jwt
import pytest
from confluent_kafka.admin import AclOperation, AclPermissionType, ResourcePatternType
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from kio.schema.errors import ErrorCode

from logkeel.config import BrokerConfig, ConfigError
from logkeel.ports import free_port
from logkeel.server.network.oauthbearer import (
    INVALID_TOKEN,
    InvalidToken,
    JwksKeys,
    JwtSettings,
    jwt_settings,
    parse_client_response,
    validate_token,
)
from logkeel.server.protocol import ApiKey
from logkeel.server.session import SaslFailure, session_lifetime_ms
from logkeel.testing.broker_process import LogkeelBroker
from logkeel.testing.certs import Certificates, make_certificates
from tests.server.test_acls import create_acls, topic_acl
from tests.server.test_security import _call, _closed

pytestmark = pytest.mark.timeout(180)

ISSUER, AUDIENCE = "https://idp.test", "logkeel"
CLIENT_ID, CLIENT_SECRET = "app", "app-secret"
REAUTH_MS = 60_000
ADMIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-pw";'
)


class IdentityProvider:
    """Signs tokens with its keys; serves POST /token (client credentials) and GET /jwks."""

    def __init__(self) -> None:
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())
        self.tokens_issued = 0
        self.ttl = 300.0  # of the tokens /token hands out
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer(200, idp.jwks()) if self.path == "/jwks" else self._answer(404, {})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                form = parse_qs(self.rfile.read(length).decode())
                basic = base64.b64decode(self.headers.get("Authorization", "Basic ")[6:]).decode()
                if self.path != "/token" or form.get("grant_type") != ["client_credentials"]:
                    return self._answer(400, {"error": "invalid_request"})
                if basic != f"{CLIENT_ID}:{CLIENT_SECRET}":
                    return self._answer(401, {"error": "invalid_client"})
                idp.tokens_issued += 1
                self._answer(200, {"access_token": idp.token(ttl=idp.ttl), "token_type": "bearer",
                                   "expires_in": int(idp.ttl)})  # fmt: skip

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def jwks(self) -> dict[str, Any]:
        rsa_jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.rsa.public_key()))
        ec_jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.ec.public_key()))
        return {"keys": [{**rsa_jwk, "kid": "rsa-1", "use": "sig", "alg": "RS256"},
                         {**ec_jwk, "kid": "ec-1", "use": "sig", "alg": "ES256"}]}  # fmt: skip

    def token(self, *, alg: str = "RS256", ttl: float = 300, **claims: Any) -> str:
        now = time.time()
        # exp rounded up: a token must not expire before the expires_in /token tells the client
        # (whose refresh at 80% of it would otherwise come after the expiry).
        body = {"sub": CLIENT_ID, "iss": ISSUER, "aud": AUDIENCE, "iat": int(now),
                "exp": math.ceil(now + ttl), "scope": "kafka", **claims}  # fmt: skip
        body = {k: v for k, v in body.items() if v is not None}  # None: leave the claim out
        key: Any = self.ec if alg == "ES256" else self.rsa
        kid = "ec-1" if alg == "ES256" else "rsa-1"
        return jwt.encode(body, key, algorithm=alg, headers={"kid": kid})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class OidcBroker:
    broker: LogkeelBroker
    idp: IdentityProvider
    certs: Certificates
    ports: dict[str, int]

    def client_conf(self, listener: str) -> dict[str, Any]:
        conf = {
            "bootstrap.servers": f"127.0.0.1:{self.ports[listener]}",
            "security.protocol": listener,
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.client.id": CLIENT_ID,
            "sasl.oauthbearer.client.secret": CLIENT_SECRET,
            "sasl.oauthbearer.token.endpoint.url": f"{self.idp.url}/token",
        }
        if listener == "SASL_SSL":
            conf["ssl.ca.location"] = str(self.certs.ca)
        return conf

    def admin(self) -> confluent_kafka.admin.AdminClient:
        return confluent_kafka.admin.AdminClient({
            "bootstrap.servers": f"127.0.0.1:{self.ports['SASL_PLAINTEXT']}",
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "admin", "sasl.password": "admin-pw",
        })  # fmt: skip


@pytest.fixture(scope="module")
def oidc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcBroker]:
    work: Path = tmp_path_factory.mktemp("oauthbearer")
    idp = IdentityProvider()
    certs = make_certificates(work / "certs")
    jwks_file = work / "jwks.json"
    jwks_file.write_text(json.dumps(idp.jwks()))
    ports = {"SASL_PLAINTEXT": free_port(), "SASL_SSL": free_port()}
    overrides = {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": ADMIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": ADMIN_JAAS,
        "sasl.oauthbearer.jwks.endpoint.url": f"{idp.url}/jwks",
        "listener.name.sasl_ssl.oauthbearer.sasl.oauthbearer.jwks.endpoint.url":
            jwks_file.as_uri(),
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
        "sasl.oauthbearer.clock.skew.seconds": "5",
        "connections.max.reauth.ms": str(REAUTH_MS),
        "ssl.keystore.location": str(certs.server),
        "ssl.truststore.location": str(certs.ca),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
    }  # fmt: skip
    broker = LogkeelBroker(
        work, port=ports["SASL_PLAINTEXT"], overrides=overrides, verbose=True
    ).start()
    try:
        yield OidcBroker(broker, idp, certs, ports)
    finally:
        broker.stop()
        idp.close()


def _oauth_message(token: str, authzid: str = "") -> bytes:
    header = f"n,a={authzid}," if authzid else "n,,"
    return f"{header}\x01auth=Bearer {token}\x01\x01".encode()


def _authenticate(port: int, token: str, authzid: str = "") -> tuple[Any, socket.socket]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    shake = _call(sock, ApiKey.SASL_HANDSHAKE, 1, mechanism="OAUTHBEARER")
    assert shake.error_code == ErrorCode.none
    assert "OAUTHBEARER" in shake.mechanisms
    return _call(sock, ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=_oauth_message(token, authzid)), sock


def test_oidc_client_produces_and_consumes_on_both_listeners(oidc: OidcBroker) -> None:
    create_acls(oidc.admin(), [
        topic_acl("oidc-", "User:app", op, pattern=ResourcePatternType.PREFIXED)
        for op in (AclOperation.CREATE, AclOperation.WRITE, AclOperation.READ)
    ] + [confluent_kafka.admin.AclBinding(
        confluent_kafka.admin.ResourceType.GROUP, "oidc-", ResourcePatternType.PREFIXED,
        "User:app", "*", AclOperation.READ, AclPermissionType.ALLOW)])  # fmt: skip
    for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
        topic = f"oidc-{listener.lower()}-{uuid.uuid4().hex[:6]}"
        conf = oidc.client_conf(listener)
        producer = confluent_kafka.Producer({**conf, "acks": "all"})
        for i in range(5):
            producer.produce(topic, b"m%d" % i)
        assert producer.flush(30) == 0
        consumer = confluent_kafka.Consumer({**conf, "group.id": f"oidc-{listener}",
                                             "auto.offset.reset": "earliest"})  # fmt: skip
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        consumer.close()
        assert got == [b"m%d" % i for i in range(5)], listener
    assert oidc.idp.tokens_issued >= 2
    # The principal is the token's subject: it may not touch a topic outside its ACLs.
    producer = confluent_kafka.Producer({**oidc.client_conf("SASL_PLAINTEXT"),
                                         "message.timeout.ms": 5000})  # fmt: skip
    errors: list[Any] = []
    producer.produce("not-granted", b"x", on_delivery=lambda err, _m: errors.append(err))
    producer.flush(15)
    assert errors and errors[0].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_librdkafka_re_authenticates_before_its_token_expires(oidc: OidcBroker) -> None:
    """KIP-368 with short-lived tokens: each session ends with its token, and librdkafka logs
    in again on the same connection with a fresh one, so producing goes on undisturbed."""
    create_acls(oidc.admin(), [topic_acl("reauth-oidc", "User:app", op)
                               for op in (AclOperation.CREATE, AclOperation.WRITE)])  # fmt: skip
    # librdkafka fetches a fresh token at 80% of its lifetime; a re-login with the old one near
    # its expiry gets a session as short as what is left of it.
    oidc.idp.ttl = 6
    before = len(oidc.broker.output(limit=50_000_000))

    def logins() -> dict[str, int]:
        log = oidc.broker.output(limit=50_000_000)[before:]
        assert "without re-authentication" not in log
        counts: dict[str, int] = {}
        for connection in re.findall(r"authenticated on (\S+) as User:app", log):
            counts[connection] = counts.get(connection, 0) + 1
        return counts

    try:
        producer = confluent_kafka.Producer({**oidc.client_conf("SASL_PLAINTEXT"), "acks": "all"})
        failures: list[Any] = []
        deadline = time.monotonic() + 40  # three logins on one connection take two lifetimes
        sent = 0
        while time.monotonic() < deadline and max(logins().values(), default=0) < 3:
            for _ in range(10):
                producer.produce("reauth-oidc", b"%d" % sent,
                                 on_delivery=lambda err, _m: failures.append(err) if err else None)  # fmt: skip
                sent += 1
                producer.poll(0.1)
        assert producer.flush(30) == 0
    finally:
        oidc.idp.ttl = 300
    assert failures == []
    counts = logins()
    assert max(counts.values()) >= 3, counts  # re-authentication, not reconnection


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
def test_a_valid_token_logs_in_with_a_lifetime_bounded_by_its_expiry(
    oidc: OidcBroker, alg: str
) -> None:
    for listener in ("SASL_PLAINTEXT",):  # the SASL_SSL listener's file JWKS: the test above
        auth, sock = _authenticate(oidc.ports[listener], oidc.idp.token(alg=alg, ttl=20))
        with sock:
            assert (auth.error_code, auth.auth_bytes) == (ErrorCode.none, b"")
            # KIP-368 with a token: the session ends when the token does, before the max.
            lifetime_ms = auth.session_lifetime.total_seconds() * 1000
            assert 10_000 < lifetime_ms <= 21_000  # exp is rounded up to a second
            assert _call(sock, ApiKey.METADATA, 4, topics=None,
                         allow_auto_topic_creation=False).brokers  # fmt: skip


def _unsigned(idp: IdentityProvider) -> str:
    claims = jwt.decode(idp.token(), options={"verify_signature": False})
    return jwt.encode(claims, None, algorithm="none")


def _forged(idp: IdentityProvider) -> str:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    claims = jwt.decode(idp.token(), options={"verify_signature": False})
    return jwt.encode(claims, other, algorithm="RS256", headers={"kid": "rsa-1"})


def _hmac(idp: IdentityProvider) -> str:
    claims = jwt.decode(idp.token(), options={"verify_signature": False})
    return jwt.encode(claims, "a-shared-secret-of-at-least-32-bytes!", algorithm="HS256",
                      headers={"kid": "rsa-1"})  # fmt: skip


REFUSED = {
    "expired": (lambda idp: idp.token(ttl=-60), "expired"),
    "wrong audience": (lambda idp: idp.token(aud="someone-else"), "audience"),
    "wrong issuer": (lambda idp: idp.token(iss="https://evil.test"), "issuer"),
    "bad signature": (_forged, "signature"),
    "unsigned": (_unsigned, "'none'"),
    "hmac": (_hmac, "'HS256'"),
    "no subject": (lambda idp: idp.token(sub=None), "'sub'"),
    "unknown key id": (
        lambda idp: jwt.encode(
            {"sub": "x", "exp": int(time.time()) + 60, "aud": AUDIENCE, "iss": ISSUER},
            idp.rsa,
            algorithm="RS256",
            headers={"kid": "rotated"},
        ),
        "key id",
    ),  # fmt: skip
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_bad_tokens_get_the_error_challenge_then_fail(oidc: OidcBroker, case: str) -> None:
    make, reason = REFUSED[case]
    auth, sock = _authenticate(oidc.ports["SASL_PLAINTEXT"], make(oidc.idp))
    with sock:
        # RFC 7628: the server's error challenge, which the client acknowledges with %x01.
        assert (auth.error_code, auth.auth_bytes) == (ErrorCode.none, INVALID_TOKEN)
        assert json.loads(auth.auth_bytes) == {"status": "invalid_token"}
        final = _call(sock, ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\x01")
        assert final.error_code == ErrorCode.sasl_authentication_failed
        assert reason in (final.error_message or ""), final.error_message
        assert _closed(sock)


def test_an_authorization_id_must_be_the_subject(oidc: OidcBroker) -> None:
    auth, sock = _authenticate(oidc.ports["SASL_PLAINTEXT"], oidc.idp.token(), authzid="admin")
    with sock:
        assert auth.error_code == ErrorCode.sasl_authentication_failed
        assert _closed(sock)
    auth, sock = _authenticate(oidc.ports["SASL_PLAINTEXT"], oidc.idp.token(), authzid=CLIENT_ID)
    with sock:
        assert auth.error_code == ErrorCode.none
    assert oidc.broker.alive()
    assert "Traceback" not in oidc.broker.output()


def test_client_response_parsing_and_session_lifetime() -> None:
    assert parse_client_response(b"n,,\x01auth=Bearer abc\x01\x01") == ("abc", None)
    assert parse_client_response(b"n,a=bob,\x01auth=Bearer abc\x01ext=1\x01\x01") == ("abc", "bob")
    for bad in (b"n,,auth=Bearer abc", b"n,,\x01auth=Basic abc\x01\x01", b"p=x,,\x01\x01\x01",
                b"\xff\x01\x01\x01"):  # fmt: skip
        with pytest.raises(SaslFailure):
            parse_client_response(bad)
    now_ms = int(time.time() * 1000)
    assert session_lifetime_ms(0, now_ms + 5000) == 0  # no re-authentication: no expiry
    assert session_lifetime_ms(60_000, None) == 60_000
    assert 4000 < session_lifetime_ms(60_000, now_ms + 5000) <= 5000
    assert session_lifetime_ms(1000, now_ms + 5000) == 1000


def test_the_key_set_is_refreshed_when_due_or_asked(tmp_path: Path) -> None:
    first, second = IdentityProvider(), IdentityProvider()
    try:
        path = tmp_path / "jwks.json"
        path.write_text(json.dumps(first.jwks()))
        keys = JwksKeys(path.as_uri(), refresh_ms=3_600_000)
        settings = JwtSettings(path.as_uri(), (AUDIENCE,), ISSUER)
        assert validate_token(first.token(), keys.keys, settings).principal == "User:app"
        path.write_text(json.dumps(second.jwks()))  # the provider rotated its keys
        assert not keys.refresh_if_due()  # neither due nor asked for
        with pytest.raises(InvalidToken, match="signature"):
            validate_token(second.token(), keys.keys, settings)
        keys.want_refresh()
        assert keys.refresh_if_due(time.monotonic() + 2)
        assert validate_token(second.token(), keys.keys, settings).principal == "User:app"
    finally:
        first.close()
        second.close()


def test_oauthbearer_without_a_jwks_is_a_config_error(tmp_path: Path) -> None:
    config = BrokerConfig.from_properties(None, [
        "listeners=SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms=OAUTHBEARER",
    ])  # fmt: skip
    with pytest.raises(ConfigError, match="unsecured tokens are not accepted"):
        jwt_settings(config, "SASL_PLAINTEXT")
    with pytest.raises(ConfigError, match="unreadable"):
        JwksKeys((tmp_path / "missing.json").as_uri(), 1000)
