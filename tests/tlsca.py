"""A certificate authority made inside the test run, for the TLS tests: its certificate, a server
certificate for 127.0.0.1 and localhost, and client certificates with a chosen subject CN, all
written as PEM files into a directory the test owns.

Keys are ECDSA P-256 (quick to generate); the certificates carry the extensions that OpenSSL's
strict X.509 checks ask for (key identifiers, a critical basicConstraints and keyUsage on the CA),
so that they verify under any client's default settings.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Long enough for any test run, short enough that a leaked file is worthless soon.
VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, as PEM files."""

    certfile: Path
    keyfile: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "BatonMQ tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path, password: bytes | None = None) -> None:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )


class TestCA:
    """A root CA named `name` whose files live in `directory` (created if need be)."""

    __test__ = False  # a helper, not a test class, despite its name

    def __init__(self, directory: Path, name: str = "BatonMQ test CA") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        public_key = self._key.public_key()
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        slug = name.lower().replace(" ", "-")
        self.certfile = directory / f"{slug}.crt"
        self.certfile.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def _issue(
        self,
        stem: str,
        common_name: str,
        usages: list[x509.ObjectIdentifier],
        alternative_names: list[x509.GeneralName],
        key_password: bytes | None = None,
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        if alternative_names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(alternative_names), critical=False
            )
        certificate = builder.sign(self._key, hashes.SHA256())
        pair = KeyPair(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        pair.certfile.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pair.keyfile, key_password)
        return pair

    def server(self, stem: str = "server", *, key_password: bytes | None = None) -> KeyPair:
        """A server certificate for 127.0.0.1, ::1 and localhost (CN localhost)."""
        return self._issue(
            stem,
            "localhost",
            [ExtendedKeyUsageOID.SERVER_AUTH],
            [
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                x509.IPAddress(ipaddress.ip_address("::1")),
            ],
            key_password,
        )

    def client(self, common_name: str, stem: str | None = None) -> KeyPair:
        """A client certificate whose subject CN is `common_name` (the user EXTERNAL logs in
        as)."""
        return self._issue(
            stem or f"client-{common_name}", common_name, [ExtendedKeyUsageOID.CLIENT_AUTH], []
        )

    def member(self, broker: str) -> KeyPair:
        """A cluster member's certificate (CN `broker`): it serves heartbeats and sends them, so
        it is both a server and a client certificate."""
        return self._issue(
            f"member-{broker}",
            broker,
            [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
            [],
        )
