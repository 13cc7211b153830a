"""A 3-class and a numeric (binned-ordinal) label through the whole protocol, over real HTTP.

A real aggregator (uvicorn on loopback) and one peer host of simulated MOOC
students (its relay served on loopback) run the dropout problem's plan with
the ``user_window`` instancer's activity level (3 classes) or event count (a
numeric label in [0, 120], 4 bins) as the label. Checked: every stored report
has the label domain K in its mechanism, the published model's classes are
the label domain, every peer's local prediction is a class name or a value
inside the public range, and the status and the model carry the shuffle bound
beside the local ε.
"""

from __future__ import annotations

import html
import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import requests

from anonml.demo import DEMO_HOPS, packet_windows, probed_hop_seconds
from anonml.learn import AnonMLClassifier
from anonml.privacy.amplification import report_pool_bound
from anonml.protocol import LabelSpec, ModelDocument, ProblemDraft
from peer.app import start_peer_server
from peer.dashboard import ModelView, label_words, prediction_text
from peer.features import predict_locally
from peer.records import shuffle_bounds
from peer.routes.dashboard import PAGES
from tests.aggregator.helpers import close_registration, propose, status, wait_phase
from tests.peer.helpers import mooc_dropout_draft, simulated_nodes, simulation_host
from tests.waiting import wait_until

N_PEERS = 40
EPSILON = 2.0


def _draft(label: LabelSpec, instancer_label: dict) -> ProblemDraft:
    # The demo's windows (6 s each): with 3 s and a 1 s release window, a loaded CI run (4 workers)
    # once delivered no report in time.
    base = mooc_dropout_draft(
        epsilon=EPSILON, report_delay_seconds=6.0, send_window_seconds=6.0, release_window_seconds=6.0
    )
    body = base.model_dump(mode="json")
    body["instancer"]["params"] = {**body["instancer"]["params"], **instancer_label}
    body["label"] = label.model_dump(mode="json")
    # One route per report (these rounds test label kinds): two routes' doubled packets in these
    # windows delivered nothing once on a loaded CI run; redundancy has its own tests.
    body["routes"] = 1
    return ProblemDraft.model_validate(body)


def _measured_windows(d: ProblemDraft, host) -> ProblemDraft:
    """``d`` with its packet windows raised to what this host's relay sustains now, as the demo sizes
    them (:func:`anonml.demo.packet_windows`): fixed 6 s windows once delivered no report at all on
    a loaded CI run."""
    hop = probed_hop_seconds(host)
    send, release = packet_windows(N_PEERS, hops=DEMO_HOPS, slots_per_peer=d.kh, hop_seconds=hop)
    schedule = d.schedule.model_copy(update={
        "send_window_seconds": max(d.schedule.send_window_seconds, send),
        "release_window_seconds": max(d.schedule.release_window_seconds, release),
    })
    return d.model_copy(update={"schedule": schedule})


def _run(aggregator_url: str, tmp_path: Path, d: ProblemDraft):
    simulated, nodes = simulated_nodes(tmp_path, N_PEERS, seed=11, rng_base=100)
    host = simulation_host(nodes, tmp_path / "peers.db", aggregator_url, workers=4)
    server = start_peer_server(host)
    try:
        problem = propose(aggregator_url, _measured_windows(d, host))
        wait_until(lambda: status(aggregator_url, problem.id).registered >= N_PEERS, 120, "registrations")
        close_registration(aggregator_url, problem.id, or_deadline=True)
        final = wait_phase(aggregator_url, problem.id, ("done", "degraded", "failed"), timeout=180)
        assert final.phase in ("done", "degraded"), final.message
        document = ModelDocument.model_validate_json(
            requests.get(f"{aggregator_url}/problems/{problem.id}/model", timeout=30).content
        )
        predictions = [predict_locally(problem, document, p.store, p.username) for p in simulated]
        # What `anonml peer ledger` and the dashboard show each identity (peer.records.shuffle_bounds).
        wait_until(lambda: host.sessions[problem.id].finished, 30, "the host's session to finish")
        per_node = [
            shuffle_bounds(host.db, n.fingerprint, n.ledger.releases(peer=n.fingerprint)).get(problem.id)
            for n in nodes
        ]
        bounds = [b for b in per_node if b is not None]  # an identity that stopped released nothing
        assert len(bounds) >= N_PEERS // 2
        return problem, final, document, predictions, bounds

    finally:
        server.stop()
        for p in simulated:
            p.store.close()


def _models_page(problem, final, document, prediction) -> str:
    """The dashboard's Models page (its template, as the peer's app renders it) for one prediction."""
    view = ModelView(problem, final.phase, document.created_at, dict(document.metrics), document.reports,
                     prediction, "", prediction_text(problem, prediction))
    return PAGES.env.get_template("models.html").render(
        prefix="/ui", site="AnonML peer", nav=PAGES.nav, here="/ui/models", csrf="x", logged_in=True,
        notice="", error="", models=[view],
    )


