#!/usr/bin/env python3
"""Generate docs/api.md's reference (every service, method, message and enum) from proto/ and
its comments, so that the reference can say nothing the protos do not.

Usage::

    python scripts/gen_api_doc.py            # print the reference
    python scripts/gen_api_doc.py --write    # replace it in docs/api.md

The reference sits between ``<!-- BEGIN GENERATED: api-reference -->`` and
``<!-- END GENERATED: api-reference -->``; the rest of docs/api.md is written by hand.
protoc (grpcio-tools, pinned in pyproject.toml) compiles proto/ with source info, which holds
the comments. ``tests/test_api_doc.py`` fails when the doc differs from this output.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "api.md"
BEGIN = "<!-- BEGIN GENERATED: api-reference -->"
END = "<!-- END GENERATED: api-reference -->"
PACKAGE = "headwater.v1"

# FieldDescriptorProto.type -> proto type name (messages and enums use type_name)
_SCALARS = {
    getattr(descriptor_pb2.FieldDescriptorProto, f"TYPE_{t.upper()}"): t
    for t in [
        "double",
        "float",
        "int64",
        "uint64",
        "int32",
        "fixed64",
        "fixed32",
        "bool",
        "string",
        "bytes",
        "uint32",
        "sfixed32",
        "sfixed64",
        "sint32",
        "sint64",
    ]
}


def descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    """proto/headwater/v1/*.proto compiled with their comments."""
    files = sorted(str(p.relative_to(ROOT / "proto")) for p in (ROOT / "proto").rglob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                "-I",
                str(ROOT / "proto"),
                "--include_source_info",
                f"--descriptor_set_out={out}",
                *files,
            ],
            check=True,
        )
        fds = descriptor_pb2.FileDescriptorSet()
        fds.ParseFromString(out.read_bytes())
    return fds


def _clean(comment: str) -> str:
    lines = [line.strip() for line in comment.strip("\n").splitlines()]
    return " ".join(line for line in lines if line)


def _prose(comment: str) -> str:
    """A comment as Markdown: its lines as written (paragraphs and lists kept)."""
    lines = [line.removeprefix(" ").rstrip() for line in comment.strip("\n").splitlines()]
    return "\n".join(lines).strip()


class _Comments:
    """Leading and trailing comments of a file's elements, by source path."""

    def __init__(self, f: descriptor_pb2.FileDescriptorProto) -> None:
        self._by_path = {tuple(loc.path): loc for loc in f.source_code_info.location}

    def prose(self, *path: int) -> str:
        """The leading comment at ``path`` as Markdown (trailing one appended)."""
        loc = self._by_path.get(path)
        if loc is None:
            return ""
        parts = (_prose(loc.leading_comments), _prose(loc.trailing_comments))
        return "\n\n".join(p for p in parts if p)

    def __call__(self, *path: int) -> str:
        loc = self._by_path.get(path)
        if loc is None:
            return ""
        return " ".join(
            c for c in (_clean(loc.leading_comments), _clean(loc.trailing_comments)) if c
        )


def _type(field: descriptor_pb2.FieldDescriptorProto, maps: dict[str, str]) -> str:
    if field.type_name:
        name = field.type_name.lstrip(".")
        if name in maps:
            return maps[name]
        short = name.removeprefix(PACKAGE + ".")
        return f"[{short}](#{_anchor(short)})" if name.startswith(PACKAGE) else short
    return _SCALARS[field.type]


def _anchor(name: str) -> str:
    return re.sub(r"[^\w\- ]", "", name.lower()).replace(" ", "-")


def _cell(text: str) -> str:
    return text.replace("|", "\\|") or " "


def _fields(
    msg: descriptor_pb2.DescriptorProto, comments: _Comments, path: tuple[int, ...]
) -> list[str]:
    maps = {
        f"{PACKAGE}.{msg.name}.{n.name}": (f"map<{_type(n.field[0], {})}, {_type(n.field[1], {})}>")
        for n in msg.nested_type
        if n.options.map_entry
    }
    rows = ["| field | number | type | meaning |", "| --- | --- | --- | --- |"]
    for i, field in enumerate(msg.field):
        t = _type(field, maps)
        if field.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED and "map<" not in t:
            t = f"repeated {t}"
        if field.proto3_optional:
            t = f"optional {t}"
        rows.append(f"| `{field.name}` | {field.number} | {t} | {_cell(comments(*path, 2, i))} |")
    if not msg.field:
        rows.append("| (no fields) | | | |")
    return rows


def reference() -> str:
    fds = descriptor_set()
    out: list[str] = []
    services: list[str] = []
    messages: list[str] = []
    enums: list[str] = []
    for f in sorted(fds.file, key=lambda f: f.name):
        comments = _Comments(f)
        header = "\n\n".join(  # the file's opening comment, before `syntax`
            _prose(c)
            for loc in f.source_code_info.location
            if tuple(loc.path) == (12,)
            for c in [*loc.leading_detached_comments, loc.leading_comments]
            if c
        )
        for si, svc in enumerate(f.service):
            intro = comments.prose(6, si) or header
            services += [f"### {PACKAGE}.{svc.name}", "", f"In `proto/{f.name}`.", "", intro, ""]
            for mi, m in enumerate(svc.method):
                req = m.input_type.removeprefix(f".{PACKAGE}.")
                resp = m.output_type.removeprefix(f".{PACKAGE}.")
                cs = "stream " if m.client_streaming else ""
                ss = "stream " if m.server_streaming else ""
                sig = (
                    f"{m.name}({cs}[{req}](#{_anchor(req)}))"
                    f" returns ({ss}[{resp}](#{_anchor(resp)}))"
                )
                services += [f"#### {svc.name}.{m.name}", "", f"`rpc` {sig}", ""]
                text = comments.prose(6, si, 2, mi)
                services += [text or "(no comment in the proto; see the messages)", ""]
        for mi, msg in enumerate(f.message_type):
            messages += [f"### {msg.name}", "", f"In `proto/{f.name}`.", ""]
            if comments.prose(4, mi):
                messages += [comments.prose(4, mi), ""]
            messages += [*_fields(msg, comments, (4, mi)), ""]
        for ei, enum in enumerate(f.enum_type):
            enums += [f"### {enum.name}", "", f"In `proto/{f.name}`.", ""]
            if comments.prose(5, ei):
                enums += [comments.prose(5, ei), ""]
            enums += ["| name | number | meaning |", "| --- | --- | --- |"]
            for vi, v in enumerate(enum.value):
                enums.append(f"| `{v.name}` | {v.number} | {_cell(comments(5, ei, 2, vi))} |")
            enums.append("")
    out += ["## Services", "", *services, "## Messages", "", *messages, "## Enums", "", *enums]
    return "\n".join(out).rstrip() + "\n"


def extract(doc: str) -> str:
    """The generated part of ``doc`` (between the markers)."""
    return doc[doc.index(BEGIN) + len(BEGIN) : doc.index(END)].removeprefix("\n")


def replace(doc: str, text: str) -> str:
    """``doc`` with ``text`` as its generated part."""
    return doc[: doc.index(BEGIN) + len(BEGIN)] + "\n" + text + doc[doc.index(END) :]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="replace the reference in docs/api.md")
    args = parser.parse_args()
    text = reference()
    if not args.write:
        sys.stdout.write(text)
        return
    doc = DOC.read_text()
    DOC.write_text(replace(doc, text))


if __name__ == "__main__":
    main()
