"""``headwater users`` / ``headwater acls`` and the global security options (subprocesses)
against a real cluster with the authorizer on: the admin (a super user, logged in through
``--command-config``) adds a user and a topic Read ACL; the user consumes; removing the ACL
gives TOPIC_AUTHORIZATION_FAILED with the topic named; removing the user makes the login
fail. Passwords never appear in the output. Option parsing is checked in-process."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.cli import acls_cmd, security_opts
from headwater.cli.main import build_parser
from headwater.client.security import SECURITY_CONFIG_ENV
from headwater.dev.cluster import LocalCluster
from headwater.errors import InvalidConfigError
from tests.helpers.cli import hw, ok

ALICE_PW = "alice-secret-pw-1"
BOB_PW = "bob-secret-pw-2"


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("seccli")
    with LocalCluster(
        data_dir, brokers=1, controllers=1, etcd_unsafe_no_fsync=True, authorizer=True
    ) as cluster:
        yield cluster


def _tls_flags(c: LocalCluster) -> list[str]:
    """The cluster's TLS files as flags (the cluster is TLS under HEADWATER_TEST_TLS)."""
    tls = c.client_security()
    return [] if tls is None else ["--tls-ca", str(tls.ca_file)]


def _admin_config(c: LocalCluster, tmp: Path) -> Path:
    sec = c.admin_security()
    lines = [
        f"security.protocol={'SASL_SSL' if sec.tls else 'SASL_PLAINTEXT'}",
        "sasl.mechanism=SCRAM-SHA-512",
        "sasl.username=admin",
        f"sasl.password={sec.password}",
    ]
    if sec.tls:
        lines.append(f"ssl.ca.location={sec.ca_file}")
    path = tmp / "admin.properties"
    path.write_text("# the cluster's super user\n" + "\n".join(lines) + "\n")
    return path


def as_admin(c: LocalCluster, tmp: Path, *args: str, stdin: bytes | None = None) -> str:
    env = {SECURITY_CONFIG_ENV: ""}
    return ok(hw(c, "--command-config", str(_admin_config(c, tmp)), *args, stdin=stdin, env=env))


def as_user(c: LocalCluster, user: str, password: str, *args: str) -> tuple[int, str, str]:
    env = {SECURITY_CONFIG_ENV: "", security_opts.PASSWORD_ENV: password}
    proc = hw(c, *args, "--sasl-user", user, *_tls_flags(c), env=env)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def test_users_acls_consume_revoke_and_remove(c: LocalCluster, tmp_path: Path) -> None:
    pw_file = tmp_path / "alice.pw"
    pw_file.write_text(ALICE_PW + "\n")
    proc = hw(
        c,
        "--command-config",
        str(_admin_config(c, tmp_path)),
        "users",
        "add",
        "alice",
        "--password-file",
        str(pw_file),
        env={SECURITY_CONFIG_ENV: ""},
    )
    ok(proc)
    assert ALICE_PW not in (proc.stdout + proc.stderr).decode()
    proc = hw(
        c,
        "--command-config",
        str(_admin_config(c, tmp_path)),
        "users",
        "add",
        "bob",
        "--mechanism",
        "SCRAM-SHA-256",
        "--iterations",
        "8192",
        env={SECURITY_CONFIG_ENV: "", "HEADWATER_PASSWORD": BOB_PW},
    )
    ok(proc)
    assert BOB_PW not in (proc.stdout + proc.stderr).decode()
    users = json.loads(as_admin(c, tmp_path, "--output", "json", "users", "list"))
    assert users["alice"] == {"SCRAM-SHA-512": 4096}
    assert users["bob"] == {"SCRAM-SHA-256": 8192}
    assert "alice\tSCRAM-SHA-512\t4096" in as_admin(c, tmp_path, "users", "list", "alice")

    as_admin(c, tmp_path, "topics", "create", "sec-orders", "--partitions", "1")
    as_admin(c, tmp_path, "produce", "sec-orders", stdin=b"r1\nr2\nr3\n")

    # a login without an ACL is authenticated but not authorized
    consume = ("consume", "sec-orders", "--from-beginning", "--max-messages", "3")
    code, _, err = as_user(c, "alice", ALICE_PW, *consume, "--timeout-ms", "20000")
    assert code == 1 and "TOPIC_AUTHORIZATION_FAILED" in err and "sec-orders" in err, err

    as_admin(
        c, tmp_path, "acls", "add", "--allow-principal", "User:alice",
        "--operation", "Read", "--topic", "sec-orders",
    )  # fmt: skip
    listed = as_admin(c, tmp_path, "acls", "list", "--topic", "sec-orders")
    assert listed.splitlines() == ["ALLOW\tUser:alice\tREAD\ttopic\tliteral:sec-orders\thost=*"]
    as_json = json.loads(as_admin(c, tmp_path, "--output", "json", "acls", "list"))
    assert {
        "resource_type": "topic",
        "resource_name": "sec-orders",
        "pattern_type": "literal",
        "principal": "User:alice",
        "host": "*",
        "operation": "read",
        "permission": "allow",
    } in as_json

    code, out, err = as_user(c, "alice", ALICE_PW, *consume, "--timeout-ms", "60000")
    assert code == 0, err
    assert out.splitlines() == ["r1", "r2", "r3"]
    # Read does not imply Write
    code, _, err = as_user(c, "alice", ALICE_PW, "acls", "list")
    assert code == 1 and "CLUSTER_AUTHORIZATION_FAILED" in err, err

    removed = as_admin(
        c, tmp_path, "acls", "remove", "--allow-principal", "User:alice", "--topic", "sec-orders"
    )
    assert "READ\ttopic\tliteral:sec-orders" in removed
    assert as_admin(c, tmp_path, "acls", "list", "--topic", "sec-orders") == ""
    code, _, err = as_user(c, "alice", ALICE_PW, *consume, "--timeout-ms", "20000")
    assert code == 1, err
    assert "error: TOPIC_AUTHORIZATION_FAILED" in err and "sec-orders" in err, err

    as_admin(c, tmp_path, "users", "remove", "alice")
    assert "alice" not in json.loads(as_admin(c, tmp_path, "--output", "json", "users", "list"))
    code, _, err = as_user(c, "alice", ALICE_PW, "topics", "list")
    assert code == 1 and "error: SASL_AUTHENTICATION_FAILED" in err, err
    # a wrong password is refused the same way
    code, _, err = as_user(c, "bob", "not-bobs-password", "topics", "list")
    assert code == 1 and "error: SASL_AUTHENTICATION_FAILED" in err, err


