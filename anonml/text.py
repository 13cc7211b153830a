"""Text that came from elsewhere, made inert for whoever reads it: the terminal's and the pages' one rule.

A proposal's title, an aggregator's reason, a file name: any of them may carry
characters that change what a person sees rather than add to it. Terminal
escape sequences (CSI, OSC) restyle or rewrite a terminal; C0/C1 controls do
the same or hide text; the Unicode bidirectional controls (embeddings and
overrides U+202A–U+202E, isolates U+2066–U+2069, the marks U+200E/U+200F) and
the zero-width characters reorder or hide what follows, so that
``"\\u202eexe.elif_tnedutS"`` reads "Student_file.exe" (Unicode TR #9; the
"Trojan Source" attack, Boucher & Anderson 2021). :func:`strip_controls` removes
all of them, keeping tabs and newlines; ``anonml``'s commands
(:func:`anonml.cli_support.untrusted`) and the web pages (:class:`anonml.web.Pages`,
every value a template prints) both use it, so the two never show a string differently.
"""

from __future__ import annotations

import re

__all__ = ["strip_controls"]

#: Terminal escape sequences: CSI (``ESC [ … final``), OSC (``ESC ] … BEL|ST``), two-byte escapes.
_ESCAPES = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])|\x9b[0-?]*[ -/]*[@-~]"
)
#: C0/C1 controls but tab and newline, and the invisible characters that reorder or hide text
#: (bidi marks, embeddings, overrides and isolates; zero widths; the byte-order mark).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def strip_controls(text: str) -> str:
    """``text`` without escape sequences, control characters (tab and newline kept) or bidi controls."""
    return _CONTROLS.sub("", _ESCAPES.sub("", text))
