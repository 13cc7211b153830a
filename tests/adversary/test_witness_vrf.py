"""Grinding the plan through a witness the aggregator declares itself: it re-signs and re-proves at will.

Issue 24, item 1. The aggregator declares the honest witness W and a witness
W' whose key it holds. W co-signs the roster transcript once (a real server).
Ed25519 verification cannot tell which nonce a signer used, so W' can produce
as many valid signatures on the same statement as it likes — when the beacon
hashed signatures, each was a new plan (446 tries isolated a victim among 40
members). The beacon now hashes each declared witness's verified ECVRF output
(RFC 9381): a new nonce gives a new valid *proof* but the same *output*, so
W' can vary nothing, every peer's checks pass on every variant, and the plan
is the one and only draw. Placement of the victim stays uniform even when the
aggregator picks, among its variants, the one that suits it best.
"""

from __future__ import annotations

import math

import pytest

from anonml.crypto import Identity
from anonml.errors import ProtocolError
from anonml.learn import make_plan
from anonml.protocol import (
    Cosignature,
    CosignatureBundle,
    Problem,
    Roster,
    TranscriptStatement,
    WitnessRef,
    cosign_statement,
    roster_beacon,
    signing_bytes,
    signing_context,
    transcript_hash,
    verify_message,
    vrf_input,
    witness_vrf_output,
)
from peer.transcript import verify_bundle
from tests.aggregator.helpers import draft, roster_document, signed_problem, unsigned_roster_entries
from tests.crypto.helpers import grinding_vrf_proof, random_nonce_signature
from tests.witness.helpers import ask_witness
from witness import WitnessSettings, start_witness_server

AGG = Identity.generate()
ACCOMPLICE_SEED = bytes(range(32))
ACCOMPLICE = Identity(ACCOMPLICE_SEED, bytes(32 * [7]))  # W': the aggregator holds its secret key
MEMBERS = [Identity.generate() for _ in range(40)]
VICTIM = MEMBERS[0]
KP = 4
VARIANTS = 5_000  # of each kind: re-signed and re-proved cosignatures of W'


def _problem(pid: str, honest: bytes, seed: bytes) -> Problem:
    witnesses = (
        WitnessRef(identity=honest, url="http://127.0.0.1:1"),
        WitnessRef(identity=bytes(ACCOMPLICE.public), url="http://127.0.0.1:2"),
    )
    d = draft(kp=KP, min_peers=4).model_copy(update={"witnesses": witnesses})
    return signed_problem(d, AGG, pid=pid, seed=seed)


def _roster(pid: str, seed: bytes) -> Roster:
    entries = unsigned_roster_entries(MEMBERS, 1)
    return roster_document(pid, entries, seed=seed, token_key=b"\x01" * 32, signer=AGG)


def _statement(problem: Problem, roster: Roster) -> TranscriptStatement:
    return TranscriptStatement(
        aggregator=bytes(AGG.public),
        problem_id=problem.id,
        stage="roster",
        transcript=transcript_hash("roster", problem, roster),
    )


def _re_signed(cosignature: Cosignature) -> Cosignature:
    """``cosignature`` under a fresh random-nonce Ed25519 signature of W' (valid, and new)."""
    signature = random_nonce_signature(
        ACCOMPLICE_SEED, signing_bytes(cosignature), signing_context(cosignature)
    )
    return cosignature.model_copy(update={"signature": signature})


def _re_proved(statement: TranscriptStatement) -> Cosignature:
    """A cosignature whose VRF proof used a fresh random nonce, then signed (valid, and new)."""
    unsigned = Cosignature(
        witness=bytes(ACCOMPLICE.public),
        statement=statement,
        vrf_proof=grinding_vrf_proof(ACCOMPLICE_SEED, vrf_input(statement)),
        signature=bytes(64),
    )
    return _re_signed(unsigned)


def _victim_partition(seed: bytes, beacon: bytes) -> int:
    plan = make_plan(seed, [bytes(m.public) for m in MEMBERS], 3, n_partitions=KP, beacon=beacon)
    return plan.assignment(0).index


@pytest.fixture
def honest_witness(tmp_path):
    server = start_witness_server(WitnessSettings(home=tmp_path / "w", port=0))
    yield server
    server.stop()


