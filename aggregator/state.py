"""The aggregator process's state: database, keys, and per-problem caches.

One :class:`AggregatorState` per process, shared by every request (through
:mod:`aggregator.deps`) and by the phase machine (:mod:`aggregator.rounds`).
Published documents (problem, roster, bins) are immutable once written, so
they are parsed once and cached; everything that changes lives in the database.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING

from fastapi import HTTPException
from sqlalchemy.orm import Session, sessionmaker

from aggregator.db import DocumentKind, ProblemRow, count_reject, create_tables, read_documents
from aggregator.settings import AggregatorSettings
from aggregator.storage import StorageHealth
from anonml.crypto import (
    Identity,
    MemorySpentSet,
    PublicIdentity,
    TokenKey,
    TokenVerifier,
)
from anonml.crypto import load_or_create_identity as crypto_load_or_create
from anonml.database import make_engine
from anonml.errors import AnonMLError
from anonml.protocol import Bins, CosignatureBundle, Problem, Roster, Schedule, roster_beacon, route_count
from anonml.schedule import ServiceMeter, schedule_floors

if TYPE_CHECKING:  # the learner's modules (NumPy) load with a problem's first bins or plan, not at start
    from anonml.learn.binning import Binning
    from anonml.learn.partition import PartitionPlan

__all__ = [
    "AggregatorState",
    "ProblemContext",
    "MissingProblemFact",
    "Refusal",
    "load_or_create_identity",
    "INTAKE_REFUSAL",
    "MEDIAN_REFUSAL",
    "CALIBRATION_REFUSAL",
    "median_refusals",
    "calibration_refusals",
    "DROPPED_COVER",
    "DUPLICATE_COPY",
    "reject_counts",
    "cover_count",
]

log = logging.getLogger("anonml.aggregator")

#: Prefix of the refusal reasons counted by the intake (they account for lost reports).
INTAKE_REFUSAL = "intake: "

#: Counter of the cover payloads the intake opened and dropped: kept with the refusal counters
#: but neither a refusal nor a loss (:func:`reject_counts` leaves it out, :func:`cover_count`).
DROPPED_COVER = "dropped: cover"
#: Intake counter of a verified copy of a stored report (its other route): not a refusal, not a loss —
#: the account's ``duplicates`` (:func:`aggregator.training.account_reports`); kept out of the
#: refusals by reason (:func:`reject_counts`), as dropped cover is.
DUPLICATE_COPY = "duplicate token"
#: Prefix under which refused median answers are counted, so the median account can attribute
#: missing answers to them (shown without it among the problem's refusals, like intake's).
MEDIAN_REFUSAL = "median answer: "
#: Prefix under which refused calibration answers are counted (the calibration account's, as the
#: median account's are under :data:`MEDIAN_REFUSAL`).
CALIBRATION_REFUSAL = "calibration answer: "


def reject_counts(rows: list[tuple[str, int]]) -> tuple[dict[str, int], dict[str, int]]:
    """``(every refusal by reason, intake refusals by reason)`` from stored ``(reason, count)`` rows.

    Intake refusals are stored under :data:`INTAKE_REFUSAL` + reason and appear
    in the first dictionary without the prefix, merged with the same reason's
    other counts; the intake's :data:`DUPLICATE_COPY` count (a report's copy,
    not a refusal) only in the second, where the report account reads it. Refused
    median and calibration answers are in the first only: the second explains lost
    reports (a median answer refused as late once counted as a late report).
    """
    merged: dict[str, int] = {}
    intake: dict[str, int] = {}
    for reason, count in rows:
        if reason == DROPPED_COVER:
            continue
        if reason.startswith((MEDIAN_REFUSAL, CALIBRATION_REFUSAL)):  # shown; it explains no lost report
            bare = reason.removeprefix(MEDIAN_REFUSAL).removeprefix(CALIBRATION_REFUSAL)
            merged[bare] = merged.get(bare, 0) + int(count)
            continue
        bare = reason.removeprefix(INTAKE_REFUSAL)
        if reason != INTAKE_REFUSAL + DUPLICATE_COPY:  # a copy is counted, never a refusal
            merged[bare] = merged.get(bare, 0) + int(count)
        if bare != reason:
            intake[bare] = intake.get(bare, 0) + int(count)
    return merged, intake


def median_refusals(rows: list[tuple[str, int]]) -> dict[str, int]:
    """Refused median answers by reason (without :data:`MEDIAN_REFUSAL`), from stored ``(reason, count)``."""
    return _refusals_under(rows, MEDIAN_REFUSAL)


def calibration_refusals(rows: list[tuple[str, int]]) -> dict[str, int]:
    """Refused calibration answers by reason (without :data:`CALIBRATION_REFUSAL`)."""
    return _refusals_under(rows, CALIBRATION_REFUSAL)


def _refusals_under(rows: list[tuple[str, int]], prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for reason, count in rows:
        if reason.startswith(prefix):
            bare = reason.removeprefix(prefix)
            out[bare] = out.get(bare, 0) + int(count)
    return out


def cover_count(rows: list[tuple[str, int]]) -> int:
    """Cover payloads dropped at the intake, from the same stored ``(reason, count)`` rows."""
    return sum(int(count) for reason, count in rows if reason == DROPPED_COVER)


def load_or_create_identity(settings: AggregatorSettings) -> Identity:
    """The aggregator's identity from its key file, created (mode 0600) on first start."""
    return crypto_load_or_create(settings.identity_file, settings.identity_passphrase)


