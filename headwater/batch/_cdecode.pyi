"""Stub of the C module headwater/batch/_cdecode.c (see its docstring for the contract)."""

from typing import Any, TypeVar

T = TypeVar("T", bound=tuple[Any, ...])

def binary_list(validity: Any, offsets: Any, data: Any, start: int, stop: int) -> list[Any]: ...
def rows(cls: type[T], prefix: tuple[Any, ...], columns: tuple[list[Any], ...]) -> list[T]: ...
