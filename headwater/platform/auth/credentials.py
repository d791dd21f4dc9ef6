"""SCRAM credentials in etcd: ``/headwater/security/scram/<user>`` holds JSON
``{"SCRAM-SHA-256": {"salt", "iterations", "stored_key", "server_key"}, ...}`` (bytes as
base64). Only the stored form (:class:`~headwater.scram.ScramCredential`) is kept:
never the password, never SaltedPassword.
"""

from __future__ import annotations

import base64
import json

from headwater import scram
from headwater.platform import etcd as hetcd
from headwater.scram import ScramCredential

SCRAM_PREFIX = "/headwater/security/scram/"
MAX_USER_CHARS = 256


def key_of(user: str) -> str:
    return SCRAM_PREFIX + user


def encode(creds: dict[str, ScramCredential]) -> bytes:
    return json.dumps(
        {
            mech: {
                "salt": base64.b64encode(c.salt).decode(),
                "iterations": c.iterations,
                "stored_key": base64.b64encode(c.stored_key).decode(),
                "server_key": base64.b64encode(c.server_key).decode(),
            }
            for mech, c in sorted(creds.items())
        },
        sort_keys=True,
    ).encode()


def decode(value: bytes) -> dict[str, ScramCredential]:
    raw = json.loads(value)
    return {
        mech: ScramCredential(
            salt=base64.b64decode(c["salt"]),
            iterations=int(c["iterations"]),
            stored_key=base64.b64decode(c["stored_key"]),
            server_key=base64.b64decode(c["server_key"]),
        )
        for mech, c in raw.items()
    }


async def lookup(etcd: hetcd.Etcd, user: str, mechanism: str) -> ScramCredential | None:
    """The stored credential of ``user`` for ``mechanism``, or None (unknown / unreadable)."""
    if not user or len(user) > MAX_USER_CHARS or "/" in user:
        return None
    got = await etcd.get(key_of(user))
    if got is None:
        return None
    try:
        return decode(got[0]).get(mechanism)
    except (ValueError, KeyError, TypeError):
        return None


async def bootstrap_user(
    etcd: hetcd.Etcd,
    user: str,
    password: str,
    mechanisms: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512"),
    iterations: int = scram.DEFAULT_ITERATIONS,
) -> None:
    """Write ``user``'s credentials straight into etcd (Kafka's ``kafka-storage --add-scram``):
    how a first administrator exists before anyone may call AlterUserScramCredentials. Needs
    etcd access (cluster-admin by definition); everything else goes through the controller."""
    import secrets

    creds = {}
    for mech in mechanisms:
        h = scram.hash_name_of(mech)
        salt = secrets.token_bytes(32)
        creds[mech] = scram.credential_from_salted(
            scram.salted_password(password, salt, iterations, h), salt, iterations, h
        )
    await etcd.put(key_of(user), encode(creds))
