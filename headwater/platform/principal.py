"""Who sent a request: the user principal and the client id (quota identity, docs/quotas.md).

:func:`principal_of` resolves, in order (docs/security.md): a valid bearer token's user
(authentication); else the mTLS peer certificate's subject mapped by the principal-mapping
rules (:class:`headwater.platform.security_flags.PrincipalMapper`, set by ``start_server``); else
``"ANONYMOUS"``.
"""

from __future__ import annotations

import contextvars
import functools
from typing import Any

from cryptography import x509

from headwater.platform.security_flags import DEFAULT_MAPPER, PrincipalMapper

ANONYMOUS = "ANONYMOUS"
#: gRPC metadata key naming the client id when a request has no ``client_id`` field (or it is
#: empty).
CLIENT_ID_METADATA_KEY = "x-client-id"

_mapper: PrincipalMapper = DEFAULT_MAPPER


def set_mapper(mapper: PrincipalMapper) -> None:
    """The process's certificate-subject mapping rules (one server per process)."""
    global _mapper
    _mapper = mapper
    _cert_principal.cache_clear()


#: The user the auth interceptor (:mod:`headwater.platform.auth.interceptor`) resolved for the call
#: being handled (token > certificate > anonymous); a context variable of the call's task.
_authenticated: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "headwater_authenticated_user", default=None
)


def set_authenticated(user: str) -> None:
    """Record the resolved user of the current call (called by the auth interceptor only)."""
    _authenticated.set(user)


def principal_of(context: Any) -> str:
    """The authenticated user of the call behind ``context`` (a ``grpc.aio.ServicerContext``).

    Raises SaslAuthenticationFailedError for a client certificate no mapping rule applies to.
    """
    user = _authenticated.get()
    if user is not None:
        return user
    name = cert_principal_of(context)
    return ANONYMOUS if name is None else name


def cert_principal_of(context: Any) -> str | None:
    """The mapped subject of the verified client certificate of the call, or None (plaintext,
    TLS without a client certificate, or a context without an auth context)."""
    auth = getattr(context, "auth_context", None)
    if auth is None:
        return None
    try:
        props = auth()
    except (AttributeError, TypeError, ValueError):
        return None
    pems = props.get("x509_pem_cert") if isinstance(props, dict) else None
    if not pems or not isinstance(pems[0], bytes):
        return None
    return _cert_principal(pems[0])


def subject_dn(pem: bytes) -> str:
    """The certificate's subject as an RFC 4514 (RFC 2253 order) DN, e.g. ``CN=alice,O=Acme``."""
    return x509.load_pem_x509_certificate(pem).subject.rfc4514_string()


@functools.lru_cache(maxsize=1024)
def _cert_principal(pem: bytes) -> str:
    return _mapper.map(subject_dn(pem))


def client_id_of(context: Any, request_client_id: str = "") -> str:
    """``request_client_id`` when not empty, else the ``x-client-id`` metadata, else ``""``."""
    if request_client_id:
        return request_client_id
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_METADATA_KEY:
            return value.decode() if isinstance(value, bytes) else str(value)
    return ""
