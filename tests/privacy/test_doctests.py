"""The numpydoc Examples in anonml.privacy run and print what they claim."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "anonml.privacy.mechanisms",
    "anonml.privacy.selection",
    "anonml.privacy.descriptor",
    "anonml.privacy.estimation",
    "anonml.privacy.binary",
    "anonml.privacy.median",
    "anonml.privacy.ledger",
]


@pytest.mark.parametrize("name", MODULES)
def test_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
