"""The transcript covers every signed document a peer acts on; bundles are checked against the peer's own."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from anonml.crypto import Identity
from anonml.errors import ProtocolError
from anonml.protocol import (
    Bins,
    Cosignature,
    CosignatureBundle,
    Problem,
    Roster,
    TranscriptStatement,
    WitnessRef,
    cosign_statement,
    roster_beacon,
    sign_message,
    transcript_hash,
)
from peer.transcript import verify_bundle
from tests.aggregator.helpers import (
    bins_document,
    draft,
    roster_document,
    signed_problem,
    unsigned_roster_entries,
)

AGG = Identity.generate()
WITNESSES = [Identity.generate() for _ in range(3)]
SEED = bytes(range(32))


def problem(witnesses=WITNESSES, **changes) -> Problem:
    d = draft().model_copy(
        update={
            "witnesses": tuple(
                WitnessRef(identity=bytes(w.public), url=f"http://127.0.0.1:{9000 + i}")
                for i, w in enumerate(witnesses)
            ),
            **changes,
        }
    )
    created = datetime(2026, 1, 1, tzinfo=UTC)
    return signed_problem(d, AGG, pid="p-transcript", seed=SEED, round_id=7, created_at=created)


def roster() -> Roster:
    peers = [Identity.generate() for _ in range(2)]
    entries = unsigned_roster_entries(peers, 7)
    return roster_document("p-transcript", entries, round_id=7, seed=SEED, token_key=b"\x05" * 32, signer=AGG)


def bins(**changes) -> Bins:
    fields = dict(edges=((5.0,), (5.0,), ()), t_s=100.0, delta=4.0, t_r=105.0) | changes
    return bins_document("p-transcript", **fields, signer=AGG)


P, R, B = problem(), roster(), bins()


def test_transcripts_are_deterministic_and_stage_separated():
    assert transcript_hash("roster", P, R) == transcript_hash("roster", P, R)
    assert len(transcript_hash("roster", P, R)) == 32
    assert transcript_hash("roster", P, R) != transcript_hash("bins", P, R, B)
    with pytest.raises(ValueError):
        transcript_hash("bins", P, R)
    with pytest.raises(ValueError):
        transcript_hash("roster", P, R, B)
    with pytest.raises(ValueError):
        transcript_hash("medians", P, R)


@pytest.mark.parametrize(
    "variant",
    [
        lambda: (problem(epsilon=0.99), R, B),  # another copy of the Problem (ε)
        lambda: (problem(schedule=P.draft.schedule.model_copy(update={"send_window_seconds": 9.0})), R, B),
        lambda: (P, roster(), B),  # other members (fresh identities)
        lambda: (P, R.model_copy(update={"token_key": b"\x06" * 32}), B),  # token key (signature unchanged)
        lambda: (P, sign_message(R.model_copy(update={"seed": b"\x01" * 32}), AGG), B),
        lambda: (P, R, bins(edges=((2.0, 5.0, 8.0), (5.0,), ()))),  # 3 cuts instead of 1
        lambda: (P, R, bins(t_s=100.5)),  # another absolute schedule
        lambda: (P, R, B.model_copy(update={"signature": b"\x01" * 64})),  # another signature
    ],
)
def test_every_document_and_field_a_peer_acts_on_changes_the_transcript(variant):
    p, r, b = variant()
    assert transcript_hash("bins", p, r, b) != transcript_hash("bins", P, R, B)


def cosign(
    witness: Identity,
    transcript: bytes,
    *,
    stage: str = "roster",
    problem_id: str = "p-transcript",
    aggregator: Identity = AGG,
) -> Cosignature:
    statement = TranscriptStatement(
        aggregator=bytes(aggregator.public), problem_id=problem_id, stage=stage, transcript=transcript
    )
    return cosign_statement(statement, witness)


T = transcript_hash("roster", P, R)
TRUSTED = [bytes(WITNESSES[0].public).hex()]


def check(cosignatures, *, transcript=T, trusted=TRUSTED, threshold=1, problem_=P, stage="roster"):
    bundle = CosignatureBundle(problem_id=problem_.id, stage=stage, cosignatures=tuple(cosignatures))
    return verify_bundle(
        bundle, problem=problem_, stage=stage, transcript=transcript, trusted=trusted, threshold=threshold
    )


def test_a_complete_bundle_on_the_peers_own_transcript_gives_the_beacon():
    sigs = [cosign(w, T) for w in WITNESSES]
    beacon = check(sigs)
    assert beacon == roster_beacon(sigs) == check(list(reversed(sigs)))  # order does not matter
    assert len(beacon) == 32
    # Deterministic signatures: the same witnesses on the same roster give the same beacon;
    # another roster gives another.
    assert check([cosign(w, T) for w in WITNESSES]) == beacon
    other = transcript_hash("roster", P, roster())
    assert roster_beacon([cosign(w, other) for w in WITNESSES]) != beacon


@pytest.mark.parametrize(
    "cosignatures, message",
    [
        (lambda: [cosign(w, b"\x00" * 32) for w in WITNESSES], "different roster documents"),
        (lambda: [cosign(w, T) for w in WITNESSES[:2]], "did not co-sign"),
        (lambda: [cosign(w, T) for w in WITNESSES] + [cosign(Identity.generate(), T)], "does not declare"),
        (lambda: [cosign(w, T) for w in WITNESSES] + [cosign(WITNESSES[0], T)], "twice"),
        (lambda: [cosign(w, T, stage="bins") for w in WITNESSES], "another problem or stage"),
        (
            lambda: [cosign(w, T, aggregator=Identity.generate()) for w in WITNESSES],
            "another problem or stage",
        ),
        (
            lambda: [
                c.model_copy(update={"signature": bytes(64)}) for c in (cosign(w, T) for w in WITNESSES)
            ],
            "does not verify",
        ),
    ],
)
def test_bundles_that_do_not_vouch_for_the_peers_transcript_are_refused(cosignatures, message):
    with pytest.raises(ProtocolError, match=message):
        check(cosignatures())


def test_trusted_witness_threshold():
    sigs = [cosign(w, T) for w in WITNESSES]
    two = [bytes(w.public).hex() for w in WITNESSES[:2]]
    assert check(sigs, trusted=two, threshold=2)
    # The peer trusts a witness the problem does not declare: only one of its two is there.
    outsider = bytes(Identity.generate().public).hex()
    with pytest.raises(ProtocolError, match="only 1 of the 2"):
        check(sigs, trusted=[two[0], outsider], threshold=2)


def test_a_problem_without_witnesses_has_no_beacon_and_an_empty_bundle_passes_only_without_trust():
    bare = problem(witnesses=[])
    t = transcript_hash("roster", bare, R)
    assert check([], transcript=t, problem_=bare, trusted=[]) == b""
    with pytest.raises(ProtocolError, match="only 0 of the 1"):
        check([], transcript=t, problem_=bare)


def test_declared_witnesses_are_validated():
    ref = WitnessRef(identity=bytes(WITNESSES[0].public), url="https://witness.example:8472/w")
    with pytest.raises(ValueError, match="declared more than once"):
        draft().model_validate({**draft().model_dump(), "witnesses": [ref, ref]})
    with pytest.raises(ValueError, match="at most 16"):
        draft().model_validate(
            {
                **draft().model_dump(),
                "witnesses": [
                    WitnessRef(identity=bytes(Identity.generate().public), url="http://127.0.0.1:1")
                    for _ in range(17)
                ],
            }
        )
    for bad in ("http://w.example/?x=1", "http://user@w.example", "http://w.example/#f", "ftp://w.example"):
        with pytest.raises(ValueError, match="url"):
            WitnessRef(identity=bytes(WITNESSES[0].public), url=bad)
    with pytest.raises(ValueError, match="identity"):
        WitnessRef(identity=b"\x01" * 63, url="http://127.0.0.1:1")
