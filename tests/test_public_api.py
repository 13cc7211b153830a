"""``import anonml``: the lazily imported public surface (PEP 562) and what type checkers see of it."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import anonml


def _type_checking_imports() -> dict[str, str]:
    """Name → module of the ``if TYPE_CHECKING:`` imports of ``anonml/__init__.py``."""
    tree = ast.parse(Path(anonml.__file__).read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    return {alias.name: node.module for node in block.body for alias in node.names}  # type: ignore[union-attr]


def test_every_export_resolves_to_its_module_object() -> None:
    # __all__ stays a literal list, which linters and type checkers read; it names the same exports
    assert sorted(anonml.__all__) == sorted(anonml._EXPORTS)
    for name, module in anonml._EXPORTS.items():
        assert getattr(anonml, name) is getattr(importlib.import_module(module), name), name
    assert set(anonml.__all__) <= set(dir(anonml))


def test_type_checkers_see_exactly_the_exports() -> None:
    assert _type_checking_imports() == anonml._EXPORTS


def test_unknown_names_raise_attribute_error() -> None:
    try:
        anonml.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("anonml.no_such_name resolved")


def test_import_anonml_loads_none_of_the_heavy_dependencies() -> None:
    code = "import sys, anonml; print(sorted({'numpy', 'pydantic', 'sqlalchemy'} & set(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"
