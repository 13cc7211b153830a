"""A problem with a calibration pool, played over HTTP up to its calibration step.

The library's pool rule needs about 500 answers' worth of information
(:func:`anonml.learn.simulation.calibration_pool_size`), so the rounds here have a roster of
:data:`MEMBERS` at ε = 8, 90 % of it in the calibration pool; the test-side peers are
:class:`~tests.aggregator.helpers.WirePeer` (registered in batches), the report peers send their
reports through the intake and the admin's ``train`` closes the round.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import requests

from anonml.crypto import Identity
from anonml.learn.settings import roster_plan
from anonml.privacy import best_mechanism
from anonml.protocol import (
    BatchResults,
    CalibrationAnswer,
    CalibrationRequest,
    Problem,
    ProblemDraft,
    RegistrationBatch,
    pack_bits,
    sign_message,
)
from tests.aggregator.helpers import (
    ADMIN,
    WirePeer,
    close_registration,
    draft,
    in_roster_order,
    post,
    propose,
    roster_of,
    send_reports,
    wait_phase,
)
from tests.waiting import wait_until

__all__ = [
    "MEMBERS",
    "EPSILON",
    "calibration_draft",
    "CalibratingRound",
    "calibration_request",
    "pool_answer",
    "truth",
]

MEMBERS = 560
EPSILON = 8.0


def calibration_draft(*, median_step: float = 60.0, fraction: float = 0.9) -> ProblemDraft:
    """One boolean feature, one report partition, no median pool, ``fraction`` of the roster calibrating."""
    d = draft(
        n_numeric=0, kp=1, kh=1, min_peers=4, epsilon=EPSILON, send_window=120.0, median_step=median_step
    )
    return ProblemDraft.model_validate({**d.model_dump(), "calibration_fraction": fraction})


def register_many(url: str, problem: Problem, n: int, given: Sequence[Identity] = ()) -> list[WirePeer]:
    """``n`` peers registered through the batch endpoint (each item 201): the ``given`` identities
    first, then fresh ones."""
    peers = [WirePeer(identity=i) for i in given] + [WirePeer() for _ in range(n - len(given))]
    for start in range(0, n, 200):
        part = peers[start : start + 200]
        batch = RegistrationBatch(registrations=tuple(p.registration(problem) for p in part))
        response = post(f"{url}/problems/{problem.id}/registrations/batch", batch)
        assert response.status_code == 200, response.text
        results = BatchResults.model_validate_json(response.content).results
        assert all(r.status == 201 for r in results), [r for r in results if r.status != 201][:3]
    return peers


@dataclass
class CalibratingRound:
    """A problem in ``calibrating``: its peers in roster order and its pool's roster indices."""

    url: str
    problem: Problem
    peers: list[WirePeer]
    pool: list[int]

    @classmethod
    def open(
        cls, url: str, d: ProblemDraft, *, given: Sequence[Identity] = (), timeout: float = 180.0
    ) -> CalibratingRound:
        """Propose ``d``, register :data:`MEMBERS` (``given`` among them), close, send every report
        peer's reports, train, and wait for ``calibrating``."""
        problem = propose(url, d)
        peers = register_many(url, problem, MEMBERS, given)
        close_registration(url, problem.id)
        wait_phase(url, problem.id, ("reporting",), timeout)
        peers = in_roster_order(url, problem.id, peers)
        plan = roster_plan(problem.draft, roster_of(url, problem.id))
        pool = [int(i) for i in plan.calibration_pool()]
        reporters = [peers[int(i)] for i in plan.members(0)]
        assert send_reports(url, problem, reporters, np.random.default_rng(3)) == len(reporters)
        assert post(f"{url}/problems/{problem.id}/train", b"", ADMIN).status_code == 200
        wait_phase(url, problem.id, ("calibrating",), timeout)
        return cls(url, problem, peers, pool)

    def answer(self, index: int, rng: np.random.Generator) -> requests.Response:
        """Roster member ``index`` answers the question with :func:`truth`'s (score bin, label)."""
        request = calibration_request(self.url, self.problem.id)
        bins = len(request.question.cuts) + 1
        score_bin = int(rng.integers(bins))
        answer = pool_answer(self.peers[index], request, score_bin, truth(score_bin, bins, rng), rng)
        return post(f"{self.url}/problems/{self.problem.id}/calibration/answers", answer)


def calibration_request(url: str, pid: str) -> CalibrationRequest:
    response = wait_until(
        lambda: (r := requests.get(f"{url}/problems/{pid}/calibration", timeout=30)).status_code == 200 and r,
        60,
        lambda: f"the calibration question of {pid}",
    )
    return CalibrationRequest.model_validate_json(response.content)


def truth(score_bin: int, bins: int, rng: np.random.Generator) -> int:
    """The pool's labels: P(y = 1 | bin) = σ(4·(bin/(bins − 1) − 1/2)), steeper than any model of one flag."""
    return int(rng.random() < 1.0 / (1.0 + np.exp(-4.0 * (score_bin / (bins - 1) - 0.5))))


def pool_answer(
    peer: WirePeer, request: CalibrationRequest, score_bin: int, label: int, rng: np.random.Generator
) -> CalibrationAnswer:
    """An honest answer: ``2·score_bin + label`` through the least-error mechanism at the question's ε."""
    q = request.question
    mechanism = best_mechanism(q.epsilon, q.domain, len(q.members))
    bits = mechanism.perturb(np.asarray([2 * score_bin + label]), rng)[0]
    unsigned = CalibrationAnswer(
        problem_id=q.problem_id,
        identity=peer.public,
        model_digest=q.model_digest,
        mechanism=mechanism.descriptor(),
        bits=pack_bits(bits),
        signature=bytes(64),
    )
    return sign_message(unsigned, peer.identity)