def test_user_errors_change_nothing(c: LocalCluster, tmp_path: Path) -> None:
    config = ("--command-config", str(_admin_config(c, tmp_path)))

    def run(*args: str, password: str = "") -> tuple[int, bytes]:
        env = {SECURITY_CONFIG_ENV: "", "HEADWATER_PASSWORD": password}
        proc = hw(c, *config, *args, env=env)
        return proc.returncode, proc.stderr

    before = as_admin(c, tmp_path, "--output", "json", "users", "list")
    code, err = run("users", "add", "carol", "--iterations", "10", password="x")
    assert code == 1 and b"INVALID_CONFIG" in err, err
    code, err = run("users", "add", "carol")
    assert code == 1 and b"no password" in err, err
    code, err = run("users", "add", "carol", password="a\x07b")  # SASLprep refuses controls
    assert code == 1 and b"INVALID_REQUEST" in err and b"SASLprep" in err, err
    code, err = run("users", "remove", "nobody")
    assert code == 1 and b"INVALID_REQUEST" in err, err
    code, err = run("acls", "remove")
    assert code == 1 and b"--force" in err, err
    code, err = run("acls", "add", "--allow-principal", "User:a", "--operation", "read")
    assert code == 1 and b"name a resource" in err, err
    assert as_admin(c, tmp_path, "--output", "json", "users", "list") == before
    assert as_admin(c, tmp_path, "acls", "list", "--allow-principal", "User:a") == ""


def _parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_properties_and_flags_build_client_security(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    props = tmp_path / "c.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nssl.ca.location=/ca.pem\nsasl.mechanism=SCRAM-SHA-256\n"
        "sasl.username=u\nsasl.password: p\n! comment\n"
    )
    sec = security_opts.security_from_args(_parse("--command-config", str(props), "topics", "list"))
    assert sec is not None
    assert (sec.ca_file, sec.username, sec.password, sec.mechanism) == (
        "/ca.pem", "u", "p", "SCRAM-SHA-256",
    )  # fmt: skip
    # flags override the file; the password of a flag user comes from the environment
    monkeypatch.setenv(security_opts.PASSWORD_ENV, "envpw")
    sec = security_opts.security_from_args(
        _parse("--command-config", str(props), "--sasl-user", "v", "topics", "list")
    )
    assert sec is not None and (sec.username, sec.password) == ("v", "envpw")
    monkeypatch.delenv(security_opts.PASSWORD_ENV)
    with pytest.raises(InvalidConfigError, match="needs a password"):
        security_opts.security_from_args(_parse("--sasl-user", "v", "topics", "list"))
    assert security_opts.security_from_args(_parse("topics", "list")) is None
    for bad in ("ssl.truststore.location=x.jks\n", "security.protocol=SSL\n", "garbage\n",
                "security.protocol=PLAINTEXT\nsasl.username=u\nsasl.password=p\n"):  # fmt: skip
        props.write_text(bad)
        with pytest.raises(InvalidConfigError):
            security_opts.security_from_args(
                _parse("--command-config", str(props), "topics", "list")
            )


def test_acl_command_lines() -> None:
    args = _parse(
        "acls", "add", "--allow-principal", "User:a", "--deny-principal", "User:b",
        "--operation", "Read", "--operation", "IdempotentWrite", "--topic", "t",
        "--cluster", "--host", "10.0.0.1",
    )  # fmt: skip
    acls = acls_cmd.acls_to_add(args)
    assert len(acls) == 2 * 2 * 2
    assert {(a.permission, a.principal) for a in acls} == {("allow", "User:a"), ("deny", "User:b")}
    assert {a.operation for a in acls} == {"read", "idempotent_write"}
    assert {a.host for a in acls} == {"10.0.0.1"}
    (f,) = acls_cmd.filters_of(_parse("acls", "list", "--resource-pattern-type", "match"))
    assert (f.resource_type, f.principal, f.pattern_type) == (None, None, "match")
    with pytest.raises(SystemExit):
        _parse("acls", "add", "--allow-principal", "alice", "--operation", "read", "--topic", "t")
    with pytest.raises(SystemExit):
        _parse("acls", "add", "--allow-principal", "User:a", "--operation", "fly", "--topic", "t")
