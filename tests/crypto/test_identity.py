"""Identities: fingerprints, domain-separated signatures, per-round relay key certificates, X25519 checks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from anonml.crypto.exceptions import CryptoError, InvalidEncoding, InvalidPoint, InvalidSignature
from anonml.crypto.identity import Identity, PublicIdentity, RelayKeyCertificate, RoundRelayKey, x25519
from tests.crypto import edwards_ref as ed
from tests.crypto.helpers import flip_bit


@pytest.fixture()
def alice() -> Identity:
    return Identity.generate(np.random.default_rng(1))


def test_generation_is_seeded_and_fingerprint_stable(alice: Identity) -> None:
    again = Identity.generate(np.random.default_rng(1))
    assert again.public == alice.public and again.fingerprint == alice.fingerprint
    assert Identity.generate(np.random.default_rng(2)).fingerprint != alice.fingerprint
    # The fingerprint names the signing key only: a new relay key keeps it.
    rotated = Identity(alice._secret_bytes()[:32], bytes(range(32)))
    assert rotated.fingerprint == alice.fingerprint and rotated.public != alice.public
    assert len(alice.fingerprint) == 32 and alice.public.node_id == alice.fingerprint[:16]
    assert alice.public.fingerprint_text().replace(" ", "") == alice.fingerprint.hex()


def test_public_identity_round_trips(alice: Identity) -> None:
    assert PublicIdentity.from_bytes(bytes(alice.public)) == alice.public


def test_signatures_are_domain_separated(alice: Identity) -> None:
    sig = alice.sign(b"roster", context=b"roster")
    assert alice.public.verify(b"roster", sig, context=b"roster") == b"roster"
    with pytest.raises(InvalidSignature):
        alice.public.verify(b"roster", sig, context=b"registration")
    with pytest.raises(InvalidSignature):
        alice.public.verify(b"roster!", sig, context=b"roster")
    bob = Identity.generate(np.random.default_rng(9))
    with pytest.raises(InvalidSignature):
        bob.public.verify(b"roster", sig, context=b"roster")


def test_every_bit_flip_in_a_signature_is_rejected(alice: Identity) -> None:
    sig = alice.sign(b"m", context=b"c")
    for bit in range(512):
        with pytest.raises(InvalidSignature):
            alice.public.verify(b"m", flip_bit(sig, bit), context=b"c")


def test_relay_key_certificate_round_trip_and_checks(alice: Identity) -> None:
    key, cert = alice.new_round_relay_key(42, np.random.default_rng(3))
    parsed = RelayKeyCertificate.from_bytes(bytes(cert))
    assert parsed == cert and len(bytes(cert)) == RelayKeyCertificate.SIZE
    assert parsed.verify(alice.public, round_id=42) == key.public_key
    assert parsed.node_id == alice.public.node_id
    with pytest.raises(InvalidSignature):
        parsed.verify(alice.public, round_id=43)
    with pytest.raises(InvalidSignature):
        parsed.verify(Identity.generate(np.random.default_rng(4)).public)


def test_every_bit_flip_in_a_relay_certificate_is_rejected(alice: Identity) -> None:
    _, cert = alice.new_round_relay_key(7, np.random.default_rng(5))
    raw = bytes(cert)
    for bit in range(len(raw) * 8):
        with pytest.raises((InvalidSignature, InvalidPoint)):
            RelayKeyCertificate.from_bytes(flip_bit(raw, bit)).verify(round_id=None)


def test_round_relay_key_destroy(alice: Identity) -> None:
    key = RoundRelayKey.generate(1, np.random.default_rng(6))
    peer = RoundRelayKey.generate(1, np.random.default_rng(7))
    assert key.exchange(peer.public_key) == peer.exchange(key.public_key)
    key.destroy()
    assert key.destroyed
    with pytest.raises(InvalidEncoding):
        key.exchange(peer.public_key)


def test_round_ids_must_be_u64(alice: Identity) -> None:
    for bad in (-1, 2**64, True, 1.5):
        with pytest.raises(InvalidEncoding):
            RoundRelayKey.generate(bad)  # type: ignore[arg-type]


def _low_order_u() -> list[int]:
    """u = (1 + y)/(1 - y) of the Edwards torsion points (y != 1), plus u = 0 for the identity."""
    us = {0}
    for _x, y in ed.small_order_points():
        if y != 1:
            us.add((1 + y) * ed.inv(1 - y) % ed.P)
    return sorted(us)


def test_x25519_rejects_small_order_and_non_canonical_inputs() -> None:
    secret = bytes(range(1, 33))
    lows = _low_order_u()
    assert len(lows) >= 4
    bad = [u.to_bytes(32, "little") for u in lows]
    bad += [(u + ed.P).to_bytes(32, "little") for u in lows if u + ed.P < 2**256]
    bad += [(ed.P - 1).to_bytes(32, "little"), ed.P.to_bytes(32, "little"), (2**255).to_bytes(32, "little")]
    for u in bad:
        with pytest.raises(InvalidPoint):
            x25519(secret, u)


def test_identity_rejects_bad_ed25519_public_keys() -> None:
    for t in ed.small_order_points():
        with pytest.raises(InvalidPoint):
            PublicIdentity(ed.encode(t), bytes(32))


@given(st.binary(min_size=0, max_size=200))
def test_random_certificates_raise_only_typed_errors(data: bytes) -> None:
    with pytest.raises(CryptoError):
        RelayKeyCertificate.from_bytes(data).verify()
