"""What every ``anonml`` command shares: consoles, the error boundary, JSON output.

Rich tables go to stdout; progress and messages to stderr; an
:class:`~anonml.errors.AnonMLError` becomes one stderr line and exit code 1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from anonml.errors import AnonMLError

__all__ = ["out", "err", "expected_errors", "print_json", "parse_json_option"]

out = Console()
err = Console(stderr=True, soft_wrap=True)


@contextmanager
def expected_errors() -> Iterator[None]:
    """Turn an AnonMLError into one stderr line and exit code 1 (no traceback)."""
    try:
        yield
    except AnonMLError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True)
        raise typer.Exit(code=1) from None


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
