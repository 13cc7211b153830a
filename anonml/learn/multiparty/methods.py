"""The methods the multiparty harness runs, by name, on one prepared split.

Each entry fits on a :class:`SplitContext` (the parties' private rows, the
aggregator's public rows, all in the unit ball) for one ε and returns
predictors plus the :class:`PrivacyGuarantee` the result carries.

References: ``batch`` (non-private regularised logistic regression on the
pooled rows — the best any method can hope for), ``indiv`` (the same fitted by
one party alone on its own rows, averaged over parties — what a party gets
without collaborating), ``public`` (the same fitted on the aggregator's public
labelled rows alone — what the feature method and Hamm et al.'s auxiliary set
could learn with no party at all) and ``central`` (objective perturbation on the pooled
rows, a trusted curator's central-DP result).

``gop_printed`` and ``psgd_printed`` are Rajkumar & Agarwal's methods with σ
from the condition as printed in the paper (:func:`~anonml.learn.multiparty.
rajkumar.printed_condition_sigma`): NON-PRIVATE reproductions, run at a nominal
ε, whose rows carry privacy unit "none".

Binary methods on a multiclass data set run one-vs-rest, one binary model per
class, each with ε/C and δ/C: every record enters all C models, so sequential
composition gives (ε, δ) in total. Hamm et al.'s methods are natively
multiclass (softmax ERM).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import NearestCentroid

from anonml.learn.multiparty.base import LinearMultipartyClassifier
from anonml.learn.multiparty.common import NON_PRIVATE, MultipartyError, PrivacyGuarantee, PrivacyUnit
from anonml.learn.multiparty.erm import fit_linear_erm, fit_softmax_erm
from anonml.learn.multiparty.hamm import (
    HammMajorityVote,
    HammSoftLabel,
    collect_votes,
    train_local_classifiers,
)
from anonml.learn.multiparty.objective import ObjectivePerturbationLR
from anonml.learn.multiparty.pathak import ParameterAveraging
from anonml.learn.multiparty.rajkumar import NON_PRIVATE_LABEL, GaussianObjectivePerturbation, PrivateSGD
from anonml.learn.multiparty.xie import AverageMethod, FeatureMethod
from anonml.model import FeatureSpec

__all__ = ["SplitContext", "Fitted", "Method", "METHODS", "method_names"]

Predictor = Callable[[np.ndarray], np.ndarray]


@dataclass
class SplitContext:
    """One train/test split, shared out among parties, ready for every method.

    Attributes
    ----------
    X, y, parties : the parties' private rows, labels and party ids
    X_public, y_public : the aggregator's public rows (labels used only by the
        feature method; Hamm et al. use the rows unlabeled)
    classes : all classes of the data set
    lam : λ of the ERM-based methods; hamm_lam : λ of Hamm et al.'s ERM
    delta : δ of the (ε, δ) methods
    max_indiv : number of parties ``indiv`` averages over
    local_estimator : Hamm et al.'s local classifier, cloned per party. Default
        for two classes: a weakly regularised (C=100) logistic regression
        (liblinear, the fastest on a few rows), since a party's few unit-ball
        rows would otherwise give a constant classifier; for more classes the
        nearest centroid, as accurate as multinomial logistic regression on a
        handful of rows and ten times faster
    X_raw, raw_features : the private rows before scaling and their feature
        specs with public ranges (AnonML bins raw rows itself)
    cache : ε-independent intermediate results (Hamm et al.'s votes)
    """

    X: np.ndarray
    y: np.ndarray
    parties: np.ndarray
    X_public: np.ndarray
    y_public: np.ndarray
    classes: np.ndarray
    lam: float
    hamm_lam: float
    delta: float
    max_indiv: int = 10
    local_estimator: ClassifierMixin | None = None
    X_raw: np.ndarray | None = None
    raw_features: tuple[FeatureSpec, ...] | None = None
    cache: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Fitted:
    """What one fit yields.

    Attributes
    ----------
    predictors : label predictors (``indiv`` has several; errors are averaged)
    privacy : the guarantee of the released model
    scorers : continuous scores (higher = second class), two-class data only;
        used for ROC AUC
    noise_free : the same method's model before its noise (Hamm et al.: the
        ERM minimiser on the labelled auxiliary data), as (predictor, scorer)
    """

    predictors: list[Predictor]
    privacy: PrivacyGuarantee
    scorers: list[Predictor] | None = None
    noise_free: tuple[Predictor, Predictor | None] | None = None
    #: True when the predictors take raw feature rows (AnonML bins them itself).
    raw_input: bool = False


@dataclass(frozen=True)
class Method:
    """A named method of the harness."""

    name: str
    summary: str
    fit: Callable[[SplitContext, float, np.random.Generator], Fitted]
    #: False for the non-private references, which run once per split (ε = inf).
    private: bool = True
    #: True when the method needs two classes and has no multiclass lift.
    binary_only: bool = False
    #: True when the method uses the aggregator's public rows (then public_fraction must be > 0).
    needs_public: bool = False
    #: True when the parties' shares do not enter the fit (its runs may be pooled across K).
    party_free: bool = False
    #: True for a non-private method that still runs at each ε (the printed-condition reproduction).
    nominal_epsilon: bool = False


# --- binary methods, lifted to multiclass by one-vs-rest --------------------------------

BinaryFit = Callable[
    [SplitContext, np.ndarray, np.ndarray, float, float, np.random.Generator], LinearMultipartyClassifier
]


def _one_vs_rest(binary: BinaryFit) -> Callable[[SplitContext, float, np.random.Generator], Fitted]:
    def fit(ctx: SplitContext, eps: float, rng: np.random.Generator) -> Fitted:
        if ctx.classes.size == 2:
            model = binary(ctx, ctx.y, ctx.y_public, eps, ctx.delta, rng)
            return Fitted([model.predict], model.privacy_, [model.decision_function])
        c = ctx.classes.size
        models = [
            binary(
                ctx, (ctx.y == k).astype(int), (ctx.y_public == k).astype(int), eps / c, ctx.delta / c, rng
            )
            for k in ctx.classes
        ]
        first = models[0].privacy_
        privacy = PrivacyGuarantee(
            first.unit,
            eps,
            first.delta * c,
            f"one-vs-rest over {c} classes, each with eps/{c} (sequential composition); {first.mechanism}",
        )

        def predict(X: np.ndarray) -> np.ndarray:
            scores = np.column_stack([m.decision_function(X) for m in models])
            return ctx.classes[np.argmax(scores, axis=1)]

        return Fitted([predict], privacy)

    return fit


def _seed(rng: np.random.Generator) -> np.random.Generator:
    return np.random.default_rng(rng.integers(2**63))


def _central(
    ctx: SplitContext, y: np.ndarray, y_pub: np.ndarray, eps: float, delta: float, rng: np.random.Generator
) -> LinearMultipartyClassifier:
    return ObjectivePerturbationLR(epsilon=eps, lam=ctx.lam, random_state=_seed(rng)).fit(ctx.X, y)


def _pathak(
    ctx: SplitContext, y: np.ndarray, y_pub: np.ndarray, eps: float, delta: float, rng: np.random.Generator
) -> LinearMultipartyClassifier:
    return ParameterAveraging(epsilon=eps, lam=ctx.lam, random_state=_seed(rng)).fit(ctx.X, y, ctx.parties)


def _xie_feature(
    ctx: SplitContext, y: np.ndarray, y_pub: np.ndarray, eps: float, delta: float, rng: np.random.Generator
) -> LinearMultipartyClassifier:
    return FeatureMethod(epsilon=eps, lam=ctx.lam, random_state=_seed(rng)).fit(
        ctx.X, y, ctx.parties, ctx.X_public, y_pub
    )


def _xie_average(
    ctx: SplitContext, y: np.ndarray, y_pub: np.ndarray, eps: float, delta: float, rng: np.random.Generator
) -> LinearMultipartyClassifier:
    return AverageMethod(epsilon=eps, lam=ctx.lam, random_state=_seed(rng)).fit(ctx.X, y, ctx.parties)


def _gaussian(cls: type[PrivateSGD] | type[GaussianObjectivePerturbation], condition: str) -> BinaryFit:
    """Rajkumar & Agarwal's PSGD or GOP with σ from the derived or the printed condition."""

    def fit(
        ctx: SplitContext,
        y: np.ndarray,
        y_pub: np.ndarray,
        eps: float,
        delta: float,
        rng: np.random.Generator,
    ) -> LinearMultipartyClassifier:
        model = cls(epsilon=eps, delta=delta, lam=ctx.lam, condition=condition, random_state=_seed(rng))
        return model.fit(ctx.X, y, ctx.parties)

    return fit


