"""Proposing a problem: the draft an aggregator signs (features, label, schedule, ε, witnesses,
admission, routes) and the published :class:`Problem`.

The protocol as a whole: docs/protocol.md.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal

from pydantic import (
    AwareDatetime,
    Field,
    model_validator,
)

from anonml.model import FeatureKind, FeatureSpec
from anonml.plugins import PluginRef
from anonml.protocol.messages import B64, PROTOCOL_VERSION, IdentityBytes, SignatureBytes, WireMessage

__all__ = [
    "WaitSeconds",
    "WindowSeconds",
    "Schedule",
    "MedianSettings",
    "WITNESS_URL_PATTERN",
    "WitnessRef",
    "Admission",
    "MAX_LABEL_CLASSES",
    "LABEL_RANGE_LIMIT",
    "LabelSpec",
    "DEFAULT_ROUTES",
    "route_count",
    "CentralTargetSpec",
    "ProblemDraft",
    "Problem",
]

#: A schedule's wait between two steps: up to a day, possibly none.
WaitSeconds = Annotated[float, Field(ge=0, le=86_400)]
#: A schedule's window for a step to happen in: up to a day, never empty.
WindowSeconds = Annotated[float, Field(gt=0, le=86_400)]


class Schedule(WireMessage):
    """When each phase happens. Durations are seconds; the deadline is absolute.

    ``roster_seconds`` is the peers' time to check the roster and compare its
    fingerprint: each median search's first question is asked when the median
    phase begins and stays open ``roster_seconds + median_step_seconds``, the
    roster wait counted from the last signed assignment served when that came
    later (:mod:`aggregator.medians`), and closes early, as every step, once
    its quorum answered.

    The report round's absolute times (``t_s``, ``t_s + δ``, ``t_r``) are fixed
    when the bins are published: ``t_s = publication + witness_seconds +
    report_delay_seconds`` when the problem declares witnesses (their bins
    cosignatures are collected within ``witness_seconds``), else
    ``publication + report_delay_seconds``. The roster's cosignatures are
    collected within ``roster_seconds + witness_seconds`` of its publication.
    """

    registration_deadline: AwareDatetime
    roster_seconds: WaitSeconds = 2.0
    median_step_seconds: WindowSeconds = 10.0
    report_delay_seconds: WaitSeconds = 5.0
    send_window_seconds: WindowSeconds = 5.0
    release_window_seconds: WindowSeconds = 5.0
    witness_seconds: float = Field(
        default=10.0,
        ge=0,
        le=3600,
        description="Bound on collecting the witnesses' cosignatures, after the roster and after the bins.",
    )


class MedianSettings(WireMessage):
    """The private-median search (thesis algorithm 1) that sets numeric features' bins.

    At most ``pool_fraction`` of the peers answer median queries only (one answer
    each, parallel composition with the report pool): as many as give each
    question an answer share of noise sd ``anonml.privacy.median.MEDIAN_ANSWER_SD``
    (:meth:`ProblemDraft.median_pool_size`), so a large roster keeps the rest for
    reports; ``steps`` binary-search
    steps per numeric feature (per inner edge when ``bins > 2``), each asked of
    a fresh group of that pool. ``epsilon`` is one answer's ε (at most the
    problem's ε, which is what it defaults to); ``confidence`` is the level of
    :func:`anonml.privacy.estimate_quantile`'s stopping margin (0.5 moves more
    readily, as the learning library's simulation does). A step ends as soon
    as ``ceil(quorum · group size)`` of its group answered, or when
    ``Schedule.median_step_seconds`` passed, whichever comes first.
    """

    epsilon: float | None = Field(
        default=None, gt=0, le=20, description="ε of one answer; None = the problem's ε."
    )
    pool_fraction: float = Field(default=0.2, ge=0, lt=1)
    steps: int = Field(default=6, ge=1, le=32)
    quorum: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="A step ends once this fraction of its group answered (or at median_step_seconds).",
    )
    confidence: float = Field(
        default=0.5, gt=0, lt=1, description="Confidence of each search's stopping margin."
    )


WITNESS_URL_PATTERN = r"^https?://[A-Za-z0-9.\-\[\]:]{1,200}(/[A-Za-z0-9._~\-/]{0,200})?$"


class WitnessRef(WireMessage):
    """A witness a proposal declares: its public identity and where the aggregator reaches it.

    The URL is a plain base URL (scheme, host, optional port and path; no
    query, fragment or userinfo).
    """

    identity: IdentityBytes
    url: str = Field(pattern=WITNESS_URL_PATTERN)


class Admission(WireMessage):
    """Who may register: anyone (``open``) or holders of an issuer's credential for ``scope``."""

    mode: Literal["open", "credentials"] = "open"
    issuer: IdentityBytes | None = None
    scope: str = Field(default="", max_length=200, pattern=r"^[\x21-\x7e ]*$")

    @model_validator(mode="after")
    def _check(self) -> Admission:
        if self.mode == "credentials" and (self.issuer is None or not self.scope):
            raise ValueError("admission by credentials names its issuer and a non-empty scope")
        if self.mode == "open" and (self.issuer is not None or self.scope):
            raise ValueError("open admission names no issuer and no scope")
        return self

