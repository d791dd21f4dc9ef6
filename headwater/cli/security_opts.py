"""Global CLI options that reach a secured cluster (docs/security.md).

Every ``headwater`` command takes them (before or after the subcommand); they build one
:class:`headwater.client.security.ClientSecurity` that becomes the process default, so every
client a command creates uses it:

* ``--command-config FILE``: Kafka-style properties (``key=value`` lines, ``#`` comments) with
  librdkafka's PEM key names: ``security.protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT,
  SASL_SSL; checked against the other keys), ``ssl.ca.location``,
  ``ssl.certificate.location``, ``ssl.key.location``, ``ssl.endpoint.identification.hostname``
  (the server-name override), ``sasl.mechanism`` (SCRAM-SHA-256 | SCRAM-SHA-512),
  ``sasl.username``, ``sasl.password``. Unknown keys are an InvalidConfigError.
* flags, which override the file: ``--tls-ca``, ``--tls-cert``, ``--tls-key``,
  ``--tls-server-name``, ``--sasl-user``, ``--sasl-mechanism``, and the password from
  ``--sasl-password-file`` or ``$HEADWATER_SASL_PASSWORD`` (never a plain flag: command lines
  are visible to other users of the machine; with ``--sasl-user`` the file's
  ``sasl.password`` is not used).

Without any of them the default is ``$HEADWATER_SECURITY_CONFIG`` (a JSON file of
ClientSecurity arguments), else plaintext.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from headwater.client.security import ClientSecurity, set_default_security
from headwater.errors import InvalidConfigError

PASSWORD_ENV = "HEADWATER_SASL_PASSWORD"
#: global options taking a value (hoisted from after the subcommand by the entry point)
VALUE_OPTIONS = (
    "--command-config",
    "--tls-ca",
    "--tls-cert",
    "--tls-key",
    "--tls-server-name",
    "--sasl-user",
    "--sasl-mechanism",
    "--sasl-password-file",
)
_PROPERTY_FIELDS = {
    "ssl.ca.location": "ca_file",
    "ssl.certificate.location": "cert_file",
    "ssl.key.location": "key_file",
    "ssl.endpoint.identification.hostname": "server_hostname_override",
    "sasl.username": "username",
    "sasl.password": "password",
    "sasl.mechanism": "mechanism",
}
_PROTOCOLS = {
    "PLAINTEXT": (False, False),
    "SSL": (True, False),
    "SASL_PLAINTEXT": (False, True),
    "SASL_SSL": (True, True),
}


def add_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("security (docs/security.md)")
    g.add_argument("--command-config", metavar="FILE", help="Kafka-style client properties")
    g.add_argument("--tls-ca", metavar="PEM", help="CA bundle verifying the servers (TLS on)")
    g.add_argument("--tls-cert", metavar="PEM", help="client certificate (mTLS)")
    g.add_argument("--tls-key", metavar="PEM", help="client certificate's key")
    g.add_argument("--tls-server-name", metavar="NAME", help="verify servers against NAME")
    g.add_argument("--sasl-user", metavar="USER", help="SCRAM user to log in as")
    g.add_argument(
        "--sasl-mechanism", choices=["SCRAM-SHA-256", "SCRAM-SHA-512"], help="SCRAM mechanism"
    )
    g.add_argument(
        "--sasl-password-file",
        metavar="FILE",
        help=f"file holding the SCRAM password (else ${PASSWORD_ENV})",
    )


def read_properties(path: str) -> dict[str, str]:
    """``key=value`` (or ``key: value``) lines of a properties file; ``#``/``!`` comments."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise InvalidConfigError(f"cannot read command config {path}: {exc}") from exc
    out: dict[str, str] = {}
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise InvalidConfigError(f"{path}:{n}: expected key=value")
        out[line[:sep].strip()] = line[sep + 1 :].strip()
    return out


def _from_properties(props: dict[str, str], path: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    protocol = props.pop("security.protocol", None)
    for key, value in props.items():
        if key not in _PROPERTY_FIELDS:
            known = ", ".join(["security.protocol", *_PROPERTY_FIELDS])
            raise InvalidConfigError(f"{path}: unknown property {key!r} (known: {known})")
        fields[_PROPERTY_FIELDS[key]] = value
    if protocol is not None:
        if protocol.upper() not in _PROTOCOLS:
            raise InvalidConfigError(f"{path}: security.protocol must be one of {list(_PROTOCOLS)}")
        tls, sasl = _PROTOCOLS[protocol.upper()]
        if sasl != ("username" in fields):
            raise InvalidConfigError(
                f"{path}: security.protocol {protocol} "
                + ("needs sasl.username" if sasl else "does not take sasl.* credentials")
            )
        if not tls and ({"ca_file", "cert_file"} & set(fields)):
            raise InvalidConfigError(f"{path}: security.protocol {protocol} takes no ssl.* files")
        if tls and not ({"ca_file", "cert_file"} & set(fields)):
            raise InvalidConfigError(
                f"{path}: security.protocol {protocol} needs ssl.ca.location (PEM)"
            )
    return fields


def _password(args: argparse.Namespace) -> str | None:
    path = getattr(args, "sasl_password_file", None)
    if path:
        try:
            return Path(path).read_text().rstrip("\r\n")
        except OSError as exc:
            raise InvalidConfigError(f"cannot read password file {path}: {exc}") from exc
    return os.environ.get(PASSWORD_ENV) or None


def security_from_args(args: argparse.Namespace) -> ClientSecurity | None:
    """The ClientSecurity the options describe, or None when none was given (then the
    process default applies). Raises InvalidConfigError for inconsistent options."""
    fields: dict[str, str] = {}
    if getattr(args, "command_config", None):
        path = args.command_config
        fields = _from_properties(read_properties(path), path)
    flags = {
        "ca_file": args.tls_ca,
        "cert_file": args.tls_cert,
        "key_file": args.tls_key,
        "server_hostname_override": args.tls_server_name,
        "username": args.sasl_user,
        "mechanism": args.sasl_mechanism,
    }
    fields |= {k: v for k, v in flags.items() if v}
    if args.sasl_user:
        fields.pop("password", None)  # the file's password is its own user's
    if "username" in fields and "password" not in fields:
        password = _password(args)
        if password is None:
            raise InvalidConfigError(
                f"--sasl-user needs a password: --sasl-password-file FILE or ${PASSWORD_ENV}"
            )
        fields["password"] = password
    if not fields:
        return None
    return ClientSecurity(**fields)


def apply(args: argparse.Namespace) -> None:
    """Make the options' security the process default (no-op when none were given)."""
    sec = security_from_args(args)
    if sec is not None:
        set_default_security(sec)