class MissingProblemFact(AnonMLError):
    """A step needs what its problem has not published (its row, roster, plan or bins): a step run
    out of its phase's order, or a database that lost a row. The round driver fails the problem
    with it rather than go on without the fact."""


def binning_of(problem: Problem, bins: Bins) -> Binning:
    """The published bins as a :class:`~anonml.learn.binning.Binning` (what peers use too)."""
    from anonml.learn.binning import Binning  # NumPy: not at the service's start (issue 31)

    return Binning.from_published(problem.draft.features, bins.edges)


@dataclass(frozen=True)
class ProblemContext:
    """Parsed facts about one problem, as far as they are published: frozen, so a reader holding one
    never sees it change. A fact published later gives a new context (:meth:`with_roster`,
    :meth:`with_bins`), which :meth:`AggregatorState.context` caches in place of the old."""

    problem: Problem
    token_key: TokenKey
    #: The roster as published (JSON, as stored), from registration's close on: served as it is.
    roster_text: str | None = None
    #: From the witnesses' co-signature of the roster on: the roster, its indexes and the plan.
    roster: Roster | None = None
    index: Mapping[bytes, int] = field(default_factory=lambda: MappingProxyType({}))
    by_fingerprint: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    plan: PartitionPlan | None = None
    bins: Bins | None = None

    @cached_property
    def verifier(self) -> TokenVerifier:
        """MAC checks only (:meth:`~anonml.crypto.TokenVerifier.check`), with its per-slot cache;
        spending happens in the intake's own transaction."""
        return TokenVerifier(self.token_key, MemorySpentSet())

    def require_roster(self) -> Roster:
        """The co-signed roster (from witnessing's end on), else :class:`MissingProblemFact`."""
        if self.roster is None:
            raise MissingProblemFact(f"problem {self.problem.id}: its roster is not co-signed yet")
        return self.roster

    def require_plan(self) -> PartitionPlan:
        """The partition plan, fixed with the co-signed roster, else :class:`MissingProblemFact`."""
        if self.plan is None:
            raise MissingProblemFact(f"problem {self.problem.id}: its partition plan is not fixed yet")
        return self.plan

    def require_bins(self) -> Bins:
        """The published bins (from reporting on), else :class:`MissingProblemFact`."""
        if self.bins is None:
            raise MissingProblemFact(f"problem {self.problem.id}: its bins are not published yet")
        return self.bins

    @cached_property
    def binning(self) -> Binning:
        """The published bins as a :class:`~anonml.learn.binning.Binning` (once the bins are out)."""
        return binning_of(self.problem, self.require_bins())

    def plan_for(self, roster: Roster, beacon: bytes = b"") -> PartitionPlan:
        """The plan of ``roster`` under the witnesses' ``beacon``; ValueError when the sizes do not fit
        (which the beacon never changes)."""
        from anonml.learn.settings import roster_plan  # NumPy (not scikit-learn): not at start-up

        return roster_plan(self.problem.draft, roster, beacon)

    def with_roster_text(self, roster_text: str) -> ProblemContext:
        """This context once registration closed and ``roster_text`` was published."""
        return replace(self, roster_text=roster_text)

    def with_roster(self, roster: Roster, beacon: bytes, plan: PartitionPlan | None = None) -> ProblemContext:
        """This context once the witnesses co-signed ``roster``: its plan fixed under their ``beacon``
        (:func:`roster_beacon`; ``plan``: that plan computed already by :meth:`plan_for`, e.g. before
        a write transaction), its indexes by identity key and by fingerprint."""
        keys = [bytes(e.identity) for e in roster.entries]
        return replace(
            self,
            roster=roster,
            plan=plan if plan is not None else self.plan_for(roster, beacon),
            index=MappingProxyType({key: i for i, key in enumerate(keys)}),
            by_fingerprint=MappingProxyType(
                {PublicIdentity.from_bytes(key).fingerprint.hex(): i for i, key in enumerate(keys)}
            ),
        )

    def with_bins(self, bins: Bins) -> ProblemContext:
        """This context once ``bins`` were published."""
        return replace(self, bins=bins)


