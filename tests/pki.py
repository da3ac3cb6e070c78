"""Throw-away certificate authorities and certificates for the TLS tests."""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_NOW = datetime.datetime.now(datetime.UTC)


@dataclasses.dataclass
class Issued:
    """A certificate and its key, written as PEM files."""

    cert: Path
    key: Path


class CA:
    """A self-signed CA that issues server and client certificates."""

    def __init__(self, where: Path, name: str = "test-ca") -> None:
        self.where = where
        where.mkdir(parents=True, exist_ok=True)
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_NOW - datetime.timedelta(days=1))
            .not_valid_after(_NOW + datetime.timedelta(days=30))
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
            .sign(self.key, hashes.SHA256())
        )
        self.pem = where / f"{name}.pem"
        self.pem.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        cn: str,
        *,
        server: bool = False,
        expired: bool = False,
        file: str = "",
        client: bool = False,
    ) -> Issued:
        """A certificate for ``cn``: a server's (SAN localhost, 127.0.0.1,
        ::1) or a client's; ``expired``: valid only in the past; ``server``
        and ``client``: both (a board of a cluster, which dials the others)."""
        key = ec.generate_private_key(ec.SECP256R1())
        start, end = (
            (_NOW - datetime.timedelta(days=10), _NOW - datetime.timedelta(days=5))
            if expired
            else (_NOW - datetime.timedelta(days=1), _NOW + datetime.timedelta(days=10))
        )
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [
                        *([ExtendedKeyUsageOID.SERVER_AUTH] if server else []),
                        *([ExtendedKeyUsageOID.CLIENT_AUTH] if client or not server else []),
                    ]
                ),
                critical=False,
            )
        )
        if server:
            b = b.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                        x509.IPAddress(ipaddress.ip_address("::1")),
                    ]
                ),
                critical=False,
            )
        cert = b.sign(self.key, hashes.SHA256())
        stem = file or cn
        out = Issued(self.where / f"{stem}.crt", self.where / f"{stem}.key")
        out.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        out.key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return out
