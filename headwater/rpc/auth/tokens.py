"""Bearer tokens: ``<base64url payload>.<base64url HMAC-SHA256(payload)>``.

The payload is JSON ``{"u": <user name>, "e": <expiry, ms since the epoch>, "n": <nonce>}``.
Any service verifies a token locally with the cluster's token key, held in etcd at
``/headwater/security/token_key`` (32 random bytes, created once by whichever service starts
first, with a create-if-absent transaction). Whoever can read that key can mint tokens: etcd
access is cluster-admin access (docs/security.md, threat model).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time

from headwater import etcd as hetcd

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


def mint(
    key: bytes, user: str, *, ttl_ms: int = DEFAULT_TOKEN_TTL_MS, now: int | None = None
) -> tuple[str, int]:
    """A token for ``user`` valid ``ttl_ms``; returns ``(token, expiry_ms)``."""
    expiry = (now_ms() if now is None else now) + ttl_ms
    payload = json.dumps({"u": user, "e": expiry, "n": _b64(secrets.token_bytes(9))}).encode()
    body = _b64(payload)
    sig = hmac.new(key, body.encode(), hashlib.sha256).digest()
    return f"{body}.{_b64(sig)}", expiry


def verify(key: bytes, token: str, *, now: int | None = None) -> str:
    """The user name in a valid token; raises InvalidTokenError (forged, malformed, expired)."""
    if len(token) > MAX_TOKEN_CHARS:
        raise InvalidTokenError("token too long")
    body, sep, sig = token.partition(".")
    if not sep:
        raise InvalidTokenError("malformed token")
    expected = hmac.new(key, body.encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(_unb64(sig), expected):
        raise InvalidTokenError("bad token signature")
    try:
        payload = json.loads(_unb64(body))
        user, expiry = payload["u"], payload["e"]
    except (ValueError, KeyError, TypeError):
        raise InvalidTokenError("malformed token payload") from None
    if not isinstance(user, str) or not isinstance(expiry, int) or not user:
        raise InvalidTokenError("malformed token payload")
    if expiry <= (now_ms() if now is None else now):
        raise InvalidTokenError("token expired")
    return user


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
