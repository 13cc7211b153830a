"""Settings from environment variables: prefixes, parsers, overrides, validation."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from aggregator.settings import AggregatorSettings
from peer.settings import PeerSettings


def test_aggregator_settings_read_prefixed_variables_and_overrides(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ANONML_AGGREGATOR_PORT", "9123")
    monkeypatch.setenv("ANONML_AGGREGATOR_DB_URL", "sqlite:///x.db")
    settings = AggregatorSettings.from_env(db_url="sqlite:///y.db", port=None)
    assert settings.port == 9123  # None overrides nothing
    assert settings.db_url == "sqlite:///y.db"  # a given override wins


def test_peer_settings_parse_lists_and_json(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ANONML_PEER_AGGREGATORS", "http://a:1, http://b:2,")
    monkeypatch.setenv("ANONML_PEER_POLICY", '{"max_epsilon_per_problem": 0.5}')
    settings = PeerSettings.from_env()
    assert settings.aggregators == ["http://a:1", "http://b:2"]
    assert settings.policy.max_epsilon_per_problem == 0.5


def test_bad_variable_is_a_validation_error(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ANONML_AGGREGATOR_PORT", "not-a-port")
    with pytest.raises(ValidationError, match="port"):
        AggregatorSettings.from_env()
