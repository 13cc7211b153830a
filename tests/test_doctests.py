"""Every numpydoc Example in the code runs and prints what it claims.

The modules are found, not listed: any module of the project's packages whose
source holds a ``>>>`` prompt is run through :func:`doctest.testmod`, so an
example added anywhere is checked from then on.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

PACKAGES = ("anonml", "importers", "featurizers", "instancers", "peer", "aggregator", "witness")
ROOT = Path(__file__).resolve().parents[1]


def _modules_with_examples() -> list[str]:
    found = []
    for package in PACKAGES:
        for info in pkgutil.walk_packages([str(ROOT / package)], prefix=f"{package}."):
            if info.name.endswith("__main__") or ".migrations." in info.name:
                continue
            relative = Path(*info.name.split("."))
            source = ROOT / relative.with_suffix(".py")
            if not source.is_file():
                source = ROOT / relative / "__init__.py"
            if source.is_file() and ">>> " in source.read_text(encoding="utf-8"):
                found.append(info.name)
    return sorted(found)


MODULES = _modules_with_examples()


def test_the_examples_are_found_where_they_are_known_to_be():
    known = {"anonml.privacy.mechanisms", "anonml.learn.model", "anonml.store", "importers.edx"}
    assert known <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} holds '>>> ' but no example doctest could find"
    assert result.failed == 0
