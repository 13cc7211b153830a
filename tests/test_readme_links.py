"""Every relative link in README.md and docs/*.md reaches a file, and every ``#anchor`` a heading.

The README points to documents under ``docs/`` (the model-quality record, the protocol, the
threat model) and those point back; a moved file or a renamed heading would leave a link that
GitHub renders and that leads nowhere. Anchors are GitHub's heading slugs: the heading's text
lower-cased, every character but letters, digits, spaces, ``-`` and ``_`` dropped, spaces made
``-``, and a repeated slug suffixed ``-1``, ``-2`` … in order.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) and ![alt](target); a target ends at the first space (a title may follow) or ")".
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, …
_FENCE = re.compile(r"^\s*(```|~~~)")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, where ``](`` is code, not a link."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (before the duplicate suffix)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a linked heading keeps its text
    text = "".join(ch for ch in text.lower() if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, duplicates suffixed as GitHub suffixes them."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = _slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(path: Path) -> list[str]:
    """``file:line: target (reason)`` for each relative link of ``path`` that leads nowhere."""
    broken = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        for target in _LINK.findall(line):
            if _EXTERNAL.match(target):
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{number}: {target}"
            if not linked.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{where} (no heading with that anchor)")
    return broken


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(document: Path) -> None:
    assert broken_links(document) == []


def test_the_readme_links_the_model_quality_record() -> None:
    """The learning section's current results point to where their history went."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](docs/model-quality.md" in readme
    assert (ROOT / "docs" / "model-quality.md").exists()


def test_a_broken_link_is_reported(tmp_path: Path) -> None:
    """The check fails on a missing file, a missing anchor, and not on a code block or a URL."""
    (tmp_path / "other.md").write_text("# A heading: with `code`\n\n## Twice\n\n## Twice\n", encoding="utf-8")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](other.md) [ok](other.md#a-heading-with-code) [ok](other.md#twice-1) [web](https://x.org/a)\n"
        "[gone](missing.md) [bad anchor](other.md#nowhere)\n"
        "```\n[in code](also-missing.md)\n```\n"
        "[self](#none)\n",
        encoding="utf-8",
    )
    reported = broken_links(doc)
    assert [entry.split(": ", 1)[1] for entry in reported] == [
        "missing.md (no such file)",
        "other.md#nowhere (no heading with that anchor)",
        "#none (no heading with that anchor)",
    ]
