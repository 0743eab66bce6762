"""The pieces of TLS and SASL that need no broker: SCRAM against RFC 7677's test vector and a
client written from RFC 5802, the certificate-to-principal rules, and JAAS parsing."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ssl
import tempfile
from pathlib import Path

import pytest

from logkeel.cluster.scram import ScramCredential, ScramError, ScramServerExchange, salted_password
from logkeel.config import BrokerConfig
from logkeel.config.jaas import plain_users
from logkeel.config.types import ConfigError
from logkeel.server.authorization import exposed_listeners
from logkeel.server.network.tls import PrincipalMapper, server_ssl_context
from logkeel.testing.certs import make_certificates

# RFC 7677 section 3: user "user", password "pencil".
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"


def _client_final(cred_password: str, server_first: bytes, mechanism: str) -> tuple[bytes, bytes]:
    digest = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
    attrs = dict(item.split("=", 1) for item in server_first.decode().split(","))
    salted = salted_password(
        mechanism, cred_password, base64.b64decode(attrs["s"]), int(attrs["i"])
    )
    client_key = hmac.digest(salted, b"Client Key", digest)
    without_proof = f"c=biws,r={attrs['r']}"
    auth = b"n=user,r=rOprNGfwEbeRWgbNEkqO," + server_first + b"," + without_proof.encode()
    signature = hmac.digest(hashlib.new(digest, client_key).digest(), auth, digest)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_key = hmac.digest(salted, b"Server Key", digest)
    expected = b"v=" + base64.b64encode(hmac.digest(server_key, auth, digest))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode(), expected


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_succeeds_with_the_password_and_proves_the_server(mechanism: str) -> None:
    salted = salted_password(mechanism, "pencil", RFC7677_SALT, 4096)
    cred = ScramCredential.from_salted_password(mechanism, RFC7677_SALT, 4096, salted)
    server = ScramServerExchange(mechanism, lambda user, mech: cred if user == "user" else None)
    server_first = server.step(RFC7677_CLIENT_FIRST)
    assert server_first.startswith(b"r=rOprNGfwEbeRWgbNEkqO")
    final, expected = _client_final("pencil", server_first, mechanism)
    assert server.step(final) == expected
    assert server.username == "user"


def test_rfc7677_stored_key() -> None:
    salted = salted_password("SCRAM-SHA-256", "pencil", RFC7677_SALT, 4096)
    cred = ScramCredential.from_salted_password("SCRAM-SHA-256", RFC7677_SALT, 4096, salted)
    # The RFC's client proof for its nonces verifies against this stored key.
    server_first = (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    auth = (
        RFC7677_CLIENT_FIRST[3:]
        + b","
        + server_first
        + b",c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    )
    proof = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    signature = hmac.digest(cred.stored_key, auth, "sha256")
    client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
    assert hashlib.sha256(client_key).digest() == cred.stored_key
    assert base64.b64encode(hmac.digest(cred.server_key, auth, "sha256")) == (
        b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    )


@pytest.mark.parametrize("password", ["wrong", ""])
def test_scram_wrong_password_and_unknown_user_fail_alike(password: str) -> None:
    cred = ScramCredential.from_password("SCRAM-SHA-256", "pencil")
    server = ScramServerExchange(
        "SCRAM-SHA-256", lambda user, mech: cred if user == "user" else None
    )
    final, _ = _client_final(password, server.step(RFC7677_CLIENT_FIRST), "SCRAM-SHA-256")
    with pytest.raises(ScramError) as wrong:
        server.step(final)
    unknown = ScramServerExchange("SCRAM-SHA-256", lambda user, mech: None)
    with pytest.raises(ScramError) as missing:
        unknown.step(RFC7677_CLIENT_FIRST)
    assert str(wrong.value) == str(missing.value)
    assert "pencil" not in str(wrong.value)


@pytest.mark.parametrize(
    "garbage", [b"", b"\xff\xfe", b"p=tls-unique,,n=u,r=x", b"n,,", b"n,,n=user"]
)
def test_scram_garbage_is_an_error(garbage: bytes) -> None:
    cred = ScramCredential.from_password("SCRAM-SHA-512", "pencil")
    with pytest.raises(ScramError):
        ScramServerExchange("SCRAM-SHA-512", lambda u, m: cred).step(garbage)


SUBJECT = ((("organizationName", "logkeel"),), (("organizationalUnitName", "apps"),),
           (("commonName", "client"),))  # fmt: skip


@pytest.mark.parametrize(
    ("rules", "principal"),
    [
        ("DEFAULT", "User:CN=client,OU=apps,O=logkeel"),
        ("RULE:^CN=(.*?),OU=apps.*$/$1/,DEFAULT", "User:client"),
        ("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/U", "User:CLIENT@APPS"),
        ("RULE:^CN=nobody.*$/x/,DEFAULT", "User:CN=client,OU=apps,O=logkeel"),
    ],
)
def test_principal_mapping_rules(rules: str, principal: str) -> None:
    assert PrincipalMapper(rules).principal({"subject": SUBJECT}) == principal


def test_no_certificate_is_anonymous_and_bad_rules_are_refused() -> None:
    assert PrincipalMapper("DEFAULT").principal(None) == "User:ANONYMOUS"
    with pytest.raises(ConfigError):
        PrincipalMapper("RULE:no-slashes")


def test_jaas_plain_users() -> None:
    text = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required\n"
        ' username="admin" password="admin-secret" user_admin="admin-secret"'
        ' user_alice="with \\"quote\\"";'
    )
    assert plain_users(text, "k") == {"admin": "admin-secret", "alice": 'with "quote"'}
    with pytest.raises(ConfigError) as err:
        plain_users('PlainLoginModule required user_a="secret"', "k")  # no ';'
    assert "secret" not in str(err.value)


def test_tls_context_from_pem_strings(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path)
    config = BrokerConfig(
        {
            "listeners": "SSL://127.0.0.1:0",
            "ssl.keystore.certificate.chain": certs.server_cert.read_text(),
            "ssl.keystore.key": certs.server_key.read_text(),
            "ssl.truststore.certificates": certs.ca.read_text(),
            "ssl.client.auth": "required",
            "ssl.enabled.protocols": "TLSv1.3",
        }
    )
    ctx = server_ssl_context(config, "SSL")
    assert [c["subject"] for c in ctx.get_ca_certs()] == [
        ((("organizationName", "logkeel"),), (("commonName", "logkeel test CA"),))
    ]
    assert ctx.minimum_version == ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    wrong_key = BrokerConfig(
        {
            "listeners": "SSL://127.0.0.1:0",
            "ssl.keystore.certificate.chain": certs.server_cert.read_text(),
            "ssl.keystore.key": certs.client_key.read_text(),
        }
    )
    with pytest.raises(ConfigError, match="listener SSL"):
        server_ssl_context(wrong_key, "SSL")
    assert not list(Path(tempfile.gettempdir()).glob("logkeel-keystore-*"))


def test_exposed_plaintext_listeners_are_named_only_without_an_authorizer() -> None:
    assert exposed_listeners(BrokerConfig({})) == []  # the default: loopback only
    wide = {"listeners": "PLAINTEXT://:9092,SASL_PLAINTEXT://0.0.0.0:9093,INNER://[::1]:9094",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                              "INNER:PLAINTEXT"}  # fmt: skip
    assert exposed_listeners(BrokerConfig(wide)) == ["PLAINTEXT://:9092"]
    guarded = {**wide, "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
    assert exposed_listeners(BrokerConfig(guarded)) == []
