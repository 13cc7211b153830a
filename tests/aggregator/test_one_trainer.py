"""One trainer per problem (issue 26, item 8): the race in ``advance()`` that trained a problem twice.

``advance`` reads the phase first and checks "no thread of this process trains
it" later; a training thread that publishes the model and leaves in between
made a stale "training" look like an untrained problem, and a second thread
trained it again ("left training while this process trained it"). The test
forces exactly that interleaving with two threads on one database: the
driver's own training thread is held inside ``train_problem``; a second thread
calls ``advance`` for the problem, and right after ``advance`` has read the
phase (at its ``state.context`` call) the first thread is let go and joined.
What must hold: the problem is trained once — ``train_problem`` runs once and
no second training thread is started.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import aggregator.training as training
from tests.aggregator.helpers import ADMIN, OpenRound, draft, post, send_reports, wait_phase


def test_a_stale_training_phase_never_starts_a_second_trainer(aggregator, monkeypatch: pytest.MonkeyPatch):
    round_ = OpenRound.open(aggregator, draft(kh=1, kp=1, min_peers=4, send_window=60.0), 6)
    pid = round_.problem.id
    assert send_reports(round_.url, round_.problem, round_.peers, np.random.default_rng(8)) == 6
    driver, state = aggregator.driver, aggregator.state
    assert driver is not None
    calls: list[str] = []
    held, release = threading.Event(), threading.Event()
    real_train = training.train_problem  # the driver imports it from there when it trains

    def counted_train(*args, **kwargs):
        calls.append(threading.current_thread().name)
        held.set()
        assert release.wait(60), "the test never let the first trainer go"
        return real_train(*args, **kwargs)

    monkeypatch.setattr(training, "train_problem", counted_train)
    assert post(f"{round_.url}/problems/{pid}/train", b"", ADMIN).status_code == 200
    assert held.wait(60), "the driver did not start training"
    first = driver.trainer.threads[pid]
    racer_name = "racing-advance"
    real_context = state.context

    def context_then_finish_first(problem_id, *args, **kwargs):
        # advance() has read the phase ("training"); now the first trainer publishes and leaves.
        if threading.current_thread().name == racer_name and problem_id == pid and not release.is_set():
            release.set()
            first.join(60)
            assert not first.is_alive()
        return real_context(problem_id, *args, **kwargs)

    monkeypatch.setattr(state, "context", context_then_finish_first)
    racer = threading.Thread(target=driver.advance, args=(pid,), name=racer_name)
    racer.start()
    racer.join(120)
    assert release.is_set(), "the race was not run: advance() never reached its context read"
    second = driver.trainer.threads.get(pid)
    if second is not None:
        second.join(120)
    final = wait_phase(round_.url, pid, ("done", "degraded", "failed"), timeout=60)
    assert final.phase == "done", final.message
    assert second is None, "a second training thread was started"
    assert len(calls) == 1, calls
