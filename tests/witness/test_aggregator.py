"""The aggregator collects the declared witnesses' cosignatures: roster before the plan, bins before t_s."""

from __future__ import annotations

import time
from pathlib import Path

import requests

from anonml.crypto import Identity
from anonml.learn import roster_plan
from anonml.protocol import (
    CosignatureBundle,
    WitnessRef,
    roster_beacon,
    transcript_hash,
)
from peer.transcript import check_roster_entries, verify_bundle
from tests.aggregator.helpers import (
    aggregator_settings,
    assignment_of,
    bins_of,
    draft,
    propose,
    register_and_close,
    roster_of,
    wait_phase,
)
from tests.waiting import wait_until
from tests.witness.helpers import ask_witness
from witness import WitnessSettings


def witnessed_draft(witnesses, **kwargs):
    d = draft(**kwargs)
    refs = tuple(WitnessRef(identity=w.identity, url=w.url) for w in witnesses)
    return d.model_copy(update={"witnesses": refs})


def _witness_not_yet_up(home: Path) -> tuple[WitnessRef, WitnessSettings]:
    """A witness as a draft declares it while nobody listens at its URL, and the settings that start it
    there later (started once on a free port to learn its identity and URL, then stopped)."""
    from witness import start_witness_server

    settings = WitnessSettings(home=home, port=0)
    probe = start_witness_server(settings)
    identity, port = probe.identity, int(probe.url.rsplit(":", 1)[1])
    probe.stop()
    declared = WitnessRef(identity=identity, url=f"http://127.0.0.1:{port}")
    return declared, settings.model_copy(update={"port": port})


def bundle_of(url: str, pid: str, stage: str, timeout: float = 30.0) -> CosignatureBundle:
    def published() -> CosignatureBundle | None:
        answer = requests.get(f"{url}/problems/{pid}/cosignatures/{stage}", timeout=30)
        assert answer.status_code in (200, 404), answer.text
        return None if answer.status_code == 404 else CosignatureBundle.model_validate_json(answer.content)

    return wait_until(published, timeout, f"the {stage} bundle")


def test_the_plan_follows_the_witness_beacon_and_both_stages_are_cosigned(aggregator, witness):
    problem = propose(aggregator.url, witnessed_draft([witness], n_numeric=1, send_window=2.0))
    # Nothing to show before the roster exists.
    early = requests.get(f"{aggregator.url}/problems/{problem.id}/cosignatures/roster", timeout=30)
    assert early.status_code == 404
    bad = requests.get(f"{aggregator.url}/problems/{problem.id}/cosignatures/medians", timeout=30)
    assert bad.status_code == 422
    peers = register_and_close(aggregator.url, problem)
    bundle = bundle_of(aggregator.url, problem.id, "roster")
    roster = roster_of(aggregator.url, problem.id)
    check_roster_entries(roster, problem)  # every entry is its member's own signed registration
    transcript = transcript_hash("roster", problem, roster)
    beacon = verify_bundle(
        bundle,
        problem=problem,
        stage="roster",
        transcript=transcript,
        trusted=[witness.identity.hex()],
        threshold=1,
    )
    assert beacon == roster_beacon(bundle.cosignatures) and len(beacon) == 32
    plan = roster_plan(problem.draft, roster, beacon)
    index = {bytes(e.identity): i for i, e in enumerate(roster.entries)}
    for p in peers:
        told = assignment_of(aggregator.url, problem.id, p)
        mine = plan.assignment(index[p.public])
        assert (told.role, told.index) == (mine.role, mine.index)
    wait_phase(aggregator.url, problem.id, ("reporting",), timeout=60)
    bins = bins_of(aggregator.url, problem.id)
    bins_bundle = bundle_of(aggregator.url, problem.id, "bins")
    assert time.time() < bins.t_s + bins.delta  # collected before the send window closed
    verify_bundle(
        bins_bundle,
        problem=problem,
        stage="bins",
        transcript=transcript_hash("bins", problem, roster, bins),
        trusted=[witness.identity.hex()],
        threshold=1,
    )
    log = requests.get(f"{witness.url}/log", timeout=30).json()
    assert [e["cosignature"]["statement"]["stage"] for e in log] == ["roster", "bins"]


