"""Entry point of the ``headwater`` command (``python -m headwater.cli.main``).

Errors: a :class:`headwater.errors.HeadwaterError` prints ``error: <CODE>: message`` to
stderr and exits 1 (no traceback); usage errors exit 2 (argparse).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from headwater.cli import (
    acls_cmd,
    bench,
    cluster_cmd,
    common,
    configs_cmd,
    consume,
    groups_cmd,
    metadata_cmd,
    partitions_cmd,
    produce,
    security_opts,
    topics,
    transactions_cmd,
    users_cmd,
)
from headwater.errors import HeadwaterError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="headwater", description="Headwater: a partitioned, replicated commit log."
    )
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get(common.ENV_BOOTSTRAP),
        help="broker HOST:PORT[,HOST:PORT] (default: $HEADWATER_BOOTSTRAP)",
    )
    parser.add_argument(
        "--controller",
        default=os.environ.get(common.ENV_CONTROLLER),
        help="controller HOST:PORT for admin commands (default: found through a broker)",
    )
    parser.add_argument("--output", choices=["text", "json"], default="text")
    security_opts.add_options(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (
        topics,
        produce,
        consume,
        bench,
        metadata_cmd,
        cluster_cmd,
        partitions_cmd,
        groups_cmd,
        configs_cmd,
        transactions_cmd,
        users_cmd,
        acls_cmd,
    ):
        module.register(sub)
    sub.add_parser("dev", help="run a local cluster (see `headwater dev --help`)", add_help=False)
    return parser


def _dev(argv: list[str]) -> int:
    import importlib

    # imported lazily: only `headwater dev` needs the local-cluster code, which runs on the
    # server platform (the `local` extra; a client-only install has the CLI without it)
    try:
        dev_main = importlib.import_module("headwater.dev.main")
    except ModuleNotFoundError as exc:
        print(
            f"headwater dev needs the server packages ({exc.name} is not installed): "
            "pip install 'headwater[local]'",
            file=sys.stderr,
        )
        return 2
    return int(dev_main.main(argv) or 0)


def _hoist_globals(argv: list[str]) -> list[str]:
    """Allow global options after the subcommand (``headwater topics list --output json``)."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        name = a.split("=", 1)[0]
        if name in ("--bootstrap", "--controller", "--output", *security_opts.VALUE_OPTIONS):
            if "=" in a:
                front.append(a)
            elif i + 1 < len(argv):
                front += [a, argv[i + 1]]
                i += 1
            else:
                rest.append(a)
        else:
            rest.append(a)
        i += 1
    return front + rest


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["dev"]:
        return _dev(args_list[1:])
    parser = build_parser()
    args = parser.parse_args(_hoist_globals(args_list))
    try:
        security_opts.apply(args)
        return int(asyncio.run(args.run(args)) or 0)
    except HeadwaterError as exc:
        sys.stderr.write(f"error: {exc.code_name()}: {exc.message}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # stdout closed early (e.g. `| head`): not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
