"""POPRF (RFC 9497 shape) and the one DLEQ proof per request: correctness and every bit flip or
forgery the client must catch."""

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
    evaluate_blinded,
    finalize,
    prove_evaluation,
)
from tests.crypto.helpers import flip_bit

SLOT = b"problem-1/round-2/slot-0"


@pytest.fixture(scope="module")
def key() -> TokenKey:
    return TokenKey.generate(np.random.default_rng(11))


@pytest.fixture(scope="module")
def exchange(key: TokenKey):
    """One honest blind → evaluate exchange for a single input."""
    rng = np.random.default_rng(12)
    x = b"nonce-0"
    r, blinded = blind(x, rng)
    evaluated, proof = blind_evaluate(key, [blinded], [SLOT], rng)
    return x, r, blinded, key.public_key, evaluated[0], proof


def test_context_string_carries_the_suite_id_and_poprf_mode() -> None:
    assert CONTEXT_STRING == b"OPRFV1-\x02-edwards25519-SHA512-AnonMLv1"


def test_finalize_equals_direct_evaluation(key: TokenKey, exchange) -> None:
    x, r, blinded, pinned, z, proof = exchange
    (y,) = finalize([x], [r], [z], [blinded], proof, [SLOT], pinned)
    assert y == evaluate(key, x, SLOT)
    assert len(y) == 64


def test_output_depends_on_slot_and_key(key: TokenKey) -> None:
    y = evaluate(key, b"x", SLOT)
    assert evaluate(key, b"x", SLOT + b"!") != y
    assert evaluate(TokenKey.generate(np.random.default_rng(99)), b"x", SLOT) != y
    assert evaluate(key, b"x", SLOT, tweaked_inverse=key.tweaked_inverse(SLOT)) == y


def test_one_proof_covers_a_batch_of_several_slots(key: TokenKey) -> None:
    rng = np.random.default_rng(5)
    inputs = [f"in-{i}".encode() for i in range(4)]
    infos = [SLOT, b"slot-b", b"slot-c", SLOT]  # different tweaks, one repeated
    blinds, blinded = zip(*(blind(x, rng) for x in inputs), strict=True)
    evaluated, proof = blind_evaluate(key, blinded, infos, rng)
    outputs = finalize(inputs, blinds, evaluated, blinded, proof, infos, key.public_key)
    assert outputs == [evaluate(key, x, info) for x, info in zip(inputs, infos, strict=True)]
    # Swapping two evaluated elements, or two slots, breaks the proof.
    swapped = [evaluated[1], evaluated[0], *evaluated[2:]]
    with pytest.raises(InvalidProof):
        finalize(inputs, blinds, swapped, blinded, proof, infos, key.public_key)
    with pytest.raises(InvalidProof):
        finalize(inputs, blinds, evaluated, blinded, proof, [infos[1], infos[0], *infos[2:]], key.public_key)
    # The proof covers exactly this batch: not a part of it.
    with pytest.raises(InvalidProof):
        finalize(inputs[:3], blinds[:3], evaluated[:3], blinded[:3], proof, infos[:3], key.public_key)


def test_a_forged_batched_proof_is_refused(key: TokenKey) -> None:
    """An issuer that evaluates one element of a batch with another key (to tag that client) or with
    another slot's tweak cannot make a proof the client accepts, whatever it proves with."""
    rng = np.random.default_rng(6)
    inputs = [b"a", b"b", b"c"]
    infos = [SLOT, b"slot-b", b"slot-c"]
    blinds, blinded = zip(*(blind(x, rng) for x in inputs), strict=True)
    honest, _ = blind_evaluate(key, blinded, infos, rng)
    tagging = TokenKey.generate(np.random.default_rng(7))
    for forged in (
        [honest[0], evaluate_blinded(tagging, [blinded[1]], [infos[1]])[1][0], honest[2]],
        [honest[0], honest[1], evaluate_blinded(key, [blinded[2]], [SLOT])[1][0]],
    ):
        for prover in (key, tagging):  # proving with the real key or with the tagging one
            proof = prove_evaluation(prover, blinded, forged, infos, rng)
            with pytest.raises(InvalidProof):
                finalize(inputs, blinds, forged, blinded, proof, infos, key.public_key)
    # A proof honestly made for another batch does not transfer.
    other_blinds, other_blinded = zip(*(blind(x, rng) for x in inputs), strict=True)
    _, other_proof = blind_evaluate(key, other_blinded, infos, rng)
    with pytest.raises(InvalidProof):
        finalize(inputs, blinds, honest, blinded, other_proof, infos, key.public_key)
    # Random (c, s) pairs never pass.
    for _ in range(50):
        fake = Proof(random_scalar(rng), random_scalar(rng))
        with pytest.raises(InvalidProof):
            finalize(inputs, blinds, honest, blinded, fake, infos, key.public_key)