def test_a_witness_that_cosigned_another_roster_fails_the_problem_with_the_reason(aggregator, witness):
    problem = propose(aggregator.url, witnessed_draft([witness]))
    # The witness already co-signed some other roster of this aggregator for this problem.
    assert ask_witness(witness.url, aggregator.state.identity, problem.id, b"\x09" * 32).status_code == 200
    register_and_close(aggregator.url, problem)
    status = wait_phase(aggregator.url, problem.id, ("failed", "medians", "reporting"), timeout=30)
    assert status.phase == "failed"
    assert "refused (HTTP 409)" in status.message and "already co-signed" in status.message
    # No plan, no assignment: nothing for peers to act on.
    assert (
        requests.get(f"{aggregator.url}/problems/{problem.id}/cosignatures/roster", timeout=30).status_code
        == 404
    )


def test_an_unreachable_witness_fails_the_problem_within_the_bound(aggregator):
    class Gone:
        identity = bytes(Identity.generate().public)
        url = "http://127.0.0.1:9"  # discard port: nobody listens

    d = witnessed_draft([Gone])
    d = d.model_copy(update={"schedule": d.schedule.model_copy(update={"witness_seconds": 1.0})})
    problem = propose(aggregator.url, d)
    register_and_close(aggregator.url, problem)
    started = time.monotonic()
    status = wait_phase(aggregator.url, problem.id, ("failed", "medians"), timeout=30)
    assert status.phase == "failed" and "no roster cosignature from 1 declared witness" in status.message
    assert time.monotonic() - started < 25


def test_a_problem_without_witnesses_keeps_working_with_empty_bundles(aggregator):
    problem = propose(aggregator.url, draft(n_numeric=1, send_window=2.0))
    register_and_close(aggregator.url, problem)
    assert bundle_of(aggregator.url, problem.id, "roster").cosignatures == ()
    wait_phase(aggregator.url, problem.id, ("reporting",), timeout=60)
    assert bundle_of(aggregator.url, problem.id, "bins").cosignatures == ()


def test_a_restart_during_witnessing_resumes_the_collection(tmp_path):
    from aggregator.app import create_app, start_server
    from witness import start_witness_server

    # Learn a free port for the witness, then take it down: the aggregator will find nobody there.
    later, witness_settings = _witness_not_yet_up(tmp_path / "w")
    settings = aggregator_settings(tmp_path)
    d = witnessed_draft([later])
    d = d.model_copy(update={"schedule": d.schedule.model_copy(update={"witness_seconds": 120.0})})
    first = start_server(create_app(settings))
    try:
        problem = propose(first.url, d)
        register_and_close(first.url, problem)
        assert wait_phase(first.url, problem.id, ("witnessing",), timeout=30).phase == "witnessing"
    finally:
        first.stop()
    witness = start_witness_server(witness_settings)
    second = start_server(create_app(settings))
    try:
        status = wait_phase(second.url, problem.id, ("medians", "reporting", "failed"), timeout=60)
        assert status.phase != "failed", status.message
        assert len(bundle_of(second.url, problem.id, "roster").cosignatures) == 1
    finally:
        second.stop()
        witness.stop()


def test_the_aggregator_retries_a_witness_that_comes_up_late(aggregator, tmp_path):
    from witness import start_witness_server

    late, settings = _witness_not_yet_up(tmp_path / "late")
    problem = propose(aggregator.url, witnessed_draft([late]))
    register_and_close(aggregator.url, problem)
    # Nobody answers yet: the problem waits in witnessing (retrying with backoff), it does not fail.
    assert wait_phase(aggregator.url, problem.id, ("witnessing",), timeout=30).phase == "witnessing"
    witness = start_witness_server(settings)
    try:
        status = wait_phase(aggregator.url, problem.id, ("medians", "reporting", "failed"), timeout=30)
        assert status.phase != "failed", status.message
        log = requests.get(f"{witness.url}/log", timeout=30).json()
        # Exactly one roster cosignature (the bins may be co-signed too by now, on a fast machine).
        assert [e["cosignature"]["statement"]["stage"] for e in log].count("roster") == 1
    finally:
        witness.stop()


def test_a_refused_bins_transcript_fails_the_problem_before_the_send_window(aggregator, witness):
    problem = propose(aggregator.url, witnessed_draft([witness], n_numeric=1))
    # Someone already had other bins of this problem co-signed by the witness.
    assert (
        ask_witness(
            witness.url, aggregator.state.identity, problem.id, b"\x0b" * 32, stage="bins"
        ).status_code
        == 200
    )
    register_and_close(aggregator.url, problem)
    status = wait_phase(aggregator.url, problem.id, ("failed", "done"), timeout=60)
    assert status.phase == "failed" and "bins transcript" in status.message and "409" in status.message
    assert (
        requests.get(f"{aggregator.url}/problems/{problem.id}/cosignatures/bins", timeout=30).status_code
        == 404
    )
