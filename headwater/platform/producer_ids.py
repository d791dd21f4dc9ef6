"""Producer id allocation from etcd, shared by brokers and transaction coordinators.

etcd layout::

    /headwater/producer_ids/block    the first id of the next free block, decimal ASCII

A :class:`ProducerIdAllocator` claims a block of ``block_size`` ids by a transaction that
compares the key's mod revision with the one it read (absent: creates it), retrying on a lost
race, then hands the ids out one by one. Ids are never reused: a process that dies loses the
rest of its block. The allocator is used from one event loop; an ``asyncio.Lock`` serialises
concurrent callers so a block is claimed once.
"""

from __future__ import annotations

import asyncio

from headwater.platform import etcd as hetcd

BLOCK_KEY = "/headwater/producer_ids/block"
DEFAULT_BLOCK_SIZE = 1000
#: Producer ids fit in an i64; stop well before overflow.
MAX_PRODUCER_ID = 2**62


class ProducerIdsExhaustedError(Exception):
    """No producer id is left (never expected in practice: 2^62 ids)."""


class ProducerIdAllocator:
    """See the module docstring."""

    def __init__(self, etcd: hetcd.Etcd, *, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        if block_size < 1:
            raise ValueError("block_size must be >= 1")
        self._etcd = etcd
        self._block_size = block_size
        self._next = 0
        self._end = 0  # exclusive; _next == _end: no ids left in hand
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        """A producer id no other caller, in any process, has been or will be given."""
        async with self._lock:
            if self._next >= self._end:
                self._next, self._end = await self._claim_block()
            pid = self._next
            self._next += 1
            return pid

    async def _claim_block(self) -> tuple[int, int]:
        for _ in range(100):
            got = await self._etcd.get(BLOCK_KEY)
            if got is None:
                start, cmp = 0, hetcd.cmp_absent(BLOCK_KEY)
            else:
                start = int(got[0].decode())
                cmp = hetcd.cmp_mod(BLOCK_KEY, "==", got[1].mod_revision)
            end = start + self._block_size
            if end > MAX_PRODUCER_ID:
                raise ProducerIdsExhaustedError(f"producer ids exhausted at {start}")
            res = await self._etcd.txn([cmp], [hetcd.op_put(BLOCK_KEY, str(end))])
            if res.succeeded:
                return start, end
        raise hetcd.EtcdUnavailableError("could not claim a producer id block (100 lost races)")
