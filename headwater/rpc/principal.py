"""Who sent a request: the user principal and the client id (quota identity, docs/quotas.md).

Until authentication exists every request's user is ``"ANONYMOUS"``; authentication replaces
:func:`principal_of` here and nowhere else.
"""

from __future__ import annotations

from typing import Any

ANONYMOUS = "ANONYMOUS"
#: gRPC metadata key naming the client id when a request has no ``client_id`` field (or it is
#: empty).
CLIENT_ID_METADATA_KEY = "x-client-id"


def principal_of(context: Any) -> str:
    """The authenticated user of the call behind ``context`` (a ``grpc.aio.ServicerContext``)."""
    return ANONYMOUS


def client_id_of(context: Any, request_client_id: str = "") -> str:
    """``request_client_id`` when not empty, else the ``x-client-id`` metadata, else ``""``."""
    if request_client_id:
        return request_client_id
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_METADATA_KEY:
            return value.decode() if isinstance(value, bytes) else str(value)
    return ""
