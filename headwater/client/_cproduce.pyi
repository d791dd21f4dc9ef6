"""Stub of the C module headwater/client/_cproduce.c (see its docstring for the contract)."""

from collections.abc import Callable
from typing import Any

class RecordFutureBase:
    _outcome: Any
    _index: int
    def __init__(self, outcome: Any, index: int) -> None: ...

class FastProduce:
    fallback: Callable[..., Any]
    def __init__(
        self,
        fallback: Callable[..., Any],
        acc: Any,
        tps: dict[str, list[Any]],
        sticky: dict[str, int],
        seq: Any,
        max_request_size: int,
        record_future: type,
        batch_type: type,
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
