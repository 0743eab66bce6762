"""The pieces of TLS and SASL that need no broker: SCRAM against RFC 7677's test vector and a
client written from RFC 5802, the certificate-to-principal rules, JAAS parsing, the
inter-broker listener and login, and session expiry (re-authentication)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ssl
import tempfile
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from logkeel.cluster.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from logkeel.cluster.metadata import BrokerInfo
from logkeel.cluster.scram import (
    ScramClientExchange,
    ScramCredential,
    ScramError,
    ScramServerExchange,
    decoy_shape,
    salted_password,
)
from logkeel.config import BrokerConfig
from logkeel.config.jaas import plain_users
from logkeel.config.types import ConfigError
from logkeel.server.authorization import (
    ALTER_CLUSTER,
    DESCRIBE_CLUSTER,
    RequestAuthorizer,
    anyone,
    exposed_listeners,
    gated,
    refusal,
)
from logkeel.server.handlers import RequestContext
from logkeel.server.network.client import SaslLogin
from logkeel.server.network.inter_broker import InterBroker, client_security, inter_broker
from logkeel.server.network.sasl import ListenerSasl
from logkeel.server.network.tls import PrincipalMapper, server_ssl_context
from logkeel.server.session import SaslFailure, Session
from logkeel.testing.certs import make_certificates

# RFC 7677 section 3: user "user", password "pencil".
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SECRET = b"decoy secret of the test"


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
    server = ScramServerExchange(
        mechanism, lambda user, mech: cred if user == "user" else None, SECRET
    )
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
        "SCRAM-SHA-256", lambda user, mech: cred if user == "user" else None, SECRET
    )
    final, _ = _client_final(password, server.step(RFC7677_CLIENT_FIRST), "SCRAM-SHA-256")
    with pytest.raises(ScramError) as wrong:
        server.step(final)
    # An unknown user gets a server-first message too (a decoy credential) and fails only at
    # the proof, with the same message: the exchange does not tell that the user is missing.
    unknown = ScramServerExchange("SCRAM-SHA-256", lambda user, mech: None, SECRET)
    final, _ = _client_final(password, unknown.step(RFC7677_CLIENT_FIRST), "SCRAM-SHA-256")
    with pytest.raises(ScramError) as missing:
        unknown.step(final)
    assert str(wrong.value) == str(missing.value)
    assert "pencil" not in str(wrong.value)


def _salt_and_iterations(server_first: bytes) -> tuple[str, str]:
    attrs = dict(item.split("=", 1) for item in server_first.decode().split(","))
    return attrs["s"], attrs["i"]


def test_an_unknown_users_decoy_is_stable_per_secret_and_user() -> None:
    def first(user: str, secret: bytes) -> tuple[str, str]:
        server = ScramServerExchange("SCRAM-SHA-512", lambda u, m: None, secret)
        return _salt_and_iterations(server.step(f"n,,n={user},r=abc".encode()))

    # The same answer at every attempt (and on every broker sharing the secret), as a real
    # user's stored salt would be; another user or another secret gets another salt.
    assert first("mallory", SECRET) == first("mallory", SECRET)
    assert first("mallory", SECRET)[0] != first("trent", SECRET)[0]
    assert first("mallory", SECRET)[0] != first("mallory", b"another secret")[0]
    salt, iterations = first("mallory", SECRET)
    assert len(base64.b64decode(salt)) == 32 and iterations == "4096"  # like a real credential


@pytest.mark.parametrize(
    ("authzid", "refused"), [("", False), ("a=user", False), ("a=admin", True), ("x=user", True)]
)
def test_scram_authorization_id_must_be_the_user(authzid: str, refused: bool) -> None:
    cred = ScramCredential.from_password("SCRAM-SHA-256", "pencil")
    server = ScramServerExchange("SCRAM-SHA-256", lambda user, mech: cred, SECRET)
    client_first = f"n,{authzid},n=user,r=rOprNGfwEbeRWgbNEkqO".encode()
    if refused:
        with pytest.raises(ScramError, match="authorization id"):
            server.step(client_first)
    else:
        assert server.step(client_first).startswith(b"r=rOprNGfwEbeRWgbNEkqO")


@pytest.mark.parametrize(
    "garbage", [b"", b"\xff\xfe", b"p=tls-unique,,n=u,r=x", b"n,,", b"n,,n=user"]
)
def test_scram_garbage_is_an_error(garbage: bytes) -> None:
    cred = ScramCredential.from_password("SCRAM-SHA-512", "pencil")
    with pytest.raises(ScramError):
        ScramServerExchange("SCRAM-SHA-512", lambda u, m: cred, SECRET).step(garbage)


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
    guarded = {
        **wide,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    }
    assert exposed_listeners(BrokerConfig(guarded)) == []


# ---- the client side a broker logs in to another broker with --------------------------------


def _server_for(mechanism: str, user: str, password: str) -> ScramServerExchange:
    credential = ScramCredential.from_password(mechanism, password)
    return ScramServerExchange(
        mechanism,
        lambda name, mech: credential if (name, mech) == (user, mechanism) else None,
        SECRET,
    )


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user", ["broker", "odd,name=x"])
def test_scram_client_logs_in_and_checks_the_server(mechanism: str, user: str) -> None:
    server = _server_for(mechanism, user, "pencil")
    client = ScramClientExchange(mechanism, user, "pencil")
    client_final = client.step(server.step(client.first()))
    assert client.step(server.step(client_final)) == b""
    assert client.complete and server.username == user


def test_scram_client_refuses_a_server_that_cannot_prove_itself() -> None:
    server = _server_for("SCRAM-SHA-512", "broker", "pencil")
    client = ScramClientExchange("SCRAM-SHA-512", "broker", "pencil")
    server_final = server.step(client.step(server.step(client.first())))
    forged = b"v=" + base64.b64encode(b"\0" * 64)
    assert server_final != forged
    with pytest.raises(ScramError, match="signature"):
        client.step(forged)
    client = ScramClientExchange("SCRAM-SHA-512", "broker", "pencil")
    client.step(_server_for("SCRAM-SHA-512", "broker", "pencil").step(client.first()))
    with pytest.raises(ScramError, match="refused"):
        client.step(b"e=invalid-proof")


def test_scram_client_with_a_wrong_password_is_refused_by_the_server() -> None:
    server = _server_for("SCRAM-SHA-256", "broker", "pencil")
    client = ScramClientExchange("SCRAM-SHA-256", "broker", "crayon")
    with pytest.raises(ScramError, match="invalid credentials"):
        server.step(client.step(server.step(client.first())))


def test_scram_client_refuses_a_nonce_it_did_not_start_or_too_few_iterations() -> None:
    client = ScramClientExchange("SCRAM-SHA-256", "broker", "pencil")
    client.first()
    with pytest.raises(ScramError, match="server-first"):
        client.step(b"r=someone-elses-nonce,s=QSXCR+Q6sek8bf92,i=4096")
    client = ScramClientExchange("SCRAM-SHA-256", "broker", "pencil")
    nonce = client.first().decode().rpartition("r=")[2]
    with pytest.raises(ScramError, match="iteration"):
        client.step(f"r={nonce}xyz,s=QSXCR+Q6sek8bf92,i=1".encode())


# ---- the inter-broker listener and this broker's credentials on it ----------------------------

CLUSTER = {"zookeeper.connect": "127.0.0.1:2181/x"}
TWO_LISTENERS = {
    **CLUSTER,
    "listeners": "CLIENT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
    "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:SASL_PLAINTEXT",
}


@pytest.mark.parametrize(
    ("settings", "listener"),
    [
        ({}, "PLAINTEXT"),  # Kafka's default: the listener named after PLAINTEXT
        ({"listeners": "SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092"}, "PLAINTEXT"),
        ({"listeners": "SSL://127.0.0.1:9093"}, "SSL"),  # logkeel: else the first one
        ({**TWO_LISTENERS, "inter.broker.listener.name": "internal"}, "INTERNAL"),
        ({"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
          "security.inter.broker.protocol": "SSL"}, "SSL"),
    ],
)  # fmt: skip
def test_inter_broker_listener_is_chosen_as_kafka_does(
    settings: dict[str, str], listener: str
) -> None:
    assert BrokerConfig(settings).inter_broker_listener == listener


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({**TWO_LISTENERS, "inter.broker.listener.name": "INTERNAL",
          "security.inter.broker.protocol": "SSL"}, "not both"),
        ({**TWO_LISTENERS, "inter.broker.listener.name": "OTHER"}, "not one of listeners"),
        ({"security.inter.broker.protocol": "SSL"}, "not one of listeners"),
        ({**TWO_LISTENERS, "inter.broker.listener.name": "INTERNAL",
          "advertised.listeners": "CLIENT://broker1:9092"}, "advertised.listeners"),
    ],
)  # fmt: skip
def test_inter_broker_listener_mistakes_are_refused(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(settings)


def test_inter_broker_login_comes_from_the_listeners_jaas_config() -> None:
    base = {**TWO_LISTENERS, "inter.broker.listener.name": "INTERNAL"}
    with pytest.raises(ConfigError, match="listener.name.internal.plain.sasl.jaas.config"):
        inter_broker(BrokerConfig(base))
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'username="broker" password="s3cret" user_broker="s3cret";')  # fmt: skip
    got = inter_broker(
        BrokerConfig({**base, "listener.name.internal.plain.sasl.jaas.config": jaas})
    )
    assert got.listener == "INTERNAL" and got.security.protocol == "SASL_PLAINTEXT"
    assert got.security.sasl == SaslLogin("PLAIN", "broker", "s3cret")
    assert "s3cret" not in repr(got)
    with pytest.raises(ConfigError, match="sasl.enabled.mechanisms"):
        inter_broker(BrokerConfig({**base, "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
                                   "sasl.enabled.mechanisms": "PLAIN"}))  # fmt: skip
    # A single node reaches no other broker: nothing to log in with is needed.
    single = {k: v for k, v in base.items() if k != "zookeeper.connect"}
    assert inter_broker(BrokerConfig(single)).security.sasl is None


def test_inter_broker_tls_uses_the_listeners_stores_and_checks_the_host(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path)
    config = BrokerConfig({
        **CLUSTER, "listeners": "SSL://127.0.0.1:9093",
        "ssl.keystore.location": str(certs.server), "ssl.truststore.location": str(certs.ca),
    })  # fmt: skip
    factory = inter_broker(config).security.ssl_context
    assert factory is not None
    ctx = factory()
    assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    lax = config.updated({"ssl.endpoint.identification.algorithm": ""})
    lax_factory = inter_broker(lax).security.ssl_context
    assert lax_factory is not None and not lax_factory().check_hostname
    broken = config.updated({"ssl.truststore.location": str(tmp_path / "missing.pem")})
    with pytest.raises(ConfigError):
        inter_broker(broken)  # at start-up, not at the first fetch


def test_endpoint_of_a_peer_is_its_inter_broker_listener() -> None:
    peer = BrokerInfo(2, "10.0.0.2", 9092, None, (("CLIENT", "10.0.0.2", 9092),
                                                  ("INTERNAL", "10.1.0.2", 9093)))  # fmt: skip
    assert InterBroker("INTERNAL").endpoint(peer) == ("10.1.0.2", 9093)
    assert InterBroker("INTERNAL").endpoint(BrokerInfo(3, "h", 1)) == ("h", 1)


# ---- re-authentication (KIP-368) --------------------------------------------------------------


def _session(reauth_ms: int) -> Session:
    users = {"alice": "a-pw", "bob": "b-pw"}
    return Session("SASL_PLAINTEXT", "SASL_PLAINTEXT", sasl=ListenerSasl(("PLAIN",), users, None),  # type: ignore[arg-type]
                   reauth_ms=reauth_ms)  # fmt: skip


def test_a_session_expires_and_is_renewed_by_re_authenticating() -> None:
    session = _session(60_000)
    session.begin("PLAIN")
    assert not session.may_serve(3)
    session.step(b"\0alice\0a-pw")
    assert session.may_serve(3) and session.principal == "User:alice"
    assert session.expires_at is not None and not session.expired()
    assert session.expired(session.expires_at + 1)
    first_expiry = session.expires_at
    session.begin("PLAIN")  # re-authentication: the old session still serves meanwhile
    assert session.exchanging and session.may_serve(3)
    session.step(b"\0alice\0a-pw")
    assert not session.exchanging and session.expires_at >= first_expiry


def test_re_authentication_keeps_the_principal_and_the_mechanism() -> None:
    session = _session(60_000)
    session.begin("PLAIN")
    session.step(b"\0alice\0a-pw")
    session.begin("PLAIN")
    with pytest.raises(SaslFailure, match="principal"):
        session.step(b"\0bob\0b-pw")
    assert session.close_after_response
    other = _session(60_000)
    other.begin("PLAIN")
    other.step(b"\0alice\0a-pw")
    with pytest.raises(SaslFailure, match="must use PLAIN"):
        other.begin("SCRAM-SHA-256")


def test_without_reauth_ms_sessions_never_expire_and_re_authentication_is_refused() -> None:
    session = _session(0)
    session.begin("PLAIN")
    session.step(b"\0alice\0a-pw")
    assert session.expires_at is None and not session.expired()
    with pytest.raises(SaslFailure, match="re-authentication is off"):
        session.begin("PLAIN")


def test_command_client_properties_are_read_as_kafka_clients_read_them(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path)
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'username="admin" password="pw";')  # fmt: skip
    sasl_ssl = {"security.protocol": "sasl_ssl", "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": jaas, "ssl.truststore.location": str(certs.ca)}  # fmt: skip
    got = client_security(sasl_ssl, "client.properties")
    assert got.protocol == "SASL_SSL" and got.sasl == SaslLogin("PLAIN", "admin", "pw")
    assert got.ssl_context is not None and got.ssl_context().check_hostname
    assert client_security({}, "x").protocol == "PLAINTEXT"
    for broken, message in (
        ({**sasl_ssl, "sasl.mechanism": "GSSAPI"}, "PLAIN, SCRAM"),  # Kafka's default
        ({**sasl_ssl, "sasl.jaas.config": jaas.replace('password="pw"', "")}, "username"),
        ({**sasl_ssl, "ssl.truststore.location": str(tmp_path / "none.pem")}, "client.properties"),
        ({"security.protocol": "TLS"}, "unknown"),
    ):
        with pytest.raises(ConfigError, match=message):
            client_security(broken, "client.properties")


# ---- authorization rules, without a socket (issue 26) ----------------------------------------


def _request_authorizer(*bindings: AclBinding) -> RequestAuthorizer:
    config = BrokerConfig.from_properties(None, {
        "log.dirs": tempfile.mkdtemp(), "super.users": "User:admin",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    })  # fmt: skip

    class Store:
        def acl_bindings(self) -> tuple[AclBinding, ...]:
            return bindings

    return RequestAuthorizer(config, Store())  # type: ignore[arg-type]


def _as(user: str) -> RequestContext:
    session = Session("SASL_PLAINTEXT", "SASL_PLAINTEXT", principal=f"User:{user}")
    return RequestContext(api_key=50, api_version=0, correlation_id=1, client_id="", peer=("10.0.0.1", 1),
                          connection_id="c", listener="SASL_PLAINTEXT", session=session)  # fmt: skip


def _cluster(op: AclOperation) -> AclBinding:
    return AclBinding(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, "User:bob", "*",
                      op, AclPermissionType.ALLOW)  # fmt: skip


def test_a_rules_checks_refuse_without_the_acl_and_serve_with_it() -> None:
    authorizer = _request_authorizer(_cluster(AclOperation.DESCRIBE))
    describe, alter = gated(DESCRIBE_CLUSTER), gated(ALTER_CLUSTER)
    refused = ErrorCode.cluster_authorization_failed
    assert refusal(authorizer, _as("carol"), object(), describe) == refused
    assert refusal(authorizer, _as("bob"), object(), describe) is None
    assert refusal(authorizer, _as("bob"), object(), alter) == refused
    assert refusal(authorizer, _as("admin"), object(), alter) is None  # a super user
    assert refusal(authorizer, _as("carol"), object(), anyone("bootstrap")) is None


def test_authorized_operations_are_kafkas_bit_field_of_the_principals_acls() -> None:
    authorizer = _request_authorizer(
        _cluster(AclOperation.ALTER_CONFIGS),
        AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:bob", "*",
                   AclOperation.WRITE, AclPermissionType.ALLOW),
    )  # fmt: skip
    # ALTER_CONFIGS implies DESCRIBE_CONFIGS, WRITE implies DESCRIBE.
    assert authorizer.authorized_operations(_as("bob"), ResourceType.CLUSTER) == (1 << 10) | (
        1 << 11
    )
    assert authorizer.authorized_operations(_as("bob"), ResourceType.TOPIC, "t") == (1 << 4) | (
        1 << 8
    )
    assert authorizer.authorized_operations(_as("carol"), ResourceType.TOPIC, "t") == 0
    assert authorizer.authorized_operations(_as("admin"), ResourceType.GROUP, "g") == (
        (1 << 3) | (1 << 6) | (1 << 8)
    )


def test_an_unknown_users_decoy_has_the_shape_of_most_stored_credentials() -> None:
    """Clients choose the salt (librdkafka 64 bytes, ``logkeel users`` 32): a decoy of another
    length or count would tell unknown users apart at the server-first message."""
    stored = [
        ScramCredential.from_salted_password("SCRAM-SHA-256", bytes(64), 4096, bytes(32)),
        ScramCredential.from_salted_password("SCRAM-SHA-256", bytes(64), 4096, bytes(32)),
        ScramCredential.from_salted_password("SCRAM-SHA-256", bytes(32), 8192, bytes(32)),
    ]
    assert decoy_shape(stored) == (64, 4096)
    assert decoy_shape([]) == (32, 4096)
    server = ScramServerExchange(
        "SCRAM-SHA-256", lambda u, m: None, SECRET, lambda: decoy_shape(stored)
    )
    salt, iterations = _salt_and_iterations(server.step(b"n,,n=nobody,r=abc"))
    assert (len(base64.b64decode(salt)), iterations) == (64, "4096")
