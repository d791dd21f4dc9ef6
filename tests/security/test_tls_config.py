"""Unit tests of the TLS configuration: principal mapping rules (Kafka's
ssl.principal.mapping.rules), the shared service flags, ClientSecurity, the test CA."""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import pytest
from cryptography import x509

from headwater.client.security import ClientSecurity
from headwater.dev.tls import CertificateAuthority
from headwater.errors import InvalidConfigError, SaslAuthenticationFailedError
from headwater.platform import principal
from headwater.platform.security_flags import (
    PrincipalMapper,
    ServerSecurity,
    add_security_flags,
    flags_of,
    security_from_args,
)

pytestmark = pytest.mark.fast

# The examples of Kafka's documentation (ssl.principal.mapping.rules).
KAFKA_RULES = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
    "DEFAULT"
)


@pytest.mark.parametrize(
    ("dn", "principal_name"),
    [
        ("CN=kafka1,OU=ServiceUsers,O=Org,C=US", "kafka1"),
        ("CN=Adam,OU=Eng,O=Org,L=Lx,ST=Sx,C=US", "adam@eng"),
        ("OU=Eng,CN=Duke,O=Org", "duke"),
        ("OU=JustThis", "OU=JustThis"),  # DEFAULT: the DN itself
    ],
)
def test_kafka_documented_rules(dn: str, principal_name: str) -> None:
    assert PrincipalMapper.parse(KAFKA_RULES).map(dn) == principal_name


def test_upper_case_newline_separator_and_escaped_slash() -> None:
    m = PrincipalMapper.parse("RULE:^CN=([^,]*),O=a\\/b$/$1/U\nDEFAULT")
    assert m.map("CN=alice,O=a/b") == "ALICE"
    assert m.map("CN=alice,O=c") == "CN=alice,O=c"


def test_no_rule_applies_is_an_authentication_failure() -> None:
    m = PrincipalMapper.parse("RULE:^CN=(.*),O=Acme$/$1/")
    assert m.map("CN=bob,O=Acme") == "bob"
    with pytest.raises(SaslAuthenticationFailedError):
        m.map("CN=bob,O=Other")


@pytest.mark.parametrize(
    "rules",
    ["", "FOO", "RULE:(a/$1/", "RULE:^CN=(.*)$/$2/", "RULE:^x$/y/Q", "DEFAULT,RULE:[/x/"],
)
def test_bad_rules_are_typed_config_errors(rules: str) -> None:
    with pytest.raises(InvalidConfigError):
        PrincipalMapper.parse(rules)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    add_security_flags(ap)
    return ap


def test_flags_default_to_plaintext() -> None:
    ap = _parser()
    sec = security_from_args(ap.parse_args([]), ap)
    assert sec == ServerSecurity()
    assert not sec.tls and sec.server_credentials() is None and sec.client_security() is None
    assert sec.etcd_kwargs() == {"ca": None, "cert": None, "key": None}
    assert flags_of(sec) == []


