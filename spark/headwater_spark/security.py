"""Spark's Kafka security options (``kafka.security.protocol``, ``kafka.sasl.*``,
``kafka.ssl.*``) mapped to the client's :class:`headwater.client.security.ClientSecurity`.

Pure parsing plus, in :meth:`SecuritySpec.client_security`, the files the client needs. Every
option named here either takes effect or raises :class:`InvalidConfigError` naming it and the
alternative: a security option is never dropped (docs/spark.md, "Security").

* ``kafka.security.protocol``: ``PLAINTEXT`` (default), ``SSL`` (TLS; a keystore adds a client
  certificate: mTLS), ``SASL_PLAINTEXT`` (SCRAM over plaintext), ``SASL_SSL`` (SCRAM over TLS).
* ``kafka.sasl.mechanism``: ``SCRAM-SHA-256`` or ``SCRAM-SHA-512`` (Kafka's default GSSAPI,
  PLAIN and OAUTHBEARER are refused). ``kafka.sasl.jaas.config``: Kafka's
  ``org.apache.kafka.common.security.scram.ScramLoginModule required username="u"
  password="p";`` gives the credentials.
* Trust: ``kafka.ssl.truststore.location`` (a PEM bundle; ``kafka.ssl.truststore.type`` PEM, or
  absent when the file is PEM) or ``kafka.ssl.truststore.certificates`` (PEM text); neither:
  the system CA bundle. JKS / PKCS12 stores and store passwords are refused (convert to PEM).
* Client certificate (mTLS): ``kafka.ssl.keystore.location`` with ``kafka.ssl.keystore.type=PEM``
  (a file holding the certificate chain and an unencrypted private key, as Kafka's PEM
  keystore) or ``kafka.ssl.keystore.certificate.chain`` + ``kafka.ssl.keystore.key`` (PEM text).
* ``kafka.ssl.endpoint.identification.algorithm``: ``https`` (Kafka's default) only; the
  client always checks that the server's certificate names the host it dials.

A :class:`SecuritySpec` is picklable and shipped to executors; PEM text and split keystores
become files only where a client is made (each process writes its own, under the temporary
directory, mode 0600, named by their content's hash).
"""

from __future__ import annotations

import hashlib
import os
import re
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from headwater.client.security import MECHANISMS, ClientSecurity
from headwater.errors import InvalidConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

#: The security options this module understands (lower case, as the parsed options).
SECURITY_OPTIONS = frozenset(
    {
        "kafka.security.protocol",
        "kafka.sasl.mechanism",
        "kafka.sasl.jaas.config",
        "kafka.ssl.truststore.location",
        "kafka.ssl.truststore.type",
        "kafka.ssl.truststore.certificates",
        "kafka.ssl.keystore.location",
        "kafka.ssl.keystore.type",
        "kafka.ssl.keystore.certificate.chain",
        "kafka.ssl.keystore.key",
        "kafka.ssl.endpoint.identification.algorithm",
    }
)

#: Security options of Kafka's client that Headwater refuses, with what to do instead.
REFUSED = {
    "kafka.ssl.truststore.password": "PEM truststores have no password: give a PEM bundle "
    "(kafka.ssl.truststore.type=PEM)",
    "kafka.ssl.keystore.password": "give an unencrypted PEM keystore "
    "(kafka.ssl.keystore.type=PEM) instead of a password-protected one",
    "kafka.ssl.key.password": "encrypted private keys are not supported: decrypt the key "
    "(openssl pkey -in key.pem -out plain.pem) and give it as a PEM keystore",
    "kafka.ssl.protocol": "TLS versions are negotiated by gRPC (TLS 1.2 or 1.3): remove it",
    "kafka.ssl.enabled.protocols": "TLS versions are negotiated by gRPC (TLS 1.2 or 1.3): "
    "remove it",
    "kafka.ssl.cipher.suites": "cipher suites are chosen by gRPC's TLS library: remove it",
    "kafka.ssl.provider": "gRPC's TLS library is the only provider: remove it",
    "kafka.ssl.keymanager.algorithm": "Java key managers do not apply: use PEM files",
    "kafka.ssl.trustmanager.algorithm": "Java trust managers do not apply: use PEM files",
    "kafka.ssl.secure.random.implementation": "Java-only setting: remove it",
    "kafka.ssl.engine.factory.class": "Java-only setting: remove it",
    "kafka.sasl.client.callback.handler.class": "only SCRAM credentials from "
    "kafka.sasl.jaas.config are supported",
    "kafka.sasl.login.class": "only SCRAM (kafka.sasl.mechanism SCRAM-SHA-256/512) is supported",
    "kafka.sasl.login.callback.handler.class": "only SCRAM (kafka.sasl.mechanism "
    "SCRAM-SHA-256/512) is supported",
    "kafka.sasl.kerberos.service.name": "Kerberos (GSSAPI) is not supported: use SCRAM",
}
REFUSED_PREFIXES = {
    "kafka.sasl.kerberos.": "Kerberos (GSSAPI) is not supported: use SCRAM",
    "kafka.sasl.oauthbearer.": "OAUTHBEARER is not supported: use SCRAM",
    "kafka.sasl.login.": "only SCRAM (kafka.sasl.mechanism SCRAM-SHA-256/512) is supported",
}

