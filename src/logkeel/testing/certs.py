"""Throw-away certificates for TLS tests and benchmarks: a CA, a server certificate for
127.0.0.1/localhost signed by it, client certificates signed by it (one on demand that has
expired), and an untrusted one from a second CA. PEM files, written with the ``cryptography``
package (a test dependency)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "Certificates",
    "expired_client_certificate",
    "make_certificates",
    "renew_server_certificate",
]


@dataclass(frozen=True)
class Certificates:
    ca: Path  # the CA certificate (trust store of both sides)
    ca_key: Path
    server: Path  # server key + certificate chain, one PEM file (ssl.keystore.location)
    server_cert: Path
    server_key: Path
    client_cert: Path  # subject CN=client,OU=apps,O=logkeel
    client_key: Path
    untrusted_cert: Path  # CN=intruder, from a CA nobody trusts
    untrusted_key: Path


def _name(cn: str, ou: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "logkeel")]
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    server: bool = False,
    expired: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    # An expired one was valid for a day that ended an hour ago.
    end = now - datetime.timedelta(hours=1) if expired else now + datetime.timedelta(days=2)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(end - datetime.timedelta(days=2, minutes=5))
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), True
        )
    else:
        # A broker's certificate serves both ends of the connections between brokers.
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        if server:
            usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_certificates(directory: Path) -> Certificates:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, rogue_key = _key(), _key()
    ca_name, rogue_name = _name("logkeel test CA"), _name("rogue CA")
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    server_key, client_key, intruder_key = _key(), _key(), _key()
    server = _cert(_name("localhost"), server_key, ca_name, ca_key, server=True)
    client = _cert(_name("client", "apps"), client_key, ca_name, ca_key)
    intruder = _cert(_name("intruder"), intruder_key, rogue_name, rogue_key)
    files = {
        "ca.pem": _pem_cert(ca),
        "ca-key.pem": _pem_key(ca_key),
        "server.pem": _pem_key(server_key) + _pem_cert(server) + _pem_cert(ca),
        "server-cert.pem": _pem_cert(server),
        "server-key.pem": _pem_key(server_key),
        "client-cert.pem": _pem_cert(client),
        "client-key.pem": _pem_key(client_key),
        "intruder-cert.pem": _pem_cert(intruder),
        "intruder-key.pem": _pem_key(intruder_key),
    }
    for name, data in files.items():
        (directory / name).write_bytes(data)
    d = directory
    return Certificates(
        d / "ca.pem",
        d / "ca-key.pem",
        d / "server.pem",
        d / "server-cert.pem",
        d / "server-key.pem",
        d / "client-cert.pem",
        d / "client-key.pem",
        d / "intruder-cert.pem",
        d / "intruder-key.pem",
    )


def expired_client_certificate(certs: Certificates) -> tuple[Path, Path]:
    """A client certificate (CN=late) from the trusted CA whose validity ended an hour ago:
    (certificate file, key file)."""
    ca = x509.load_pem_x509_certificate(certs.ca.read_bytes())
    ca_key = serialization.load_pem_private_key(certs.ca_key.read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = _key()
    cert = _cert(_name("late", "apps"), key, ca.subject, ca_key, expired=True)
    cert_path, key_path = (
        certs.ca.with_name("expired-cert.pem"),
        certs.ca.with_name("expired-key.pem"),
    )
    cert_path.write_bytes(_pem_cert(cert))
    key_path.write_bytes(_pem_key(key))
    return cert_path, key_path


def renew_server_certificate(certs: Certificates) -> int:
    """A new server key and certificate from the same CA, written over ``certs.server`` at
    once (a rename, as a certificate manager does); returns the new serial number."""
    ca = x509.load_pem_x509_certificate(certs.ca.read_bytes())
    ca_key = serialization.load_pem_private_key(certs.ca_key.read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = _key()
    cert = _cert(_name("localhost"), key, ca.subject, ca_key, server=True)
    staging = certs.server.with_suffix(".new")
    staging.write_bytes(_pem_key(key) + _pem_cert(cert) + _pem_cert(ca))
    staging.replace(certs.server)
    return int(cert.serial_number)
