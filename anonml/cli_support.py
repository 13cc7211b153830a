"""What every ``anonml`` command shares: consoles, the error boundary, JSON output.

Rich tables go to stdout; progress and messages to stderr; an
:class:`~anonml.errors.AnonMLError` becomes one stderr line and exit code 1.
Text that came from elsewhere (a proposal's title, an aggregator's reason, an
error message quoting either) goes through :func:`untrusted` before Rich sees
it: control characters and terminal escape sequences removed, Rich markup
escaped, length limited.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from anonml.errors import AnonMLError

__all__ = ["out", "err", "expected_errors", "print_json", "parse_json_option", "untrusted"]

out = Console()
err = Console(stderr=True, soft_wrap=True)


@contextmanager
def expected_errors() -> Iterator[None]:
    """Turn an AnonMLError into one stderr line and exit code 1 (no traceback)."""
    try:
        yield
    except AnonMLError as exc:
        err.print(f"[bold red]error:[/] {untrusted(exc, 2000)}", highlight=False, markup=True)
        raise typer.Exit(code=1) from None


#: Terminal escape sequences: CSI (``ESC [ … final``), OSC (``ESC ] … BEL|ST``), two-byte escapes.
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])|\x9b[0-?]*[ -/]*[@-~]")
#: C0/C1 controls and the invisible characters that reorder or hide text (bidi overrides, zero widths).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def untrusted(text: object, limit: int = 200) -> str:
    """``text`` made safe for a Rich console: printable, markup escaped, at most ``limit`` characters.

    Escape sequences and control characters are removed (tabs and newlines
    become spaces), the result is cut to ``limit`` characters with an ellipsis,
    and Rich markup in it is escaped so ``[/oops]`` prints as itself.
    """
    plain = _CONTROLS.sub("", _ESCAPES.sub("", str(text))).replace("\t", " ").replace("\n", " ")
    if len(plain) > limit:
        plain = plain[: max(0, limit - 1)] + "…"
    return escape(plain)


def print_json(document: Any) -> None:
    """Exactly one JSON document on stdout."""
    typer.echo(json.dumps(document, indent=2, default=str))


def parse_json_option(text: str | None, option: str) -> dict[str, Any]:
    """A JSON object given inline or as ``@file.json``; errors name the option."""
    if not text:
        return {}
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise AnonMLError(f"{option}: cannot read {path}: {exc.strerror or exc}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AnonMLError(f"{option}: invalid JSON at column {exc.colno}: {exc.msg}") from None
    if not isinstance(value, dict):
        raise AnonMLError(f"{option}: expected a JSON object")
    return value
