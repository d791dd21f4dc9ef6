"""Certificates for local TLS clusters and the tests: a CA and certificates it signs.

:class:`CertificateAuthority` creates (or loads) a self-signed CA in a folder and issues
certificates into it. Every file is PEM; keys are ECDSA P-256 (fast to make), unencrypted,
written with mode 0600. A certificate for a service carries the subject alternative names
``127.0.0.1`` and ``localhost`` (so clients verify the host they dial) and both the server
and client extended key usages (services are clients of each other with the same identity).

For the security tests: ``issue(..., not_after=<past>)`` makes an expired certificate, a
second CA makes certificates a cluster does not trust, and ``hosts=("other.invalid",)`` makes a
server certificate whose names do not match ``127.0.0.1``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOCAL_HOSTS = ("127.0.0.1", "localhost")
_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Issued:
    """Paths of an issued certificate (``cert``), its key and the CA that signed it."""

    cert: Path
    key: Path
    ca: Path


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _name(common_name: str, org: str | None) -> x509.Name:
    attrs = []
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _san(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    return x509.SubjectAlternativeName(names)


class CertificateAuthority:
    """A CA whose certificate and key live in ``directory`` (``ca.pem``, ``ca.key``)."""

    def __init__(self, directory: Path | str, name: str = "Headwater Local CA") -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.cert_path = self.directory / "ca.pem"
        key_path = self.directory / "ca.key"
        if self.cert_path.exists() and key_path.exists():
            self._cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
            loaded = serialization.load_pem_private_key(key_path.read_bytes(), None)
            assert isinstance(loaded, ec.EllipticCurvePrivateKey)
            self._key = loaded
            return
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = _name(name, "Headwater")
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - _DAY)
            .not_valid_after(_now() + 3650 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
            .sign(self._key, hashes.SHA256())
        )
        _write_key(key_path, self._key)
        self.cert_path.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        name: str,
        *,
        common_name: str | None = None,
        organization: str | None = "Headwater",
        hosts: Sequence[str] = LOCAL_HOSTS,
        not_before: datetime.datetime | None = None,
        not_after: datetime.datetime | None = None,
    ) -> Issued:
        """Issue ``<name>.pem`` / ``<name>.key`` (subject ``O=<organization>,CN=<common_name or
        name>``, SANs ``hosts``, server + client usage; valid for a year unless given)."""
        key = ec.generate_private_key(ec.SECP256R1())
        end = not_after or _now() + 365 * _DAY
        start = not_before or min(_now(), end) - _DAY
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name or name, organization))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if hosts:
            builder = builder.add_extension(_san(hosts), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        cert_path, key_path = self.directory / f"{name}.pem", self.directory / f"{name}.key"
        _write_key(key_path, key)
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return Issued(cert_path, key_path, self.cert_path)

    def issued(self, name: str) -> Issued:
        """The files of ``name``, issuing them if absent."""
        cert, key = self.directory / f"{name}.pem", self.directory / f"{name}.key"
        if cert.exists() and key.exists():
            return Issued(cert, key, self.cert_path)
        return self.issue(name)
