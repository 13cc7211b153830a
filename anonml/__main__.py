"""``python -m anonml`` runs the CLI (ending with its parent when that one asked: :mod:`anonml.lifeline`)."""

from anonml.lifeline import watch_lifeline

watch_lifeline()

from anonml.cli import app  # noqa: E402  (the watch first: a parent may die while this imports)

app(prog_name="anonml")
