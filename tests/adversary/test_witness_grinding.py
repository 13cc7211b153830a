"""Grinding the partition plan: the attack works on the seed alone and fails against the witness beacon.

The aggregator knows the seed while registration is open. Without a beacon,
membership is ``H(seed ‖ roster digest ‖ key)``: by re-keying its Sybils (or
by choosing which registrations to close with) it tries rosters offline until
the victim sits in a partition with nobody but Sybils, and
``verify_assignment`` still passes — performed here. With the beacon (the
witnesses' deterministic signatures over the roster transcript) every
candidate roster's plan depends on a value the aggregator learns only after a
witness co-signed that roster, and the witness co-signs one roster per
(aggregator, problem): the aggregator gets one draw, and the victim is
isolated only as often as chance says.
"""

from __future__ import annotations

import math

import pytest
import requests

from anonml.crypto import Identity
from anonml.errors import ProtocolError
from anonml.learn import commit_seed, make_plan, verify_assignment
from anonml.protocol import (
    Cosignature,
    Problem,
    Roster,
    WitnessRef,
    roster_beacon,
    transcript_hash,
)
from tests.aggregator.helpers import draft, roster_document, signed_problem, unsigned_roster_entries
from tests.witness.helpers import ask_witness
from witness import WitnessSettings, start_witness_server

HONEST = 4  # besides the victim
SYBILS = 5
KP = 2  # partitions of 5: the victim is isolated when its 4 partition mates are all Sybils
P_ISOLATED = math.comb(SYBILS, 4) / math.comb(HONEST + SYBILS, 4)  # 5/126 by chance
AGG = Identity.generate()
VICTIM = Identity.generate()
HONEST_PEERS = [Identity.generate() for _ in range(HONEST)]


def _problem(pid: str, seed: bytes, witness: bytes) -> Problem:
    d = draft(kp=KP, min_peers=4).model_copy(
        update={"witnesses": (WitnessRef(identity=witness, url="http://127.0.0.1:1"),)}
    )
    return signed_problem(d, AGG, pid=pid, seed=seed)


def _roster(pid: str, seed: bytes, members: list[Identity]) -> Roster:
    entries = unsigned_roster_entries(members, 1)
    return roster_document(pid, entries, seed=seed, token_key=b"\x01" * 32, signer=AGG)


def _isolated(keys: list[bytes], sybils: set[bytes], seed: bytes, beacon: bytes) -> bool:
    plan = make_plan(seed, keys, 3, n_partitions=KP, beacon=beacon)
    me = keys.index(bytes(VICTIM.public))
    partition = plan.assignment(me).index
    mates = {keys[int(i)] for i in plan.members(partition)} - {bytes(VICTIM.public)}
    return mates <= sybils


def _victim_checks(claimed, seed: bytes, keys: list[bytes], beacon: bytes = b""):
    """The victim's own check of what the aggregator told it (:func:`verify_assignment`)."""
    plan = make_plan(seed, keys, 3, n_partitions=KP, beacon=beacon)
    return verify_assignment(
        claimed, plan, commitment=commit_seed(seed), peer_keys=keys, my_key=bytes(VICTIM.public)
    )


def _grind(seed: bytes, tries: int = 3000) -> tuple[list[Identity], int]:
    """Re-key the Sybils until the seed-only plan isolates the victim (the attack of the seed alone)."""
    for attempt in range(1, tries + 1):
        sybils = [Identity.generate() for _ in range(SYBILS)]
        keys = [bytes(m.public) for m in [VICTIM, *HONEST_PEERS, *sybils]]
        if _isolated(keys, {bytes(s.public) for s in sybils}, seed, b""):
            return sybils, attempt
    raise AssertionError(f"grinding found no isolating roster in {tries} tries")


def test_without_the_beacon_re_keying_sybils_isolates_the_victim_and_verification_passes():
    seed = bytes(range(32))
    sybils, attempts = _grind(seed)
    keys = [bytes(m.public) for m in [VICTIM, *HONEST_PEERS, *sybils]]
    plan = make_plan(seed, keys, 3, n_partitions=KP)
    told = plan.assignment(0)
    # The victim checks everything it can without a beacon, and it all holds.
    assert _victim_checks(told, seed, keys) == told
    mates = {keys[int(i)] for i in plan.members(told.index)} - {bytes(VICTIM.public)}
    assert mates <= {bytes(s.public) for s in sybils}  # partitioned with Sybils only
    # Expected tries 1/P ≈ 25; far fewer than the 3,000 allowed.
    assert attempts < 3000


def test_with_the_beacon_the_aggregator_gets_one_draw_and_isolation_is_chance(tmp_path):
    witness = start_witness_server(WitnessSettings(home=tmp_path / "w", port=0))
    try:
        runs, isolated, refused = 60, 0, 0
        for r in range(runs):
            seed = bytes([r]) * 32
            pid = f"p-grind-{r:03d}"
            problem = _problem(pid, seed, witness.identity)
            # The aggregator grinds offline exactly as before (its best guess of the plan)...
            sybils, _ = _grind(seed)
            members = [VICTIM, *HONEST_PEERS, *sybils]
            roster = _roster(pid, seed, members)
            cosignature = _cosign(witness.url, problem, roster)
            beacon = roster_beacon([cosignature])
            keys = [bytes(m.public) for m in members]
            isolated += _isolated(keys, {bytes(s.public) for s in sybils}, seed, beacon)
            # ...sees the real plan, and wants another draw: re-keyed Sybils (or a re-closed roster
            # with other members) is another transcript, which the witness refuses.
            regrind = _roster(
                pid, seed, [VICTIM, *HONEST_PEERS, *[Identity.generate() for _ in range(SYBILS)]]
            )
            again = _post(witness.url, problem, regrind)
            refused += again.status_code == 409
            # And announcing the ground plan's (seed-only) assignment fails the victim's check.
            ground = make_plan(seed, keys, 3, n_partitions=KP).assignment(0)
            real = make_plan(seed, keys, 3, n_partitions=KP, beacon=beacon).assignment(0)
            if ground != real:
                with pytest.raises(ProtocolError, match="differs from the one the seed gives"):
                    _victim_checks(ground, seed, keys, beacon)
        assert refused == runs  # one draw per problem, every time
        # Isolated by chance only: Binomial(60, 5/126), mean 2.4, sd 1.5; grinding alone gives 60 of 60.
        mean, sd = runs * P_ISOLATED, math.sqrt(runs * P_ISOLATED * (1 - P_ISOLATED))
        assert isolated <= mean + 4 * sd, (isolated, mean, sd)
    finally:
        witness.stop()


def _post(url: str, problem: Problem, roster: Roster) -> requests.Response:
    return ask_witness(url, AGG, problem.id, transcript_hash("roster", problem, roster))


def _cosign(url: str, problem: Problem, roster: Roster) -> Cosignature:
    response = _post(url, problem, roster)
    assert response.status_code == 200, response.text
    return Cosignature.model_validate_json(response.content)
