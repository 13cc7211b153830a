"""Throwaway certificate authorities and server certificates for the network tests.

Made with the ``cryptography`` package (a dependency of the project's crypto): a
self-signed CA (``BasicConstraints(ca=True)``, ``keyCertSign``) and leaf certificates it
signs for given IP addresses and names (subjectAltName; ``serverAuth``). Keys are
ECDSA P-256: quick to make, accepted by OpenSSL's default security level.
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

__all__ = ["TestCA", "ServerFiles"]


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@dataclass(frozen=True)
class ServerFiles:
    """A leaf certificate (PEM, leaf then CA) and its key, as a service's ``tls_cert``/``tls_key``."""

    cert: Path
    key: Path


class TestCA:
    """A certificate authority made for one test, its certificate written to ``folder/<name>-ca.pem``."""

    __test__ = False  # not a test class for pytest

    def __init__(self, folder: Path, name: str = "test") -> None:
        self.folder, self.name = folder, name
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(f"AnonML {name} CA"))
            .issuer_name(_name(f"AnonML {name} CA"))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                    encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        self.bundle = folder / f"{name}-ca.pem"
        self.bundle.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def server(self, label: str, *, ips: tuple[str, ...] = (), names: tuple[str, ...] = ()) -> ServerFiles:
        """A certificate for ``ips`` and ``names`` signed by this CA (files ``<label>.pem``, ``-key.pem``)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        alt: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        alt += [x509.DNSName(name) for name in names]
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(label))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        files = ServerFiles(self.folder / f"{label}.pem", self.folder / f"{label}-key.pem")
        files.cert.write_bytes(
            cert.public_bytes(serialization.Encoding.PEM) + self.cert.public_bytes(serialization.Encoding.PEM)
        )
        files.key.write_bytes(_pem_key(key))
        files.key.chmod(0o600)
        return files
