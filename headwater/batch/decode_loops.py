"""The per-record loops of turning a decoded batch into Python objects: C when built, Python
otherwise.

:mod:`headwater.batch._cdecode` (optional, like :mod:`headwater.batch._cencode`) makes each
value's bytes straight from the column's buffers and each row without a Python call; without
it, :func:`binary_list` goes through pyarrow and :func:`rows` maps ``tuple.__new__`` over
``zip``. Same results either way (tests/batch/test_cdecode.py).
"""

from __future__ import annotations

from functools import partial
from itertools import repeat
from typing import Any, TypeVar

try:
    from headwater.batch import _cdecode
except ImportError:  # built without a C compiler
    _cdecode = None  # type: ignore[assignment]

T = TypeVar("T", bound=tuple[Any, ...])


def _binary_list_py(validity: Any, offsets: Any, data: Any, start: int, stop: int) -> list[Any]:
    import pyarrow as pa

    n = stop - start
    arr = pa.Array.from_buffers(
        pa.binary(),
        n,
        [
            None if validity is None else pa.py_buffer(validity),
            pa.py_buffer(offsets),
            pa.py_buffer(data),
        ],
        offset=start,
    )
    return arr.to_pylist()


def _rows_py(cls: type[T], prefix: tuple[Any, ...], columns: tuple[list[Any], ...]) -> list[T]:
    if not columns:
        return []
    n = len(columns[0])
    new = partial(tuple.__new__, cls)
    prefixed = [repeat(item, n) for item in prefix]
    return list(map(new, zip(*prefixed, *columns, strict=True)))


#: binary_list(validity, offsets, data, start, stop): entries ``start..stop`` of an Arrow
#: binary column (a validity bitmap or None when every entry is present, ``stop + 1`` or more
#: little-endian int32 offsets, the data) as bytes, None for a null entry. The column's offsets
#: must already be checked (headwater.batch.columns checks them when it decodes a section);
#: the C path checks them again and raises ValueError.
binary_list = _cdecode.binary_list if _cdecode is not None else _binary_list_py

#: rows(cls, prefix, columns): ``cls(*prefix, *(c[i] for c in columns))`` for each i, built
#: as ``tuple.__new__(cls, ...)`` builds them (``cls`` a NamedTuple or another tuple subclass
#: without fields of its own; ``columns`` a tuple of lists of one length).
rows = _cdecode.rows if _cdecode is not None else _rows_py
