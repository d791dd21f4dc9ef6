"""Bearer tokens: ``<base64url payload>.<base64url HMAC-SHA256(payload)>``.

The payload is JSON ``{"u": <user name>, "e": <expiry, ms since the epoch>, "n": <nonce>}``.
Any service verifies a token locally with the cluster's token key, held in etcd at
``/headwater/security/token_key`` (32 random bytes, created once by whichever service starts
first, with a create-if-absent transaction). Whoever can read that key can mint tokens: etcd
access is cluster-admin access (docs/security.md, threat model).

Internal tokens (the cluster's own services calling each other, docs/security.md "Internal
identity") carry the claim ``"i": 1`` and are signed with a key derived from the token key
(:func:`internal_key`), never with the token key itself: a user token (SCRAM-issued or any
other) cannot pass as internal, whatever its user name, and an internal token cannot be made
by editing a user token's payload.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

from headwater.platform import etcd as hetcd

TOKEN_KEY_PATH = "/headwater/security/token_key"
DEFAULT_TOKEN_TTL_MS = 15 * 60 * 1000
#: Longest accepted token (characters): a bound before decoding.
MAX_TOKEN_CHARS = 2048


class InvalidTokenError(Exception):
    """Forged, malformed or expired."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise InvalidTokenError("malformed token") from None


def now_ms() -> int:
    return int(time.time() * 1000)


#: Domain separation of the internal-token signing key (:func:`internal_key`).
_INTERNAL_KEY_LABEL = b"headwater internal service identity v1"


@dataclass(frozen=True)
class Identity:
    """Who a valid token names: the user, and whether it is the cluster's internal identity."""

    user: str
    internal: bool = False


def internal_key(key: bytes) -> bytes:
    """The key internal tokens are signed with, derived from the cluster token key."""
    return hmac.new(key, _INTERNAL_KEY_LABEL, hashlib.sha256).digest()


def mint(
    key: bytes,
    user: str,
    *,
    ttl_ms: int = DEFAULT_TOKEN_TTL_MS,
    now: int | None = None,
    internal: bool = False,
) -> tuple[str, int]:
    """A token for ``user`` valid ``ttl_ms``; returns ``(token, expiry_ms)``. ``internal``:
    the cluster's own identity (only services holding the token key mint these)."""
    expiry = (now_ms() if now is None else now) + ttl_ms
    claims: dict[str, object] = {"u": user, "e": expiry, "n": _b64(secrets.token_bytes(9))}
    if internal:
        claims["i"] = 1
    body = _b64(json.dumps(claims).encode())
    signing = internal_key(key) if internal else key
    sig = hmac.new(signing, body.encode(), hashlib.sha256).digest()
    return f"{body}.{_b64(sig)}", expiry


def verify_identity(key: bytes, token: str, *, now: int | None = None) -> Identity:
    """The identity in a valid token; raises InvalidTokenError (forged, malformed, expired).

    The payload's internal claim chooses the key the signature must match (the derived
    internal key or the token key), so the claim is as unforgeable as the signature."""
    if len(token) > MAX_TOKEN_CHARS:
        raise InvalidTokenError("token too long")
    body, sep, sig = token.partition(".")
    if not sep:
        raise InvalidTokenError("malformed token")
    try:
        payload = json.loads(_unb64(body))
        user, expiry, internal = payload["u"], payload["e"], payload.get("i", 0)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise InvalidTokenError("malformed token payload") from None
    if internal not in (0, 1) or isinstance(internal, bool):
        raise InvalidTokenError("malformed token payload")
    signing = internal_key(key) if internal else key
    expected = hmac.new(signing, body.encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(_unb64(sig), expected):
        raise InvalidTokenError("bad token signature")
    if not isinstance(user, str) or not isinstance(expiry, int) or not user:
        raise InvalidTokenError("malformed token payload")
    if expiry <= (now_ms() if now is None else now):
        raise InvalidTokenError("token expired")
    return Identity(user, bool(internal))


def verify(key: bytes, token: str, *, now: int | None = None) -> str:
    """The user name in a valid token (internal or not); raises InvalidTokenError."""
    return verify_identity(key, token, now=now).user


async def load_or_create_key(etcd: hetcd.Etcd) -> bytes:
    """The cluster token key, created (32 random bytes) if absent."""
    candidate = secrets.token_bytes(32)
    result = await etcd.txn(
        compare=[hetcd.cmp_absent(TOKEN_KEY_PATH)],
        success=[hetcd.op_put(TOKEN_KEY_PATH, candidate)],
        failure=[hetcd.op_get(TOKEN_KEY_PATH)],
    )
    if result.succeeded:
        return candidate
    got = result.responses[0]
    if not isinstance(got, list) or not got:
        raise hetcd.EtcdError("token key vanished while being read")
    return got[0].value
