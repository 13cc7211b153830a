"""Peers need a real aggregator to talk to: reuse the aggregator tests' fixture."""

from tests.aggregator.conftest import aggregator  # noqa: F401 - a fixture, registered by import
