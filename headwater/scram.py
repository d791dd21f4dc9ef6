"""SCRAM (RFC 5802) for SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 7677), no I/O: thin adapters over
the ``scramp`` library, which does the message parsing, nonces, proofs and signatures.

Messages (no channel binding, gs2 header ``n,,``)::

    client-first  n,,n=<user>,r=<client nonce>
    server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final  c=biws,r=<nonce>,p=<base64 ClientProof>
    server-final  v=<base64 ServerSignature>

Keys: ``SaltedPassword = Hi(SASLprep(password), salt, i)`` (PBKDF2-HMAC), ``ClientKey =
HMAC(SaltedPassword, "Client Key")``, ``StoredKey = H(ClientKey)``, ``ServerKey =
HMAC(SaltedPassword, "Server Key")``. A server stores only salt, iterations, StoredKey and
ServerKey (:class:`ScramCredential`): neither the password nor SaltedPassword.

What this module adds to scramp: only SCRAM-SHA-256/512; iterations in
[:data:`MIN_ITERATIONS`, :data:`MAX_ITERATIONS`] (checked by the client before it runs PBKDF2);
every message bounded to :data:`MAX_MESSAGE_BYTES` before parsing; only the ``n,,`` gs2 header;
a server side whose credential look-up happens between the client-first and server-first
messages (asynchronously, by the caller); an unknown user goes through the whole exchange with a
fake, stable salt and fails at the proof, like a wrong password (no user enumeration).

SASLprep (RFC 4013) is applied to user names and passwords, as scramp does: the identity for
printable ASCII; other text is NFKC-normalised, non-ASCII spaces become spaces, and control,
private-use or unassigned characters are refused (docs/security.md).

Every protocol violation or failed proof raises :class:`ScramError`; callers answer it as
SASL_AUTHENTICATION_FAILED without saying which check failed.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import scramp
from scramp.utils import saslprep

#: Mechanism name -> hashlib name.
MECHANISMS: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 1_000_000
DEFAULT_ITERATIONS = 4096
#: Longest accepted SCRAM message (bytes): a bound before any parsing.
MAX_MESSAGE_BYTES = 4096
_GS2_HEADER = "n,,"
#: Shortest salt scramp accepts (a stored credential with a shorter salt cannot authenticate).
MIN_SALT_BYTES = 12
#: Length of the fake salt sent for an unknown user.
_FAKE_SALT_BYTES = 16


class ScramError(Exception):
    """A malformed message, a nonce mismatch or a failed proof / signature."""


@dataclass(frozen=True)
class ScramCredential:
    """What a server keeps for one user and mechanism."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


@contextmanager
def _failures() -> Iterator[None]:
    """scramp's exceptions (and any ValueError/TypeError from hostile input) as ScramError."""
    try:
        yield
    except (scramp.ScramException, ValueError, TypeError) as exc:
        raise ScramError(str(exc)) from None


def hash_name_of(mechanism: str) -> str:
    """``"SCRAM-SHA-256"`` -> ``"sha256"``; raises ScramError for anything else."""
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ScramError(f"unsupported mechanism {mechanism!r}") from None


def salted_password(password: str, salt: bytes, iterations: int, hash_name: str) -> bytes:
    """``Hi(SASLprep(password), salt, i)``: PBKDF2-HMAC over the password as scramp's client
    prepares it. Raises ScramError for a password SASLprep refuses."""
    with _failures():
        prepared = saslprep(password)
    return hashlib.pbkdf2_hmac(hash_name, prepared.encode("utf-8"), salt, iterations)


def _hmac(key: bytes, msg: bytes, hash_name: str) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def credential_from_salted(
    salted: bytes, salt: bytes, iterations: int, hash_name: str
) -> ScramCredential:
    """The stored form of a credential, from SaltedPassword (computed by the client)."""
    client_key = _hmac(salted, b"Client Key", hash_name)
    return ScramCredential(
        salt=salt,
        iterations=iterations,
        stored_key=hashlib.new(hash_name, client_key).digest(),
        server_key=_hmac(salted, b"Server Key", hash_name),
    )