_JAAS = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>\w+)(?P<rest>.*?);?\s*$", re.S)
_JAAS_OPT = re.compile(r'\s*(?P<key>[\w.]+)\s*=\s*(?:"(?P<q>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;]+))')
_PEM_BLOCK = re.compile(
    rb"-----BEGIN (?P<label>[A-Z0-9 ]+)-----\r?\n.*?-----END (?P=label)-----\r?\n?", re.S
)


def refusal(name: str) -> str | None:
    """Why the security option ``name`` (lower case) is refused, or None if not refused."""
    if name in REFUSED:
        return REFUSED[name]
    for prefix, why in REFUSED_PREFIXES.items():
        if name.startswith(prefix):
            return why
    if name.startswith(("kafka.ssl.", "kafka.sasl.")) and name not in SECURITY_OPTIONS:
        return "Headwater maps only the kafka.ssl.* / kafka.sasl.* options docs/spark.md lists"
    return None


@dataclass(frozen=True)
class SecuritySpec:
    """The parsed security options (picklable). ``ca_file`` / ``ca_pem``, ``keystore_file``
    (chain and key in one PEM file) / ``chain_pem`` + ``key_pem`` hold what the options name;
    :meth:`client_security` turns them into files and a ClientSecurity."""

    protocol: str = "PLAINTEXT"
    ca_file: str | None = None
    ca_pem: str | None = None
    keystore_file: str | None = None
    chain_pem: str | None = None
    key_pem: str | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    mechanism: str = "SCRAM-SHA-512"

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def client_security(self) -> ClientSecurity | None:
        """The client's security (None for PLAINTEXT: then the process default applies, as
        for any client made without ``security=``). Writes PEM text to files first."""
        if self.protocol == "PLAINTEXT":
            return None
        ca = cert = key = None
        if self.tls:
            ca = self.ca_file or (_materialize(self.ca_pem.encode()) if self.ca_pem else None)
            ca = ca or _system_ca()
            if self.keystore_file is not None:
                chain_b, key_b = split_keystore(Path(self.keystore_file).read_bytes())
                cert, key = _materialize(chain_b), _materialize(key_b)
            elif self.chain_pem is not None and self.key_pem is not None:
                cert = _materialize(self.chain_pem.encode())
                key = _materialize(self.key_pem.encode())
        sasl = self.protocol.startswith("SASL_")
        return ClientSecurity(
            ca_file=ca,
            cert_file=cert,
            key_file=key,
            username=self.username if sasl else None,
            password=self.password if sasl else None,
            mechanism=self.mechanism,
        )


#: No TLS, no SASL (Kafka's default protocol): clients get the process default security.
PLAINTEXT = SecuritySpec()


def parse_security(o: Mapping[str, str]) -> SecuritySpec:
    """Parse the security options of ``o`` (lower-cased names). Raises InvalidConfigError
    naming the option for a refused option or value, and for a TLS or SASL option given
    while ``kafka.security.protocol`` does not use it."""
    for name in o:
        why = refusal(name)
        if why is not None:
            raise InvalidConfigError(f"option {name} is not supported: {why}")
    protocol = o.get("kafka.security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise InvalidConfigError(
            f"option kafka.security.protocol must be one of {', '.join(PROTOCOLS)}, "
            f"not {protocol!r}"
        )
    tls = protocol in ("SSL", "SASL_SSL")
    sasl = protocol.startswith("SASL_")
    for name in sorted(o):
        if name.startswith("kafka.ssl.") and not tls:
            raise InvalidConfigError(
                f"option {name} is set but kafka.security.protocol is {protocol}: "
                "set SSL or SASL_SSL to use TLS"
            )
        if name.startswith("kafka.sasl.") and not sasl:
            raise InvalidConfigError(
                f"option {name} is set but kafka.security.protocol is {protocol}: "
                "set SASL_SSL or SASL_PLAINTEXT to authenticate with SCRAM"
            )
    spec = SecuritySpec(protocol=protocol)
    if tls:
        spec = _tls(o, spec)
    if sasl:
        spec = _sasl(o, spec)
    return spec


