"""The security flags every service takes, parsed once: TLS, mTLS, principal mapping, etcd TLS,
authorizer switches (docs/security.md).

Flags (broker, controller and coordinator alike; :func:`add_security_flags` adds them,
:func:`security_from_args` turns the parsed namespace into a :class:`ServerSecurity`)::

    --tls-cert PEM --tls-key PEM     serve TLS with this certificate chain and key; the same pair
                                     is the service's client identity towards its peers
    --tls-ca PEM                     CA bundle: verifies client certificates (mTLS) and peers
    --tls-client-auth none|requested|required   (default none; requested/required need --tls-ca)
    --principal-mapping-rules RULES  Kafka's ssl.principal.mapping.rules (default DEFAULT)
    --etcd-ca/--etcd-cert/--etcd-key TLS (and client certificate) towards etcd
    --authorizer                     enforce ACLs (off by default)
    --super-users "User:a;User:b"    principals allowed everything
    --allow-everyone-if-no-acl-found a resource without any ACL is open (Kafka's; default off)

Principal mapping (Kafka's ``ssl.principal.mapping.rules``): a comma- or newline-separated list
of ``RULE:pattern/replacement/[LU]`` and ``DEFAULT``. The certificate subject, written as an
RFC 2253 / 4514 distinguished name (``CN=alice,OU=eng,O=Acme``), is tried against each rule in
order: the first rule whose ``pattern`` matches the whole DN gives the principal name
(``replacement`` with ``$1``.. group references, then lower-cased with ``L`` or upper-cased with
``U``); ``DEFAULT`` gives the DN unchanged. A DN no rule matches is refused
(:class:`headwater.errors.SaslAuthenticationFailedError`). Bad rules raise
:class:`headwater.errors.InvalidConfigError`.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from headwater.client.security import read_file
from headwater.errors import InvalidConfigError, SaslAuthenticationFailedError

if TYPE_CHECKING:
    from headwater.client.security import ClientSecurity

CLIENT_AUTH_CHOICES = ("none", "requested", "required")

# Kafka's SslPrincipalMapper splitter: DEFAULT, or RULE:pattern/replacement/[LU] where the
# pattern and replacement may contain escaped characters (\/ among them).
_RULE = re.compile(
    r"\s*(?:(?P<default>DEFAULT)"
    r"|RULE:(?P<pattern>(?:\\.|[^\\/])*)/(?P<replacement>(?:\\.|[^\\/])*)/(?P<case>[LU]?))"
    r"\s*(?:[,\n]\s*|$)"
)
_GROUP_REF = re.compile(r"\$(\d+)")


@dataclass(frozen=True)
class MappingRule:
    """One parsed rule; ``pattern`` None is ``DEFAULT``."""

    pattern: re.Pattern[str] | None
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        out = self.pattern.sub(self.replacement, dn)
        if self.case == "L":
            out = out.lower()
        elif self.case == "U":
            out = out.upper()
        return out


@dataclass(frozen=True)
class PrincipalMapper:
    """Certificate subject DN -> principal name, by Kafka's rules (see the module doc)."""

    rules: tuple[MappingRule, ...]
    text: str = "DEFAULT"

    @classmethod
    def parse(cls, text: str) -> PrincipalMapper:
        rules: list[MappingRule] = []
        pos, text_s = 0, text.strip()
        if not text_s:
            raise InvalidConfigError("principal mapping rules are empty (use DEFAULT)")
        while pos < len(text_s):
            m = _RULE.match(text_s, pos)
            if m is None or m.end() == pos:
                raise InvalidConfigError(
                    f"bad principal mapping rule at {text_s[pos:]!r}: expected "
                    "RULE:pattern/replacement/[LU] or DEFAULT"
                )
            pos = m.end()
            if m.group("default"):
                rules.append(MappingRule(None))
                continue
            raw_pattern = m.group("pattern").replace("\\/", "/")
            try:
                pattern = re.compile(raw_pattern)
            except re.error as exc:
                raise InvalidConfigError(f"bad pattern {raw_pattern!r}: {exc}") from exc
            repl = m.group("replacement").replace("\\/", "/")
            repl = _GROUP_REF.sub(lambda g: f"\\g<{g.group(1)}>", repl)
            try:  # expand the template once now (same group count), not at first use
                re.compile("()" * pattern.groups).sub(repl, "")
            except (re.error, IndexError) as exc:
                raise InvalidConfigError(f"bad replacement {repl!r}: {exc}") from exc
            rules.append(MappingRule(pattern, repl, m.group("case")))
        return cls(tuple(rules), text)

    def map(self, dn: str) -> str:
        """The principal name of ``dn``; SaslAuthenticationFailedError when no rule applies."""
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise SaslAuthenticationFailedError(
            f"no principal mapping rule applies to {dn!r} (rules {self.text!r})"
        )


