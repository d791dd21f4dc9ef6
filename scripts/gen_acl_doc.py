#!/usr/bin/env python3
"""Generate docs/security.md's table of what every RPC needs, from the one RPC table
(:data:`headwater.platform.auth.rules.RULES`).

Usage::

    python scripts/gen_acl_doc.py            # print the table
    python scripts/gen_acl_doc.py --write    # replace it in docs/security.md

The table sits between ``<!-- BEGIN GENERATED: acl-operations -->`` and
``<!-- END GENERATED: acl-operations -->``. A rule's checks are functions of the request, so
they are found by running them on sample requests: one with every string field set (one
element in every repeated field), then one per top-level scalar field changed alone (strings
emptied, integers set to -1, 0 and 1, enums to each value; nested fields too, in the first
element of repeated ones). The union of what those samples
need is listed; which check applies to which request shape is described in the doc's notes.
``tests/security/test_acl_doc.py`` fails when the doc differs from this output.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from google.protobuf import symbol_database  # noqa: E402
from google.protobuf.descriptor import FieldDescriptor  # noqa: E402

from headwater.platform.auth.acls import op_name, rt_name  # noqa: E402
from headwater.platform.auth.rules import RULES, Rule  # noqa: E402

DOC = ROOT / "docs" / "security.md"
SECTION = "acl-operations"
BEGIN = f"<!-- BEGIN GENERATED: {SECTION} -->"
END = f"<!-- END GENERATED: {SECTION} -->"


def _fill(msg: Any) -> Any:
    """Every string field "x", one element in every repeated field (recursively)."""
    for f in msg.DESCRIPTOR.fields:
        if f.type == FieldDescriptor.TYPE_STRING:
            if f.is_repeated:
                getattr(msg, f.name).append("x")
            else:
                setattr(msg, f.name, "x")
        elif f.type == FieldDescriptor.TYPE_MESSAGE and not f.message_type.GetOptions().map_entry:
            if f.is_repeated:
                _fill(getattr(msg, f.name).add())
            else:
                _fill(getattr(msg, f.name))
    return msg


def _values(f: Any) -> list[Any]:
    if f.type == FieldDescriptor.TYPE_STRING:
        return [""]
    if f.type == FieldDescriptor.TYPE_ENUM:
        return [v.number for v in f.enum_type.values]
    if f.type == FieldDescriptor.TYPE_BOOL:
        return [True]
    if f.cpp_type in (FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_INT64):
        return [-1, 0, 1]
    return []


def _scalar_paths(desc: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """(path, field) of every non-repeated scalar field, descending into message fields
    (the first element of repeated ones)."""
    out: list[tuple[tuple[str, ...], Any]] = []
    for f in desc.fields:
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            if not f.message_type.GetOptions().map_entry:
                out += _scalar_paths(f.message_type, (*prefix, f.name))
        elif not f.is_repeated:
            out.append(((*prefix, f.name), f))
    return out


def _set(msg: Any, path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        child = getattr(msg, name)
        msg = child[0] if hasattr(child, "add") else child
    setattr(msg, path[-1], value)


def _variants(request_cls: Any) -> list[Any]:
    base = _fill(request_cls())
    out = [base]
    for path, f in _scalar_paths(request_cls.DESCRIPTOR):
        for v in _values(f):
            m = request_cls()
            m.CopyFrom(base)
            _set(m, path, v)
            out.append(m)
    return out


def _request_class(method: str) -> Any:
    from headwater.v1 import (  # noqa: F401  (registers the descriptors)
        broker_pb2,
        controller_pb2,
        coordinator_pb2,
        group_stream_pb2,
        security_pb2,
        transaction_pb2,
    )

    service, name = method.strip("/").split("/")
    pool = symbol_database.Default().pool
    desc = pool.FindServiceByName(service).FindMethodByName(name)
    return symbol_database.Default().GetSymbol(desc.input_type.full_name)


def _first_messages(request_cls: Any) -> list[Any]:
    """One request per message field (a stream's oneof of message kinds), that field filled."""
    out = []
    for f in request_cls.DESCRIPTOR.fields:
        if f.type == FieldDescriptor.TYPE_MESSAGE and not f.is_repeated:
            m = request_cls()
            getattr(m, f.name).SetInParent()
            _fill(getattr(m, f.name))
            out.append(m)
    return out


def _check(c: tuple[int, int, str]) -> str:
    return f"{op_name(c[1])} {rt_name(c[0])}"


def _needs(method: str, rule: Rule) -> str:
    if rule.open:
        return "none (open)"
    if rule.streaming and method.endswith("/ReplicaFetch"):
        samples: list[Any] = [None]
    else:
        samples = _variants(_request_class(method))
    found: dict[str, None] = {}
    for req in samples:
        for need in rule.needs(req):
            found[" or ".join(_check(c) for c in (need.check, *need.alternatives))] = None
    if rule.first is not None:  # a client stream: each kind of first message, filled
        for req in _first_messages(_request_class(method)):
            for need in rule.first(req):
                check = " or ".join(_check(c) for c in (need.check, *need.alternatives))
                found[f"{check} (of its first message)"] = None
    text = "; ".join(found) or "-"
    # internal RPCs: closed to all but the cluster's identity, authorizer on or off
    return f"**internal**; {text}" if rule.internal else text


def table() -> str:
    lines = [
        "| RPC | needs | per-partition (in-band) | list filtered by |",
        "| --- | --- | --- | --- |",
    ]
    for method, rule in RULES.items():
        inband = f"{op_name(rule.inband.operation)} TOPIC" if rule.inband else ""
        filtered = "DESCRIBE" if rule.filter else ""
        lines.append(
            f"| `{method.strip('/').removeprefix('headwater.v1.')}` | {_needs(method, rule)} "
            f"| {inband} | {filtered} |"
        )
    return "\n".join(lines) + "\n"


def extract(doc: str) -> str:
    m = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), doc, re.S)
    if m is None:
        raise SystemExit(f"{DOC}: markers for {SECTION} not found")
    return m.group(1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"update {DOC.relative_to(ROOT)}")
    args = ap.parse_args()
    generated = table()
    if not args.write:
        sys.stdout.write(generated)
        return 0
    doc = DOC.read_text()
    old = extract(doc)
    DOC.write_text(doc.replace(BEGIN + "\n" + old + END, BEGIN + "\n" + generated + END))
    return 0


if __name__ == "__main__":
    sys.exit(main())
