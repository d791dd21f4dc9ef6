"""Shared CLI plumbing: addresses, key=value parsing, output, the error edge."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from headwater.errors import InvalidConfigError, InvalidRequestError

ENV_BOOTSTRAP = "HEADWATER_BOOTSTRAP"
ENV_CONTROLLER = "HEADWATER_CONTROLLER"


class UsageError(InvalidRequestError):
    """A command line that cannot be run (missing address, bad k=v, ...)."""


def bootstrap(args: argparse.Namespace) -> str:
    """``--bootstrap`` or ``$HEADWATER_BOOTSTRAP``; a clear error when neither is set."""
    value = getattr(args, "bootstrap", None) or os.environ.get(ENV_BOOTSTRAP)
    if not value:
        raise UsageError(
            "no broker address: pass --bootstrap HOST:PORT or set HEADWATER_BOOTSTRAP "
            "(`headwater dev` prints it as 'bootstrap: HOST:PORT')"
        )
    return str(value)


def controller(args: argparse.Namespace) -> str | None:
    return getattr(args, "controller", None) or os.environ.get(ENV_CONTROLLER) or None


def parse_kv(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidConfigError(f"expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def progress(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "backslashreplace")