def _decode(message: bytes) -> str:
    if len(message) > MAX_MESSAGE_BYTES:
        raise ScramError("SCRAM message too long")
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("SCRAM message is not UTF-8") from None


class ScramClient:
    """One client side of one exchange: :meth:`first_message`, :meth:`final_message`,
    :meth:`verify_server_final`, in that order, each once. The constructor raises ScramError
    for an unsupported mechanism or a user name / password that SASLprep refuses."""

    def __init__(
        self, user: str, password: str, mechanism: str, *, nonce: str | None = None
    ) -> None:
        hash_name_of(mechanism)
        with _failures():
            self._client = scramp.ScramClient([mechanism], user, password, c_nonce=nonce)

    def first_message(self) -> bytes:
        with _failures():
            return str(self._client.get_client_first()).encode()

    def final_message(self, server_first: bytes) -> bytes:
        """The client-final message; refuses an iteration count above MAX_ITERATIONS before
        running PBKDF2 (a hostile server cannot make the client spin)."""
        text = _decode(server_first)
        with _failures():
            self._client.set_server_first(text)
            iterations = int(self._client.iterations)
            if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
                raise ScramError(f"iteration count {iterations} out of range")
            return str(self._client.get_client_final()).encode()

    def verify_server_final(self, server_final: bytes) -> None:
        """Raises ScramError unless the server proved it knows the credential."""
        text = _decode(server_final)
        with _failures():
            self._client.set_server_final(text)


class ScramServer:
    """One server side of one exchange.

    :meth:`receive_client_first` -> the user name (SASLprep-ed); the caller looks the credential
    up and calls :meth:`server_first` (None for an unknown user: a fake, stable salt is sent and
    the exchange fails at :meth:`receive_client_final`); :meth:`receive_client_final` verifies
    the proof and returns the server-final message.

    scramp asks for the credential synchronously while it reads the client-first message; the
    look-up here is the caller's (asynchronous) step in between, so the client-first message is
    read twice: once to learn the user name, once by the server that answers.
    """

    def __init__(
        self, mechanism: str, *, nonce: str | None = None, fake_salt_key: bytes = b""
    ) -> None:
        self._hash = hash_name_of(mechanism)
        with _failures():
            self._mechanism = scramp.ScramMechanism(mechanism)
        self._server_nonce = nonce
        self._fake_salt_key = fake_salt_key or secrets.token_bytes(32)
        self._client_first = ""
        self._server: scramp.core.ScramServer | None = None
        self.user = ""

    def receive_client_first(self, message: bytes) -> str:
        text = _decode(message)
        if not text.startswith(_GS2_HEADER):
            raise ScramError("unsupported gs2 header (channel binding or authzid)")
        users: list[str] = []

        def note_user(user: str) -> tuple[bytes, bytes, bytes, int]:
            users.append(user)
            return self._fake_auth_info(user)

        with _failures():
            self._mechanism.make_server(note_user).set_client_first(text)
        self._client_first = text
        self.user = users[0]
        return self.user

    def _fake_auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        """A stable salt per user (so probing twice shows nothing) and keys no proof matches."""
        salt = _hmac(self._fake_salt_key, user.encode(), "sha256")[:_FAKE_SALT_BYTES]
        size = hashlib.new(self._hash).digest_size
        return salt, secrets.token_bytes(size), secrets.token_bytes(size), DEFAULT_ITERATIONS

    def server_first(self, credential: ScramCredential | None) -> bytes:
        if not self._client_first:
            raise ScramError("server-first before client-first")
        if self._server is not None:
            raise ScramError("server-first sent twice")

        def auth_info(user: str) -> tuple[bytes, bytes, bytes, int]:
            if credential is None:
                return self._fake_auth_info(user)
            c = credential
            return c.salt, c.stored_key, c.server_key, c.iterations

        with _failures():
            self._server = self._mechanism.make_server(auth_info, s_nonce=self._server_nonce)
            self._server.set_client_first(self._client_first)
            return str(self._server.get_server_first()).encode()

    def receive_client_final(self, message: bytes) -> bytes:
        if self._server is None:
            raise ScramError("client-final before server-first")
        text = _decode(message)
        with _failures():
            self._server.set_client_final(text)
            return str(self._server.get_server_final()).encode()
