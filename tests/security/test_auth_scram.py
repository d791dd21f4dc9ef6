"""SCRAM message logic against the RFC test vectors, and bearer tokens (no network)."""

from __future__ import annotations

import base64
import contextlib

import pytest
import scramp
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater import scram
from headwater.platform.auth import tokens

pytestmark = pytest.mark.fast

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


# Computed by the hand-written SCRAM code this module replaced (commit 9a1fa20), before the
# switch to scramp: a credential stored then must authenticate now.
OLD_STORED_KEY_256 = bytes.fromhex(
    "586e5df283e6dceb5c3e791d8b8528ec191e664045ce971792e2e6b5bb13e2a6"
)
OLD_SERVER_KEY_256 = bytes.fromhex(
    "c1f3cbc1c13a9d35a14c0990eed97629ea225863e566a4314ab99f3f00e5d9d5"
)
OLD_SALT_512 = b"headwater-interop-salt-512"
OLD_STORED_KEY_512 = bytes.fromhex(
    "a3c0cb46e1e2492b15d90f734608eaa23689b49c0e38e2de9563fa9a89efb18d"
    "49f4330840a571200afb9b095f6e4086a9c61fcd970f5c5e01813ec647f10c53"
)
OLD_SERVER_KEY_512 = bytes.fromhex(
    "0a6c19b4f790956213f69b9b466c6f1f0819352b1249e9f9968157bd8822319b"
    "481b0a25986d251b254e130dc6c97ed3ace2f776a1863655ee92e135b2fde46c"
)
# One SCRAM-SHA-512 exchange between the old client and the old server (fixed nonces).
OLD_EXCHANGE_512 = (
    b"n,,n=user,r=clientnonce512abc",
    b"r=clientnonce512abcservernonce512xyz,s=aGVhZHdhdGVyLWludGVyb3Atc2FsdC01MTI=,i=4096",
    b"c=biws,r=clientnonce512abcservernonce512xyz,"
    b"p=zcs6hkitHMK75GwQWC5lA9yTTtTtkf+7qNzowtHQhNmr74YB8tui6PJazwNvvQ2kUvPE+TRB3ML8OlLliyn3Eg==",
    b"v=HuPCggWI10RwmU77DYjgjIDTvH5axZvs7N51+nnyte8UGzt7FpuiTwuM8MuoyeRQzlQTmEy3865ST8kgdXiPCg==",
)
# The old code's keys (RFC 7677 salt, 4096 iterations) for non-ASCII passwords.
OLD_NON_ASCII_256 = {
    "pässwörd": "75c82a4d62e4b7f418fc6d934c6d8ac74e789764d8fddd7faebaa9c457f8d9cf",
    "pa\u00a0ss": "73813474c3ea2c0f30063d19c4d731366ecb556d73e621ea18f970e144905e76",
    "\uff50\uff57": "ccb3836fb5b53693888274d65b48071ed23076642d9fdad5fc19d7fc4cc85457",
}
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")


def test_credential_stored_by_the_old_code_authenticates() -> None:
    stored = scram.ScramCredential(RFC7677_SALT, 4096, OLD_STORED_KEY_256, OLD_SERVER_KEY_256)
    assert _credential("pencil", RFC7677_SALT, "SCRAM-SHA-256") == stored
    client = scram.ScramClient("user", "pencil", "SCRAM-SHA-256")
    server = scram.ScramServer("SCRAM-SHA-256")
    assert server.receive_client_first(client.first_message()) == "user"
    final = client.final_message(server.server_first(stored))
    client.verify_server_final(server.receive_client_final(final))

    stored_512 = scram.ScramCredential(OLD_SALT_512, 4096, OLD_STORED_KEY_512, OLD_SERVER_KEY_512)
    assert _credential("pencil", OLD_SALT_512, "SCRAM-SHA-512") == stored_512
    wrong = scram.ScramClient("user", "pencil2", "SCRAM-SHA-512")
    server = scram.ScramServer("SCRAM-SHA-512")
    server.receive_client_first(wrong.first_message())
    with pytest.raises(scram.ScramError):
        server.receive_client_final(wrong.final_message(server.server_first(stored_512)))


