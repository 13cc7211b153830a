"""POPRF (RFC 9497 shape) and batched DLEQ: correctness and every bit flip the client must catch."""

from __future__ import annotations

import numpy as np
import pytest

from anonml.crypto.dleq import Proof, generate_proof, verify_proof
from anonml.crypto.exceptions import CryptoError, InvalidPoint, InvalidProof, InvalidScalar
from anonml.crypto.group import Element, Scalar, random_scalar
from anonml.crypto.poprf import (
    CONTEXT_STRING,
    TokenKey,
    TokenPublicKey,
    blind,
    blind_evaluate,
    evaluate,
    finalize,
)

SLOT = b"problem-1/round-2/slot-0"


def _flip(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


@pytest.fixture(scope="module")
def key() -> TokenKey:
    return TokenKey.generate(np.random.default_rng(11))


@pytest.fixture(scope="module")
def exchange(key: TokenKey):
    """One honest blind → evaluate exchange for a single input."""
    rng = np.random.default_rng(12)
    x = b"nonce-0"
    r, blinded, tweaked = blind(x, SLOT, key.public_key, rng)
    evaluated, proof = blind_evaluate(key, [blinded], SLOT, rng)
    return x, r, blinded, tweaked, evaluated[0], proof


def test_context_string_carries_the_suite_id_and_poprf_mode() -> None:
    assert CONTEXT_STRING == b"OPRFV1-\x02-edwards25519-SHA512-AnonMLv1"


def test_finalize_equals_direct_evaluation(key: TokenKey, exchange) -> None:
    x, r, blinded, tweaked, z, proof = exchange
    (y,) = finalize([x], [r], [z], [blinded], proof, SLOT, tweaked)
    assert y == evaluate(key, x, SLOT)
    assert len(y) == 64


def test_output_depends_on_slot_and_key(key: TokenKey) -> None:
    y = evaluate(key, b"x", SLOT)
    assert evaluate(key, b"x", SLOT + b"!") != y
    assert evaluate(TokenKey.generate(np.random.default_rng(99)), b"x", SLOT) != y
    assert evaluate(key, b"x", SLOT, tweaked_inverse=key.tweaked_inverse(SLOT)) == y


def test_batched_evaluation_with_one_proof(key: TokenKey) -> None:
    rng = np.random.default_rng(5)
    inputs = [f"in-{i}".encode() for i in range(4)]
    blinds, blinded = [], []
    for x in inputs:
        r, c, tweaked = blind(x, SLOT, key.public_key, rng)
        blinds.append(r)
        blinded.append(c)
    evaluated, proof = blind_evaluate(key, blinded, SLOT, rng)
    outputs = finalize(inputs, blinds, evaluated, blinded, proof, SLOT, tweaked)
    assert outputs == [evaluate(key, x, SLOT) for x in inputs]
    # Swapping two evaluated elements breaks the batch proof.
    swapped = [evaluated[1], evaluated[0], *evaluated[2:]]
    with pytest.raises(InvalidProof):
        finalize(inputs, blinds, swapped, blinded, proof, SLOT, tweaked)


def test_derive_key_pair_is_deterministic_and_info_separated() -> None:
    seed = bytes(range(32))
    assert bytes(TokenKey.derive(seed, b"a")) == bytes(TokenKey.derive(seed, b"a"))
    assert bytes(TokenKey.derive(seed, b"a")) != bytes(TokenKey.derive(seed, b"b"))


def test_every_bit_flip_in_the_proof_is_rejected(exchange) -> None:
    x, r, blinded, tweaked, z, proof = exchange
    raw = bytes(proof)
    for bit in range(len(raw) * 8):
        with pytest.raises((InvalidProof, InvalidScalar)):
            finalize([x], [r], [z], [blinded], Proof.from_bytes(_flip(raw, bit)), SLOT, tweaked)


def test_every_bit_flip_in_the_evaluated_element_is_rejected(exchange) -> None:
    x, r, blinded, tweaked, z, proof = exchange
    outcomes = {"invalid point": 0, "invalid proof": 0}
    for bit in range(256):
        try:
            bad = Element.from_bytes(_flip(bytes(z), bit))
        except InvalidPoint:
            outcomes["invalid point"] += 1
            continue
        with pytest.raises(InvalidProof):
            finalize([x], [r], [bad], [blinded], proof, SLOT, tweaked)
        outcomes["invalid proof"] += 1
    assert outcomes["invalid proof"] > 0  # some flips give valid points; the proof catches those


def test_every_bit_flip_in_the_clients_blinded_element_is_rejected(exchange) -> None:
    x, r, blinded, tweaked, z, proof = exchange
    for bit in range(256):
        try:
            bad = Element.from_bytes(_flip(bytes(blinded), bit))
        except InvalidPoint:
            continue
        with pytest.raises(InvalidProof):
            finalize([x], [r], [z], [bad], proof, SLOT, tweaked)


def test_every_bit_flip_in_the_pinned_key_is_rejected(key: TokenKey) -> None:
    """The server answers with its real key; a client pinning any other key refuses it."""
    rng = np.random.default_rng(21)
    pk = bytes(key.public_key)
    checked = 0
    for bit in range(256):
        try:
            pinned = TokenPublicKey(_flip(pk, bit))
        except InvalidPoint:
            continue
        r, blinded, tweaked = blind(b"x", SLOT, pinned, rng)
        evaluated, proof = blind_evaluate(key, [blinded], SLOT, rng)
        with pytest.raises(InvalidProof):
            finalize([b"x"], [r], evaluated, [blinded], proof, SLOT, tweaked)
        checked += 1
    assert checked > 0


def test_evaluation_under_another_key_or_slot_fails_the_proof(key: TokenKey) -> None:
    rng = np.random.default_rng(8)
    r, blinded, tweaked = blind(b"x", SLOT, key.public_key, rng)
    other = TokenKey.generate(rng)
    evaluated, proof = blind_evaluate(other, [blinded], SLOT, rng)
    with pytest.raises(InvalidProof):
        finalize([b"x"], [r], evaluated, [blinded], proof, SLOT, tweaked)
    evaluated, proof = blind_evaluate(key, [blinded], b"another-slot", rng)
    with pytest.raises(InvalidProof):
        finalize([b"x"], [r], evaluated, [blinded], proof, SLOT, tweaked)


def test_dleq_proves_exactly_the_claimed_relation() -> None:
    rng = np.random.default_rng(4)
    k = random_scalar(rng)
    A = Element.generator()
    Cs = [Element.base_mul(random_scalar(rng)) for _ in range(3)]
    Ds = [C * k for C in Cs]
    proof = generate_proof(k, A, Element.base_mul(k), Cs, Ds, context=b"ctx", rng=rng)
    verify_proof(A, Element.base_mul(k), Cs, Ds, proof, context=b"ctx")
    with pytest.raises(InvalidProof):
        verify_proof(A, Element.base_mul(k), Cs, Ds, proof, context=b"other ctx")
    with pytest.raises(InvalidProof):  # one D_i made with another scalar
        verify_proof(A, Element.base_mul(k), Cs, [*Ds[:2], Cs[2] * (k + k)], proof, context=b"ctx")
    with pytest.raises(InvalidProof):
        verify_proof(A, Element.base_mul(k), Cs, [], proof, context=b"ctx")


def test_blinded_identity_like_inputs_cannot_reach_the_server() -> None:
    # The server only sees Elements, and those cannot hold the identity or small-order points.
    with pytest.raises(InvalidPoint):
        Element.from_bytes((1).to_bytes(32, "little"))


def test_zero_or_out_of_range_secret_key_is_rejected() -> None:
    from anonml.crypto.group import L

    for bad in (bytes(32), L.to_bytes(32, "little")):
        with pytest.raises(InvalidScalar):
            TokenKey(bad)


def test_errors_are_crypto_errors() -> None:
    assert issubclass(InvalidProof, CryptoError) and issubclass(InvalidPoint, ValueError)
    assert Scalar.from_int(5) == Scalar.from_int(5)
