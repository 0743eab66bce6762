"""SCRAM-SHA-256/512 (RFC 5802, RFC 7677): salted credentials, the server side of the
exchange, and the client side a broker uses to log in to another broker.

Only the salted form is ever stored: salt, iteration count, StoredKey = H(HMAC(SaltedPassword,
"Client Key")) and ServerKey = HMAC(SaltedPassword, "Server Key"). That is enough to check a
client's proof and to prove the server to the client, and not enough to log in as the user.
Credentials are kept in the metadata store as ``ScramCredential.to_json()`` documents, keyed by
user and mechanism name.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_ITERATIONS",
    "MECHANISMS",
    "MIN_ITERATIONS",
    "ScramClientExchange",
    "ScramCredential",
    "ScramError",
    "ScramServerExchange",
    "decoy_credential",
    "decoy_shape",
    "mechanism_name",
    "mechanism_type",
    "salted_password",
]

# Kafka's ScramMechanism: name -> (hash, the type byte of the Describe/AlterUserScramCredentials
# APIs).
MECHANISMS: dict[str, tuple[str, int]] = {
    "SCRAM-SHA-256": ("sha256", 1),
    "SCRAM-SHA-512": ("sha512", 2),
}
# Kafka's bounds on the iteration count of a credential.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
# What kafka-configs gives a credential by default, so the decoy of an unknown user looks like one.
DECOY_ITERATIONS = 4096


class ScramError(Exception):
    """The exchange failed; the message is safe to send to the client (names no secret)."""


def mechanism_type(name: str) -> int:
    return MECHANISMS[name][1]


def mechanism_name(type_byte: int) -> str | None:
    return next((name for name, (_, t) in MECHANISMS.items() if t == type_byte), None)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism][0], password.encode(), salt, iterations)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salt: bytes, iterations: int, salted: bytes
    ) -> ScramCredential:
        digest = MECHANISMS[mechanism][0]
        client_key = hmac.digest(salted, b"Client Key", digest)
        return cls(
            mechanism,
            salt,
            iterations,
            hashlib.new(digest, client_key).digest(),
            hmac.digest(salted, b"Server Key", digest),
        )

    @classmethod
    def from_password(
        cls, mechanism: str, password: str, iterations: int = MIN_ITERATIONS
    ) -> ScramCredential:
        salt = os.urandom(32)
        salted = salted_password(mechanism, password, salt, iterations)
        return cls.from_salted_password(mechanism, salt, iterations, salted)

    def to_json(self) -> dict[str, Any]:
        b64 = base64.b64encode
        return {
            "salt": b64(self.salt).decode(),
            "iterations": self.iterations,
            "stored_key": b64(self.stored_key).decode(),
            "server_key": b64(self.server_key).decode(),
        }

    @classmethod
    def from_json(cls, mechanism: str, doc: Mapping[str, Any]) -> ScramCredential:
        b64 = base64.b64decode
        return cls(
            mechanism,
            b64(doc["salt"]),
            int(doc["iterations"]),
            b64(doc["stored_key"]),
            b64(doc["server_key"]),
        )


CredentialLookup = Callable[[str, str], ScramCredential | None]
_FAILED = (
    "Authentication failed during authentication due to invalid credentials with SASL mechanism"
)


def decoy_credential(
    mechanism: str,
    user: str,
    secret: bytes,
    shape: tuple[int, int] = (32, DECOY_ITERATIONS),
) -> ScramCredential:
    """The credential an unknown user is answered with (RFC 5802 section 5.1): a salt derived
    from the user name and the server's ``secret``, so it is the same at every attempt, on every
    broker sharing the secret; the salt length and iteration count of ``shape`` (see
    ``decoy_shape``); keys no password yields. The exchange then runs to the proof and fails
    there, as a wrong password does: neither the answer, its shape nor its timing tells whether
    the user exists."""
    salt_length, iterations = shape
    digest = MECHANISMS[mechanism][0]
    seed = hmac.digest(secret, f"{mechanism}\0{user}".encode(), digest)
    salt = b""
    block = 0
    while len(salt) < salt_length:
        salt += hmac.digest(seed, b"salt%d" % block, digest)
        block += 1
    return ScramCredential(
        mechanism,
        salt[:salt_length],
        iterations,
        hmac.digest(seed, b"stored key", digest),
        hmac.digest(seed, b"server key", digest),
    )


def decoy_shape(credentials: Iterable[ScramCredential]) -> tuple[int, int]:
    """The (salt length, iterations) most stored credentials of a mechanism have: a decoy of
    another shape would tell unknown users apart at the server-first message (clients choose
    the salt: librdkafka 64 bytes, logkeel users 32). Ties go to the shorter salt and lower
    count; with no credential, 32 bytes and Kafka's default count."""
    counts = Counter((len(c.salt), c.iterations) for c in credentials)
    if not counts:
        return (32, DECOY_ITERATIONS)
    return min(counts, key=lambda shape: (-counts[shape], shape))