def _said_in_the_labels_words(problem, final, document, predictions, words: tuple[str, ...]) -> None:
    """Each prediction is said in the label's words, with every class's probability; never P(label = 1)."""
    for p in predictions:
        said = prediction_text(problem, p)
        assert [w for w, _ in said.rows] == list(words)
        assert sum(q for _, q in said.rows) == pytest.approx(1.0)
        assert said.answer == words[p.label] and max(q for _, q in said.rows) == said.rows[p.label][1]
    page = _models_page(problem, final, document, predictions[0])
    assert "P(label = 1)" not in page
    headline = prediction_text(problem, predictions[0]).headline
    assert words[predictions[0].label] in headline and html.escape(headline) in page
    for w in words:
        assert f"<td>{w}</td>" in page


def _stored_domains(db: Path) -> set[int]:
    with sqlite3.connect(db) as con:
        return {json.loads(m)["m"] for (m,) in con.execute("SELECT mechanism_json FROM reports")}


def _check_shuffle(final, document: ModelDocument, bounds) -> None:
    # The conditional central bound sits beside the local ε, smaller than it, with its assumptions.
    shuffle = final.shuffle
    assert shuffle is not None and not shuffle.planned
    assert shuffle.local_epsilon == EPSILON
    # Groups of ~10 reports hide little at δ = 1e-6 (ε_c ≈ 1.999998 here): the figure is the
    # FMT bound of the smallest group, never above the local ε.
    expected = report_pool_bound(EPSILON, 1, shuffle.smallest_group)
    assert shuffle.epsilon == pytest.approx(expected.epsilon) and shuffle.epsilon <= EPSILON
    assert shuffle.delta == expected.delta == 1e-6
    assert "unlinkable" in shuffle.assumptions and "median answers are signed" in shuffle.assumptions
    privacy = document.model["privacy"]
    assert privacy["shuffle"]["epsilon"] == pytest.approx(shuffle.epsilon)
    assert privacy["shuffle"]["smallest_group"] == shuffle.smallest_group <= N_PEERS // 4
    # The status names what the bound covers and who stands outside it (the median peers who answered).
    assert shuffle.pools == ("report",) and shuffle.peers_outside == privacy["shuffle"]["peers_outside"]
    # Each peer computes its own bound from the roster it checked: the same figure when no report
    # was lost (the aggregator's rests on the fewest reports received per slot).
    assert all(bound is not None and note.startswith("partitions of ≥") for bound, note in bounds)
    if final.reports is not None and final.reports.lost == 0:
        assert {round(b.epsilon, 9) for b, _ in bounds} == {round(shuffle.epsilon, 9)}


@pytest.mark.slow
def test_a_three_class_problem_runs_end_to_end_and_predicts_class_names(aggregator, tmp_path):
    names = ("silent", "some", "busy")
    d = _draft(LabelSpec(kind="classes", classes=names), {"label": "level", "level_cuts": [1, 40]})
    problem, final, document, predictions, bounds = _run(aggregator.url, tmp_path, d)
    # Every report's domain is (2 bins) × K = 3 labels.
    assert _stored_domains(aggregator.db_path) == {6}
    model = AnonMLClassifier.from_json(json.dumps(document.model))
    assert list(model.classes_) == list(names)
    assert document.metrics["label_classes"] == 3
    assert {p.kind for p in predictions} == {"classes"}
    assert {p.answer for p in predictions} <= set(names)
    for p in predictions:
        assert p.answer == names[p.label] and 1 / 3 <= p.probability <= 1
    assert label_words(problem.draft.label) == names
    _said_in_the_labels_words(problem, final, document, predictions, names)
    _check_shuffle(final, document, bounds)


@pytest.mark.slow
def test_a_numeric_label_runs_end_to_end_and_predicts_values_in_its_range(aggregator, tmp_path):
    spec = LabelSpec(kind="numeric", low=0.0, high=120.0, bins=4)
    d = _draft(spec, {"label": "events"})
    problem, final, document, predictions, bounds = _run(aggregator.url, tmp_path, d)
    assert _stored_domains(aggregator.db_path) == {8}  # (2 bins) × K = 4 target bins
    model = AnonMLClassifier.from_json(json.dumps(document.model))
    assert model.classes_.tolist() == [0, 1, 2, 3]
    values = np.array([p.answer for p in predictions], dtype=float)
    # Σ_k P(bin k)·c_k lies between the first and last bin midpoints (15 and 105).
    assert np.all((values >= 15.0 - 1e-9) & (values <= 105.0 + 1e-9))
    assert {p.kind for p in predictions} == {"numeric"} and all(0 <= p.label < 4 for p in predictions)
    # The public bins of [0, 120] in 4: each class said as its range, the value beside the likeliest.
    ranges = ("[0, 30)", "[30, 60)", "[60, 90)", "[90, 120]")
    assert label_words(problem.draft.label) == ranges
    _said_in_the_labels_words(problem, final, document, predictions, ranges)
    assert prediction_text(problem, predictions[0]).headline.startswith(
        f"predicted value {predictions[0].answer:.4g}, most likely in {ranges[predictions[0].label]}"
    )
    _check_shuffle(final, document, bounds)
