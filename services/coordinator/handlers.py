"""Request handlers registered by request type (no dispatch on strings).

A coordinator partition runtime (log_runtime.py) is sent typed requests — the protobuf
request of an RPC (``JoinGroupRequest``, ``EndTxnRequest``, ...) or a small frozen dataclass
for an internal one (``DescribeGroup``, ``TriggerRebalance``, a transaction's ``MarkerJob``)
— and finds the one handler of that exact type in a :class:`Registry`. Each route also knows
the in-band error answer of its request type (NOT_COORDINATOR when the partition is not owned
here, INVALID_REQUEST at the edge, ...); a route registered without one is internal, and
:meth:`Registry.error` raises :class:`PartitionLostError` for it instead.

The registries: ``group_handlers.HANDLERS`` (group coordinator) and ``txn.handlers.HANDLERS``
(transaction coordinator).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

TableT = TypeVar("TableT")
CtxT = TypeVar("CtxT")
OutT = TypeVar("OutT")
ReqT = TypeVar("ReqT")


class PartitionLostError(Exception):
    """The partition is no longer served by this runtime (released or fenced)."""


#: The in-band error answer to a request: (request, error code, message) -> response.
ErrorAnswer = Callable[[Any, int, str], Any]


@dataclass(frozen=True)
class Route(Generic[TableT, CtxT, OutT]):
    handle: Callable[[TableT, Any, CtxT], OutT]
    error: ErrorAnswer | None  # None: an internal request


class Registry(Generic[TableT, CtxT, OutT]):
    """Request type -> (pure handler ``(table, request, ctx) -> OutT``, error answer)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._routes: dict[type, Route[TableT, CtxT, OutT]] = {}

    def add(
        self,
        request_type: type[ReqT],
        handle: Callable[[TableT, ReqT, CtxT], OutT],
        error: Callable[[ReqT, int, str], Any] | None = None,
    ) -> None:
        """Register the handler of ``request_type`` (one per type; ``error``: the in-band
        error answer of a client request, None for an internal request)."""
        if request_type in self._routes:
            raise ValueError(f"{self.name}: {request_type.__name__} has a handler already")
        self._routes[request_type] = Route(handle, error)

    def copy(self) -> Registry[TableT, CtxT, OutT]:
        other: Registry[TableT, CtxT, OutT] = Registry(self.name)
        other._routes = dict(self._routes)
        return other

    def replace(
        self, request_type: type[ReqT], handle: Callable[[TableT, ReqT, CtxT], OutT]
    ) -> None:
        """Swap the handler of a registered type (its error answer stays)."""
        self._routes[request_type] = Route(handle, self.route(request_type).error)

    def route(self, request_or_type: object) -> Route[TableT, CtxT, OutT]:
        t = request_or_type if isinstance(request_or_type, type) else type(request_or_type)
        route = self._routes.get(t)
        if route is None:
            raise TypeError(f"{self.name}: no handler for {t.__name__}")
        return route

    @property
    def types(self) -> frozenset[type]:
        return frozenset(self._routes)

    def handle(self, table: TableT, request: object, ctx: CtxT) -> OutT:
        return self.route(request).handle(table, request, ctx)

    def error(self, request: object, code: int, msg: str) -> Any:
        """The in-band error answer to ``request``; raises :class:`PartitionLostError`
        (``msg``) for an internal request, whose caller handles the loss itself."""
        answer = self.route(request).error
        if answer is None:
            raise PartitionLostError(msg)
        return answer(request, code, msg)


def whole(response_type: Callable[..., Any]) -> Callable[[Any, int, str], Any]:
    """The error answer that is ``response_type(error_code=code, error_message=msg)``."""
    return lambda _request, code, msg: response_type(error_code=code, error_message=msg)
