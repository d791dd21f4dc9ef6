"""Headwater errors -> kopf's temporary (retried with backoff) or permanent failures.

Temporary: the cluster cannot be reached or is busy (``retriable`` wire codes such as
NOT_CONTROLLER, COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT, the client's NetworkError) —
kopf retries the handler after :meth:`OperatorConfig.backoff`. Permanent: the cluster refused
the request as written (INVALID_CONFIG, INVALID_REPLICATION_FACTOR, POLICY_VIOLATION ...) or
the spec is invalid — retrying cannot help until the spec changes, which re-runs the handler.
Either way the Ready condition carries the reason first.
"""

from __future__ import annotations

import kopf

from headwater import errors
from headwater_operator.config import OperatorConfig


def is_temporary(exc: BaseException) -> bool:
    return isinstance(exc, errors.HeadwaterError) and (
        exc.retriable or isinstance(exc, errors.NetworkError | errors.UnknownServerError)
    )


def reason_of(exc: BaseException) -> str:
    """A CamelCase condition reason for a Headwater error (e.g. InvalidConfig)."""
    if isinstance(exc, errors.HeadwaterError):
        return "".join(w.capitalize() for w in exc.code_name().lower().split("_"))
    return type(exc).__name__


def to_kopf(exc: BaseException, config: OperatorConfig, retry: int) -> kopf.TemporaryError | (
    kopf.PermanentError
):
    message = f"{reason_of(exc)}: {exc}"
    if is_temporary(exc):
        return kopf.TemporaryError(message, delay=config.backoff(retry))
    return kopf.PermanentError(message)