# --- non-private references ------------------------------------------------------------


def _erm_model(X: np.ndarray, y: np.ndarray, classes: np.ndarray, lam: float) -> tuple[Predictor, Predictor]:
    """Non-private λ-regularised logistic (softmax) regression: (predict, score)."""
    present = np.unique(y)
    if present.size == 1:
        sign = 1.0 if classes.size == 2 and present[0] == classes[1] else -1.0
        return (lambda Z: np.full(Z.shape[0], present[0])), (lambda Z: np.full(Z.shape[0], sign))
    if classes.size == 2:
        w = fit_linear_erm(X, np.where(y == classes[1], 1.0, -1.0), lam)
        return (lambda Z: classes[(Z @ w > 0).astype(int)]), (lambda Z: Z @ w)
    W = fit_softmax_erm(X, (y[:, None] == classes[None, :]).astype(float), lam)
    return (lambda Z: classes[np.argmax(Z @ W.T, axis=1)]), (lambda Z: Z @ W.T)


def _reference(pairs: list[tuple[Predictor, Predictor]], classes: np.ndarray) -> Fitted:
    scorers = [s for _, s in pairs] if classes.size == 2 else None
    return Fitted([p for p, _ in pairs], NON_PRIVATE, scorers)


def _batch(ctx: SplitContext, eps: float, rng: np.random.Generator) -> Fitted:
    return _reference([_erm_model(ctx.X, ctx.y, ctx.classes, ctx.lam)], ctx.classes)


