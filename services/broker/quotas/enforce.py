"""Quota enforcement around the broker's client RPCs (used by ``services.broker.servicer``).

Per request of ``(user, client_id)`` (``headwater.platform.principal``):

1. wait until the client's holds of the request's types have passed (a throttled client's
   next request is held here even when the client ignores throttle time);
2. run the handler, timing its run on the loop (:class:`Timed`, the request quota);
3. record its bytes (produce: the request's record bytes, as it is admitted; fetch: each
   response's record bytes, once read) and its time; the larger delay goes back as
   ``throttle_time_ms`` where the response has that field, and holds the client's next
   requests.

Fetch is a server stream: each response is recorded and sent with its delay; the *next*
response of the stream (and any other Fetch of the client on this broker) waits until the
delay has passed, as Kafka sends a throttled fetch response and then mutes the channel.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

from headwater.platform.principal import client_id_of, principal_of
from services.broker.quotas.manager import FETCH, PRODUCE, REQUEST, QuotaManager
from services.broker.quotas.timing import Timed

T = TypeVar("T")


def identity(context: Any, request_client_id: str = "") -> tuple[str, str]:
    """``(user, client_id)`` of a call."""
    return principal_of(context), client_id_of(context, request_client_id)


def to_ms(delay_s: float) -> int:
    """Throttle delay as the wire's int32 milliseconds (rounded up: never under-report)."""
    return min(int(delay_s * 1000 + 0.999), 2**31 - 1)


async def unary(
    quotas: QuotaManager,
    who: tuple[str, str],
    coro: Coroutine[Any, Any, T],
    *,
    kind: str | None = None,
    size: int = 0,
) -> tuple[T, float]:
    """Steps 1-3 for one unary request; returns the response and the throttle delay (s).

    ``kind`` (PRODUCE) records ``size`` bytes against its byte-rate quota *as the request is
    admitted*: nothing awaits between the hold check and the record, so concurrent requests
    of one client (a producer's in-flight requests) see each other's bytes and a new hold at
    once — the analogue of Kafka reading one request of a connection at a time. The request
    quota is always recorded, after the handler ran."""
    kinds = (REQUEST,) if kind is None else (kind, REQUEST)
    try:
        await quotas.wait(kinds, *who)
    except BaseException:
        coro.close()
        raise
    delay = 0.0 if kind is None else quotas.record(kind, *who, size)
    timed = Timed(coro)
    response = await timed
    delay = max(delay, quotas.record_request_time(*who, timed.seconds))
    return response, delay


async def produce(
    quotas: QuotaManager,
    who: tuple[str, str],
    coro: Coroutine[Any, Any, T],
    record_bytes: int,
) -> T:
    """A produce request: ``record_bytes`` against ``producer_byte_rate``; the response's
    ``throttle_time_ms`` is set."""
    response, delay = await unary(quotas, who, coro, kind=PRODUCE, size=record_bytes)
    response.throttle_time_ms = to_ms(delay)  # type: ignore[attr-defined]
    return response


async def stream(
    quotas: QuotaManager,
    who: tuple[str, str],
    responses: AsyncIterator[T],
    size: Callable[[T], int],
    set_throttle: Callable[[T, int], None] | None = None,
) -> AsyncIterator[T]:
    """A fetch stream: each response is timed, its ``size`` recorded against
    ``consumer_byte_rate``, its delay set with ``set_throttle``; the next one waits for the
    client's holds."""
    kinds = (FETCH, REQUEST)
    try:
        while True:
            await quotas.wait(kinds, *who)
            step: Any = responses.__anext__()  # async_generator_asend: send/throw/close
            timed: Timed[T] = Timed(step)
            try:
                response = await timed
            except StopAsyncIteration:
                return
            delay = quotas.record_request_time(*who, timed.seconds)
            delay = max(delay, quotas.record(FETCH, *who, size(response)))
            if set_throttle is not None:
                set_throttle(response, to_ms(delay))
            yield response
    finally:
        aclose = getattr(responses, "aclose", None)
        if aclose is not None:  # an async generator: end it now, not at garbage collection
            await aclose()
