"""The private median searches of one problem (thesis algorithm 1 over HTTP).

:class:`MedianRun` starts one thread per numeric feature. Each drives
:func:`anonml.privacy.estimate_median` (or :func:`~anonml.privacy.estimate_quantile`
per inner edge when ``bins > 2``) with a query callable that publishes a
signed :class:`~anonml.protocol.MedianQuery` for a fresh group of the median
pool and waits for that group's answers until ``median_step_seconds`` pass
or a quorum of the group answered (:func:`step_quorum`; with the default
quorum 1, everyone), whichever comes first; answers after the close are
refused. The pool is split by :func:`median_groups` exactly as
:func:`anonml.learn.simulation.private_binning` splits it, so every pool peer
is asked at most once (parallel composition with the report pool) and the
network search computes what the simulation computes. A share too small for
one step per edge leaves equal-width cuts of the declared range (no data
used); a step nobody answers ends that search at its threshold.

Each search asks its first question as soon as the median phase begins, and
that step stays open ``roster_seconds + median_step_seconds`` from the phase's
start (any later step ``median_step_seconds`` from its asking): peers answer
only once they have checked the roster and compared its fingerprint, so the
first step holds the roster check as well. A host begins that check by
fetching its members' signed assignments, so the roster wait runs from the
last assignment this process served, when that came later (a host that began
late, on a loaded machine), up to :data:`ROSTER_HOLD_LIMIT` roster waits
after the phase began (assignments are public: anyone may fetch one, and
holding the step longer is all it does). Like every step it closes as soon as
its quorum answered, so the roster wait costs time only while a member is
still missing: a host slow to check its identities (beside other work, one
took 6.5 s for 8 at load 10, several times its registration cost) answers
within it, where a question first asked after a fixed roster wait had closed
before it was ready. Both waits are the round's (:meth:`aggregator.state.AggregatorState.round_schedule`:
the proposal's, raised to floors that grow with the roster and the measured
cost of a request).

Every question is a row of ``median_queries`` (open until its step ends) and
every answer a row of ``median_answers``, and the search is a deterministic
function of the answers. So a search survives a restart: :class:`MedianRun`
started again replays it, taking each closed step's stored answers instead of
asking again, and waits on the step that was open (the same signed query,
still served to its group, for a fresh ``median_step_seconds``). No peer is
asked twice; a replay that would ask something else fails the problem.

A search stops when its process stops or loses the phase lease
(:mod:`aggregator.lease`): the open step stays open (it is not closed early
on fewer answers), so the next lease holder waits on it as after a restart.
Asking a question and closing a step are writes guarded by the lease.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select, update

from aggregator.db import MedianAnswerRow, MedianQueryRow
from aggregator.lease import LeaseLost
from aggregator.state import ProblemContext
from anonml.protocol import MedianQuery, sign_message

if TYPE_CHECKING:
    import numpy as np

__all__ = ["MedianRun", "median_groups", "step_quorum", "ROSTER_HOLD_LIMIT"]

#: The first question's roster hold ends at most this many roster waits after the median phase began,
#: however late assignments are fetched.
ROSTER_HOLD_LIMIT = 4

log = logging.getLogger("anonml.aggregator")


class _Halted(Exception):
    """This process stopped or lost the phase lease: the search ends without closing its step."""


class _NoAnswers(Exception):
    """No peer of the group answered in time; the search ends at ``threshold``."""

    def __init__(self, threshold: float) -> None:
        super().__init__(threshold)
        self.threshold = threshold


def median_groups(
    pool: Sequence[int], n_numeric: int, searches: int, steps: int, confidence: float
) -> list[list[np.ndarray]]:
    """Split the median pool: evenly over the numeric features, then over each one's questions.

    Returns ``groups[i][s]``: roster indices asked question ``s`` of the ``i``-th
    numeric feature. A feature gets :func:`~anonml.privacy.median.search_steps` steps per
    inner edge (``searches = bins - 1``; at most ``steps``, fewer where its share's groups
    would be too small for a step at ``confidence`` to move the search), i.e. ``searches ×
    that`` groups, or none if its share is too small — the split the simulation makes.
    """
    import numpy as np  # a median step's work: not at the service's start (issue 31)

    from anonml.privacy.median import search_steps

    out: list[list[np.ndarray]] = []
    if n_numeric == 0:
        return out
    for share in np.array_split(np.asarray(pool, dtype=np.int64), n_numeric):
        per_edge = search_steps(share.size, searches, steps, confidence)
        out.append(list(np.array_split(share, per_edge * searches)) if per_edge >= 1 else [])
    return out


def step_quorum(group: int, quorum: float) -> int:
    """Answers that end a step early: ``ceil(quorum · group)``, at least 1 (``MedianSettings.quorum``)."""
    return max(1, math.ceil(quorum * group - 1e-9))


class MedianRun:
    """The median searches of one problem, one thread per numeric feature."""

    def __init__(self, driver: Any, ctx: ProblemContext, since: float | None = None) -> None:
        self.driver = driver
        self.ctx = ctx
        #: POSIX time the median phase began: the first question holds the roster wait from here.
        self.since = time.time() if since is None else since
        self.thresholds: dict[int, tuple[float, ...]] = {}
        self.errors: list[str] = []
        draft = ctx.problem.draft
        plan, roster = ctx.require_plan(), ctx.require_roster()
        #: The round's schedule (the proposal's raised to the floors for this roster).
        self.schedule = driver.state.round_schedule(ctx, len(roster.entries))
        numeric = draft.numeric_features
        searches = draft.bins - 1
        groups = median_groups(
            plan.median_pool(), len(numeric), searches, draft.median.steps, draft.median.confidence
        )
        self.threads = []
        for j, parts in zip(numeric, groups or [[] for _ in numeric], strict=True):
            spec = draft.features[j]
            low, high = float(spec.low), float(spec.high)  # type: ignore[arg-type]
            if not parts:  # no data: equal-width cuts of the declared range
                self.thresholds[j] = tuple(low + (high - low) * k / draft.bins for k in range(1, draft.bins))
                continue
            thread = threading.Thread(
                target=self._search,
                args=(j, parts, low, high),
                name=f"median-{ctx.problem.id}-{j}",
                daemon=True,
            )
            self.threads.append(thread)
        for thread in self.threads:
            thread.start()

    @property
    def done(self) -> bool:
        return all(not t.is_alive() for t in self.threads)

    def _search(self, feature: int, parts: list[np.ndarray], low: float, high: float) -> None:
        from anonml.privacy.median import estimate_median, estimate_quantile

        draft = self.ctx.problem.draft
        per_edge = len(parts) // (draft.bins - 1)
        query = self._query(feature, parts)
        values = []
        try:
            for k in range(1, draft.bins):
                try:
                    if draft.bins == 2:
                        est = estimate_median(
                            query,
                            low,
                            high,
                            epsilon=draft.median_epsilon,
                            n_steps=per_edge,
                            confidence=draft.median.confidence,
                        )
                    else:
                        est = estimate_quantile(
                            query,
                            low,
                            high,
                            k / draft.bins,
                            epsilon=draft.median_epsilon,
                            n_steps=per_edge,
                            confidence=draft.median.confidence,
                            first_step=(k - 1) * per_edge,
                        )
                    values.append(float(est.value))
                except _NoAnswers as stop:
                    values.append(float(stop.threshold))
            self.thresholds[feature] = tuple(sorted(set(values)))
        except (_Halted, LeaseLost):
            self.errors.append("the aggregator stopped")
        except Exception as exc:  # reported as the problem's failure reason
            log.exception("median search of feature %s failed", feature)
            self.errors.append(f"median search of feature {feature}: {exc}")

    def _query(self, feature: int, parts: list[np.ndarray]):
        """The median search's oracle for ``feature``: ask a step's group, wait, close, read the answers."""

        def query(threshold: float, step: int) -> np.ndarray:
            members = tuple(int(i) for i in parts[step])
            if not self._ask(feature, step, float(threshold), members):  # closed before a restart
                return self._answers(feature, step, threshold)
            # The search's first question (step 0) also holds the members' roster check (module docstring).
            held = self._roster_held_until if step == 0 else None
            self._wait_for_quorum(feature, step, len(members), not_before=held)
            if self.driver.stopping:
                raise _Halted  # the step stays open for the next lease holder
            self._close_step(feature, step)
            return self._answers(feature, step, threshold)

        return query

    def _ask(self, feature: int, step: int, threshold: float, members: tuple[int, ...]) -> bool:
        """Store the signed question of a step (once); False when a resumed search finds it closed."""
        state, problem = self.driver.state, self.ctx.problem
        with state.sessions() as s:
            asked = s.get(MedianQueryRow, (problem.id, feature, step))
        if asked is not None:  # a resumed search: this step was asked before the restart
            earlier = MedianQuery.model_validate_json(asked.query_json)
            if earlier.members != members or not math.isclose(earlier.threshold, threshold):
                raise RuntimeError(
                    f"the resumed search diverged at step {step} (threshold {threshold} "
                    f"vs {earlier.threshold} asked before the restart)"
                )
            return bool(asked.open)
        if self.driver.stopping:
            raise _Halted
        signed = sign_message(
            MedianQuery(
                problem_id=problem.id,
                feature=feature,
                step=step,
                threshold=threshold,
                members=members,
                epsilon=problem.draft.median_epsilon,
                signature=bytes(64),
            ),
            state.identity,
        )
        with state.sessions() as s, s.begin():
            self.driver.lease.guard(s)
            key = {"problem_id": problem.id, "feature": feature, "step": step}
            s.add(MedianQueryRow(**key, query_json=signed.model_dump_json(), open=True))
        return True

    def _roster_held_until(self) -> float:
        """POSIX time until which the first question holds the roster check (module docstring)."""
        roster = self.schedule.roster_seconds
        start = self.since
        served = self.driver.state.last_assignment_served(self.ctx.problem.id)
        if served is not None:
            start = min(max(start, served), self.since + (ROSTER_HOLD_LIMIT - 1) * roster)
        return start + roster

    def _wait_for_quorum(
        self, feature: int, step: int, n_members: int, not_before: Callable[[], float] | None = None
    ) -> None:
        """Until the step's quorum answered, its deadline passed, or the driver stops.

        The deadline is ``median_step_seconds`` from when the step was asked, or from
        ``not_before()`` (POSIX time, read again at each look) when that is later: the first
        step's, which also holds the roster check.
        """
        state, problem = self.driver.state, self.ctx.problem
        asked = time.time()
        enough = step_quorum(n_members, problem.draft.median.quorum)
        count = (
            select(func.count())
            .select_from(MedianAnswerRow)
            .where(
                MedianAnswerRow.problem_id == problem.id,
                MedianAnswerRow.feature == feature,
                MedianAnswerRow.step == step,
            )
        )
        with state.answers:
            while not self.driver.stopping:
                with state.sessions() as s:
                    if (s.scalar(count) or 0) >= enough:
                        return
                start = asked if not_before is None else max(asked, not_before())
                remaining = start + self.schedule.median_step_seconds - time.time()
                if remaining <= 0:
                    return
                state.answers.wait(min(remaining, 0.25))

    def _close_step(self, feature: int, step: int) -> None:
        # The close is a write: an answer committed before it is counted, one after is refused.
        with self.driver.state.sessions() as s, s.begin():
            self.driver.lease.guard(s)
            s.execute(
                update(MedianQueryRow)
                .where(
                    MedianQueryRow.problem_id == self.ctx.problem.id,
                    MedianQueryRow.feature == feature,
                    MedianQueryRow.step == step,
                )
                .values(open=False)
            )

    def _answers(self, feature: int, step: int, threshold: float) -> np.ndarray:
        """The stored answers of a closed step (:class:`_NoAnswers` when there are none)."""
        pid = self.ctx.problem.id
        with self.driver.state.sessions() as s:
            bits = list(
                s.scalars(
                    select(MedianAnswerRow.bit)
                    .where(
                        MedianAnswerRow.problem_id == pid,
                        MedianAnswerRow.feature == feature,
                        MedianAnswerRow.step == step,
                    )
                    .order_by(MedianAnswerRow.id)
                )
            )
        if not bits:
            raise _NoAnswers(threshold)
        import numpy as np

        return np.asarray(bits, dtype=bool)