DEFAULT_MAPPER = PrincipalMapper((MappingRule(None),), "DEFAULT")


@dataclass(frozen=True)
class ServerSecurity:
    """A service's security settings (all off by default: plaintext, no authorizer)."""

    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    client_auth: str = "none"
    principal_mapping_rules: str = "DEFAULT"
    etcd_ca: Path | None = None
    etcd_cert: Path | None = None
    etcd_key: Path | None = None
    authorizer: bool = False
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False
    mapper: PrincipalMapper = field(default=DEFAULT_MAPPER, compare=False, repr=False)

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise InvalidConfigError("--tls-cert and --tls-key go together")
        if self.client_auth not in CLIENT_AUTH_CHOICES:
            raise InvalidConfigError(f"--tls-client-auth must be one of {CLIENT_AUTH_CHOICES}")
        if self.client_auth != "none" and (self.tls_ca is None or self.tls_cert is None):
            raise InvalidConfigError("--tls-client-auth needs --tls-cert, --tls-key and --tls-ca")
        if (self.etcd_cert is None) != (self.etcd_key is None):
            raise InvalidConfigError("--etcd-cert and --etcd-key go together")
        if self.etcd_cert is not None and self.etcd_ca is None:
            raise InvalidConfigError("--etcd-cert needs --etcd-ca")
        for user in self.super_users:
            if not user.startswith("User:") or len(user) == len("User:"):
                raise InvalidConfigError(f"super user {user!r} is not User:<name>")
        object.__setattr__(self, "mapper", PrincipalMapper.parse(self.principal_mapping_rules))

    @property
    def tls(self) -> bool:
        """Whether the service serves (and dials its peers over) TLS."""
        return self.tls_cert is not None

    def server_credentials(self) -> grpc.ServerCredentials | None:
        """gRPC server credentials, or None for plaintext."""
        if not self.tls:
            return None
        key, cert = read_file(self.tls_key, "TLS key"), read_file(self.tls_cert, "TLS certificate")
        assert key is not None and cert is not None
        ca = read_file(self.tls_ca, "TLS CA") if self.client_auth != "none" else None
        return grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=ca, require_client_auth=self.client_auth == "required"
        )

    def client_security(self) -> ClientSecurity | None:
        """The identity this service uses as a client of other services (None: plaintext):
        the CA verifies the peers, the service's own certificate is its client certificate."""
        if not self.tls:
            return None
        from headwater.client.security import ClientSecurity

        return ClientSecurity(
            ca_file=str(self.tls_ca) if self.tls_ca else None,
            cert_file=str(self.tls_cert),
            key_file=str(self.tls_key),
        )

    def etcd_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :meth:`headwater.platform.etcd.Etcd.connect`."""
        return {
            "ca": str(self.etcd_ca) if self.etcd_ca else None,
            "cert": str(self.etcd_cert) if self.etcd_cert else None,
            "key": str(self.etcd_key) if self.etcd_key else None,
        }


PLAINTEXT = ServerSecurity()


def add_security_flags(ap: argparse.ArgumentParser) -> None:
    """Add the shared security flags to a service's parser."""
    g = ap.add_argument_group("security (docs/security.md)")
    g.add_argument("--tls-cert", type=Path, default=None, help="serve TLS: certificate (PEM)")
    g.add_argument("--tls-key", type=Path, default=None, help="serve TLS: private key (PEM)")
    g.add_argument(
        "--tls-ca", type=Path, default=None, help="CA (PEM) verifying clients (mTLS) and peers"
    )
    g.add_argument(
        "--tls-client-auth",
        choices=CLIENT_AUTH_CHOICES,
        default="none",
        help="client certificates: none (default), requested, required (mTLS)",
    )
    g.add_argument(
        "--principal-mapping-rules",
        default="DEFAULT",
        help="certificate subject -> principal: RULE:pattern/replacement/[LU],...,DEFAULT",
    )
    g.add_argument("--etcd-ca", type=Path, default=None, help="CA (PEM) of etcd's certificate")
    g.add_argument("--etcd-cert", type=Path, default=None, help="client certificate for etcd")
    g.add_argument("--etcd-key", type=Path, default=None, help="client key for etcd")
    g.add_argument(
        "--authorizer",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="enforce ACLs (default off)",
    )
    g.add_argument(
        "--super-users", default="", help='principals allowed everything: "User:a;User:b"'
    )
    g.add_argument(
        "--allow-everyone-if-no-acl-found",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="a resource with no ACL at all is open to everyone (default off)",
    )


