"""A service's own identity on its outgoing calls: internal bearer tokens.

A service with etcd access mints its own *internal* token with the cluster token key (the
services' internal identity, docs/security.md): every service attaches one to every outgoing
call (:func:`attach_service`), whatever the security flags, by making a
:class:`LocalTokenSource` the default token source of the process's channels
(:func:`headwater.client.auth.set_default_token_source`).
"""

from __future__ import annotations

import os
from typing import Any

from headwater.client.auth import refresh_due, set_default_token_source
from headwater.platform.auth import tokens

#: Environment variable naming the principal of a service's internal token (optional).
SERVICE_USER_ENV = "HEADWATER_SERVICE_USER"
#: The internal token's user name when ``$HEADWATER_SERVICE_USER`` is not set.
DEFAULT_SERVICE_USER = "headwater-service"


class LocalTokenSource:
    """Tokens for ``user`` minted locally with the cluster token key (``internal``: the
    cluster's own identity, see :mod:`headwater.platform.auth.tokens`)."""

    def __init__(
        self,
        key: bytes,
        user: str,
        ttl_ms: int = tokens.DEFAULT_TOKEN_TTL_MS,
        *,
        internal: bool = False,
    ) -> None:
        self._key, self._user, self._ttl, self._internal = key, user, ttl_ms, internal
        self._token: str | None = None
        self._expiry = self._issued = 0

    def current(self) -> str:
        """The current token (minted again when a fifth of its life is left)."""
        if self._token is None or refresh_due(self._expiry, self._issued):
            self._issued = tokens.now_ms()
            self._token, self._expiry = tokens.mint(
                self._key, self._user, ttl_ms=self._ttl, internal=self._internal
            )
        return self._token

    async def token(self, target: str = "") -> str:
        return self.current()


def service_user() -> str:
    """The principal name of this process's internal token."""
    return os.environ.get(SERVICE_USER_ENV, "").strip() or DEFAULT_SERVICE_USER


async def attach_service(auth: Any, etcd: Any) -> None:
    """Complete a service's :class:`~headwater.platform.auth.interceptor.ServerAuth` with etcd and
    make every outgoing call of the process carry an internal token (the cluster's own
    identity, minted with the cluster key; principal ``$HEADWATER_SERVICE_USER``, default
    :data:`DEFAULT_SERVICE_USER`). Always: the internal RPCs accept nothing else."""
    await auth.attach(etcd)
    set_default_token_source(LocalTokenSource(auth.token_key, service_user(), internal=True))
