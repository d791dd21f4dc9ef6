"""Every relative link in the README, docs/ and the folders' READMEs points at something that
exists: a file or folder of the repository, and, for ``#anchor``, a heading of that document
(GitHub's anchor rules: lower case, punctuation dropped, spaces to hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").rglob("*.md"),
        # the project's folders, not tools' hidden ones (.pytest_cache/README.md)
        *(p for p in ROOT.glob("*/README.md") if not p.parent.name.startswith(".")),
    ],
)
# [text](target) outside code; images too. Targets with a scheme or starting with # are skipped
# by the caller (same-document anchors are checked separately).
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def _anchors(doc: Path) -> set[str]:
    text = FENCE.sub("", doc.read_text())
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _links(doc: Path) -> list[str]:
    text = INLINE_CODE.sub("", FENCE.sub("", doc.read_text()))
    return LINK.findall(text)


@pytest.mark.fast
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for target in _links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        path_part, _, anchor = target.partition("#")
        dest = (doc.parent / path_part).resolve() if path_part else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


@pytest.mark.fast
def test_the_link_checker_sees_links_and_anchors(tmp_path: Path) -> None:
    doc = tmp_path / "a.md"
    doc.write_text(
        "# Getting started\n## Why? (short)\n[x](b.md#top) [y](#why-short) `[z](no.md)`\n"
        "```\n[w](gone.md)\n```\n"
    )
    assert _links(doc) == ["b.md#top", "#why-short"]
    assert _anchors(doc) == {"getting-started", "why-short"}


# a path of this repository named in prose or code spans: "services/broker/app.py", "docs/x.md"
TOP = "headwater|services|tests|docs|scripts|charts|operator|spark|bench|proto|clients|examples"
NAMED_PATH = re.compile(
    rf"(?<![\w./-])((?:{TOP})/[\w./-]*\w\.(?:py|md|sh|yaml|yml|proto|json|toml|go|java|js))\b"
)


def _named_paths(doc: Path) -> list[str]:
    return sorted(set(NAMED_PATH.findall(FENCE.sub("", doc.read_text()))))


@pytest.mark.fast
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_files_named_in_the_docs_exist(doc: Path) -> None:
    # named from the repository's root, or from the document's own folder (charts/README.md)
    missing = [
        p for p in _named_paths(doc) if not ((ROOT / p).exists() or (doc.parent / p).exists())
    ]
    assert not missing, f"{doc.relative_to(ROOT)} names files that do not exist: {missing}"
