"""The etcd adapter's errors, and the one mapping of pyetcd/gRPC failures onto them.

Every pyetcd/gRPC failure surfaces as :class:`EtcdError` (or a subclass) with the original
exception chained as ``__cause__``.
"""

from __future__ import annotations

import grpc
import pyetcd.exceptions


class EtcdError(Exception):
    """An etcd operation failed. ``__cause__`` holds the pyetcd/gRPC exception."""


class EtcdUnavailableError(EtcdError):
    """etcd could not be reached or did not answer in time (retriable)."""


class EtcdWatchError(EtcdError):
    """A watch ended (stream broken or revision compacted); re-read and watch again."""


class LeaseLostError(EtcdError):
    """The lease expired or was revoked; keys attached to it are gone."""


def wrap(exc: BaseException) -> EtcdError:
    """``exc`` as an :class:`EtcdError` (itself when it already is one): unreachable etcd or
    an RPC that ran out of time is :class:`EtcdUnavailableError`, anything else EtcdError."""
    if isinstance(exc, EtcdError):
        return exc
    unavailable = (
        pyetcd.exceptions.ConnectionFailedError,
        pyetcd.exceptions.ConnectionTimeoutError,
        pyetcd.exceptions.NoServerAvailableError,
    )
    if isinstance(exc, unavailable):
        err: EtcdError = EtcdUnavailableError(f"etcd unavailable: {exc}")
    elif isinstance(exc, grpc.RpcError) and exc.code() in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    ):
        err = EtcdUnavailableError(f"etcd unavailable: {exc.code()}")
    else:
        err = EtcdError(f"etcd error: {type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err
