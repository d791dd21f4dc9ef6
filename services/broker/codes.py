"""Typed access to headwater.errors' single exception -> wire code mapping, for the broker's
response messages (whose generated stubs want ``ErrorCode`` rather than ``int``)."""

from __future__ import annotations

from typing import cast

from headwater.errors import code_of
from headwater.v1.errors_pb2 import ErrorCode


def error_code(exc: BaseException) -> ErrorCode:
    """The wire code for ``exc`` (UNKNOWN_SERVER_ERROR for anything not a HeadwaterError)."""
    return cast(ErrorCode, code_of(exc))
