"""The README and docs/ link only files that exist.

A link to a moved or never-written file is the first thing a newcomer clicks
and the last thing a review notices; this test notices it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
# [text](target "title") and ![alt](target): the text may hold `code`, one level of [].
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # https:, mailto:, ...


def links(text: str) -> list[str]:
    """Every link target of a Markdown text, outside fenced code blocks."""
    text = FENCE.sub("", text)
    return [*INLINE.findall(text), *REFERENCE.findall(text)]


def test_links_are_found() -> None:
    text = '[`a.md`](a.md) ![x](img/b.png "B") [c][1]\n[1]: docs/c.md#part\n```\n[d](d.md)\n```'
    assert links(text) == ["a.md", "img/b.png", "docs/c.md#part"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files_that_exist(doc: Path) -> None:
    missing = []
    for target in links(doc.read_text(encoding="utf-8")):
        path = target.split("#", 1)[0].split("?", 1)[0]
        if EXTERNAL.match(target) or not path:
            continue  # a web address, or an anchor in the same file
        if not (doc.parent / path).exists():
            missing.append(target)
    assert not missing, f"{doc.relative_to(ROOT)} links files that do not exist: {missing}"
