"""How a client secures its connections: TLS (server verification, optional client certificate
for mTLS) and SCRAM credentials (docs/security.md).

``ClientSecurity`` is accepted as ``security=`` by AsyncProducer, AsyncConsumer and
AsyncAdminClient (and the sync facades) and handed to their
:class:`headwater.client.connection.ConnectionPool`, the one place channels are created.

* ``ca_file``: PEM bundle of the CA(s) that signed the servers' certificates. Giving it (or a
  client certificate) turns TLS on; without ``ca_file`` the system roots are used.
* ``cert_file`` / ``key_file``: the client certificate and key (mTLS); both or neither.
* ``server_hostname_override``: verify the servers' certificates against this name instead of
  the dialled host (for addresses that are not in the certificate, such as port-forwards).
  Only for that: it disables the check that the dialled host is the certified one.
* ``username`` / ``password`` / ``mechanism``: SCRAM credentials (authentication: see
  docs/security.md; used by the connection pool's call-credentials hook).

:func:`set_default_security` sets the security of clients created without ``security=``
(process-wide). Without one, the environment variable ``HEADWATER_SECURITY_CONFIG`` may name a
JSON file of ClientSecurity keyword arguments (``headwater dev --tls`` writes one:
``<data-dir>/tls/client.json``), which the CLI and any client then use; else plaintext. Test
harnesses use these to run whole suites over TLS (subprocesses included); an application
normally passes ``security=`` instead.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import grpc

from headwater.errors import InvalidConfigError

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: Environment variable naming a JSON file of ClientSecurity keyword arguments (the default).
SECURITY_CONFIG_ENV = "HEADWATER_SECURITY_CONFIG"


def read_file(path: str | Path | None, what: str) -> bytes | None:
    """The bytes of ``path`` (None for None); InvalidConfigError naming ``what`` when it
    cannot be read. Shared by the clients' and the services' TLS settings."""
    if path is None:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidConfigError(f"cannot read {what} {path}: {exc}") from exc


@dataclass(frozen=True)
class ClientSecurity:
    """A client's TLS files and credentials (see the module doc). Raises InvalidConfigError
    when inconsistent (certificate without key, password without user, unknown mechanism)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_hostname_override: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    mechanism: str = "SCRAM-SHA-512"

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise InvalidConfigError("cert_file and key_file go together")
        if (self.username is None) != (self.password is None):
            raise InvalidConfigError("username and password go together")
        if self.mechanism not in MECHANISMS:
            raise InvalidConfigError(f"mechanism must be one of {MECHANISMS}")
        if self.server_hostname_override is not None and not self.tls:
            raise InvalidConfigError("server_hostname_override needs TLS (ca_file or cert_file)")

    @property
    def tls(self) -> bool:
        """Whether channels are TLS (a CA or a client certificate is given)."""
        return self.ca_file is not None or self.cert_file is not None

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """TLS channel credentials (reads the files: call once per pool)."""
        return grpc.ssl_channel_credentials(
            root_certificates=read_file(self.ca_file, "CA file"),
            private_key=read_file(self.key_file, "key file"),
            certificate_chain=read_file(self.cert_file, "certificate file"),
        )

    def channel_options(self) -> list[tuple[str, Any]]:
        """Extra channel options (the hostname override)."""
        if self.server_hostname_override:
            return [("grpc.ssl_target_name_override", self.server_hostname_override)]
        return []


def load_security(path: str | Path) -> ClientSecurity:
    """A ClientSecurity from a JSON object of its keyword arguments (InvalidConfigError when
    unreadable, not an object, or with unknown keys)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InvalidConfigError(f"cannot read security config {path}: {exc}") from exc
    known = {f.name for f in fields(ClientSecurity)}
    if not isinstance(data, dict) or not set(data) <= known:
        raise InvalidConfigError(f"security config {path}: a JSON object with keys in {known}")
    return ClientSecurity(**data)


_default: ClientSecurity | None = None
_from_env: dict[str, ClientSecurity] = {}


def set_default_security(security: ClientSecurity | None) -> None:
    """Security of clients (connection pools) created without ``security=`` in this process
    (None: back to ``$HEADWATER_SECURITY_CONFIG`` or plaintext)."""
    global _default
    _default = security


def default_security() -> ClientSecurity | None:
    """The set default, else the one ``$HEADWATER_SECURITY_CONFIG`` names, else None."""
    if _default is not None:
        return _default
    path = os.environ.get(SECURITY_CONFIG_ENV, "")
    if not path:
        return None
    if path not in _from_env:
        _from_env[path] = load_security(path)
    return _from_env[path]
