"""``python -m anonml`` runs the CLI."""

from anonml.cli import app

app(prog_name="anonml")
