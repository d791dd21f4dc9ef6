"""The etcd client's errors, and the one mapping of gRPC failures onto them.

Every gRPC failure surfaces as :class:`EtcdError` (or a subclass) with the original exception
chained as ``__cause__``.
"""

from __future__ import annotations

import grpc


class EtcdError(Exception):
    """An etcd operation failed. ``__cause__`` holds the gRPC exception, if there was one."""


class EtcdUnavailableError(EtcdError):
    """etcd could not be reached or did not answer in time (retriable)."""


class EtcdWatchError(EtcdError):
    """A watch ended (stream broken or revision compacted); re-read and watch again.

    ``compact_revision`` is etcd's compaction revision when the watch ended because the
    revision it was to start from (or had reached) was compacted away, else 0."""

    def __init__(self, message: str, *, compact_revision: int = 0) -> None:
        super().__init__(message)
        self.compact_revision = compact_revision


class LeaseLostError(EtcdError):
    """The lease expired or was revoked; keys attached to it are gone."""


_UNAVAILABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def wrap(exc: BaseException) -> EtcdError:
    """``exc`` as an :class:`EtcdError` (itself when it already is one): unreachable etcd or
    an RPC that ran out of time (a gRPC UNAVAILABLE / DEADLINE_EXCEEDED status, or a
    :class:`TimeoutError` of a bounded wait) is :class:`EtcdUnavailableError`, anything else
    EtcdError."""
    if isinstance(exc, EtcdError):
        return exc
    err: EtcdError
    if isinstance(exc, grpc.RpcError) and exc.code() in _UNAVAILABLE:
        err = EtcdUnavailableError(f"etcd unavailable: {exc.code()}: {_details(exc)}")
    elif isinstance(exc, TimeoutError):
        err = EtcdUnavailableError("etcd unavailable: no answer in time")
    elif isinstance(exc, grpc.RpcError):
        err = EtcdError(f"etcd error: {exc.code()}: {_details(exc)}")
    else:
        err = EtcdError(f"etcd error: {type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err


def _details(exc: grpc.RpcError) -> str:
    details = getattr(exc, "details", None)
    return str(details()) if callable(details) else str(exc)