class ScramServerExchange:
    """One server-side SCRAM exchange: ``step(client_first)`` -> server-first,
    ``step(client_final)`` -> server-final; ``username`` is set once it succeeded.
    Every failure raises ``ScramError`` with the same message, whether the user is unknown or
    the proof is wrong, and an unknown user is carried to the proof with a decoy credential
    (``decoy_credential`` with ``secret``), so a client learns nothing about which users exist.
    A gs2 authorization id (``a=``) other than the user is refused, as Kafka does."""

    def __init__(
        self,
        mechanism: str,
        lookup: CredentialLookup,
        secret: bytes,
        shape: Callable[[], tuple[int, int]] = lambda: (32, DECOY_ITERATIONS),
    ) -> None:
        self._mechanism = mechanism
        self._shape = shape
        self._digest = MECHANISMS[mechanism][0]
        self._lookup = lookup
        self._secret = secret
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._user = ""
        self.username: str | None = None

    @property
    def failure_message(self) -> str:
        return f"{_FAILED} {self._mechanism}"

    def step(self, message: bytes) -> bytes:
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError(f"invalid SCRAM message for {self._mechanism}") from None
        if self._credential is None:
            return self._client_first(text)
        if self.username is None:
            return self._client_final(text)
        raise ScramError("the SCRAM exchange is already complete")

    def _client_first(self, text: str) -> bytes:
        gs2_cbind, _, rest = text.partition(",")
        if gs2_cbind not in ("n", "y"):
            raise ScramError("invalid SCRAM client-first message (channel binding unsupported)")
        authzid, sep, bare = rest.partition(",")
        attrs = _attributes(bare) if sep else {}
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise ScramError("invalid SCRAM client-first message")
        self._user = _sasl_name(attrs["n"])
        if authzid and (not authzid.startswith("a=") or _sasl_name(authzid[2:]) != self._user):
            raise ScramError(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        credential = self._lookup(self._user, self._mechanism)
        shape = self._shape()  # asked for known users too: the same work either way
        if credential is None:
            credential = decoy_credential(self._mechanism, self._user, self._secret, shape)
        self._credential = credential
        self._client_first_bare = bare
        self._nonce = attrs["r"] + secrets.token_urlsafe(24)
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        assert self._credential is not None
        without_proof, sep, proof_attr = text.rpartition(",p=")
        attrs = _attributes(without_proof) if sep else {}
        # Kafka accepts a final nonce that ends with the server's (older librdkafka, as in
        # kcat 1.7, repeats the client part); the proof still covers the message as sent.
        if not attrs.get("r", "").endswith(self._nonce) or "c" not in attrs:
            raise ScramError("invalid SCRAM client-final message")
        try:
            proof = base64.b64decode(proof_attr, validate=True)
        except ValueError:
            raise ScramError("invalid SCRAM client proof") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        cred = self._credential
        signature = hmac.digest(cred.stored_key, auth_message, self._digest)
        if len(proof) != len(signature):
            raise ScramError(self.failure_message)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._digest, client_key).digest(), cred.stored_key):
            raise ScramError(self.failure_message)
        self.username = self._user
        server_signature = hmac.digest(cred.server_key, auth_message, self._digest)
        return b"v=" + base64.b64encode(server_signature)


class ScramClientExchange:
    """One client-side SCRAM exchange: ``first()`` -> client-first, ``step(server_first)`` ->
    client-final, ``step(server_final)`` -> b"" once the server has proved it knows the
    credential (a server that cannot is refused: it could be anyone)."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self._mechanism = mechanism
        self._digest = MECHANISMS[mechanism][0]
        self._password = password
        name = username.replace("=", "=3D").replace(",", "=2C")
        self._nonce = secrets.token_urlsafe(24)
        self._client_first_bare = f"n={name},r={self._nonce}"
        self._server_signature: bytes | None = None
        self.complete = False

    def first(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode()

    def step(self, message: bytes) -> bytes:
        text = message.decode("utf-8", "replace")
        if self._server_signature is None:
            return self._client_final(text)
        attrs = _attributes(text)
        if "e" in attrs:
            raise ScramError(f"the server refused the proof: {attrs['e']}")
        try:
            signature = base64.b64decode(attrs.get("v", ""), validate=True)
        except ValueError:
            signature = b""
        if not hmac.compare_digest(signature, self._server_signature):
            raise ScramError("the server's SCRAM signature is wrong")
        self.complete = True
        return b""

    def _client_final(self, server_first: str) -> bytes:
        attrs = _attributes(server_first)
        nonce, salt_text, iterations_text = attrs.get("r", ""), attrs.get("s"), attrs.get("i")
        if not nonce.startswith(self._nonce) or salt_text is None or iterations_text is None:
            raise ScramError("invalid SCRAM server-first message")
        try:
            salt, iterations = base64.b64decode(salt_text, validate=True), int(iterations_text)
        except ValueError:
            raise ScramError("invalid SCRAM server-first message") from None
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ScramError(f"SCRAM iteration count {iterations} out of bounds")
        salted = salted_password(self._mechanism, self._password, salt, iterations)
        credential = ScramCredential.from_salted_password(self._mechanism, salt, iterations, salted)
        without_proof = f"c=biws,r={nonce}"  # biws: base64 of the gs2 header "n,,"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        client_key = hmac.digest(salted, b"Client Key", self._digest)
        signature = hmac.digest(credential.stored_key, auth_message, self._digest)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = hmac.digest(credential.server_key, auth_message, self._digest)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def _sasl_name(text: str) -> str:
    """RFC 5802's saslname: "=2C" is a comma, "=3D" an equals sign."""
    return text.replace("=2C", ",").replace("=3D", "=")


def _attributes(text: str) -> dict[str, str]:
    """``a=x,b=y`` -> {a: x, b: y}; values may contain '=' (base64)."""
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and len(key) == 1:
            out.setdefault(key, value)
    return out
