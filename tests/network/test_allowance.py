"""``ANONML_TEST_NETWORKS``: private test networks allowed for relays only in loopback test mode."""

from __future__ import annotations

import ipaddress

import pytest

from anonml import addresses
from anonml.protocol import check_relay_url

RELAY = "https://10.77.5.2:8471/relay/" + "ab" * 16
ADDRESS = ipaddress.ip_address("10.77.5.2")


def test_without_the_variable_a_private_relay_is_refused_even_in_test_mode(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(addresses.TEST_NETWORKS_VARIABLE, raising=False)
    assert addresses.address_refusal(ADDRESS, allow_loopback=True) == "a private address"
    with pytest.raises(ValueError, match="private"):
        check_relay_url(RELAY, allow_loopback_http=True)


def test_a_declared_network_is_allowed_in_test_mode_only(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(addresses.TEST_NETWORKS_VARIABLE, "192.0.2.0/24, 10.77.5.0/24")
    assert addresses.address_refusal(ADDRESS, allow_loopback=True) is None
    assert check_relay_url(RELAY, allow_loopback_http=True) == RELAY
    # a deployment (no test mode) keeps the global-address rule whatever the environment says
    assert addresses.address_refusal(ADDRESS, allow_loopback=False) == "a private address"
    with pytest.raises(ValueError, match="private"):
        check_relay_url(RELAY, allow_loopback_http=False)
    # outside the declared prefixes nothing changes
    other = ipaddress.ip_address("10.77.6.2")
    assert addresses.address_refusal(other, allow_loopback=True) == "a private address"
    meta = ipaddress.ip_address("169.254.169.254")
    assert addresses.address_refusal(meta, allow_loopback=True) == "a link-local address"


def test_a_malformed_variable_is_an_error_naming_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(addresses.TEST_NETWORKS_VARIABLE, "10.77.5.0/24,ten-seven-seven")
    with pytest.raises(ValueError, match="ANONML_TEST_NETWORKS: 'ten-seven-seven' is not a network prefix"):
        addresses.address_refusal(ADDRESS, allow_loopback=True)