def _tls(o: Mapping[str, str], spec: SecuritySpec) -> SecuritySpec:
    algo = o.get("kafka.ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algo != "https":
        raise InvalidConfigError(
            "option kafka.ssl.endpoint.identification.algorithm must be https: Headwater's "
            "client always checks that the server's certificate names the host it dials "
            "(issue the brokers certificates for the names clients use)"
        )
    ca_file = o.get("kafka.ssl.truststore.location") or None
    ca_pem = o.get("kafka.ssl.truststore.certificates") or None
    if ca_file and ca_pem:
        raise InvalidConfigError(
            "give one of the options kafka.ssl.truststore.location and "
            "kafka.ssl.truststore.certificates"
        )
    _store_type(o, "truststore", ca_file)
    if ca_pem is not None and not _PEM_BLOCK.search(ca_pem.encode()):
        raise InvalidConfigError("option kafka.ssl.truststore.certificates holds no PEM block")
    ks_file = o.get("kafka.ssl.keystore.location") or None
    chain = o.get("kafka.ssl.keystore.certificate.chain") or None
    key = o.get("kafka.ssl.keystore.key") or None
    if ks_file and (chain or key):
        raise InvalidConfigError(
            "give either kafka.ssl.keystore.location or kafka.ssl.keystore.certificate.chain "
            "with kafka.ssl.keystore.key, not both"
        )
    if (chain is None) != (key is None):
        raise InvalidConfigError(
            "options kafka.ssl.keystore.certificate.chain and kafka.ssl.keystore.key go together"
        )
    _store_type(o, "keystore", ks_file)
    if ks_file is not None:
        split_keystore(_read(ks_file, "kafka.ssl.keystore.location"))
    if chain is not None and key is not None:
        split_keystore((chain + "\n" + key).encode())
    return SecuritySpec(
        protocol=spec.protocol,
        ca_file=ca_file,
        ca_pem=ca_pem,
        keystore_file=ks_file,
        chain_pem=chain,
        key_pem=key,
    )


def _store_type(o: Mapping[str, str], store: str, location: str | None) -> None:
    """Only PEM stores: an explicit other type is refused; no type means Kafka's JKS default,
    accepted only when the file is in fact PEM."""
    name = f"kafka.ssl.{store}.type"
    kind = o.get(name)
    if kind is not None and kind.strip().upper() != "PEM":
        raise InvalidConfigError(
            f"option {name}={kind} is not supported: only PEM stores are (convert with "
            f"keytool -exportcert -rfc / openssl pkcs12 -nodes, then set {name}=PEM)"
        )
    if kind is None and location is not None:
        data = _read(location, f"kafka.ssl.{store}.location")
        if not _PEM_BLOCK.search(data):
            raise InvalidConfigError(
                f"option kafka.ssl.{store}.location {location} is not PEM (a JKS or PKCS12 "
                f"store?): only PEM stores are supported; convert it and set {name}=PEM"
            )


def _read(path: str, name: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidConfigError(f"option {name}: cannot read {path}: {exc}") from None


def split_keystore(data: bytes) -> tuple[bytes, bytes]:
    """(certificate chain, private key) of a PEM keystore: its CERTIFICATE blocks, in order,
    and its one unencrypted PRIVATE KEY block. InvalidConfigError otherwise."""
    certs: list[bytes] = []
    keys: list[bytes] = []
    for m in _PEM_BLOCK.finditer(data):
        label = m.group("label").decode()
        block = m.group(0) if m.group(0).endswith(b"\n") else m.group(0) + b"\n"
        if label == "CERTIFICATE":
            certs.append(block)
        elif label == "ENCRYPTED PRIVATE KEY":
            raise InvalidConfigError(
                "the PEM keystore's private key is encrypted (kafka.ssl.key.password): "
                "decrypt it (openssl pkey -in key.pem -out plain.pem)"
            )
        elif label.endswith("PRIVATE KEY"):
            keys.append(block)
    if not certs or len(keys) != 1:
        raise InvalidConfigError(
            "a PEM keystore needs the certificate chain (CERTIFICATE blocks) and exactly one "
            f"private key; found {len(certs)} certificate(s) and {len(keys)} key(s)"
        )
    return b"".join(certs), keys[0]


def _sasl(o: Mapping[str, str], spec: SecuritySpec) -> SecuritySpec:
    mechanism = o.get("kafka.sasl.mechanism")
    if mechanism is None:
        raise InvalidConfigError(
            f"kafka.security.protocol={spec.protocol} needs the option kafka.sasl.mechanism "
            f"(Kafka's default GSSAPI is not supported): {' or '.join(MECHANISMS)}"
        )
    mechanism = mechanism.strip().upper()
    if mechanism not in MECHANISMS:
        raise InvalidConfigError(
            f"option kafka.sasl.mechanism={mechanism} is not supported: Headwater "
            f"authenticates with {' or '.join(MECHANISMS)} (create the user with "
            "headwater users add)"
        )
    jaas = o.get("kafka.sasl.jaas.config")
    if jaas is None:
        raise InvalidConfigError(
            f"kafka.sasl.mechanism={mechanism} needs the option kafka.sasl.jaas.config "
            f'({SCRAM_MODULE} required username="..." password="...";)'
        )
    username, password = parse_jaas(jaas)
    return SecuritySpec(
        protocol=spec.protocol,
        ca_file=spec.ca_file,
        ca_pem=spec.ca_pem,
        keystore_file=spec.keystore_file,
        chain_pem=spec.chain_pem,
        key_pem=spec.key_pem,
        username=username,
        password=password,
        mechanism=mechanism,
    )


def parse_jaas(text: str) -> tuple[str, str]:
    """(username, password) of a Kafka JAAS line for the SCRAM login module:
    ``<module> required username="u" password="p";``. Other modules (PlainLoginModule,
    Krb5LoginModule, OAuthBearerLoginModule), other flags, token auth or missing credentials
    raise InvalidConfigError (never showing the password)."""
    m = _JAAS.match(text)
    if m is None:
        raise InvalidConfigError("option kafka.sasl.jaas.config is not a JAAS login line")
    module = m.group("module")
    if module != SCRAM_MODULE:
        raise InvalidConfigError(
            f"option kafka.sasl.jaas.config: login module {module} is not supported; use "
            f"{SCRAM_MODULE} (SCRAM-SHA-256/512)"
        )
    if m.group("flag") != "required":
        raise InvalidConfigError("option kafka.sasl.jaas.config: the flag must be required")
    rest = m.group("rest").strip().rstrip(";")
    values: dict[str, str] = {}
    pos = 0
    while pos < len(rest):
        om = _JAAS_OPT.match(rest, pos)
        if om is None:
            if rest[pos:].strip():
                raise InvalidConfigError(
                    "option kafka.sasl.jaas.config: cannot parse the options after "
                    f'{module} required (expected key="value" pairs)'
                )
            break
        raw = om.group("q")
        value = re.sub(r"\\(.)", r"\1", raw) if raw is not None else om.group("bare")
        values[om.group("key")] = value
        pos = om.end()
    if values.get("tokenauth", "false").lower() == "true":
        raise InvalidConfigError(
            "option kafka.sasl.jaas.config: tokenauth (Kafka delegation tokens) is not "
            "supported; use a SCRAM user's password"
        )
    unknown = sorted(set(values) - {"username", "password", "tokenauth"})
    if unknown:
        raise InvalidConfigError(f"option kafka.sasl.jaas.config: unknown key(s) {unknown}")
    if not values.get("username") or "password" not in values:
        raise InvalidConfigError(
            'option kafka.sasl.jaas.config needs username="..." and password="..."'
        )
    return values["username"], values["password"]


def _materialize(data: bytes) -> str:
    """A file holding ``data`` (mode 0600, named by its hash, written once per process)."""
    digest = hashlib.sha256(data).hexdigest()[:32]
    path = Path(tempfile.gettempdir()) / f"headwater-spark-{os.getuid()}-{digest}.pem"
    if not path.exists() or path.read_bytes() != data:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    return str(path)


def _system_ca() -> str:
    """The system CA bundle (what Kafka's default JVM truststore stands for)."""
    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, paths.openssl_cafile):
        if candidate and Path(candidate).is_file():
            return candidate
    raise InvalidConfigError(
        "TLS without kafka.ssl.truststore.location: no system CA bundle found; give the "
        "cluster's CA as kafka.ssl.truststore.location (PEM)"
    )
