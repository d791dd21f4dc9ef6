"""SCRAM (RFC 5802) message logic for SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 7677), no I/O.

Messages (no channel binding, gs2 header ``n,,``)::

    client-first  n,,n=<user>,r=<client nonce>
    server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final  c=biws,r=<nonce>,p=<base64 ClientProof>
    server-final  v=<base64 ServerSignature>

Keys: ``SaltedPassword = Hi(password, salt, i)`` (PBKDF2-HMAC), ``ClientKey =
HMAC(SaltedPassword, "Client Key")``, ``StoredKey = H(ClientKey)``, ``ServerKey =
HMAC(SaltedPassword, "Server Key")``. A server stores only salt, iterations, StoredKey and
ServerKey (:class:`ScramCredential`): neither the password nor SaltedPassword.

Every protocol violation or failed proof raises :class:`ScramError`; callers answer it as
SASL_AUTHENTICATION_FAILED without saying which check failed (an unknown user goes through
the whole exchange with a fake salt and fails at the proof, like a wrong password).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

#: Mechanism name -> hashlib name.
MECHANISMS: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 1_000_000
DEFAULT_ITERATIONS = 4096
#: Longest accepted client message (bytes): a bound before any parsing.
MAX_MESSAGE_BYTES = 4096
_GS2_HEADER = "n,,"
_CHANNEL_BINDING = base64.b64encode(_GS2_HEADER.encode()).decode()  # "biws"


class ScramError(Exception):
    """A malformed message, a nonce mismatch or a failed proof / signature."""


@dataclass(frozen=True)
class ScramCredential:
    """What a server keeps for one user and mechanism."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def hash_name_of(mechanism: str) -> str:
    """``"SCRAM-SHA-256"`` -> ``"sha256"``; raises ScramError for anything else."""
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ScramError(f"unsupported mechanism {mechanism!r}") from None


def salted_password(password: str, salt: bytes, iterations: int, hash_name: str) -> bytes:
    """``Hi(Normalize(password), salt, i)``: PBKDF2-HMAC (SASLprep is the identity for ASCII)."""
    return hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)


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


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _unescape(name: str) -> str:
    if "=" in name.replace("=3D", "").replace("=2C", ""):
        raise ScramError("bad escape in user name")
    return name.replace("=2C", ",").replace("=3D", "=")


