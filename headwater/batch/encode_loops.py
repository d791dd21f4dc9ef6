"""The per-record loops of encoding a batch: C when built, Python otherwise.

:mod:`headwater.batch._cencode` (optional, like the client's ``_cproduce``) does them without
an object per record; without it, :func:`crc32c_extend` loops over ``crc32c.crc32c`` and the
other two return None so that their callers take their general path. Same results either way
(tests/batch/test_cencode.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import crc32c

try:
    from headwater.batch import _cencode
except ImportError:  # built without a C compiler
    _cencode = None  # type: ignore[assignment]


def _crc32c_extend_py(crc: int, pieces: Sequence[Any]) -> int:
    for piece in pieces:
        crc = crc32c.crc32c(piece, crc)
    return crc


#: crc32c_extend(crc, pieces): the CRC-32C of ``pieces`` (a list or tuple of bytes-like
#: objects) laid end to end, continued from ``crc`` as ``crc32c.crc32c(piece, crc)`` piece by
#: piece would be. TypeError if a piece is not bytes-like.
crc32c_extend = _cencode.crc32c_extend if _cencode is not None else _crc32c_extend_py


def value_offsets(items: Sequence[Any]) -> bytes | None:
    """The ``len(items) + 1`` little-endian int32 offsets of ``items`` laid end to end, when
    they are a list of exact ``bytes`` totalling under 2 GiB; None otherwise (or without C)."""
    return _cencode.value_offsets(items) if _cencode is not None else None


def int32_deltas(values: Sequence[int], first: int) -> bytes | None:
    """Little-endian int32 ``v - first`` of every value, when ``values`` is a list of exact
    ints whose differences fit an int32; None otherwise (or without C)."""
    return _cencode.int32_deltas(values, first) if _cencode is not None else None
