"""A three-class problem with a calibration pool, played over HTTP up to its calibration step, and
the honest answers of both halves of its pool.

As :mod:`tests.aggregator.calibration_helpers` (a roster of :data:`MEMBERS` at ε = 8, 90 % in the
pool): the label is three classes, the report peers report ``label = flag`` (so the model predicts
class 0 for flag 0 and class 1 for flag 1), and the pool's labels follow :func:`shifted_truth` — the
class after the model's prediction, 90 % of the time: a confidently wrong model the class map fixes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import requests

from anonml.crypto import Identity
from anonml.learn import AnonMLClassifier, Binning, roster_plan
from anonml.learn.calibration import LOSS_CLIP, loss_steps, perturb_steps
from anonml.learn.histograms import domain_size
from anonml.privacy import best_mechanism
from anonml.protocol import (
    CalibrationAnswer,
    CalibrationRequest,
    ChoiceAnswer,
    LabelSpec,
    PrivateReport,
    Problem,
    ProblemDraft,
    pack_bits,
    sign_message,
)
from tests.aggregator.calibration_helpers import MEMBERS, calibration_draft, register_many
from tests.aggregator.helpers import (
    ADMIN,
    WirePeer,
    assignment_of,
    bins_of,
    close_registration,
    delivery,
    in_roster_order,
    post,
    propose,
    roster_of,
    slots,
    wait_phase,
)
from tests.waiting import wait_until

__all__ = ["K", "class_map_draft", "ClassMapRound", "shifted_truth"]

K = 3


def class_map_draft(*, median_step: float = 60.0, fraction: float = 0.9) -> ProblemDraft:
    """:func:`~tests.aggregator.calibration_helpers.calibration_draft` with a three-class label."""
    d = calibration_draft(median_step=median_step, fraction=fraction)
    label = LabelSpec(kind="classes", classes=("a", "b", "c"))
    return ProblemDraft.model_validate({**d.model_dump(), "label": label.model_dump()})


def shifted_truth(predicted: int, rng: np.random.Generator) -> int:
    """The pool's label: the class after the model's prediction w.p. 0.9, else uniform."""
    return (predicted + 1) % K if rng.random() < 0.9 else int(rng.integers(K))


def _class_report(
    problem: Problem,
    bins: object,
    assignment: object,
    flag: int,
    label: int,
    subset: int,
    rng: np.random.Generator,
) -> PrivateReport:
    """An honest report of the one boolean feature ``flag`` and the class ``label``."""
    d = problem.draft
    binning = Binning.from_published(d.features, bins.edges)  # type: ignore[attr-defined]
    features = assignment.subsets[subset]  # type: ignore[attr-defined]
    shape = tuple(binning.n_bins[f] for f in features)
    codes = binning.transform(np.asarray([float(flag)])[None, :])[0]
    index = 0
    for f, size in zip(features, shape, strict=True):
        index = index * size + int(codes[f])
    mechanism = best_mechanism(d.report_epsilon, domain_size(shape, K), 10)
    bits = mechanism.perturb(np.asarray([index * K + label]), rng)[0]
    return PrivateReport(
        problem_id=problem.id,
        partition=assignment.index,  # type: ignore[attr-defined]
        subset=subset,
        mechanism=mechanism.descriptor(),
        bits=pack_bits(bits),
    )


@dataclass
class ClassMapRound:
    """A three-class problem in ``calibrating``: its peers in roster order and the pool's halves."""

    url: str
    problem: Problem
    peers: list[WirePeer]
    map_half: list[int]
    choice_half: list[int]

    @classmethod
    def open(
        cls, url: str, d: ProblemDraft, *, given: Sequence[Identity] = (), timeout: float = 180.0
    ) -> ClassMapRound:
        """Propose ``d``, register :data:`MEMBERS` (``given`` among them), close, send every report
        peer's reports (``label = flag``), train, and wait for ``calibrating``."""
        problem = propose(url, d)
        peers = register_many(url, problem, MEMBERS, given)
        close_registration(url, problem.id)
        wait_phase(url, problem.id, ("reporting",), timeout)
        peers = in_roster_order(url, problem.id, peers)
        roster, bins = roster_of(url, problem.id), bins_of(url, problem.id)
        plan = roster_plan(problem.draft, roster)
        rng = np.random.default_rng(3)
        accepted = 0
        reporters = [peers[int(i)] for i in plan.members(0)]
        for i, peer in enumerate(reporters):
            peer.assignment = assignment_of(url, problem.id, peer)
            tokens = peer.tokens(url, problem, roster, slots(problem, peer.assignment.index))
            for subset, token in enumerate(tokens):
                report = _class_report(problem, bins, peer.assignment, i % 2, i % 2, subset, rng)
                accepted += post(f"{url}/intake", delivery(token, report)).status_code == 201
        assert accepted == len(reporters)
        assert post(f"{url}/problems/{problem.id}/train", b"", ADMIN).status_code == 200
        wait_phase(url, problem.id, ("calibrating",), timeout)
        half = [int(i) for i in plan.class_map_half()]
        return cls(url, problem, peers, half, [int(i) for i in plan.choice_half()])

    def request(self, *, choice: bool = False) -> CalibrationRequest:
        """The calibration request (once ``choice``: once it carries the second question)."""

        def served() -> CalibrationRequest | None:
            response = requests.get(f"{self.url}/problems/{self.problem.id}/calibration", timeout=30)
            if response.status_code != 200:
                return None
            request = CalibrationRequest.model_validate_json(response.content)
            return request if not choice or request.choice is not None else None

        return wait_until(served, 120, lambda: f"the calibration request of {self.problem.id}")

    @staticmethod
    def model(request: CalibrationRequest) -> AnonMLClassifier:
        return AnonMLClassifier.from_json(json.dumps(request.model.model))

    def map_answer(self, index: int, rng: np.random.Generator) -> requests.Response:
        """Map-half member ``index``: a random flag, the model's class for it, :func:`shifted_truth`."""
        request = self.request()
        model = self.model(request)
        codes = model.binning_.transform(np.asarray([[float(rng.integers(2))]]))
        predicted = int(np.argmax(model.ensemble_.decision_function(codes)[0]))
        q = request.question
        mechanism = best_mechanism(q.epsilon, q.domain, len(q.members))
        bits = mechanism.perturb(np.asarray([predicted * K + shifted_truth(predicted, rng)]), rng)[0]
        answer = sign_message(
            CalibrationAnswer(
                problem_id=q.problem_id,
                identity=self.peers[index].public,
                model_digest=q.model_digest,
                mechanism=mechanism.descriptor(),
                bits=pack_bits(bits),
                signature=bytes(64),
            ),
            self.peers[index].identity,
        )
        return post(f"{self.url}/problems/{self.problem.id}/calibration/answers", answer)

    def choice_answer(
        self, index: int, rng: np.random.Generator, report: tuple[float, ...] | None = None
    ) -> ChoiceAnswer:
        """Choice-half member ``index``'s signed answer: its loss steps under the served map, perturbed
        as the library does (or ``report`` as given)."""
        request = self.request(choice=True)
        choice = request.choice
        assert choice is not None
        if report is None:
            model = self.model(request)
            codes = model.binning_.transform(np.asarray([[float(rng.integers(2))]]))
            predicted = int(np.argmax(model.ensemble_.decision_function(codes)[0]))
            q = np.asarray(choice.class_map)
            label = np.asarray([shifted_truth(predicted, rng)])
            steps = loss_steps(model.ensemble_.proba(codes), q[[predicted]], label)
            report = tuple(float(v) for v in perturb_steps(steps, LOSS_CLIP, choice.epsilon, rng)[0])
        return self.signed_choice(index, bytes(choice.model_digest), report)

    def signed_choice(self, index: int, digest: bytes, report: tuple[float, ...]) -> ChoiceAnswer:
        """Member ``index``'s signed choice answer ``report`` about the model of ``digest``."""
        return sign_message(
            ChoiceAnswer(
                problem_id=self.problem.id,
                identity=self.peers[index].public,
                model_digest=digest,
                report=report,
                signature=bytes(64),
            ),
            self.peers[index].identity,
        )

    def send_choice(self, answer: ChoiceAnswer) -> requests.Response:
        return post(f"{self.url}/problems/{self.problem.id}/calibration/choices", answer)
