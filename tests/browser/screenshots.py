"""The README's screenshots: taken from a real round, and checked to show the pages they name.

Regenerate them (a realistic run: 20 peers, the schedule's and the draft's
default windows, floors and median pool; see ``tests/browser/test_pages.py``)::

    ANONML_SCREENSHOTS=docs/screenshots python3 -m pytest tests/browser/test_pages.py -q

Every page is shot at 1,280 × 800 (``<page>.png``) and 390 × 844
(``<page>-phone.png``), full height. Beside each PNG, ``<page>.json`` records
the viewport and the page's *outline*: its tab title, headings, chart and
figure captions, table headers, form fields and labels, with the figures
(digits) and problem ids masked, proposal titles left out, and so are the parts
a template marks ``data-varies`` (drawn or not by the round's outcome: the
refusals table, the shuffle bound's facts) — what makes the
page that page, and what a layout or template change changes, but not what one
round's numbers change. Without ``ANONML_SCREENSHOTS`` the same test (a faster
round) compares each page's outline with the committed one and each committed
PNG's width with its viewport: a template changed without regenerating the
screenshots fails there, naming the page and what differs. (A pixel or
perceptual-hash comparison would fail on every round's different numbers and
on font rendering; the outline is what a stale screenshot gets wrong.)
"""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.browser.conftest import goto

if TYPE_CHECKING:
    from playwright.sync_api import Page

#: The committed screenshots and their outlines.
COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
#: The two viewports every page is shown at (CSS pixels): a laptop and a phone.
SIZES = {"": (1280, 800), "-phone": (390, 844)}

#: The outline, read in the page: structure and wording, never one round's figures or a proposal's title.
_OUTLINE_JS = """
() => {
  const text = e => e.textContent.replace(/\\s+/g, ' ').trim();
  const out = new Set(['title:' + document.title]);
  const card = e => e.closest('section[id^="p-"], section[id^="model-p-"]');
  const named = 'h1, h2, h3, legend, figcaption b, th, dt, label, summary, nav a';
  for (const e of document.querySelectorAll(named)) {
    if (card(e) && e.matches('h2')) { out.add('h2:(a proposal)'); continue; }
    if (e.closest('[data-varies]')) { continue; }  // drawn or not by the round's outcome
    out.add(e.tagName.toLowerCase() + ':' + text(e));
  }
  for (const e of document.querySelectorAll('[name]')) { out.add('field:' + e.getAttribute('name')); }
  for (const e of document.querySelectorAll('section[id], table[id], dl[id]')) {
    if (e.closest('[data-varies]')) { continue; }
    out.add(e.tagName.toLowerCase() + '#' + e.id);
  }
  if (document.querySelector('svg.chart')) { out.add('chart'); }
  return [...out];
}
"""
_MASKS = ((re.compile(r"p-[0-9a-f]{16}"), "p-…"), (re.compile(r"\d+(?:[.,]\d+)*"), "#"))


def outline(page: Page) -> list[str]:
    """The page's outline (module notes), sorted, figures and problem ids masked."""
    items = page.evaluate(_OUTLINE_JS)
    masked = set()
    for item in items:
        kind, sep, text = item.partition(":")  # the kind (a tag, "field", "title") as it is
        if not sep:  # an element's id ("section#p-…"): masked whole
            kind, text = "", kind
        for pattern, mask in _MASKS:
            text = pattern.sub(mask, text)
        masked.add(kind + sep + text)
    return sorted(masked)


def regenerating() -> Path | None:
    """The folder screenshots are written to (``ANONML_SCREENSHOTS``), or None when checking."""
    folder = os.environ.get("ANONML_SCREENSHOTS")
    return Path(folder) if folder else None


def png_size(path: Path) -> tuple[int, int]:
    """A PNG's width and height, from its IHDR chunk."""
    head = path.read_bytes()[:24]
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG")
    return struct.unpack(">II", head[16:24])


def shoot(page: Page, name: str, url: str, out: Path) -> None:
    """Load ``url`` at each size: write ``name[-phone].png`` and its outline when regenerating (into
    ``ANONML_SCREENSHOTS``), else shoot into ``out`` and compare with the committed outline."""
    target = regenerating()
    for suffix, (width, height) in SIZES.items():
        page.set_viewport_size({"width": width, "height": height})
        goto(page, url)
        page.wait_for_load_state("load")
        shot = f"{name}{suffix}"
        record: dict[str, Any] = {"page": name, "viewport": [width, height], "outline": outline(page)}
        if target is not None:
            target.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(target / f"{shot}.png"), full_page=True)
            (target / f"{shot}.json").write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
            continue
        page.screenshot(path=str(out / f"{shot}.png"), full_page=True)
        committed = COMMITTED / f"{shot}.json"
        assert committed.is_file(), f"no committed outline {committed.name}: regenerate the screenshots"
        expected = json.loads(committed.read_text())
        assert png_size(COMMITTED / f"{shot}.png")[0] == width, f"{shot}.png is not {width} px wide"
        missing = sorted(set(expected["outline"]) - set(record["outline"]))
        extra = sorted(set(record["outline"]) - set(expected["outline"]))
        assert (missing, extra) == ([], []), (
            f"docs/screenshots/{shot}.png shows another page than {url} draws now: "
            f"only in the screenshot {missing}, only on the page {extra} (regenerate: see {__name__})"
        )
