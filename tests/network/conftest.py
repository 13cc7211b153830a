"""The network tests' fixtures may ask whether the test itself failed (``request.node.failed_call``):
a deployment's services' logs are printed then, and only then."""

from __future__ import annotations

from collections.abc import Generator

import pytest


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, object, object]:
    report = yield
    if call.when == "call":
        item.failed_call = report.failed  # type: ignore[attr-defined]
    return report