def test_old_exchange_is_replayed_message_for_message() -> None:
    cfirst, sfirst, cfinal, sfinal = OLD_EXCHANGE_512
    stored = scram.ScramCredential(OLD_SALT_512, 4096, OLD_STORED_KEY_512, OLD_SERVER_KEY_512)
    server = scram.ScramServer("SCRAM-SHA-512", nonce="servernonce512xyz")
    assert server.receive_client_first(cfirst) == "user"
    assert server.server_first(stored) == sfirst
    assert server.receive_client_final(cfinal) == sfinal
    client = scram.ScramClient("user", "pencil", "SCRAM-SHA-512", nonce="clientnonce512abc")
    assert client.first_message() == cfirst
    assert client.final_message(sfirst) == cfinal
    client.verify_server_final(sfinal)


def test_saslprep_keeps_normalised_passwords_and_changes_the_others() -> None:
    def stored_key(password: str) -> str:
        return _credential(password, RFC7677_SALT, "SCRAM-SHA-256").stored_key.hex()

    # precomposed text is already NFKC: the same keys as before
    assert stored_key("pässwörd") == OLD_NON_ASCII_256["pässwörd"]
    # a no-break space and full-width letters are mapped: old credentials no longer match
    assert stored_key("pa\u00a0ss") != OLD_NON_ASCII_256["pa\u00a0ss"]
    assert stored_key("pa\u00a0ss") == stored_key("pa ss")
    assert stored_key("\uff50\uff57") != OLD_NON_ASCII_256["\uff50\uff57"]
    assert stored_key("\uff50\uff57") == stored_key("pw")
    # decomposed input gives the precomposed keys
    assert stored_key("pa\u0308sswo\u0308rd") == OLD_NON_ASCII_256["pässwörd"]
    for refused in ("a\x07b", "\ue000"):
        with pytest.raises(scram.ScramError):
            scram.salted_password(refused, RFC7677_SALT, 4096, "sha256")
        with pytest.raises(scram.ScramError):
            scram.ScramClient("u", refused, "SCRAM-SHA-256")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_stored_credential_equals_scramps_own(mechanism: str) -> None:
    for password in ("pencil", "pa\u00a0ss", "\uff50\uff57", "pa\u0308ss"):
        salt, stored, server, iterations = scramp.ScramMechanism(mechanism).make_auth_info(
            password, iteration_count=4096, salt=RFC7677_SALT
        )
        assert _credential(password, RFC7677_SALT, mechanism) == scram.ScramCredential(
            salt, iterations, stored, server
        )


def test_client_refuses_iterations_out_of_bounds_and_server_a_short_salt() -> None:
    for iterations in (1024, scram.MAX_ITERATIONS + 1):
        client = scram.ScramClient("u", "pw", "SCRAM-SHA-256", nonce="abc")
        client.first_message()
        salt = base64.b64encode(b"s" * 16).decode()
        with pytest.raises(scram.ScramError):
            client.final_message(f"r=abcdef,s={salt},i={iterations}".encode())
    short = _credential("pw", b"s" * (scram.MIN_SALT_BYTES - 1), "SCRAM-SHA-256")
    server = scram.ScramServer("SCRAM-SHA-256")
    server.receive_client_first(scram.ScramClient("u", "pw", "SCRAM-SHA-256").first_message())
    with pytest.raises(scram.ScramError):
        server.server_first(short)


FUZZ_CREDENTIAL = scram.credential_from_salted(b"\x01" * 32, b"0123456789abcdef", 4096, "sha256")


@given(data=st.binary(max_size=300) | st.text(max_size=200).map(str.encode))
@settings(max_examples=300, deadline=None)
def test_any_input_fails_only_with_scram_error(data: bytes) -> None:
    cred = FUZZ_CREDENTIAL
    server = scram.ScramServer("SCRAM-SHA-256")
    with contextlib.suppress(scram.ScramError):
        server.receive_client_first(b"n,," + data)
    with contextlib.suppress(scram.ScramError):
        server.receive_client_first(data)
    server = scram.ScramServer("SCRAM-SHA-256")
    client = scram.ScramClient("u", "pw", "SCRAM-SHA-256")
    server.receive_client_first(client.first_message())
    server.server_first(cred)
    with pytest.raises(scram.ScramError):
        server.receive_client_final(data)
    with pytest.raises(scram.ScramError):
        client.final_message(data)
    client = scram.ScramClient("u", "pw", "SCRAM-SHA-256")
    client.first_message()
    with pytest.raises(scram.ScramError):
        client.verify_server_final(data)
