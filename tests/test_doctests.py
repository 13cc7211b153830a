"""Every numpydoc Example in the code runs and prints what it claims (issue 30).

The modules are found, not listed: every module of the project's packages is parsed, and each
whose docstrings (module, class, function or method, at any depth) hold ``>>>`` prompts is run
through :func:`doctest.testmod`, so an example added anywhere is checked from then on. The count
of examples doctest ran must equal the count of prompts in the docstrings: an example where
doctest does not look (a nested function, a ``cached_property``, an object whose ``__module__``
is another module's) fails here instead of being skipped in silence.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

PACKAGES = ("anonml", "importers", "featurizers", "instancers", "peer", "aggregator", "witness")
ROOT = Path(__file__).resolve().parents[1]
PROMPT = re.compile(r"^\s*>>>", re.MULTILINE)
_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _prompts(source: str) -> int:
    """The ``>>>`` prompts (one per example) in every docstring of ``source``."""
    return sum(
        len(PROMPT.findall(ast.get_docstring(node, clean=False) or ""))
        for node in ast.walk(ast.parse(source))
        if isinstance(node, _DOCUMENTED)
    )


def _modules_with_examples() -> dict[str, int]:
    """Module name → prompts in its docstrings, for every module that has any (``__main__`` aside:
    importing it runs the command line; migrations are run by Alembic, never imported)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__main__" or "migrations" in parts:
                continue
            if prompts := _prompts(path.read_text(encoding="utf-8")):
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = prompts
    return found


MODULES = _modules_with_examples()


def _run(module: ModuleType) -> doctest.TestResults:
    return doctest.testmod(module, optionflags=doctest.ELLIPSIS)


def test_the_examples_are_found_where_they_are_known_to_be():
    known = {"anonml.privacy.mechanisms", "anonml.learn.model", "anonml.store", "importers.edx"}
    assert known <= set(MODULES)
    assert MODULES["anonml.learn.model"] == 7  # `>>>` lines only: `...` continues an example


@pytest.mark.parametrize("name", sorted(MODULES))
def test_examples(name):
    result = _run(importlib.import_module(name))
    assert result.attempted == MODULES[name], (
        f"{name}: {MODULES[name]} examples in its docstrings, doctest ran {result.attempted}"
    )
    assert result.failed == 0


def test_an_example_doctest_would_skip_is_counted(tmp_path: Path):
    source = '''
from functools import cached_property


class Box:
    """A box.

    >>> Box().size
    3
    """

    @cached_property
    def size(self) -> int:
        """Three (doctest does not look in a cached_property).

        >>> Box().size
        3
        """
        return 3
'''
    path = tmp_path / "skipped_example.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("skipped_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert _prompts(source) == 2
    assert _run(module) == doctest.TestResults(failed=0, attempted=1)
