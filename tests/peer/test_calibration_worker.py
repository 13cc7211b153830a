"""The worker's calibration step: the question is fetched once for the host's calibration-pool
identities only, and each identity is asked once per process (not at every poll)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import SimpleNamespace

from anonml.outbound import OutboundError
from peer.phases import ParticipationPhase
from peer.worker import ProblemSession
from tests.aggregator.helpers import draft

P = ParticipationPhase


@dataclass
class _Identity:
    """What the calibration step looks at of a participation, and what it was asked."""

    in_calibration_pool: bool
    phase: ParticipationPhase = P.REPORTING
    asked: list[object] = field(default_factory=list)
    fail_once: bool = False
    awaits_choice: int = 0  # polls before a K >= 3 choice-half identity's question is asked
    active: bool = True
    node: object = field(default_factory=lambda: SimpleNamespace(fingerprint="ab" * 32))

    def answer_calibration(self, request: object) -> bool:
        self.asked.append(request)
        if self.fail_once:
            self.fail_once = False
            raise OutboundError("the aggregator did not answer")
        return True

    def awaits_calibration_choice(self, request: object) -> bool:
        self.awaits_choice -= 1
        return self.awaits_choice >= 0


@dataclass
class _Client:
    fetched: int = 0

    def calibration(self, problem_id: str) -> str:
        self.fetched += 1
        return f"question of {problem_id}"


def test_the_question_is_fetched_for_pool_identities_only_and_each_is_asked_once():
    pool = _Identity(True)
    flaky = _Identity(True, fail_once=True)
    calibrated = _Identity(True, phase=P.CALIBRATED)  # resumed after a restart: resends its answer once
    reporter = _Identity(False)
    client = _Client()
    with ThreadPoolExecutor(2) as executor:
        host = SimpleNamespace(pool=executor, count=lambda *_: None)
        problem = SimpleNamespace(id="p-calibrating", draft=draft())
        session = ProblemSession(host, problem, client, [pool, flaky, calibrated, reporter])  # type: ignore[arg-type]
        for _ in range(3):
            session._calibrate()
    assert reporter.asked == [] and client.fetched == 2  # the second poll only for the one that failed
    assert len(pool.asked) == 1 and len(calibrated.asked) == 1
    assert len(flaky.asked) == 2  # a transient failure is tried again at the next poll, then not again
    hostless = ProblemSession(host, problem, _Client(), [reporter])  # type: ignore[arg-type]
    hostless._calibrate()
    assert hostless.client.fetched == 0  # a host without a pool identity never downloads the question


def test_a_choice_half_identity_is_asked_again_until_its_question_comes_then_not_again():
    waiting = _Identity(True, awaits_choice=2)  # the first two polls: the map half's stage still runs
    client = _Client()
    with ThreadPoolExecutor(2) as executor:
        host = SimpleNamespace(pool=executor, count=lambda *_: None)
        problem = SimpleNamespace(id="p-calibrating", draft=draft())
        session = ProblemSession(host, problem, client, [waiting])  # type: ignore[arg-type]
        for _ in range(5):
            session._calibrate()
    assert len(waiting.asked) == 3 and client.fetched == 3