#: Most classes (or target bins) a label may have: every report's domain is K × its cells.
MAX_LABEL_CLASSES = 16
#: A numeric label's public range must lie within ±this bound (finite, and no float-precision games).
LABEL_RANGE_LIMIT = 1e12
_CLASS_NAME = r"^[\x21-\x7e][\x20-\x7e]{0,62}[\x21-\x7e]$|^[\x21-\x7e]$"


class LabelSpec(WireMessage):
    """The label a problem learns, and so the label domain K of every report.

    * ``binary`` (the default): the instancer's label is a bit; K = 2.
    * ``classes``: K = len(``classes``) named classes (2 ≤ K ≤ :data:`MAX_LABEL_CLASSES`,
      distinct printable-ASCII names); the instancer's label is a class name or
      its index.
    * ``numeric``: a number learned as ``bins`` ordered bins (K = ``bins``) of
      equal width over the public range ``[low, high]`` (finite, within
      ±:data:`LABEL_RANGE_LIMIT`); a value outside the range is clipped into an
      end bin, so no value changes what a peer sends. The model predicts
      ``Σ_k P̂(bin k | x)·c_k`` with ``c_k`` the bin midpoints
      (:class:`anonml.learn.AnonMLRegressor`).

    Like the features' ranges, everything here is public and fixed before any
    data is seen; the peer checks it as it checks every parameter: K is
    bounded (a label spec cannot make a report's domain large enough to tell
    peers apart by a value only one of them has) and a numeric range is finite.
    """

    kind: Literal["binary", "classes", "numeric"] = "binary"
    classes: tuple[str, ...] = Field(default=(), max_length=MAX_LABEL_CLASSES)
    low: float | None = None
    high: float | None = None
    bins: int | None = Field(default=None, ge=2, le=MAX_LABEL_CLASSES)

    @model_validator(mode="after")
    def _check(self) -> LabelSpec:
        if self.kind != "classes" and self.classes:
            raise ValueError(f"a {self.kind} label names no classes")
        ranged = self.low is not None or self.high is not None or self.bins is not None
        if self.kind != "numeric" and ranged:
            raise ValueError(f"a {self.kind} label has no range and no bins")
        if self.kind == "classes":
            if not 2 <= len(self.classes) <= MAX_LABEL_CLASSES:
                raise ValueError(
                    f"a classes label names 2 to {MAX_LABEL_CLASSES} classes, got {len(self.classes)}"
                )
            for name in self.classes:
                if not re.fullmatch(_CLASS_NAME, name):
                    raise ValueError(
                        f"class name {name[:40]!r} must be 1-64 printable ASCII characters, "
                        "not starting or ending with a space"
                    )
            if len(set(self.classes)) != len(self.classes):
                raise ValueError("class names must be distinct")
        if self.kind == "numeric":
            if self.low is None or self.high is None or self.bins is None:
                raise ValueError("a numeric label needs its public range (low, high) and its bins")
            for name, value in (("low", self.low), ("high", self.high)):
                if not (math.isfinite(value) and abs(value) <= LABEL_RANGE_LIMIT):
                    raise ValueError(
                        f"the numeric label's {name} = {value} must be finite "
                        f"and within ±{LABEL_RANGE_LIMIT:g}"
                    )
            if not self.high > self.low:
                raise ValueError(f"the numeric label's range needs low < high, got [{self.low}, {self.high}]")
        return self

    @property
    def k(self) -> int:
        """K, the label domain of every report."""
        if self.kind == "classes":
            return len(self.classes)
        if self.kind == "numeric":
            return self.numeric_range()[2]
        return 2

    def numeric_range(self) -> tuple[float, float, int]:
        """``(low, high, bins)`` of a numeric label (its validator requires all three); ValueError
        for a label of another kind."""
        if self.kind != "numeric" or self.low is None or self.high is None or self.bins is None:
            raise ValueError(f"a {self.kind} label has no public range and bins")
        return self.low, self.high, int(self.bins)

    def model_classes(self) -> tuple[int | str, ...]:
        """The published model's ``classes_``: 0/1, the class names, or the bin indices 0..K−1."""
        return self.classes if self.kind == "classes" else tuple(range(self.k))

    def describe(self) -> str:
        """One line: ``"binary"``, ``"3 classes: a, b, c"``, ``"numeric in [0, 60], 4 bins"``."""
        if self.kind == "classes":
            return f"{self.k} classes: {', '.join(self.classes)}"
        if self.kind == "numeric":
            return f"numeric in [{self.low:g}, {self.high:g}], {self.bins} bins"
        return "binary"


