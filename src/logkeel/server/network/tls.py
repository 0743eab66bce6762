"""TLS for SSL and SASL_SSL listeners: the server ``SSLContext`` built from Kafka's ``ssl.*``
settings (PEM only; ``listener.name.<name>.ssl.*`` overrides them per listener), the client
one a broker reaches another broker's listener with, and the principal a client certificate
maps to (``ssl.principal.mapping.rules``).

PEM given as strings (``ssl.keystore.certificate.chain`` and ``ssl.keystore.key``) go through a
private temporary file, because ``ssl`` loads key pairs from files only; the file is removed
as soon as it is loaded.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from logkeel.config import BrokerConfig
from logkeel.config.types import ConfigError, ConfigProblem
from logkeel.server.session import ANONYMOUS

__all__ = [
    "CertificateReloader",
    "PrincipalMapper",
    "client_ssl_context",
    "client_ssl_context_of",
    "distinguished_name",
    "server_ssl_context",
]

log = logging.getLogger(__name__)

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


def server_ssl_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The context of one TLS listener; ConfigError says what is missing or unreadable."""

    def value(key: str) -> Any:
        return config.listener_value(listener, key)

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    trusted = _load_stores(ctx, value, listener, key_pair_required=True)
    client_auth = value("ssl.client.auth")
    if client_auth != "none" and not trusted:
        raise ConfigError(
            [
                ConfigProblem(
                    "ssl.client.auth",
                    client_auth,
                    f"listener {listener} checks client certificates: set "
                    "ssl.truststore.location or ssl.truststore.certificates",
                )
            ]
        )
    ctx.verify_mode = _CLIENT_AUTH[client_auth]
    return ctx


def client_ssl_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The context this broker connects to another broker's TLS listener ``listener`` with
    (Kafka's inter-broker client): the same key store (its certificate, should the peer ask
    for one) and trust store (the peer's certificate is checked against it, or against the
    system's CAs without one); ``ssl.endpoint.identification.algorithm=https`` also checks
    that the certificate names the host connected to."""

    return client_ssl_context_of(lambda key: config.listener_value(listener, key), listener)


def client_ssl_context_of(value: Callable[[str], Any], name: str) -> ssl.SSLContext:
    """``client_ssl_context`` from the ``ssl.*`` values ``value`` gives (``name`` for
    messages): a listener's, or a command's client properties."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if not _load_stores(ctx, value, name, key_pair_required=False):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    ctx.check_hostname = value("ssl.endpoint.identification.algorithm") == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _load_stores(
    ctx: ssl.SSLContext, value: Callable[[str], Any], listener: str, *, key_pair_required: bool
) -> bool:
    """Loads the listener's TLS versions, key pair and trust store into ``ctx``; returns
    whether a trust store was given."""
    for store in ("ssl.keystore.type", "ssl.truststore.type"):
        if value(store) != "PEM":  # the definitions refuse the rest; a reminder for new ones
            raise ConfigError([ConfigProblem(store, value(store), "only PEM is supported")])
    enabled = sorted(value("ssl.enabled.protocols"), key=list(_VERSIONS).index)
    ctx.minimum_version = _VERSIONS[enabled[0]]
    ctx.maximum_version = _VERSIONS[enabled[-1]]
    ctx.options |= ssl.OP_NO_COMPRESSION
    key_password = value("ssl.key.password") or value("ssl.keystore.password")
    try:
        location = value("ssl.keystore.location")
        chain, key = value("ssl.keystore.certificate.chain"), value("ssl.keystore.key")
        if location:
            ctx.load_cert_chain(location, password=key_password)
        elif chain and key:
            _load_pem_strings(ctx, chain, key, key_password)
        elif key_pair_required:
            raise ConfigError(
                [
                    ConfigProblem(
                        "ssl.keystore.location",
                        None,
                        f"listener {listener} uses TLS: set ssl.keystore.location (PEM key and "
                        "certificate chain) or ssl.keystore.certificate.chain and ssl.keystore.key",
                    )
                ]
            )
        trust_file, trust_pem = (
            value("ssl.truststore.location"),
            value("ssl.truststore.certificates"),
        )
        if trust_file:
            ctx.load_verify_locations(cafile=trust_file)
        elif trust_pem:
            ctx.load_verify_locations(cadata=trust_pem)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            [ConfigProblem("ssl.keystore.location", None, f"listener {listener}: {exc}")]
        ) from None
    return bool(trust_file or trust_pem)


