"""SCRAM message logic against the RFC test vectors, and bearer tokens (no network)."""

from __future__ import annotations

import base64

import pytest

from headwater import scram
from headwater.platform.auth import tokens

# RFC 7677 section 3 (SCRAM-SHA-256), user "user", password "pencil".
CLIENT_NONCE_256 = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE_256 = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
CLIENT_FIRST_256 = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST_256 = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
CLIENT_FINAL_256 = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
SERVER_FINAL_256 = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _credential(password: str, salt: bytes, mechanism: str) -> scram.ScramCredential:
    h = scram.hash_name_of(mechanism)
    return scram.credential_from_salted(
        scram.salted_password(password, salt, 4096, h), salt, 4096, h
    )


def test_rfc7677_client_messages() -> None:
    client = scram.ScramClient("user", "pencil", "SCRAM-SHA-256", nonce=CLIENT_NONCE_256)
    assert client.first_message() == CLIENT_FIRST_256
    assert client.final_message(SERVER_FIRST_256) == CLIENT_FINAL_256
    client.verify_server_final(SERVER_FINAL_256)


def test_rfc7677_server_messages() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    server = scram.ScramServer("SCRAM-SHA-256", nonce=SERVER_NONCE_256)
    assert server.receive_client_first(CLIENT_FIRST_256) == "user"
    assert server.server_first(_credential("pencil", salt, "SCRAM-SHA-256")) == SERVER_FIRST_256
    assert server.receive_client_final(CLIENT_FINAL_256) == SERVER_FINAL_256


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_round_trip_and_wrong_password(mechanism: str) -> None:
    cred = _credential("s3cret", b"0123456789abcdef", mechanism)
    client = scram.ScramClient("al,ice=", "s3cret", mechanism)
    server = scram.ScramServer(mechanism)
    assert server.receive_client_first(client.first_message()) == "al,ice="
    final = client.final_message(server.server_first(cred))
    client.verify_server_final(server.receive_client_final(final))

    bad = scram.ScramClient("al,ice=", "wrong", mechanism)
    server = scram.ScramServer(mechanism)
    server.receive_client_first(bad.first_message())
    with pytest.raises(scram.ScramError):
        server.receive_client_final(bad.final_message(server.server_first(cred)))


def test_unknown_user_fails_only_at_the_proof_with_a_stable_salt() -> None:
    firsts = []
    for _ in range(2):
        client = scram.ScramClient("nobody", "x", "SCRAM-SHA-512")
        server = scram.ScramServer("SCRAM-SHA-512", fake_salt_key=b"k" * 32)
        server.receive_client_first(client.first_message())
        first = server.server_first(None)
        firsts.append(first.split(b",s=")[1])
        with pytest.raises(scram.ScramError):
            server.receive_client_final(client.final_message(first))
    assert firsts[0] == firsts[1]


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"y,,n=user,r=abc",
        b"n,,r=abc",
        b"n,,n=,r=abc",
        b"n,,n=a=2Xb,r=x",
        b"\xff\xfe",
        b"n" * 5000,
    ],
)
def test_malformed_client_first_is_rejected(message: bytes) -> None:
    with pytest.raises(scram.ScramError):
        scram.ScramServer("SCRAM-SHA-256").receive_client_first(message)


def test_server_rejects_tampered_final_and_client_rejects_forged_server() -> None:
    cred = _credential("pw", b"salt-salt-salt!!", "SCRAM-SHA-256")
    client = scram.ScramClient("u", "pw", "SCRAM-SHA-256")
    server = scram.ScramServer("SCRAM-SHA-256")
    server.receive_client_first(client.first_message())
    final = client.final_message(server.server_first(cred))
    with pytest.raises(scram.ScramError):  # nonce changed
        server.receive_client_final(final.replace(b"r=", b"r=X", 1))
    with pytest.raises(scram.ScramError):  # forged server signature
        client.verify_server_final(b"v=" + base64.b64encode(b"\0" * 32))
    with pytest.raises(scram.ScramError):
        scram.ScramClient("u", "pw", "SCRAM-SHA-1")


def test_tokens_verify_expire_and_reject_forgery() -> None:
    key = b"k" * 32
    token, expiry = tokens.mint(key, "alice", ttl_ms=60_000, now=1_000)
    assert expiry == 61_000
    assert tokens.verify(key, token, now=2_000) == "alice"
    with pytest.raises(tokens.InvalidTokenError, match="expired"):
        tokens.verify(key, token, now=61_000)
    with pytest.raises(tokens.InvalidTokenError):
        tokens.verify(b"other" * 7, token, now=2_000)
    body, _, sig = token.partition(".")
    forged_body = base64.urlsafe_b64encode(b'{"u":"root","e":99999999999999,"n":"x"}').decode()
    for bad in (f"{forged_body}.{sig}", body, "", "a.b", "x" * 5000, f"{body}.{sig}x"):
        with pytest.raises(tokens.InvalidTokenError):
            tokens.verify(key, bad, now=2_000)
