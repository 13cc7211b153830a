"""Token issuance and redemption end to end, and every way a redemption must fail."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from anonml.crypto.exceptions import (
    AlreadyIssued,
    CryptoError,
    InvalidEncoding,
    InvalidPoint,
    InvalidProof,
    InvalidScalar,
    InvalidToken,
    TokenSpent,
)
from anonml.crypto.poprf import TokenKey, evaluate
from anonml.crypto.spent import MemoryIssuanceLedger, MemorySpentSet
from anonml.crypto.tokens import (
    Redemption,
    Token,
    TokenIssuer,
    TokenResponse,
    TokenVerifier,
    finalize_tokens,
    request_token_batch,
    request_tokens,
)
from tests.crypto import edwards_ref as ed
from tests.crypto.helpers import flip_bit

SLOT = b"p1/r0/s3"
REPORT = b'{"bits": [0, 1, 1, 0], "mechanism": "subset"}'


@pytest.fixture()
def key() -> TokenKey:
    return TokenKey.generate(np.random.default_rng(31))


def _token(key: TokenKey, slot: bytes = SLOT, peer: bytes = b"peer-a", seed: int = 32) -> Token:
    rng = np.random.default_rng(seed)
    issuer = TokenIssuer(key, MemoryIssuanceLedger())
    request = request_tokens(key.public_key, slot, rng=rng)
    response = issuer.issue(peer, slot, request.message(), rng=rng)
    return finalize_tokens(request, bytes(response))[0]


def test_round_trip_finalize_matches_evaluation_and_redeems(key: TokenKey) -> None:
    token = _token(key)
    assert token.output == evaluate(key, token.nonce, SLOT)
    assert token.key_id == key.key_id
    redemption = token.redeem(REPORT)
    wire = bytes(redemption)
    assert Redemption.from_bytes(wire) == redemption
    assert len(wire) == 1 + len(SLOT) + 32 + 32
    verifier = TokenVerifier(key, MemorySpentSet())
    assert verifier.redeem(Redemption.from_bytes(wire), REPORT) == REPORT
    assert verifier.spent.is_spent(key.key_id, SLOT, token.nonce)


def test_several_tokens_per_request_when_allowed(key: TokenKey) -> None:
    rng = np.random.default_rng(3)
    issuer = TokenIssuer(key, MemoryIssuanceLedger(), max_tokens_per_slot=3)
    request = request_tokens(key.public_key, SLOT, count=3, rng=rng)
    tokens = finalize_tokens(request, issuer.issue(b"peer", SLOT, request.message(), rng=rng))
    verifier = TokenVerifier(key, MemorySpentSet())
    assert len({t.nonce for t in tokens}) == 3
    for t in tokens:
        verifier.redeem(t.redeem(REPORT), REPORT)
    with pytest.raises(InvalidEncoding):  # default issuer: one element per request
        TokenIssuer(key, MemoryIssuanceLedger()).issue(b"peer", SLOT, request.message(), rng=rng)


def test_duplicate_redemption_is_rejected(key: TokenKey) -> None:
    token = _token(key)
    verifier = TokenVerifier(key, MemorySpentSet())
    verifier.redeem(token.redeem(REPORT), REPORT)
    with pytest.raises(TokenSpent):
        verifier.redeem(token.redeem(REPORT), REPORT)
    with pytest.raises(TokenSpent):  # same token, different report: still one use
        verifier.redeem(token.redeem(b"other report"), b"other report")


def test_token_for_another_slot_is_rejected(key: TokenKey) -> None:
    token = _token(key, slot=SLOT)
    moved = Token(token.key_id, b"p1/r0/s4", token.nonce, token.output)
    verifier = TokenVerifier(key, MemorySpentSet())
    with pytest.raises(InvalidToken):
        verifier.redeem(moved.redeem(REPORT), REPORT)
    assert not verifier.spent.is_spent(key.key_id, b"p1/r0/s4", token.nonce)


def test_token_under_another_key_is_rejected(key: TokenKey) -> None:
    other = TokenKey.generate(np.random.default_rng(77))
    token = _token(other)
    with pytest.raises(InvalidToken):
        TokenVerifier(key, MemorySpentSet()).redeem(token.redeem(REPORT), REPORT)


def test_random_authenticator_is_rejected(key: TokenKey) -> None:
    rng = np.random.default_rng(5)
    verifier = TokenVerifier(key, MemorySpentSet())
    for _ in range(20):
        forged = Redemption(SLOT, rng.bytes(32), rng.bytes(32))
        with pytest.raises(InvalidToken):
            verifier.redeem(forged, REPORT)
    assert len(verifier.spent) == 0  # nothing recorded for failed checks


def test_every_bit_flip_in_redemption_or_report_is_rejected(key: TokenKey) -> None:
    token = _token(key)
    verifier = TokenVerifier(key, MemorySpentSet())
    wire = bytes(token.redeem(REPORT))
    for bit in range(len(wire) * 8):
        with pytest.raises((InvalidToken, InvalidEncoding)):
            verifier.redeem(Redemption.from_bytes(flip_bit(wire, bit)), REPORT)
    for bit in range(len(REPORT) * 8):
        with pytest.raises(InvalidToken):
            verifier.redeem(Redemption.from_bytes(wire), flip_bit(REPORT, bit))
    assert verifier.redeem(Redemption.from_bytes(wire), REPORT) == REPORT  # original still unspent


def test_second_evaluation_for_the_same_peer_and_slot_is_refused(key: TokenKey) -> None:
    rng = np.random.default_rng(6)
    issuer = TokenIssuer(key, MemoryIssuanceLedger())
    first = request_tokens(key.public_key, SLOT, rng=rng)
    issuer.issue(b"peer-a", SLOT, first.message(), rng=rng)
    second = request_tokens(key.public_key, SLOT, rng=rng)
    with pytest.raises(AlreadyIssued):
        issuer.issue(b"peer-a", SLOT, second.message(), rng=rng)
    # Other peers and other slots are unaffected.
    issuer.issue(b"peer-b", SLOT, second.message(), rng=rng)
    issuer.issue(b"peer-a", b"p1/r0/s4", request_tokens(key.public_key, b"p1/r0/s4", rng=rng).message())


def test_invalid_blinded_elements_are_rejected_before_anything_is_recorded(key: TokenKey) -> None:
    ledger = MemoryIssuanceLedger()
    issuer = TokenIssuer(key, ledger)
    good = bytes(request_tokens(key.public_key, SLOT, rng=np.random.default_rng(1)).blinded[0])
    P = ed.decode(good)
    bad_messages = [ed.encode(p) for p in ed.small_order_points()]  # includes the identity
    bad_messages.append(ed.encode(ed.add(P, (0, ed.P - 1))))  # CVE-2025-69277 shape
    bad_messages.append((ed.P + 1).to_bytes(32, "little"))  # non-canonical identity
    bad_messages.append(bytes(32))
    for message in bad_messages:
        with pytest.raises(InvalidPoint):
            issuer.issue(b"peer-a", SLOT, message)
    assert not ledger.has_issued(key.key_id, b"peer-a", SLOT)
    issuer.issue(b"peer-a", SLOT, good)  # the honest request still goes through


def test_every_bit_flip_in_the_sent_blinded_element_is_caught_by_the_client(key: TokenKey) -> None:
    rng = np.random.default_rng(9)
    request = request_tokens(key.public_key, SLOT, rng=rng)
    for bit in range(256):
        issuer = TokenIssuer(key, MemoryIssuanceLedger())
        try:
            response = issuer.issue(b"peer", SLOT, flip_bit(request.message(), bit), rng=rng)
        except InvalidPoint:
            continue
        with pytest.raises(InvalidProof):
            finalize_tokens(request, response)


def test_response_with_small_order_or_torsion_element_is_rejected(key: TokenKey) -> None:
    rng = np.random.default_rng(10)
    request = request_tokens(key.public_key, SLOT, rng=rng)
    response = TokenIssuer(key, MemoryIssuanceLedger()).issue(b"p", SLOT, request.message(), rng=rng)
    wire = bytes(response)
    z = ed.decode(wire[:32])
    for bad in [ed.encode(ed.add(z, (0, ed.P - 1))), *(ed.encode(t) for t in ed.small_order_points())]:
        with pytest.raises(InvalidPoint):
            finalize_tokens(request, bad + wire[32:])


def test_wrong_pinned_key_rejects_the_honest_server(key: TokenKey) -> None:
    rng = np.random.default_rng(12)
    pinned = TokenKey.generate(rng).public_key  # the roster says another key
    request = request_tokens(pinned, SLOT, rng=rng)
    response = TokenIssuer(key, MemoryIssuanceLedger()).issue(b"p", SLOT, request.message(), rng=rng)
    with pytest.raises(InvalidProof):
        finalize_tokens(request, response)


def test_bad_slots_and_sizes_raise_encoding_errors(key: TokenKey) -> None:
    with pytest.raises(InvalidEncoding):
        request_tokens(key.public_key, b"")
    with pytest.raises(InvalidEncoding):
        request_tokens(key.public_key, b"s" * 65)
    with pytest.raises(InvalidEncoding):
        Redemption(SLOT, bytes(31), bytes(32))
    with pytest.raises(InvalidEncoding):
        TokenIssuer(key, MemoryIssuanceLedger()).issue(b"p", SLOT, bytes(33))


@given(st.binary(min_size=0, max_size=200))
def test_random_response_bytes_raise_only_typed_errors(data: bytes) -> None:
    key = TokenKey.derive(bytes(32))
    request = request_tokens(key.public_key, SLOT, rng=np.random.default_rng(0))
    with pytest.raises(CryptoError):
        finalize_tokens(request, data)


@given(st.binary(min_size=0, max_size=120), st.binary(max_size=40))
def test_random_redemptions_raise_only_typed_errors(data: bytes, report: bytes) -> None:
    key = TokenKey.derive(bytes(32))
    verifier = TokenVerifier(key, MemorySpentSet())
    with pytest.raises((InvalidToken, InvalidEncoding)):
        verifier.redeem(Redemption.from_bytes(data), report)


@given(st.binary(min_size=32, max_size=32))
def test_random_blinded_elements_raise_only_invalid_point_or_are_evaluated(data: bytes) -> None:
    key = TokenKey.derive(bytes(32))
    issuer = TokenIssuer(key, MemoryIssuanceLedger())
    try:
        response = issuer.issue(b"peer", SLOT, data, rng=np.random.default_rng(0))
    except InvalidPoint:
        return
    assert isinstance(response, TokenResponse) and len(bytes(response)) == 32 + 64


def test_one_request_over_several_slots_gets_one_proof_and_redeemable_tokens(key: TokenKey) -> None:
    rng = np.random.default_rng(13)
    slots = [b"p1/r0/s0", b"p1/r0/s1", b"p1/r0/s2"]
    ledger = MemoryIssuanceLedger()
    request = request_token_batch(key.public_key, slots, rng=rng)
    response = TokenIssuer(key, ledger).issue_batch(
        b"peer", [(s, bytes(b)) for s, b in zip(slots, request.blinded, strict=True)], rng=rng
    )
    assert len(bytes(response)) == 3 * 32 + 64  # three elements, one proof
    tokens = finalize_tokens(request, bytes(response))
    verifier = TokenVerifier(key, MemorySpentSet())
    for slot, token in zip(slots, tokens, strict=True):
        assert token.slot == slot and token.output == evaluate(key, token.nonce, slot)
        assert verifier.redeem(token.redeem(REPORT), REPORT) == REPORT
        assert ledger.has_issued(key.key_id, b"peer", slot)


def test_a_forged_proof_for_a_batch_is_refused_by_the_client(key: TokenKey) -> None:
    """The issuer tags the second slot's element with another key; whatever proof it sends, the
    client refuses the whole answer."""
    rng = np.random.default_rng(14)
    slots = [b"p1/r0/s0", b"p1/r0/s1"]
    request = request_token_batch(key.public_key, slots, rng=rng)
    items = [(s, bytes(b)) for s, b in zip(slots, request.blinded, strict=True)]
    honest = TokenIssuer(key, MemoryIssuanceLedger()).issue_batch(b"peer", items, rng=rng)
    tagged = TokenIssuer(TokenKey.generate(rng), MemoryIssuanceLedger()).issue_batch(b"peer", items, rng=rng)
    mixed = TokenResponse((honest.evaluated[0], tagged.evaluated[1]), honest.proof)
    for proof in (honest.proof, tagged.proof):
        with pytest.raises(InvalidProof):
            finalize_tokens(request, TokenResponse(mixed.evaluated, proof))
    wire = bytes(honest)
    for bit in range(len(wire) * 8 - 512, len(wire) * 8):  # every bit of the proof
        with pytest.raises((InvalidProof, InvalidScalar)):
            finalize_tokens(request, flip_bit(wire, bit))


def test_a_bad_element_anywhere_in_a_batch_records_nothing(key: TokenKey) -> None:
    rng = np.random.default_rng(15)
    ledger = MemoryIssuanceLedger()
    issuer = TokenIssuer(key, ledger)
    slots = [b"p1/r0/s0", b"p1/r0/s1"]
    request = request_token_batch(key.public_key, slots, rng=rng)
    with pytest.raises(InvalidPoint, match="blinded element 1"):
        issuer.issue_batch(b"peer", [(slots[0], bytes(request.blinded[0])), (slots[1], bytes(32))])
    with pytest.raises(InvalidEncoding, match="twice"):
        issuer.issue_batch(b"peer", [(slots[0], bytes(request.blinded[0]))] * 2)
    assert not any(ledger.has_issued(key.key_id, b"peer", s) for s in slots)
    with pytest.raises(InvalidEncoding):
        issuer.issue_batch(b"peer", [])
