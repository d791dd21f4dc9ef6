"""Finding and calling a group's coordinator.

Coordinators are listed in every broker's Metadata answer (``MetadataResponse.coordinators``);
``FindCoordinator(group)`` sent to any of them names the owner of the group's offsets
partition. :class:`CoordinatorClient` caches the owner per group and forgets it when a call
fails with NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE (in-band ``error_code`` or gRPC status)
or a transport error, then rediscovers and retries until the call's deadline.
COORDINATOR_LOAD_IN_PROGRESS is retried against the same coordinator. Every other answer —
including in-band group errors like ILLEGAL_GENERATION — is returned for the caller to
interpret.

The same class finds transaction coordinators (``key_type=TRANSACTION``: the key is the
transactional.id) and calls the ``TransactionCoordinator`` service on them (``stub``); there
CONCURRENT_TRANSACTIONS is retried with backoff too (``retry_same``).

Owned by one client on one event loop (it shares the client's pool and metadata).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Collection
from typing import Any

import grpc

from headwater import errors
from headwater.client.connection import ConnectionPool
from headwater.client.metadata import Metadata
from headwater.v1 import coordinator_pb2
from headwater.v1.errors_pb2 import ErrorCode

log = logging.getLogger(__name__)

_REDISCOVER = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}
_RETRY_SAME = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


class CoordinatorClient:
    """See the module docstring."""

    def __init__(
        self,
        pool: ConnectionPool,
        md: Metadata,
        *,
        timeout_s: float,
        backoff_s: float,
        key_type: int = coordinator_pb2.GROUP,
        stub: Callable[[str], Any] | None = None,
        retry_same: Collection[int] = (),
    ) -> None:
        self._pool = pool
        self._md = md
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        self.key_type = key_type
        self._stub = stub if stub is not None else pool.coordinator
        self._retry_same = _RETRY_SAME | set(retry_same)
        self._owners: dict[str, str] = {}

    def forget(self, group_id: str) -> None:
        self._owners.pop(group_id, None)

    async def find(self, group_id: str, deadline: float) -> str:
        """The address of ``group_id``'s coordinator (cached)."""
        if not group_id:
            raise errors.InvalidGroupIdError("group id must not be empty")
        cached = self._owners.get(group_id)
        if cached is not None:
            return cached
        last: errors.HeadwaterError = errors.CoordinatorNotAvailableError(
            "no group coordinator is registered in the cluster metadata"
        )
        while True:
            candidates = list(self._md.view.coordinators)
            if not candidates:
                try:
                    candidates = list((await self._md.refresh()).coordinators)
                except errors.HeadwaterError as exc:
                    last = exc
            random.shuffle(candidates)
            for address in candidates:
                try:
                    resp = await self._pool.coordinator(address).FindCoordinator(
                        coordinator_pb2.FindCoordinatorRequest(
                            group_id=group_id,
                            key_type=self.key_type,  # type: ignore[arg-type]
                        ),
                        timeout=max(0.1, min(self.timeout_s, deadline - time.monotonic())),
                    )
                except grpc.RpcError as exc:
                    last = errors.from_rpc_error(exc)
                    continue
                if resp.error_code:
                    err = errors.error_for_code(resp.error_code, resp.error_message)
                    assert err is not None
                    if not err.retriable:
                        raise err
                    last = err
                    continue
                owner = f"{resp.coordinator.host}:{resp.coordinator.port}"
                self._owners[group_id] = owner
                return owner
            if time.monotonic() >= deadline:
                raise last
            self._md.request_update()
            await asyncio.sleep(self.backoff_s)
            if not self._md.view.coordinators:
                try:
                    await self._md.refresh()
                except errors.HeadwaterError as exc:
                    last = exc

    async def call(
        self, group_id: str, method: str, request: Any, *, timeout_s: float | None = None
    ) -> Any:
        """Send ``request`` to the group's coordinator with ``GroupCoordinator.<method>``,
        retrying coordinator moves until ``timeout_s`` (default: the request timeout)."""
        budget = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + budget
        while True:
            address = await self.find(group_id, deadline)
            stub = self._stub(address)
            err: errors.HeadwaterError | None = None
            try:
                resp = await getattr(stub, method)(
                    request, timeout=max(0.1, deadline - time.monotonic())
                )
            except grpc.RpcError as exc:
                err = errors.from_rpc_error(exc)
                if not err.retriable:
                    raise err from exc
            else:
                code = getattr(resp, "error_code", ErrorCode.NONE)
                if code not in _REDISCOVER and code not in self._retry_same:
                    return resp
                err = errors.error_for_code(code, getattr(resp, "error_message", ""))
                assert err is not None
            if err.code not in self._retry_same:
                self.forget(group_id)
            if time.monotonic() + self.backoff_s >= deadline:
                raise err
            log.debug("%s for group %s: %s; retrying", method, group_id, err)
            await asyncio.sleep(self.backoff_s)
