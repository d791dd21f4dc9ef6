"""Client-side errors that have no wire code of their own.

Each is a :class:`headwater.errors.HeadwaterError` subclass of the closest wire code, so
callers can catch by code family (``except RequestTimedOutError``) or by the precise class.
"""

from __future__ import annotations

from headwater.errors import (
    HeadwaterError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
)


class BufferExhaustedError(RequestTimedOutError):
    """``send`` waited ``max_block_ms`` for buffer memory (or metadata) and gave up."""


class DeliveryTimeoutError(RequestTimedOutError):
    """A batch was not acknowledged within ``delivery_timeout_ms`` (retries included)."""


class ProducerClosedError(InvalidRequestError):
    """``send`` after ``close()``, or the producer's background task has died."""


class ConsumerClosedError(InvalidRequestError):
    """A call on a closed consumer."""


class NoOffsetForPartitionError(OffsetOutOfRangeError):
    """No position for a partition and ``auto_offset_reset='none'``."""


class IllegalStateError(InvalidRequestError):
    """The call does not fit the client's state (e.g. a partition that is not assigned)."""


__all__ = [
    "BufferExhaustedError",
    "ConsumerClosedError",
    "DeliveryTimeoutError",
    "HeadwaterError",
    "IllegalStateError",
    "NoOffsetForPartitionError",
    "ProducerClosedError",
]