class Refusal(Exception):
    """A request (or one item of a batch) refused: its problem, counted reason, HTTP status and detail.

    A batch route collects them and counts them in its own transaction
    (:meth:`AggregatorState.count_refusal`); a single request counts its one
    with :meth:`counted` and raises the HTTP error it returns.

    ``intake``: a refused report delivery, counted among the problem's intake
    refusals (:data:`INTAKE_REFUSAL`); without it under its bare reason.
    """

    def __init__(
        self, problem_id: str, reason: str, status: int, detail: str, *, intake: bool = False
    ) -> None:
        super().__init__(detail)
        self.problem_id, self.reason, self.status, self.detail = problem_id, reason, status, detail
        self.intake = intake

    def counted(self, state: AggregatorState) -> HTTPException:
        """Count it (own short transaction) and return the HTTP error a single request gets."""
        return state.refuse(self.problem_id, self.reason, self.status, self.detail, intake=self.intake)


class AggregatorState:
    """Engine, sessions, identity, admin token, caches and the answer notifier."""

    def __init__(self, settings: AggregatorSettings) -> None:
        self.settings = settings
        self.engine = make_engine(settings.db_url)
        create_tables(self.engine)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.storage = StorageHealth(settings.db_url)  # a full or read-only disk: 503, said once
        self.storage.watch(self.sessions)
        self.identity = load_or_create_identity(settings)
        self.admin_token = settings.resolved_admin_token()
        self.answers = threading.Condition()
        self._contexts: dict[str, ProblemContext] = {}
        self._meters: dict[str, ServiceMeter] = {}
        self._schedules: dict[str, Schedule] = {}  # fixed at registration's close (round_schedule)
        self._assignments_served: dict[str, float] = {}  # problem id → POSIX time of the latest
        self._lock = threading.Lock()

    def assignment_served(self, problem_id: str) -> None:
        """Note that a member's signed assignment of ``problem_id`` was served now: its host has
        begun its roster check (:class:`aggregator.medians.MedianRun` holds the first question
        for it). In this process's memory: another worker's, or one before a restart, is not seen."""
        with self._lock:
            self._assignments_served[problem_id] = time.time()

    def last_assignment_served(self, problem_id: str) -> float | None:
        """POSIX time this process last served an assignment of ``problem_id`` (None: never)."""
        with self._lock:
            return self._assignments_served.get(problem_id)

    @property
    def public_identity(self) -> bytes:
        return bytes(self.identity.public)

    # -- caches -------------------------------------------------------------------
    def require_context(self, problem_id: str, session: Session | None = None) -> ProblemContext:
        """:meth:`context`, or :class:`MissingProblemFact` when there is no such problem."""
        ctx = self.context(problem_id, session)
        if ctx is None:
            raise MissingProblemFact(f"no problem {problem_id!r}")
        return ctx

    def context(self, problem_id: str, session: Session | None = None) -> ProblemContext | None:
        """The cached context of ``problem_id`` (None if no such problem), read again from the
        database while a fact it lacks may have been published since."""
        with self._lock:
            ctx = self._contexts.get(problem_id)
        if ctx is not None and ctx.roster is not None and ctx.bins is not None:
            return ctx
        own = session is None
        s = self.sessions() if own else session
        try:
            row = s.get(ProblemRow, problem_id)  # light: the published documents are rows of their own
            if row is None:
                return None
            fresh = ctx or ProblemContext(
                Problem.model_validate_json(row.problem_json), TokenKey(row.token_secret)
            )
            # What the context lacks, in one query (the roster's text is read once per process).
            known: dict[DocumentKind, object] = {"roster": fresh.roster_text, "bins": fresh.bins}
            lacking = [kind for kind, fact in known.items() if fact is None]
            found = read_documents(s, problem_id, lacking) if lacking else {}
            if "roster" in found:
                fresh = fresh.with_roster_text(found["roster"])
            # The plan exists once the witnesses co-signed the roster (their beacon is in it).
            if fresh.roster is None and fresh.roster_text is not None and row.roster_cosignatures_json:
                bundle = CosignatureBundle.model_validate_json(row.roster_cosignatures_json)
                roster = Roster.model_validate_json(fresh.roster_text)
                fresh = fresh.with_roster(roster, roster_beacon(bundle.cosignatures))
            if "bins" in found:
                fresh = fresh.with_bins(Bins.model_validate_json(found["bins"]))
        finally:
            if own:
                s.close()
        return self._cache(problem_id, fresh)

    def _cache(self, problem_id: str, fresh: ProblemContext) -> ProblemContext:
        """Cache ``fresh`` unless the cached context already knows as much (another thread read it
        meanwhile): a context only ever gains facts, and an unchanged one keeps its caches (the
        verifier's per-slot MAC cache). Every fact is the database's, so two readers agree."""

        def known(c: ProblemContext) -> int:
            return sum(x is not None for x in (c.roster_text, c.roster, c.bins))

        with self._lock:
            current = self._contexts.get(problem_id)
            if current is not None and known(current) >= known(fresh):
                return current
            self._contexts[problem_id] = fresh
            return fresh

    def publish_roster(
        self, ctx: ProblemContext, roster: Roster, beacon: bytes, plan: PartitionPlan | None = None
    ) -> ProblemContext:
        """The context of ``ctx``'s problem once the witnesses co-signed ``roster`` (its plan under
        their ``beacon``: :meth:`ProblemContext.with_roster`), cached for every later reader."""
        return self._cache(ctx.problem.id, ctx.with_roster(roster, beacon, plan))

    def forget(self, problem_id: str) -> None:
        with self._lock:
            self._contexts.pop(problem_id, None)
            self._meters.pop(problem_id, None)
            self._schedules.pop(problem_id, None)

    # -- the round's schedule -------------------------------------------------------
    def meter(self, problem_id: str) -> ServiceMeter:
        """The problem's registration meter: busy wall time per registration (``L`` of the floors)."""
        with self._lock:
            return self._meters.setdefault(problem_id, ServiceMeter())

    def round_schedule(self, ctx: ProblemContext, n_peers: int) -> Schedule:
        """The schedule the round of ``ctx`` keeps with ``n_peers`` members; fixed on the first call.

        The proposal's schedule with each wait raised to
        :func:`anonml.schedule.schedule_floors` for the roster size, the
        routes' hops, ``k_h`` slots, the registrations' measured time per
        request (``L``) and per member while they kept coming (``M``) and
        ``peer_poll_seconds``; longer values the
        proposal asks for are kept (``scale_schedule`` off: the proposal's as
        they are). Taken when registration closes, so ``L`` measures that
        problem's registrations; an aggregator restarted later has measured
        none and takes :data:`anonml.schedule.DEFAULT_REQUEST_SECONDS`. The
        bins carry the windows (signed), so a restart never changes a
        published round.
        """
        pid, draft = ctx.problem.id, ctx.problem.draft
        with self._lock:
            if pid in self._schedules:
                return self._schedules[pid]
        schedule = draft.schedule
        if self.settings.scale_schedule:
            meter = self.meter(pid)
            floors = schedule_floors(
                max(1, n_peers),
                hops=draft.hops,
                # packets per member: each slot goes over route_count routes
                slots_per_peer=draft.kh * route_count(draft.routes, draft.hops, max(2, n_peers)),
                request_seconds=meter.seconds_per_request(),
                member_seconds=meter.flow_seconds_per_request(),
                reaction_seconds=self.settings.peer_poll_seconds,
            )
            schedule = schedule.model_copy(update=floors.raised(schedule.model_dump()))
            log.info("problem %s: round schedule for %d peers: %s", pid, n_peers, floors)
        with self._lock:
            return self._schedules.setdefault(pid, schedule)

    # -- refusals -----------------------------------------------------------------
    def refuse(
        self, problem_id: str, reason: str, status: int, detail: str, *, intake: bool = False,
        median: bool = False, calibration: bool = False,
    ) -> HTTPException:
        """Count a refusal (own short transaction) and return the HTTP error to raise.

        ``intake``: a refused report delivery, counted under :data:`INTAKE_REFUSAL`
        so the problem's report account can attribute lost reports to it;
        ``median``: a refused median answer, under :data:`MEDIAN_REFUSAL` (the median account);
        ``calibration``: a refused calibration answer, under :data:`CALIBRATION_REFUSAL`.
        """
        prefix = MEDIAN_REFUSAL if median else CALIBRATION_REFUSAL if calibration else ""
        with self.sessions() as s, s.begin():
            self.count_refusal(s, problem_id, prefix + reason, intake=intake)
        return HTTPException(status_code=status, detail=detail)

    @staticmethod
    def count_refusal(session: Session, problem_id: str, reason: str, *, intake: bool = False) -> None:
        """Count a refusal inside the caller's transaction (a batch counts all of its own in one)."""
        count_reject(session, problem_id, INTAKE_REFUSAL + reason if intake else reason)