def _attrs(message: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError("malformed SCRAM attribute")
        out.append((part[0], part[2:]))
    return out


def _decode(message: bytes) -> str:
    if len(message) > MAX_MESSAGE_BYTES:
        raise ScramError("SCRAM message too long")
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("SCRAM message is not UTF-8") from None


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise ScramError("bad base64 in SCRAM message") from None


def _nonce() -> str:
    return base64.b64encode(secrets.token_bytes(18)).decode()


class ScramClient:
    """One client side of one exchange: :meth:`first_message`, :meth:`final_message`,
    :meth:`verify_server_final`, in that order."""

    def __init__(
        self, user: str, password: str, mechanism: str, *, nonce: str | None = None
    ) -> None:
        self._hash = hash_name_of(mechanism)
        self._user = user
        self._password = password
        self._nonce = nonce or _nonce()
        self._first_bare = f"n={_escape(user)},r={self._nonce}"
        self._server_signature: bytes | None = None

    def first_message(self) -> bytes:
        return (_GS2_HEADER + self._first_bare).encode()

    def final_message(self, server_first: bytes) -> bytes:
        text = _decode(server_first)
        attrs = dict(_attrs(text))
        nonce, salt_b64, iters = attrs.get("r"), attrs.get("s"), attrs.get("i")
        if nonce is None or salt_b64 is None or iters is None or "m" in attrs:
            raise ScramError("malformed server-first message")
        if not nonce.startswith(self._nonce) or len(nonce) <= len(self._nonce):
            raise ScramError("server nonce does not extend the client nonce")
        if not iters.isdigit() or not MIN_ITERATIONS <= int(iters) <= MAX_ITERATIONS:
            raise ScramError(f"iteration count {iters!r} out of range")
        salted = salted_password(self._password, _b64decode(salt_b64), int(iters), self._hash)
        without_proof = f"c={_CHANNEL_BINDING},r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        client_key = _hmac(salted, b"Client Key", self._hash)
        stored_key = hashlib.new(self._hash, client_key).digest()
        signature = _hmac(stored_key, auth_message, self._hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = _hmac(salted, b"Server Key", self._hash)
        self._server_signature = _hmac(server_key, auth_message, self._hash)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        """Raises ScramError unless the server proved it knows the credential."""
        attrs = dict(_attrs(_decode(server_final)))
        if "e" in attrs:
            raise ScramError(f"server error: {attrs['e']}")
        if self._server_signature is None or "v" not in attrs:
            raise ScramError("malformed server-final message")
        if not hmac.compare_digest(_b64decode(attrs["v"]), self._server_signature):
            raise ScramError("server signature mismatch")


class ScramServer:
    """One server side of one exchange.

    :meth:`receive_client_first` -> the user name; the caller looks the credential up and
    calls :meth:`server_first` (None for an unknown user: a fake, stable salt is sent and the
    exchange fails at :meth:`receive_client_final`); :meth:`receive_client_final` verifies the
    proof and returns the server-final message.
    """

    def __init__(
        self, mechanism: str, *, nonce: str | None = None, fake_salt_key: bytes = b""
    ) -> None:
        self._hash = hash_name_of(mechanism)
        self._server_nonce = nonce or _nonce()
        self._fake_salt_key = fake_salt_key or secrets.token_bytes(32)
        self._first_bare = ""
        self._client_nonce = ""
        self._server_first = ""
        self._credential: ScramCredential | None = None
        self.user = ""

    def receive_client_first(self, message: bytes) -> str:
        text = _decode(message)
        if not text.startswith(_GS2_HEADER):
            raise ScramError("unsupported gs2 header (channel binding or authzid)")
        self._first_bare = text[len(_GS2_HEADER) :]
        attrs = _attrs(self._first_bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise ScramError("malformed client-first message")
        self.user = _unescape(attrs[0][1])
        self._client_nonce = attrs[1][1]
        if not self.user or not self._client_nonce:
            raise ScramError("empty user name or nonce")
        return self.user

    def server_first(self, credential: ScramCredential | None) -> bytes:
        if not self._first_bare:
            raise ScramError("server-first before client-first")
        self._credential = credential
        if credential is None:
            salt = _hmac(self._fake_salt_key, self.user.encode(), "sha256")[:16]
            iterations = DEFAULT_ITERATIONS
        else:
            salt, iterations = credential.salt, credential.iterations
        self._server_first = (
            f"r={self._client_nonce}{self._server_nonce},"
            f"s={base64.b64encode(salt).decode()},i={iterations}"
        )
        return self._server_first.encode()

    def receive_client_final(self, message: bytes) -> bytes:
        if not self._server_first:
            raise ScramError("client-final before server-first")
        text = _decode(message)
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise ScramError("client-final without a proof")
        attrs = dict(_attrs(without_proof))
        if attrs.get("c") != _CHANNEL_BINDING:
            raise ScramError("channel binding mismatch")
        if attrs.get("r") != self._client_nonce + self._server_nonce:
            raise ScramError("nonce mismatch")
        proof = _b64decode(proof_part)
        cred = self._credential
        if cred is None:
            raise ScramError("authentication failed")
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(cred.stored_key, auth_message, self._hash)
        if len(proof) != len(signature):
            raise ScramError("authentication failed")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), cred.stored_key):
            raise ScramError("authentication failed")
        server_signature = _hmac(cred.server_key, auth_message, self._hash)
        return f"v={base64.b64encode(server_signature).decode()}".encode()