def test_flags_round_trip(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    own = ca.issue("broker-1")
    argv = [
        "--tls-cert", str(own.cert), "--tls-key", str(own.key), "--tls-ca", str(own.ca),
        "--tls-client-auth", "required", "--principal-mapping-rules", "RULE:^CN=(.*)$/$1/L",
        "--etcd-ca", str(own.ca), "--authorizer", "--super-users", "User:broker-1;User:admin",
    ]  # fmt: skip
    ap = _parser()
    sec = security_from_args(ap.parse_args(argv), ap)
    assert sec.tls and sec.client_auth == "required" and sec.authorizer
    assert sec.super_users == ("User:broker-1", "User:admin")
    assert sec.mapper.map("CN=Broker-1") == "broker-1"
    assert sec.server_credentials() is not None
    client = sec.client_security()
    assert client is not None and client.cert_file == str(own.cert)
    assert security_from_args(ap.parse_args(list(flags_of(sec))), ap) == sec


@pytest.mark.parametrize(
    "argv",
    [
        ["--tls-cert", "c.pem"],  # no key
        ["--tls-client-auth", "required"],  # no certificate / CA
        ["--etcd-cert", "c.pem", "--etcd-key", "k.pem"],  # no etcd CA
        ["--super-users", "alice"],  # not User:<name>
        ["--principal-mapping-rules", "RULE:("],
        ["--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"],
    ],
)
def test_bad_flags_are_refused(argv: list[str]) -> None:
    ap = _parser()
    with pytest.raises(SystemExit):
        security_from_args(ap.parse_args(argv), ap)


def test_client_security_validation(tmp_path: Path) -> None:
    assert not ClientSecurity().tls
    assert ClientSecurity(ca_file="ca.pem").tls
    with pytest.raises(InvalidConfigError):
        ClientSecurity(cert_file="c.pem")
    with pytest.raises(InvalidConfigError):
        ClientSecurity(username="u")
    with pytest.raises(InvalidConfigError):
        ClientSecurity(ca_file="ca.pem", mechanism="PLAIN")
    with pytest.raises(InvalidConfigError):
        ClientSecurity(server_hostname_override="x")  # an override without TLS
    with pytest.raises(InvalidConfigError):
        ClientSecurity(ca_file=str(tmp_path / "missing.pem")).channel_credentials()
    opts = ClientSecurity(ca_file="ca.pem", server_hostname_override="h").channel_options()
    assert opts == [("grpc.ssl_target_name_override", "h")]


def test_ca_issues_certificates_with_local_sans_and_subject(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    issued = ca.issue("alice", organization="Acme")
    cert = x509.load_pem_x509_certificate(issued.cert.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert principal.subject_dn(issued.cert.read_bytes()) == "CN=alice,O=Acme"
    assert oct(issued.key.stat().st_mode & 0o777) == "0o600"
    # reloading the folder keeps the same CA
    assert CertificateAuthority(tmp_path).cert_path.read_bytes() == ca.cert_path.read_bytes()
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
    expired = ca.issue("old", not_after=past)
    old = x509.load_pem_x509_certificate(expired.cert.read_bytes())
    assert old.not_valid_after_utc < datetime.datetime.now(datetime.UTC)


class _Ctx:
    def __init__(self, props: dict[str, list[bytes]]) -> None:
        self.props = props

    def auth_context(self) -> dict[str, list[bytes]]:
        return self.props


def test_principal_of_maps_the_peer_certificate(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    pem = ca.issue("alice", organization="Acme").cert.read_bytes()
    try:
        principal.set_mapper(PrincipalMapper.parse("RULE:^CN=([^,]*),O=Acme$/$1/L,DEFAULT"))
        assert principal.principal_of(_Ctx({"x509_pem_cert": [pem]})) == "alice"
        principal.set_mapper(PrincipalMapper.parse("DEFAULT"))
        assert principal.principal_of(_Ctx({"x509_pem_cert": [pem]})) == "CN=alice,O=Acme"
        assert principal.principal_of(_Ctx({})) == principal.ANONYMOUS  # no certificate
        assert principal.principal_of(object()) == principal.ANONYMOUS  # no auth context
    finally:
        principal.set_mapper(PrincipalMapper.parse("DEFAULT"))


def test_default_security_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from headwater.client import security as client_security
    from headwater.client.connection import ConnectionPool

    ca = CertificateAuthority(tmp_path)
    issued = ca.issue("client")
    config = tmp_path / "client.json"
    config.write_text(
        f'{{"ca_file": "{issued.ca}", "cert_file": "{issued.cert}", "key_file": "{issued.key}"}}'
    )
    monkeypatch.setattr(client_security, "_default", None)
    monkeypatch.setenv(client_security.SECURITY_CONFIG_ENV, str(config))
    got = client_security.default_security()
    assert got == ClientSecurity(str(issued.ca), str(issued.cert), str(issued.key))
    assert ConnectionPool().security == got
    # an explicit plaintext security wins over the default
    assert ConnectionPool(security=ClientSecurity()).security == ClientSecurity()
    bad = tmp_path / "bad.json"
    bad.write_text('{"ca_file": "x", "color": "blue"}')
    with pytest.raises(InvalidConfigError):
        client_security.load_security(bad)
    with pytest.raises(InvalidConfigError):
        client_security.load_security(tmp_path / "missing.json")