def _public(ctx: SplitContext, eps: float, rng: np.random.Generator) -> Fitted:
    return _reference([_erm_model(ctx.X_public, ctx.y_public, ctx.classes, ctx.lam)], ctx.classes)


def _indiv(ctx: SplitContext, eps: float, rng: np.random.Generator) -> Fitted:
    ids = np.unique(ctx.parties)
    chosen = rng.choice(ids, size=min(ctx.max_indiv, ids.size), replace=False)
    pairs = [
        _erm_model(ctx.X[ctx.parties == k], ctx.y[ctx.parties == k], ctx.classes, ctx.lam) for k in chosen
    ]
    return _reference(pairs, ctx.classes)


# --- Hamm et al.: votes once per split, ERM + noise per ε ------------------------------


def _votes(ctx: SplitContext) -> np.ndarray:
    if "votes" not in ctx.cache:
        local = ctx.local_estimator
        if local is None:
            local = (
                LogisticRegression(C=100.0, solver="liblinear")
                if ctx.classes.size == 2
                else NearestCentroid()
            )
        # A party with one row per class has no within-class spread: NearestCentroid's
        # (unused) deviation estimate divides by zero and warns; its centroids are exact.
        with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*within_class_std_dev_", category=UserWarning)
            models = train_local_classifiers(ctx.X, ctx.y, ctx.parties, local)
        ctx.cache["votes"] = collect_votes(models, ctx.X_public, ctx.classes)
    return ctx.cache["votes"]


def _linear(coef: np.ndarray, classes: np.ndarray) -> tuple[Predictor, Predictor | None]:
    if coef.shape[0] == 1:
        w = coef[0]
        return (lambda Z: classes[(Z @ w > 0).astype(int)]), (lambda Z: Z @ w)
    return (lambda Z: classes[np.argmax(Z @ coef.T, axis=1)]), None


def _hamm(
    cls: type[HammMajorityVote] | type[HammSoftLabel],
) -> Callable[[SplitContext, float, np.random.Generator], Fitted]:
    def fit(ctx: SplitContext, eps: float, rng: np.random.Generator) -> Fitted:
        model = cls(epsilon=eps, lam=ctx.hamm_lam, random_state=_seed(rng)).fit(
            ctx.X_public, _votes(ctx), ctx.classes
        )
        scorers = [model.decision_function] if ctx.classes.size == 2 else None
        return Fitted([model.predict], model.privacy_, scorers, _linear(model.nonprivate_coef_, ctx.classes))

    return fit