def parse_super_users(text: str) -> tuple[str, ...]:
    return tuple(u.strip() for u in text.split(";") if u.strip())


def security_from_args(ns: argparse.Namespace, ap: argparse.ArgumentParser) -> ServerSecurity:
    """The :class:`ServerSecurity` of parsed flags; a bad combination is ``ap.error``."""
    try:
        sec = ServerSecurity(
            tls_cert=ns.tls_cert,
            tls_key=ns.tls_key,
            tls_ca=ns.tls_ca,
            client_auth=ns.tls_client_auth,
            principal_mapping_rules=ns.principal_mapping_rules,
            etcd_ca=ns.etcd_ca,
            etcd_cert=ns.etcd_cert,
            etcd_key=ns.etcd_key,
            authorizer=ns.authorizer,
            super_users=parse_super_users(ns.super_users),
            allow_everyone_if_no_acl_found=ns.allow_everyone_if_no_acl_found,
        )
        for path in (sec.tls_cert, sec.tls_key, sec.tls_ca, sec.etcd_ca, sec.etcd_cert):
            read_file(path, "file")
    except InvalidConfigError as exc:
        ap.error(str(exc))
    return sec


def flags_of(sec: ServerSecurity) -> Sequence[str]:
    """The command-line flags that reproduce ``sec`` (launchers: LocalCluster)."""
    out: list[str] = []
    for flag, value in (
        ("--tls-cert", sec.tls_cert),
        ("--tls-key", sec.tls_key),
        ("--tls-ca", sec.tls_ca),
        ("--etcd-ca", sec.etcd_ca),
        ("--etcd-cert", sec.etcd_cert),
        ("--etcd-key", sec.etcd_key),
    ):
        if value is not None:
            out += [flag, str(value)]
    if sec.client_auth != "none":
        out += ["--tls-client-auth", sec.client_auth]
    if sec.principal_mapping_rules != "DEFAULT":
        out += ["--principal-mapping-rules", sec.principal_mapping_rules]
    if sec.authorizer:
        out.append("--authorizer")
    if sec.super_users:
        out += ["--super-users", ";".join(sec.super_users)]
    if sec.allow_everyone_if_no_acl_found:
        out.append("--allow-everyone-if-no-acl-found")
    return out
