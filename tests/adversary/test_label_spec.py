"""Hostile label specs, proposed by a malicious aggregator to a real peer host.

The label spec sets K, the label domain of every report (K × the subset's
cells). An aggregator that could make K huge, name classes that render as
something else, or give a numeric label a range no float arithmetic survives
would widen or distort what each peer sends. Its own admin API refuses such
drafts, so the aggregator here goes around it: it rewrites the proposal it
shows the victim byte for byte and signs the result with its real key, so the
signature check passes and only the peer's own reading of the spec stands in
the way. Each test also lists an honest proposal beside the hostile one, which
the same peer accepts: the hostile one was read and refused, not missed.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest
import requests

from anonml.protocol import MAX_LABEL_CLASSES, LabelSpec, Problem, WitnessRef, signing_bytes
from peer.policy import PeerPolicy
from tests.adversary.malicious import MaliciousAggregator, mooc_draft, start_peers
from tests.peer.helpers import mooc_dropout_draft
from tests.waiting import wait_until
from witness import WitnessSettings, start_witness_server

POLICY = PeerPolicy(
    auto_accept=True, max_epsilon_per_problem=4.0, allow_loopback_http=True, require_witnesses=False
)

#: (label spec as the victim is shown it, what the peer must say about it).
HOSTILE: dict[str, tuple[dict[str, Any], str]] = {
    "a million classes": (
        {"kind": "classes", "classes": [f"c{i}" for i in range(10**6)]},
        f"at most {MAX_LABEL_CLASSES} items",
    ),
    "duplicate class names": ({"kind": "classes", "classes": ["pass", "fail", "pass"]}, "distinct"),
    "a NUL in a class name": ({"kind": "classes", "classes": ["pass", "fa\x00il"]}, "printable ASCII"),
    "a right-to-left override": ({"kind": "classes", "classes": ["pass", "\u202eliaf"]}, "printable ASCII"),
    "one class": ({"kind": "classes", "classes": ["pass"]}, "2 to 16 classes"),
    "a NaN range": ({"kind": "numeric", "low": math.nan, "high": 60.0, "bins": 4}, "must be finite"),
    "a ±1e300 range": ({"kind": "numeric", "low": -1e300, "high": 1e300, "bins": 4}, "within ±1e+12"),
    "an inverted range": ({"kind": "numeric", "low": 60.0, "high": 0.0, "bins": 4}, "needs low < high"),
    "0 bins": ({"kind": "numeric", "low": 0.0, "high": 60.0, "bins": 0}, "greater than or equal to 2"),
    "a million bins": (
        {"kind": "numeric", "low": 0.0, "high": 60.0, "bins": 10**6},
        "less than or equal to 16",
    ),
    "a binary label with classes": ({"kind": "binary", "classes": ["0", "1"]}, "names no classes"),
}


def _show_label(adversary: MaliciousAggregator, title: str, label: dict[str, Any]) -> None:
    """Show the victim every proposal titled ``title`` with ``label``, in its listing and its own route,
    validly signed.

    Matched by title, not by id, so the rewrite is installed before the problem exists: there is no
    moment at which the victim could be shown the honest copy, however early it polls.
    """

    def rewrite_one(entry: dict[str, Any]) -> dict[str, Any]:
        if entry.get("draft", {}).get("title") != title:
            return entry
        draft = {**entry["draft"], "label": label}
        return adversary.sign_raw({**entry, "draft": draft}, Problem)

    adversary.equivocate_raw(
        "victim", "problems", lambda body: json.dumps([rewrite_one(e) for e in json.loads(body)]).encode()
    )
    adversary.equivocate_raw(
        "victim", "problem", lambda body: json.dumps(rewrite_one(json.loads(body))).encode()
    )


def test_the_raw_signature_is_the_protocols(adversary):
    # The hostile copies are signed exactly as the aggregator signs a proposal: re-signing the
    # honest one byte for byte gives its own signature (Ed25519 is deterministic).
    problem = adversary.propose(mooc_draft(min_peers=20))
    honest = json.loads(problem.model_dump_json())
    assert adversary.sign_raw(honest, Problem)["signature"] == honest["signature"]
    assert json.dumps(
        {k: v for k, v in honest.items() if k != "signature"}, sort_keys=True, separators=(",", ":")
    ).encode() == signing_bytes(problem)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_label_spec_is_never_joined(
    adversary: MaliciousAggregator, cohort, tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str
):
    label, reason = HOSTILE[case]
    caplog.set_level(logging.WARNING, logger="anonml.peer")
    title = f"hostile label spec: {case}"
    _show_label(adversary, title, label)  # before the problem exists: the victim never sees the honest copy
    problem = adversary.propose(mooc_draft(min_peers=20, title=title))
    # What the victim's first poll will read: the hostile copy, and nothing else of this problem.
    listing = requests.get(f"{adversary.url_for('victim')}/problems", timeout=60).json()
    shown = [json.dumps(e["draft"]["label"], sort_keys=True) for e in listing if e["id"] == problem.id]
    assert shown == [json.dumps(label, sort_keys=True)]
    victim = start_peers(tmp_path, adversary.url_for("victim"), cohort(3)[:1], POLICY)
    try:
        control = adversary.propose(mooc_draft(min_peers=20))  # honest, listed beside it
        # The peer read the listing that held both and joined the honest problem only.
        wait_until(
            lambda: victim.decision(control) is not None, 180, "the peer to decide on the honest problem"
        )
        assert victim.decision(control) == ("accept", victim.decision(control)[1])
        wait_until(
            lambda: any(reason in r.getMessage() for r in caplog.records),
            180,
            f"the peer to say why it left out the proposal with {case}",
        )
        said = next(r.getMessage() for r in caplog.records if reason in r.getMessage())
        assert "malformed problem" in said
        # Never recorded, decided on, registered for, answered or reported in.
        assert victim.host.db.proposal(problem.id) is None
        assert victim.decision(problem) is None and victim.participation(problem) is None
        posted = [path for method, path in adversary.seen("victim") if method == "POST"]
        assert not any(f"/problems/{problem.id}/" in path for path in posted), posted
        assert all(r.problem != problem.id for r in victim.releases())
        assert adversary.status(problem).registered == 0
    finally:
        victim.stop()


@pytest.mark.slow
def test_a_label_shown_to_one_peer_only_is_caught_by_the_witness(
    adversary: MaliciousAggregator, cohort, tmp_path: Path
):
    # A well-formed spec the victim alone is shown (3 classes; everyone else, and the witness,
    # hold the binary proposal under the same id, both validly signed): its reports would have
    # a label domain nobody else's has, so the aggregator could pick them out of its partition.
    # Nothing the victim receives later carries the label, so only the witnessed transcript
    # (which covers the whole signed Problem) can tell; the victim must stop before releasing.
    witness = start_witness_server(WitnessSettings(home=tmp_path / "witness", port=0))
    policy = PeerPolicy.for_simulation(
        auto_accept=True, max_epsilon_per_problem=4.0, witnesses=[witness.identity.hex()], witness_threshold=1
    )
    three = LabelSpec(kind="classes", classes=("stay", "drop", "pause"))

    def relabel(problem: Problem) -> Problem:
        return problem.model_copy(update={"draft": problem.draft.model_copy(update={"label": three})})

    adversary.equivocate("victim", "problems", lambda listed: [relabel(p) for p in listed])
    adversary.equivocate("victim", "problem", relabel)
    people = cohort(8)
    others = start_peers(tmp_path, adversary.url, people[:7], policy, name="others")
    victim = start_peers(tmp_path, adversary.url_for("victim"), people[7:], policy, name="victim")
    try:
        draft = mooc_dropout_draft(
            min_peers=8,
            median_step_seconds=1.5,
            witnesses=[WitnessRef(identity=witness.identity, url=witness.url)],
            witness_seconds=3.0,
        )
        problem = adversary.propose(draft)
        wait_until(lambda: adversary.status(problem).registered >= 8, 60, "all 8 peers to register")
        held = victim.host.db.proposal(problem.id)
        assert held is not None
        assert Problem.model_validate_json(held.problem_json).draft.label == three  # the lie was believed
        assert problem.draft.label.kind == "binary"
        adversary.close(problem)
        said = victim.wait_stopped(problem, timeout=90)
        assert "roster not witnessed" in said, said
        victim.assert_ledger_empty()
        assert not any(path.endswith("/tokens") for _, path in adversary.seen("victim"))
        # The others, who hold what the witness holds, finish the round.
        final = adversary.wait_phase(problem, "done", "degraded", "failed", timeout=120)
        assert final.phase in ("done", "degraded"), final.message
    finally:
        victim.stop()
        others.stop()
        witness.stop()