def test_derive_key_pair_is_deterministic_and_info_separated() -> None:
    seed = bytes(range(32))
    assert bytes(TokenKey.derive(seed, b"a")) == bytes(TokenKey.derive(seed, b"a"))
    assert bytes(TokenKey.derive(seed, b"a")) != bytes(TokenKey.derive(seed, b"b"))


def test_every_bit_flip_in_the_proof_is_rejected(exchange) -> None:
    x, r, blinded, pinned, z, proof = exchange
    raw = bytes(proof)
    for bit in range(len(raw) * 8):
        with pytest.raises((InvalidProof, InvalidScalar)):
            finalize([x], [r], [z], [blinded], Proof.from_bytes(flip_bit(raw, bit)), [SLOT], pinned)


def test_every_bit_flip_in_the_evaluated_element_is_rejected(exchange) -> None:
    x, r, blinded, pinned, z, proof = exchange
    outcomes = {"invalid point": 0, "invalid proof": 0}
    for bit in range(256):
        try:
            bad = Element.from_bytes(flip_bit(bytes(z), bit))
        except InvalidPoint:
            outcomes["invalid point"] += 1
            continue
        with pytest.raises(InvalidProof):
            finalize([x], [r], [bad], [blinded], proof, [SLOT], pinned)
        outcomes["invalid proof"] += 1
    assert outcomes["invalid proof"] > 0  # some flips give valid points; the proof catches those


def test_every_bit_flip_in_the_clients_blinded_element_is_rejected(exchange) -> None:
    x, r, blinded, pinned, z, proof = exchange
    for bit in range(256):
        try:
            bad = Element.from_bytes(flip_bit(bytes(blinded), bit))
        except InvalidPoint:
            continue
        with pytest.raises(InvalidProof):
            finalize([x], [r], [z], [bad], proof, [SLOT], pinned)


def test_every_bit_flip_in_the_pinned_key_is_rejected(key: TokenKey) -> None:
    """The server answers with its real key; a client pinning any other key refuses it."""
    rng = np.random.default_rng(21)
    pk = bytes(key.public_key)
    checked = 0
    for bit in range(256):
        try:
            pinned = TokenPublicKey(flip_bit(pk, bit))
        except InvalidPoint:
            continue
        r, blinded = blind(b"x", rng)
        evaluated, proof = blind_evaluate(key, [blinded], [SLOT], rng)
        with pytest.raises(InvalidProof):
            finalize([b"x"], [r], evaluated, [blinded], proof, [SLOT], pinned)
        checked += 1
    assert checked > 0


def test_evaluation_under_another_key_or_slot_fails_the_proof(key: TokenKey) -> None:
    rng = np.random.default_rng(8)
    r, blinded = blind(b"x", rng)
    other = TokenKey.generate(rng)
    evaluated, proof = blind_evaluate(other, [blinded], [SLOT], rng)
    with pytest.raises(InvalidProof):
        finalize([b"x"], [r], evaluated, [blinded], proof, [SLOT], key.public_key)
    evaluated, proof = blind_evaluate(key, [blinded], [b"another-slot"], rng)
    with pytest.raises(InvalidProof):
        finalize([b"x"], [r], evaluated, [blinded], proof, [SLOT], key.public_key)


def test_dleq_proves_exactly_the_claimed_relation() -> None:
    """C_i = (k + m_i)·Z_i for every i, against pk = k·B; nothing else verifies."""
    rng = np.random.default_rng(4)
    k = random_scalar(rng)
    pk = Element.base_mul(k)
    tweaks = [random_scalar(rng) for _ in range(3)]
    Zs = [Element.base_mul(random_scalar(rng)) for _ in range(3)]
    Cs = [Z * (k + m) for Z, m in zip(Zs, tweaks, strict=True)]
    proof = generate_proof(k, pk, tweaks, Cs, Zs, context=b"ctx", rng=rng)
    verify_proof(pk, tweaks, Cs, Zs, proof, context=b"ctx")
    with pytest.raises(InvalidProof):
        verify_proof(pk, tweaks, Cs, Zs, proof, context=b"other ctx")
    with pytest.raises(InvalidProof):  # one C_i made with another scalar
        verify_proof(pk, tweaks, [*Cs[:2], Zs[2] * (k + k)], Zs, proof, context=b"ctx")
    with pytest.raises(InvalidProof):  # another tweak for one element
        verify_proof(pk, [*tweaks[:2], tweaks[0]], Cs, Zs, proof, context=b"ctx")
    with pytest.raises(InvalidProof):  # another public key
        verify_proof(Element.base_mul(k + k), tweaks, Cs, Zs, proof, context=b"ctx")
    with pytest.raises(InvalidProof):
        verify_proof(pk, [], [], [], proof, context=b"ctx")


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
