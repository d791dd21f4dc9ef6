#!/usr/bin/env python3
"""Generate the record-batch test vectors embedded in docs/batch-format.md.

Usage::

    python scripts/batch_vectors.py            # print the generated Markdown section
    python scripts/batch_vectors.py --write    # replace it in docs/batch-format.md

The section sits between ``<!-- BEGIN GENERATED: batch_vectors.py -->`` and
``<!-- END GENERATED: batch_vectors.py -->``. Each vector is a ``json`` block (the inputs to
``encode_batch``) followed by a ``hex`` block (the batch bytes). Strings in the inputs are
UTF-8; ``null`` is a null key, value or header value. ``tests/batch/test_vectors.py`` checks
that encoding the inputs gives the bytes, that decoding the bytes gives the inputs, and that
this script's output equals the section in the doc.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import crc32c

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from headwater.batch import encode_batch, parse_header  # noqa: E402

DOC = ROOT / "docs" / "batch-format.md"
BEGIN = "<!-- BEGIN GENERATED: batch_vectors.py -->"
END = "<!-- END GENERATED: batch_vectors.py -->"

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z, fixed so the vectors never change

VECTORS: list[tuple[str, str, dict[str, Any]]] = [
    (
        "a",
        "three records, no keys, no headers, no compression, one timestamp for all",
        {"values": ["one", "two", "three"], "timestamps": T0},
    ),
    (
        "b",
        "keys with a null, a null value, headers (one with a null value), explicit "
        "timestamps with a negative delta, base offset and leader epoch as the broker "
        "patched them",
        {
            "values": ["v1", None, "v3"],
            "keys": ["k1", None, "k3"],
            "headers": [[["trace", "abc"]], [], [["h\u00e9", None], ["n", "1"]]],
            "timestamps": [T0, T0 + 5, T0 - 10],
            "base_offset": 1000,
            "partition_leader_epoch": 3,
        },
    ),
    (
        "c",
        "gzip (zlib stream, level 1) over keys and repetitive values",
        {
            "values": ["headwater " * 8, "headwater " * 8, "headwater " * 8, "river"],
            "keys": ["a", "b", "a", "c"],
            "timestamps": [T0, T0 + 1, T0 + 2, T0 + 3],
            "compression_type": "gzip",
            "compression_level": 1,
        },
    ),
    (
        "d",
        "sparse offset deltas, as the log cleaner leaves a batch after compaction",
        {
            "values": ["x", "y"],
            "keys": ["k", "m"],
            "timestamps": T0,
            "offset_deltas": [1, 4],
        },
    ),
]

PARTITIONER_KEYS = ["", "a", "123456789", "headwater", "user-42", "\u00e9t\u00e9"]
PARTITIONS = 3


def _b(s: str | None) -> bytes | None:
    return None if s is None else s.encode()


def encode_inputs(inputs: dict[str, Any]) -> bytes:
    """Call encode_batch with the JSON inputs of one vector."""
    kwargs = dict(inputs)
    values = [_b(v) for v in kwargs.pop("values")]
    keys = kwargs.pop("keys", None)
    if keys is not None:
        keys = [_b(k) for k in keys]
    headers = kwargs.pop("headers", None)
    if headers is not None:
        headers = [[(k, _b(v)) for k, v in hs] for hs in headers]
    return encode_batch(values, keys, headers=headers, **kwargs)


def hex_lines(raw: bytes) -> str:
    """16 bytes per line, space-separated (bytes.fromhex ignores the whitespace)."""
    return "\n".join(raw[i : i + 16].hex(" ") for i in range(0, len(raw), 16))


def _header_table(raw: bytes) -> str:
    h = parse_header(raw)
    rows = [
        ("0", "base_offset", h.base_offset),
        ("8", "batch_length", h.batch_length),
        ("12", "partition_leader_epoch", h.partition_leader_epoch),
        ("16", "magic", h.magic.decode()),
        ("19", "version", h.version),
        ("20", "crc", f"{h.crc:#010x}"),
        ("24", "attributes", f"{h.attributes:#06x}"),
        ("26", "producer_epoch", h.producer_epoch),
        ("28", "last_offset_delta", h.last_offset_delta),
        ("32", "first_timestamp", h.first_timestamp),
        ("40", "max_timestamp", h.max_timestamp),
        ("48", "producer_id", h.producer_id),
        ("56", "base_sequence", h.base_sequence),
        ("60", "record_count", h.record_count),
    ]
    out = ["| offset | field | value |", "|---|---|---|"]
    out += [f"| {o} | {name} | `{value}` |" for o, name, value in rows]
    return "\n".join(out)


def render() -> str:
    """The generated Markdown section (without the BEGIN/END markers)."""
    parts: list[str] = []
    for name, title, inputs in VECTORS:
        raw = encode_inputs(inputs)
        parts += [
            f"### Vector {name}: {title}",
            "",
            "Inputs:",
            "",
            "```json",
            json.dumps(inputs, ensure_ascii=False, indent=None),
            "```",
            "",
            f"Bytes ({len(raw)}):",
            "",
            "```hex",
            hex_lines(raw),
            "```",
            "",
            "Header fields:",
            "",
            _header_table(raw),
            "",
        ]
    parts += [
        f"### Partitioner vectors (partitions = {PARTITIONS})",
        "",
        "| key (UTF-8) | crc32c (hex) | crc32c (unsigned) | partition |",
        "|---|---|---|---|",
    ]
    for key in PARTITIONER_KEYS:
        crc = crc32c.crc32c(key.encode())
        parts.append(
            f"| `{json.dumps(key, ensure_ascii=False)}` | `{crc:#010x}` | {crc} | "
            f"{crc % PARTITIONS} |"
        )
    return "\n".join(parts) + "\n"


def replace_section(doc: str, body: str) -> str:
    start = doc.index(BEGIN) + len(BEGIN)
    end = doc.index(END)
    return doc[:start] + "\n" + body + doc[end:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="update docs/batch-format.md")
    args = parser.parse_args()
    body = render()
    if args.write:
        DOC.write_text(replace_section(DOC.read_text(), body))
    else:
        sys.stdout.write(body)


if __name__ == "__main__":
    main()
