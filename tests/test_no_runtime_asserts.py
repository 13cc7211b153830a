"""No ``assert`` statement in the project's modules (issue 30): ``python -O`` strips them.

A check that bad input can reach raises the project's error with a message saying what failed; a
hint for the type checker is written so that it needs none (for example, the first candidate taken
before the loop, not ``None``).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("anonml", "peer", "aggregator", "witness", "importers", "featurizers", "instancers")


def _asserts(source: str) -> list[int]:
    """Line numbers of the ``assert`` statements in ``source`` (code only: a string holding one is not)."""
    return [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Assert)]


def test_no_module_uses_assert_as_a_runtime_check():
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line in _asserts(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_an_assert_is_found_and_one_in_a_string_is_not():
    assert _asserts("x = 1\nif x:\n    assert x, 'no'\n") == [3]
    assert _asserts('TEMPLATE = """\nassert make() == 3\n"""\n') == []
