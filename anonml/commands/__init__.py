"""Typer command groups mounted by ``anonml.cli``."""
