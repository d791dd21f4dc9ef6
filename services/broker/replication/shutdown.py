"""Controlled shutdown: before stopping, ask the active controller to move leaderships away.

``controlled_shutdown`` calls ``Controller.ControlledShutdown(broker_id, broker_epoch)`` and
retries — no controller known yet, controller unreachable, ``NOT_CONTROLLER``, any other
retriable code — until it succeeds or ``timeout_s`` (default ~10 s) has passed; then the broker
stops as before. Partitions the controller reports as ``remaining`` (no other ISR member could
take over) are logged: they go offline with this broker. A controller that does not implement
the RPC ends the attempt at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import grpc

from headwater.errors import error_class
from headwater.v1 import controller_pb2, controller_pb2_grpc
from headwater.v1.errors_pb2 import ErrorCode
from services.broker.replication.peers import Peers

log = logging.getLogger(__name__)

RPC_TIMEOUT_S = 5.0


async def controlled_shutdown(
    broker_id: int,
    broker_epoch: Callable[[], int | None],
    peers: Peers,
    *,
    timeout_s: float = 10.0,
) -> bool:
    """True when the controller confirmed; False when it gave up (see module doc)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    backoff = 0.1
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            log.warning("controlled shutdown not confirmed within %.1f s; stopping", timeout_s)
            return False
        address = peers.controller_address()
        epoch = broker_epoch()
        if address is not None and epoch is not None:
            stub = controller_pb2_grpc.ControllerStub(peers.channel(address))
            try:
                resp = await stub.ControlledShutdown(
                    controller_pb2.ControlledShutdownRequest(
                        broker_id=broker_id, broker_epoch=epoch
                    ),
                    timeout=min(RPC_TIMEOUT_S, remaining),
                )
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                    log.warning("controller does not implement ControlledShutdown")
                    return False
                log.info("controlled shutdown: %s", exc.code())
            else:
                if resp.error_code == ErrorCode.NONE:
                    if resp.remaining:
                        log.warning(
                            "controlled shutdown: still leading %s (no other ISR member)",
                            [f"{r.topic}-{r.partition}" for r in resp.remaining],
                        )
                    log.info("controlled shutdown confirmed by the controller")
                    return True
                if not error_class(resp.error_code).retriable and (
                    resp.error_code != ErrorCode.NOT_CONTROLLER
                ):
                    log.warning(
                        "controlled shutdown refused: %s %s",
                        ErrorCode.Name(resp.error_code),
                        resp.error_message,
                    )
                    return False
        await asyncio.sleep(min(backoff, max(deadline - loop.time(), 0)))
        backoff = min(backoff * 2, 1.0)