@pytest.mark.slow
def test_a_declared_accomplice_re_signing_and_re_proving_10000_times_never_moves_the_plan(honest_witness):
    seed = bytes([9]) * 32
    problem = _problem("p-vrf-grind", honest_witness.identity, seed)
    roster = _roster(problem.id, seed)
    statement = _statement(problem, roster)
    answer = ask_witness(honest_witness.url, AGG, problem.id, statement.transcript)
    assert answer.status_code == 200, answer.text
    honest = Cosignature.model_validate_json(answer.content)
    own = cosign_statement(statement, ACCOMPLICE)

    def bundle(accomplice: Cosignature) -> CosignatureBundle:
        return CosignatureBundle(problem_id=problem.id, stage="roster", cosignatures=(honest, accomplice))

    checked = dict(problem=problem, stage="roster", transcript=statement.transcript, trusted=[], threshold=0)
    beacon = verify_bundle(bundle(own), **checked)
    placement = _victim_partition(seed, beacon)

    re_signed = [_re_signed(own) for _ in range(VARIANTS)]
    re_proved = [_re_proved(statement) for _ in range(VARIANTS)]
    # The raw material of the old attack is there: every variant's signature is new...
    assert len({bytes(c.signature) for c in re_signed + re_proved}) == 2 * VARIANTS
    assert len({bytes(c.vrf_proof) for c in re_proved}) == VARIANTS  # ... and so is every proof
    # ... every variant is a valid cosignature ...
    for variant in re_signed + re_proved:
        verify_message(variant, bytes(ACCOMPLICE.public))
    # ... but the VRF output, the only thing of W' in the beacon, is one value.
    outputs = {witness_vrf_output(c) for c in re_proved} | {witness_vrf_output(own)}
    assert len(outputs) == 1
    # End to end, as every peer checks a bundle: each variant passes and gives the one beacon.
    for variant in re_signed[:50] + re_proved[:50]:
        assert verify_bundle(bundle(variant), **checked) == beacon
    assert _victim_partition(seed, roster_beacon([honest, re_proved[-1]])) == placement


def test_a_torsioned_or_foreign_vrf_proof_is_refused_by_the_peer(honest_witness):
    seed = bytes([10]) * 32
    problem = _problem("p-vrf-forged", honest_witness.identity, seed)
    roster = _roster(problem.id, seed)
    statement = _statement(problem, roster)
    honest = Cosignature.model_validate_json(
        ask_witness(honest_witness.url, AGG, problem.id, statement.transcript).content
    )
    checked = dict(problem=problem, stage="roster", transcript=statement.transcript, trusted=[], threshold=0)
    # W' proves with another key's proof (the honest witness's), or sends none: refused, nothing computed.
    own = cosign_statement(statement, ACCOMPLICE)
    foreign = _re_signed(own.model_copy(update={"vrf_proof": honest.vrf_proof}))
    none = _re_signed(own.model_copy(update={"vrf_proof": None}))
    for bad, reason in ((foreign, "does not verify"), (none, "no VRF proof")):
        bundle = CosignatureBundle(problem_id=problem.id, stage="roster", cosignatures=(honest, bad))
        with pytest.raises(ProtocolError, match=reason):
            verify_bundle(bundle, **checked)


@pytest.mark.slow
def test_placement_stays_uniform_when_the_aggregator_picks_its_best_variant(tmp_path):
    """240 problems, each with a fresh honest witness; the aggregator wants the victim in partition 0.

    For each problem it tries 8 variants of its accomplice's cosignature and keeps one that puts
    the victim in partition 0 if any does. With a signature beacon that succeeds in 1 − (3/4)^8 ≈ 90 %
    of problems; with the VRF beacon every variant is the same draw, so partition 0
    comes up 1/4 of the time and the four partitions stay uniform (chi-square, df 3: p = 0.001 at 16.27).
    """
    runs, counts, targeted = 240, [0] * KP, 0
    for r in range(runs):
        seed = r.to_bytes(32, "big")
        honest_identity = Identity.generate()
        problem = _problem(f"p-uniform-{r:04d}", bytes(honest_identity.public), seed)
        roster = _roster(problem.id, seed)
        statement = _statement(problem, roster)
        honest = cosign_statement(statement, honest_identity)
        choices = [cosign_statement(statement, ACCOMPLICE)] + [_re_proved(statement) for _ in range(7)]
        placements = [_victim_partition(seed, roster_beacon([honest, c])) for c in choices]
        chosen = 0 if 0 in placements else placements[0]
        targeted += chosen == 0
        counts[chosen] += 1
    expected = runs / KP
    assert sum((c - expected) ** 2 / expected for c in counts) < 16.27, counts
    sd = math.sqrt(runs * 0.25 * 0.75)
    assert targeted <= runs / KP + 4 * sd, targeted  # 60 ± 6.7 by chance; grinding would give ~216