_BINARY = LabelSpec()

#: Routes each report slot travels over by default (:attr:`ProblemDraft.routes`; the choice and its
#: anonymity cost are argued in docs/threat-model.md, "Redundant routes").
DEFAULT_ROUTES = 2


def route_count(routes: int, hops: int, members: int) -> int:
    """Routes each slot actually travels over: ``max(1, min(routes, ⌊(members − 1) / hops⌋))``.

    The ``routes`` copies of a slot go over pairwise disjoint relay sets
    (:func:`peer.reports.choose_routes`), which needs ``routes · hops`` other
    members; a roster too small for that degrades to as many disjoint routes
    as fit (at least one). A function of the signed roster's size alone, so
    every member sends the same number of packets (volume says nothing of
    role) and the aggregator's account states the same figure.
    """
    if routes < 1 or hops < 1:
        raise ValueError(f"routes ({routes}) and hops ({hops}) must be at least 1")
    return max(1, min(routes, (members - 1) // hops))


class CentralTargetSpec(WireMessage):
    """A central (ε, δ) the aggregator chose the problem's local ε for (shuffle amplification).

    The draft's ``epsilon`` stays each peer's local ε — the guarantee. The
    target is what the aggregator's view of the unlinkable reports should also
    satisfy by shuffling (FMT 2021, :mod:`anonml.privacy.amplification`) if the
    reports are unlinkable within each partition and every member is honest;
    whether the groups that reported meet it is stated in the published
    model's ``privacy.central_target``.
    """

    epsilon: float = Field(gt=0, le=20)
    delta: float = Field(gt=0, lt=1)


class ProblemDraft(WireMessage):
    """What an aggregator proposes: plugins by (name, version, params), never code.

    ``features`` names features of the featurizer (by name, with the kind the
    featurizer declares); a peer computes all of the featurizer's features
    locally and keeps these, in this order. Their declared ranges are public
    and bound the median search and the bins. The label is the instancer's,
    read as ``label`` says (:class:`LabelSpec`: binary, K named classes, or a
    numeric target in K ordered bins); every report carries it, so each
    report's domain is K × its subset's cells. Paper mode is binary only
    (thesis eq. 6.2 votes ±1).
    """

    title: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=4000)
    instancer: PluginRef
    featurizer: PluginRef
    features: tuple[FeatureSpec, ...] = Field(min_length=1, max_length=256)
    epsilon: float = Field(gt=0, le=20, description="Each peer's total ε for this problem.")
    kp: int = Field(default=1, ge=1, le=1000)
    kh: int = Field(default=1, ge=1, le=64)
    ks: int = Field(default=1, ge=1, le=8)
    subsets: tuple[tuple[int, ...], ...] | None = None
    bins: int = Field(default=2, ge=2, le=16, description="Bins per numeric feature.")
    median: MedianSettings = MedianSettings()
    schedule: Schedule
    min_peers: int = Field(default=10, ge=2, le=1_000_000)
    hops: int = Field(default=3, ge=1, le=4)
    #: Copies of each slot's packet, each over its own route (identical report bytes, one token: the
    #: intake keeps one). Left out of the wire form at the default, so a problem that does not set it
    #: signs the bytes it had before the field existed.
    routes: int = Field(
        default=DEFAULT_ROUTES,
        ge=1,
        le=4,
        exclude_if=lambda routes: routes == DEFAULT_ROUTES,
        description="Disjoint routes each report (and cover) packet travels over (redundant delivery).",
    )
    mode: Literal["default", "paper"] = "default"
    witnesses: tuple[WitnessRef, ...] = Field(default=(), max_length=16)
    admission: Admission = Admission()
    #: Left out of the wire form when binary, so a binary problem's canonical bytes (and every
    #: signature and transcript over them) are those it had before drafts named a label.
    label: LabelSpec = Field(default=_BINARY, exclude_if=lambda spec: spec == _BINARY)
    #: Left out of the wire form when unset, so a problem without a target signs the same bytes as before.
    central_target: CentralTargetSpec | None = Field(default=None, exclude_if=lambda target: target is None)
    #: Largest share of the roster set apart as the calibration pool (:meth:`calibration_pool_size`);
    #: 0 = no calibration, and then left out of the wire form, so the problem signs the bytes it had
    #: before the field existed.
    calibration_fraction: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        exclude_if=lambda fraction: fraction == 0,
        description="Largest share of the peers that calibrate the model (one answer each at ε); 0 = off.",
    )

    @model_validator(mode="after")
    def _check(self) -> ProblemDraft:
        if self.mode == "paper" and self.label.kind != "binary":
            raise ValueError(
                f"paper mode learns a binary label (eq. 6.2 votes ±1), not {self.label.describe()}"
            )
        names = [f.name for f in self.features]
        if len(set(names)) != len(names):
            raise ValueError("feature names must be distinct")
        witnesses = [bytes(w.identity) for w in self.witnesses]
        if len(set(witnesses)) != len(witnesses):
            raise ValueError("a witness is declared more than once")
        if self.median.epsilon is not None and self.median.epsilon > self.epsilon:
            raise ValueError(
                f"median.epsilon={self.median.epsilon} exceeds the problem's ε={self.epsilon}: "
                "a median-pool peer would spend more than the budget it accepted"
            )
        if self.kh * self.ks > len(self.features) and self.subsets is None:
            raise ValueError(
                f"kh·ks = {self.kh}·{self.ks} exceeds the {len(self.features)} features "
                "(one partition's subsets must not overlap)"
            )
        if self.ks > len(self.features):
            raise ValueError(f"ks={self.ks} exceeds the {len(self.features)} features")
        if self.calibration_fraction > 0 and self.label.kind != "binary" and self.label.k < 3:
            # Binary labels get the Platt map, K ≥ 3 the class map in two halves; a two-class label
            # of another kind is neither (the published model is binary but its labels are not 0/1).
            raise ValueError(
                f"the protocol calibrates binary labels and labels of 3 or more classes, not "
                f"{self.label.describe()}: set calibration_fraction to 0"
            )
        if self.subsets is not None:
            for i, subset in enumerate(self.subsets):
                if len(subset) != self.ks or any(not 0 <= f < len(self.features) for f in subset):
                    raise ValueError(f"subsets[{i}] must name {self.ks} of the features by index")
        return self

    @property
    def numeric_features(self) -> list[int]:
        return [i for i, f in enumerate(self.features) if f.kind is FeatureKind.NUMERIC]

    @property
    def report_epsilon(self) -> float:
        """ε of one report: ε / k_h, so a report peer's k_h reports compose to ε."""
        return self.epsilon / self.kh

    @property
    def median_epsilon(self) -> float:
        """ε of one median answer (``median.epsilon``, else the problem's ε)."""
        return self.median.epsilon if self.median.epsilon is not None else self.epsilon

    def median_pool_size(self, n_peers: int) -> int:
        """Peers that answer median queries: what the questions need, at most ``floor(pool_fraction · n)``.

        :func:`anonml.privacy.median.median_pool_size` with the cap ``floor(pool_fraction · n)``,
        ``numeric features × (bins − 1) × median.steps`` questions and ``median_epsilon``: the
        rule the simulated learner sizes its pool by (:mod:`anonml.learn.simulation`), so both
        agree. 0 without numeric features.
        """
        if not self.numeric_features:
            return 0
        from anonml.privacy.median import median_pool_size  # numpy: not at the service's start (issue 31)

        questions = len(self.numeric_features) * (self.bins - 1) * self.median.steps
        cap = int(math.floor(self.median.pool_fraction * n_peers))
        return median_pool_size(cap, self.median_epsilon, questions)

    def calibration_pool_size(self, n_peers: int) -> int:
        """Peers that calibrate the trained model: :func:`anonml.learn.simulation.calibration_pool_size`
        of ``calibration_fraction``, the roster's ``n_peers`` and the problem's ε (the rule the
        library's own fit sizes its pool by, with the label's K). Each sends one answer at ε — a
        binary problem's (score bin, label), a K ≥ 3 problem's (predicted class, label) or log-loss
        steps (its half, :meth:`~anonml.learn.partition.PartitionPlan.class_map_half`); 0 when
        calibration is off or the cap holds too few to carry a signal.
        """
        if self.calibration_fraction == 0:
            return 0
        from anonml.learn.simulation import calibration_pool_size  # numpy: not at the service's start

        return calibration_pool_size(self.calibration_fraction, n_peers, self.epsilon, self.label.k)

    def report_pool_size(self, n_peers: int, median_pool_size: int) -> int:
        """Peers of a roster of ``n_peers`` left for the k_p report partitions: the median pool
        (the roster's ``median_pool_size``) and the calibration pool set apart."""
        return n_peers - median_pool_size - self.calibration_pool_size(n_peers)


class Problem(WireMessage):
    """A published proposal, signed by the aggregator, with its seed commitment H(seed)."""

    v: Literal[1] = PROTOCOL_VERSION
    id: str = Field(pattern=r"^[a-z0-9-]{4,64}$")
    draft: ProblemDraft
    created_at: AwareDatetime
    seed_commitment: B64(32)
    aggregator: IdentityBytes
    round_id: int = Field(ge=0, lt=2**63)
    signature: SignatureBytes
