"""``headwater users add|remove|list``: SCRAM credentials (Kafka's
``kafka-configs --alter --add-config SCRAM-SHA-512=[password=...]`` in a shape of its own).

* ``add NAME [--mechanism M] [--iterations N]`` sets (or replaces) NAME's credential for the
  mechanism (default SCRAM-SHA-512). The password comes from ``--password P``,
  ``--password-file FILE`` (first line) or ``$HEADWATER_PASSWORD``, in that order; it is never
  printed, and only the salted derivation (PBKDF2 computed here) is sent to the controller.
* ``remove NAME [--mechanism M]`` deletes NAME's credential for one mechanism, or for every
  mechanism NAME has when none is given (INVALID_REQUEST when NAME has none).
* ``list [NAME ...]`` prints ``user  mechanism  iterations`` lines (``--output json``: a JSON
  object user -> {mechanism: iterations}).

These are controller calls: with the authorizer on they need ALTER (add, remove) or
DESCRIBE (list) on the cluster.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from headwater import scram
from headwater.cli import common
from headwater.client.admin import AsyncAdminClient
from headwater.client.admin_security import MECHANISMS
from headwater.errors import InvalidConfigError, InvalidRequestError

PASSWORD_ENV = "HEADWATER_PASSWORD"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("users", help="SCRAM users: add, remove, list")
    usub = p.add_subparsers(dest="users_command", required=True, metavar="ACTION")
    add = usub.add_parser("add", help="set a user's SCRAM password (creates the user)")
    add.add_argument("name")
    pw = add.add_mutually_exclusive_group()
    pw.add_argument("--password", help=f"the password (else --password-file or ${PASSWORD_ENV})")
    pw.add_argument("--password-file", help="file whose first line is the password")
    add.add_argument("--mechanism", choices=sorted(MECHANISMS), default="SCRAM-SHA-512")
    add.add_argument(
        "--iterations",
        type=int,
        default=scram.DEFAULT_ITERATIONS,
        help=f"PBKDF2 iterations, {scram.MIN_ITERATIONS}..{scram.MAX_ITERATIONS} "
        f"(default {scram.DEFAULT_ITERATIONS})",
    )
    add.set_defaults(run=run_add)
    rm = usub.add_parser("remove", help="delete a user's SCRAM credentials")
    rm.add_argument("name")
    rm.add_argument(
        "--mechanism", choices=sorted(MECHANISMS), help="only this mechanism (default: all)"
    )
    rm.set_defaults(run=run_remove)
    ls = usub.add_parser("list", help="users with SCRAM credentials")
    ls.add_argument("names", nargs="*", help="only these users")
    ls.set_defaults(run=run_list)


def _admin(args: argparse.Namespace) -> AsyncAdminClient:
    return AsyncAdminClient(common.bootstrap(args), controller=common.controller(args))


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        password: str = args.password
    elif args.password_file is not None:
        try:
            lines = Path(args.password_file).read_text().splitlines()
        except OSError as exc:
            raise InvalidConfigError(f"cannot read {args.password_file}: {exc}") from exc
        password = lines[0] if lines else ""
    else:
        password = os.environ.get(PASSWORD_ENV, "")
        if not password:
            raise common.UsageError(
                f"no password: pass --password, --password-file or set ${PASSWORD_ENV}"
            )
    if not password:
        raise InvalidConfigError("the password is empty")
    return password


async def run_add(args: argparse.Namespace) -> int:
    if not scram.MIN_ITERATIONS <= args.iterations <= scram.MAX_ITERATIONS:
        raise InvalidConfigError(
            f"--iterations must be in [{scram.MIN_ITERATIONS}, {scram.MAX_ITERATIONS}]"
        )
    password = _password(args)
    async with _admin(args) as admin:
        await admin.alter_user_scram_credentials(
            [(args.name, args.mechanism, password)], iterations=args.iterations
        )
    common.progress(f"user {args.name}: {args.mechanism} credential set")
    return 0


async def run_remove(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        if args.mechanism:
            mechanisms = [args.mechanism]
        else:
            info = (await admin.describe_user_scram_credentials([args.name])).get(args.name)
            mechanisms = sorted(info.mechanisms) if info else []
            if not mechanisms:
                raise InvalidRequestError(f"user {args.name!r} has no SCRAM credentials")
        await admin.alter_user_scram_credentials(deletions=[(args.name, m) for m in mechanisms])
    common.progress(f"user {args.name}: {', '.join(mechanisms)} credential(s) removed")
    return 0


async def run_list(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        users = await admin.describe_user_scram_credentials(args.names)
    if args.output == "json":
        common.print_json({u.user: u.mechanisms for u in users.values()})
        return 0
    for name in sorted(users):
        for mech, iterations in sorted(users[name].mechanisms.items()):
            print(f"{name}\t{mech}\t{iterations}")
    return 0