class CertificateReloader:
    """A renewed key store or trust store file is served without a restart: the listening
    context hands every new handshake the newest context (``sni_callback`` runs on each
    ClientHello, SNI or not), and ``reload_if_changed`` rebuilds that context when a file's
    modification time or size changes. Connections already open keep their certificate."""

    def __init__(self, config: BrokerConfig, listener: str) -> None:
        self._config = config
        self.listener = listener
        self._files = [
            Path(p)
            for p in (
                config.listener_value(listener, "ssl.keystore.location"),
                config.listener_value(listener, "ssl.truststore.location"),
            )
            if p
        ]
        self._stamp = self._stamps()
        self.current = server_ssl_context(config, listener)
        self.context = server_ssl_context(config, listener)
        self.context.sni_callback = self._choose

    def _choose(self, conn: ssl.SSLObject, server_name: str | None, ctx: ssl.SSLContext) -> None:
        conn.context = self.current

    def _stamps(self) -> list[tuple[int, int] | None]:
        out: list[tuple[int, int] | None] = []
        for path in self._files:
            try:
                st = path.stat()
                out.append((st.st_mtime_ns, st.st_size))
            except OSError:
                out.append(None)
        return out

    def reload_if_changed(self) -> bool:
        """Blocking (reads the files): call from a thread. True if a new context is in use; a
        file that does not load (half written, wrong password) keeps the old one, logged."""
        stamp = self._stamps()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            fresh = server_ssl_context(self._config, self.listener)
        except ConfigError as exc:
            log.error("listener %s: keeping the current certificate: %s", self.listener, exc)
            return False
        self.current = fresh
        log.info("listener %s: reloaded its TLS key and trust stores", self.listener)
        return True


def _load_pem_strings(ctx: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    fd, path = tempfile.mkstemp(prefix="logkeel-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key.strip() + "\n" + chain.strip() + "\n")
        ctx.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


# Short names Java's X500Principal.getName() (RFC 2253) uses; other attributes keep the name
# Python's ssl gives them.
_RDN_NAMES = {
    "commonName": "CN",
    "organizationalUnitName": "OU",
    "organizationName": "O",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_RULE = re.compile(r"\s*(?:RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU])?|(DEFAULT))\s*(?:,|$)")


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str | None


class PrincipalMapper:
    """Kafka's ``ssl.principal.mapping.rules``: the first rule whose pattern matches the
    certificate's distinguished name gives the principal's name; DEFAULT is the DN itself."""

    def __init__(self, rules: str) -> None:
        self._rules: list[_Rule] = []
        pos, text = 0, rules.strip()
        while pos < len(text):
            match = _RULE.match(text, pos)
            if match is None or match.end() == pos:
                raise ConfigError(
                    [ConfigProblem("ssl.principal.mapping.rules", rules, f"bad rule at {pos}")]
                )
            pattern, replacement, case, default = match.groups()
            if default:
                self._rules.append(_Rule(None, "", None))
            else:
                # Kafka's replacements use $1; Python's re uses \1.
                self._rules.append(
                    _Rule(re.compile(pattern), re.sub(r"\$(\d)", r"\\\1", replacement), case)
                )
            pos = match.end()

    def principal(self, peercert: Mapping[str, Any] | None) -> str:
        """``User:<name>`` for a verified client certificate, ANONYMOUS without one."""
        if not peercert or "subject" not in peercert:
            return ANONYMOUS
        dn = distinguished_name(peercert["subject"])
        for rule in self._rules:
            if rule.pattern is None:
                return f"User:{dn}"
            if rule.pattern.fullmatch(dn):
                name = rule.pattern.sub(rule.replacement, dn)
                if rule.case == "L":
                    name = name.lower()
                elif rule.case == "U":
                    name = name.upper()
                return f"User:{name}"
        return f"User:{dn}"


def distinguished_name(subject: Any) -> str:
    """RFC 2253 form (most specific RDN first, as Java prints it) of ``getpeercert()``'s
    subject, which lists the RDNs in certificate order."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_RDN_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


def _escape(value: str) -> str:
    return re.sub(r'([,+"\\<>;])', r"\\\1", value)