def _anonml(ctx: SplitContext, eps: float, rng: np.random.Generator) -> Fitted:
    try:
        from anonml.learn import AnonMLClassifier
    except ImportError as exc:  # the learning package is built alongside this one
        raise MultipartyError("AnonML's classifier (anonml.learn.AnonMLClassifier) is not available") from exc
    if ctx.X_raw is None:
        raise MultipartyError("the anonml method needs the raw private rows (SplitContext.X_raw)")
    model = AnonMLClassifier(epsilon=eps, features=ctx.raw_features, random_state=_seed(rng)).fit(
        ctx.X_raw, ctx.y
    )
    privacy = PrivacyGuarantee(
        PrivacyUnit.REPORT,
        float(model.privacy_.epsilon_total),
        0.0,
        "AnonML default mode: every record is a peer sending locally private histogram reports "
        "(Cyphers 2017); the parties play no role",
    )
    return Fitted([model.predict], privacy, [lambda Z: model.predict_proba(Z)[:, 1]], raw_input=True)


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method(
            "batch",
            "non-private logistic regression on all parties' rows pooled",
            _batch,
            False,
            party_free=True,
        ),
        Method(
            "indiv", "non-private logistic regression by one party alone (mean over parties)", _indiv, False
        ),
        Method(
            "public",
            "non-private logistic regression on the aggregator's public rows alone",
            _public,
            False,
            needs_public=True,
            party_free=True,
        ),
        Method(
            "central",
            "pooled central-DP objective perturbation (Chaudhuri et al. 2011)",
            _one_vs_rest(_central),
            party_free=True,
        ),
        Method(
            "pathak", "parameter averaging + output perturbation (Pathak et al. 2010)", _one_vs_rest(_pathak)
        ),
        Method(
            "hamm_vote",
            "majority-vote ERM on auxiliary data (Hamm et al. 2016)",
            _hamm(HammMajorityVote),
            needs_public=True,
        ),
        Method(
            "hamm_soft",
            "soft-label weighted ERM on auxiliary data (Hamm et al. 2016)",
            _hamm(HammSoftLabel),
            needs_public=True,
        ),
        Method(
            "xie_feature",
            "feature method over objective-perturbed local models (Xie et al. 2017)",
            _one_vs_rest(_xie_feature),
            needs_public=True,
        ),
        Method(
            "xie_average",
            "average of objective-perturbed local models (Xie et al. 2017)",
            _one_vs_rest(_xie_average),
        ),
        Method(
            "psgd",
            "private SGD, Algorithm 1 of Rajkumar & Agarwal 2012 (Gaussian objective perturbation)",
            _one_vs_rest(_gaussian(PrivateSGD, "derived")),
        ),
        Method(
            "gop",
            "single-shot Gaussian objective perturbation (Rajkumar & Agarwal 2012)",
            _one_vs_rest(_gaussian(GaussianObjectivePerturbation, "derived")),
            party_free=True,
        ),
        Method(
            "psgd_printed",
            f"{NON_PRIVATE_LABEL}: psgd with sigma from the condition as printed (no guarantee)",
            _one_vs_rest(_gaussian(PrivateSGD, "printed")),
            False,
            nominal_epsilon=True,
        ),
        Method(
            "gop_printed",
            f"{NON_PRIVATE_LABEL}: gop with sigma from the condition as printed (no guarantee)",
            _one_vs_rest(_gaussian(GaussianObjectivePerturbation, "printed")),
            False,
            party_free=True,
            nominal_epsilon=True,
        ),
        Method("anonml", "AnonML default mode, one peer per record (local DP)", _anonml, binary_only=True),
    )
}


def method_names(text: str | list[str]) -> list[str]:
    """Method names from ``"a,b"`` or a list of such strings; ``"all"`` for every method."""
    parts = [text] if isinstance(text, str) else list(text)
    names = [p.strip() for chunk in parts for p in chunk.split(",") if p.strip()]
    if names == ["all"]:
        return list(METHODS)
    unknown = [n for n in names if n not in METHODS]
    if unknown or not names:
        raise MultipartyError(
            f"unknown method(s) {unknown or names}; choose from {', '.join(METHODS)} or 'all'"
        )
    return list(dict.fromkeys(names))
