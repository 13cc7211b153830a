"""The multiparty benchmark: every method on the same splits, parties and ε.

For each trial and each train/test split (stratified K-fold for the bundled
data sets, the fixed UCI split for Adult), a stratified ``public_fraction`` of
the training rows becomes the aggregator's public/auxiliary set, the
preprocessing is fitted on it alone (``scale_on="public"``) or on the whole
training fold (``scale_on="train"``, needed when ``public_fraction`` is 0 and
the parties hold every training row: the scaling then reads private rows
outside the privacy accounting), and the
remaining rows are shared out among K parties (evenly or by the given
fractions). Every method then fits
for every ε and is scored by its test error (1 - accuracy). The ε-independent
work (Hamm et al.'s local models and votes) is done once per split.

Rows aggregate the runs of one (method, K, skew, ε) and carry the method's
privacy unit and (ε, δ): equal ε across different units is not a
like-for-like comparison; ``run_epsilon`` is the ε a method was run at, which
for the printed-condition reproductions (``privacy_unit`` "none") is a nominal
value with no guarantee behind it. With ``pool_party_free`` the runs of a method
that ignores the parties' shares (``gop``, ``central``, ``batch``...) over every
(K, skew) are one row (``parties`` 0, ``skew`` "pooled"). ``error_vs_batch`` and
``time_vs_batch`` are ratios against the non-private pooled reference measured
in the same run.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold

from anonml.learn.multiparty.common import MultipartyError, PrivacyGuarantee
from anonml.learn.multiparty.data import Preprocessor, RawDataset, load_dataset, public_ranges
from anonml.learn.multiparty.methods import METHODS, Fitted, SplitContext
from anonml.learn.multiparty.splits import assign_parties, split_public
from anonml.randomness import generator_from

__all__ = ["ResultRow", "BenchmarkConfig", "run_multiparty_benchmark", "write_results"]

#: Called after each fit with (done, total, description).
ProgressCallback = Callable[[int, int, str], None]


@dataclass(frozen=True)
class BenchmarkConfig:
    """Everything that fixes a run, recorded in the JSON."""

    dataset: str
    methods: tuple[str, ...]
    parties: tuple[int, ...]
    skews: tuple[tuple[float, ...] | None, ...]
    eps: tuple[float, ...]
    trials: int
    folds: int
    delta: float
    lam: float
    hamm_lam: float
    public_fraction: float
    norm_quantile: float | None
    seed: int | None
    max_indiv: int
    scale_on: str = "public"
    pool_party_free: bool = False


@dataclass
class ResultRow:
    """Test error (and, for two classes, ROC AUC) of one (method, K, skew, ε) over all runs.

    ``noise_free_*`` is the method's own model before its noise (Hamm et al.
    only), so the cost of privacy can be read apart from the cost of the
    ensemble labels. ``error_sem`` and ``auc_sem`` are standard errors over the
    ``n_splits`` train/test splits (runs on one split averaged first).
    """

    dataset: str
    method: str
    parties: int
    skew: str
    epsilon: float | None
    run_epsilon: float | None
    delta: float
    privacy_unit: str
    mechanism: str
    error_mean: float
    error_std: float
    error_sem: float
    n_runs: int
    n_splits: int
    fit_seconds_mean: float
    auc_mean: float | None = None
    auc_sem: float | None = None
    noise_free_error_mean: float | None = None
    noise_free_auc_mean: float | None = None
    error_vs_batch: float | None = None
    time_vs_batch: float | None = None
    errors: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _skew_label(skew: tuple[float, ...] | None) -> str:
    return "uniform" if skew is None else "[" + ",".join(f"{f:g}" for f in skew) + "]"


def _splits(
    data: RawDataset, folds: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    if data.X_test is not None and data.y_test is not None:
        return [(data.X, data.y, data.X_test, data.y_test)]
    if folds < 2:
        raise MultipartyError(f"{data.name} has no fixed test split: folds must be >= 2, got {folds}")
    kfold = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    return [(data.X[tr], data.y[tr], data.X[te], data.y[te]) for tr, te in kfold.split(data.X, data.y)]


def _combos(
    parties: Sequence[int], skews: Sequence[tuple[float, ...] | None]
) -> list[tuple[int, tuple[float, ...] | None]]:
    combos = [(k, s) for k in parties for s in skews if s is None or len(s) == k]
    for s in skews:
        if s is not None and len(s) not in parties:
            raise MultipartyError(f"skew {_skew_label(s)} has {len(s)} fractions but no --parties {len(s)}")
    if not combos:
        raise MultipartyError("no (parties, skew) combination to run")
    return combos


#: A party-share skew: K fractions summing to 1, or None for even shares.
_Skew = tuple[float, ...] | None
#: A split's test rows: raw (AnonML bins them itself), scaled into the unit ball, and the labels.
_TestData = tuple[np.ndarray, np.ndarray, np.ndarray]


#: Where the preprocessing is fitted: the public rows, or the whole training fold.
SCALE_ON = ("public", "train")
#: ``parties`` and ``skew`` of a row pooled over every (K, skew).
POOLED = (0, "pooled")


def _check_request(
    methods: Sequence[str], trials: int, eps: Sequence[float], public_fraction: float, scale_on: str
) -> None:
    """Known methods, at least one trial, every ε positive and finite, public rows where
    they are needed (else a MultipartyError)."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise MultipartyError(
            f"unknown method(s) {unknown or list(methods)}; choose from {', '.join(METHODS)}"
        )
    if trials < 1:
        raise MultipartyError(f"trials must be >= 1, got {trials}")
    if any(not (e > 0 and math.isfinite(e)) for e in eps) or not eps:
        raise MultipartyError(f"every eps must be positive and finite, got {list(eps)}")
    if scale_on not in SCALE_ON:
        raise MultipartyError(f"scale_on must be one of {', '.join(SCALE_ON)}, got {scale_on!r}")
    if public_fraction == 0:
        needing = [m for m in methods if METHODS[m].needs_public]
        if needing:
            raise MultipartyError(
                f"{', '.join(needing)} need the aggregator's public rows: public_fraction must be > 0"
            )
        if scale_on == "public":
            raise MultipartyError(
                "public_fraction 0 leaves no public rows to fit the scaling on: use scale_on='train'"
            )


def _check_classes(methods: Sequence[str], raw: RawDataset) -> None:
    """Two-class-only methods need two-class data."""
    binary_only = [m for m in methods if METHODS[m].binary_only]
    if binary_only and raw.classes.size != 2:
        raise MultipartyError(
            f"{', '.join(binary_only)} applies to two-class data only; "
            f"{raw.name} has {raw.classes.size} classes"
        )


def _contexts(
    raw: RawDataset,
    config: BenchmarkConfig,
    combos: list[tuple[int, _Skew]],
    master: np.random.Generator,
) -> Iterator[
    tuple[
        int,
        int,
        tuple[float, ...] | None,
        SplitContext,
        tuple[np.ndarray, np.ndarray, np.ndarray],
        np.random.Generator,
    ]
]:
    """Every (trial, split, K, skew): its :class:`SplitContext`, test data and generator.

    Yields ``(split number, K, skew, context, (X_test raw, X_test scaled, y_test), rng)``. Per trial a
    seed from ``master`` fixes the splits; per split a generator from ``master`` draws the
    public set, then per (K, skew) the party shares — after the methods fitted on the
    previous (K, skew) drew from the same generator, so the order of draws is the run's.
    """
    split = 0
    for _trial in range(config.trials):
        trial_seed = int(master.integers(2**31))
        for X_train, y_train, X_test, y_test in _splits(raw, config.folds, trial_seed):
            split += 1
            rng = np.random.default_rng(master.integers(2**63))
            public, private = split_public(y_train, config.public_fraction, rng)
            scaling_rows = X_train[public] if config.scale_on == "public" else X_train
            prep = Preprocessor(raw.features, config.norm_quantile).fit(scaling_rows)
            X_priv, X_te = prep.transform(X_train[private]), prep.transform(X_test)
            X_pub = prep.transform(X_train[public]) if public.size else np.empty((0, X_priv.shape[1]))
            for k, s in combos:
                ctx = SplitContext(
                    X=X_priv,
                    y=y_train[private],
                    parties=assign_parties(private.size, k, s, rng),
                    X_public=X_pub,
                    y_public=y_train[public],
                    classes=raw.classes,
                    lam=config.lam,
                    hamm_lam=config.hamm_lam,
                    delta=config.delta,
                    max_indiv=config.max_indiv,
                    X_raw=X_train[private],
                    raw_features=raw.features or public_ranges(scaling_rows),
                )
                yield split, k, s, ctx, (X_test, X_te, y_test), rng


def _fit_methods(
    ctx: SplitContext,
    methods: Sequence[str],
    budgets: dict[str, tuple[float, ...]],
    test: _TestData,
    rng: np.random.Generator,
) -> Iterator[tuple[str, float, _Run]]:
    """Fit every method at each of its budgets on ``ctx`` and score it on ``test``, timing the fit."""
    X_test, X_te, y_test = test
    for name in methods:
        for e in budgets[name]:
            start = time.perf_counter()
            fitted = METHODS[name].fit(ctx, e, rng)
            seconds = time.perf_counter() - start
            yield name, e, _score(fitted, X_test if fitted.raw_input else X_te, y_test, ctx.classes, seconds)


def _collect_runs(
    raw: RawDataset,
    config: BenchmarkConfig,
    combos: list[tuple[int, tuple[float, ...] | None]],
    budgets: dict[str, tuple[float, ...]],
    progress: ProgressCallback | None,
) -> dict[tuple[str, int, str, float], list[_Run]]:
    """Every method's runs on every split, keyed by (method, K, skew, ε) — or pooled over K and skew."""
    methods = config.methods
    n_splits = 1 if raw.X_test is not None else config.folds
    total = config.trials * n_splits * len(combos) * sum(len(budgets[m]) for m in methods)
    runs: dict[tuple[str, int, str, float], list[_Run]] = {}
    seeds = generator_from(config.seed, name="seed")
    for split, k, s, ctx, test, rng in _contexts(raw, config, combos, seeds):
        for name, e, run in _fit_methods(ctx, methods, budgets, test, rng):
            pooled = config.pool_party_free and METHODS[name].party_free
            key = (name, *POOLED, e) if pooled else (name, k, _skew_label(s), e)
            runs.setdefault(key, []).append(replace(run, split=split))
            if progress is not None:
                progress(sum(map(len, runs.values())), total, f"{name} K={k} {_skew_label(s)} eps={e:g}")
    return runs


def run_multiparty_benchmark(
    dataset: str,
    methods: Sequence[str],
    parties: Sequence[int],
    skew: Sequence[tuple[float, ...] | None] = (None,),
    eps: Sequence[float] = (0.1, 1.0),
    trials: int = 1,
    *,
    folds: int = 5,
    delta: float = 0.05,
    lam: float = 1e-2,
    hamm_lam: float = 1e-4,
    public_fraction: float = 0.1,
    norm_quantile: float | None = 0.5,
    max_indiv: int = 10,
    scale_on: str = "public",
    pool_party_free: bool = False,
    seed: int | None = 0,
    data_path: str | Path | None = None,
    data: RawDataset | None = None,
    json_path: str | Path | None = None,
    progress: ProgressCallback | None = None,
) -> list[ResultRow]:
    """Run every method on the same splits and return one row per (method, K, skew, ε).

    Parameters
    ----------
    dataset : {"breast_cancer", "adult", "digits"}
    methods : names from :data:`~anonml.learn.multiparty.methods.METHODS`
    parties : numbers of parties K to try
    skew : per entry ``None`` (even shares) or K fractions summing to 1
    eps : privacy budgets ε
    trials : repetitions with fresh splits, shares and noise
    folds : K-fold splits per trial (ignored for Adult's fixed split)
    delta : δ of the (ε, δ) methods (``psgd``, ``gop``)
    lam : λ of the ERM-based methods; hamm_lam : λ of Hamm et al.'s ERM
    public_fraction : share of training rows that is the aggregator's public set (0: the
        parties hold every training row; needs ``scale_on="train"``)
    norm_quantile : public rows' norm quantile taken as the bound (``None``: Adult's); :class:`Preprocessor`
    max_indiv : parties averaged by ``indiv``
    scale_on : {"public", "train"}, rows the preprocessing is fitted on (see the module docstring)
    pool_party_free : one row per method that ignores the parties' shares, over every (K, skew)
    seed : master seed (``None``: OS CSPRNG, not reproducible)
    data_path : Adult's folder (default ``../shared/datasets/adult``)
    data : a :class:`RawDataset` to use instead of loading ``dataset`` (tests)
    json_path : where to write the results (see :func:`write_results`)
    progress : callback after each fit

    Returns
    -------
    list of ResultRow
    """
    _check_request(methods, trials, eps, public_fraction, scale_on)
    config = BenchmarkConfig(
        dataset, tuple(methods), tuple(parties), tuple(skew), tuple(eps), trials, folds, delta, lam,
        hamm_lam, public_fraction, norm_quantile, seed, max_indiv, scale_on, pool_party_free,
    )  # fmt: skip
    raw = data if data is not None else load_dataset(dataset, data_path)
    _check_classes(methods, raw)
    combos = _combos(parties, skew)
    budgets = {
        name: tuple(eps) if METHODS[name].private or METHODS[name].nominal_epsilon else (math.inf,)
        for name in methods
    }
    rows = _aggregate(dataset, _collect_runs(raw, config, combos, budgets, progress))
    if json_path is not None:
        write_results(rows, config, json_path)
    return rows


@dataclass(frozen=True)
class _Run:
    error: float
    auc: float | None
    noise_free_error: float | None
    noise_free_auc: float | None
    seconds: float
    privacy: PrivacyGuarantee
    #: Which train/test split the run was on (runs pooled over K share their split).
    split: int = 0


def _auc(
    scorers: Sequence[Callable[[np.ndarray], np.ndarray]], X: np.ndarray, y: np.ndarray, classes: np.ndarray
) -> float:
    positive = y == classes[1]
    return float(np.mean([roc_auc_score(positive, s(X)) for s in scorers]))


def _score(fitted: Fitted, X: np.ndarray, y: np.ndarray, classes: np.ndarray, seconds: float) -> _Run:
    error = float(np.mean([np.mean(p(X) != y) for p in fitted.predictors]))
    binary = classes.size == 2 and np.unique(y).size == 2
    auc = _auc(fitted.scorers, X, y, classes) if binary and fitted.scorers else None
    nf_error = nf_auc = None
    if fitted.noise_free is not None:
        predict, scorer = fitted.noise_free
        nf_error = float(np.mean(predict(X) != y))
        nf_auc = _auc([scorer], X, y, classes) if binary and scorer is not None else None
    return _Run(error, auc, nf_error, nf_auc, seconds, fitted.privacy)


def _mean_sem(values: Sequence[float | None], splits: Sequence[int]) -> tuple[float | None, float | None]:
    """Mean, and its standard error over splits.

    Runs on the same split (a method pooled over K) are not independent, so the
    standard error is that of the per-split means: sd(split means)/√(#splits).
    With one run per split this is the ordinary sd/√n.
    """
    pairs = [(v, g) for v, g in zip(values, splits, strict=True) if v is not None]
    if not pairs:
        return None, None
    present = np.array([v for v, _ in pairs], dtype=np.float64)
    groups = np.array([g for _, g in pairs])
    means = np.array([present[groups == g].mean() for g in np.unique(groups)])
    sem = float(means.std(ddof=1) / math.sqrt(means.size)) if means.size > 1 else 0.0
    return float(present.mean()), sem


def _aggregate(dataset: str, runs: dict[tuple[str, int, str, float], list[_Run]]) -> list[ResultRow]:
    rows: list[ResultRow] = []
    for (name, k, skew, e), values in runs.items():
        errors = np.array([v.error for v in values])
        splits = [v.split for v in values]
        privacy = values[0].privacy
        std = float(errors.std(ddof=1)) if errors.size > 1 else 0.0
        error_sem = _mean_sem(list(errors), splits)[1]
        auc, auc_sem = _mean_sem([v.auc for v in values], splits)
        rows.append(
            ResultRow(
                dataset=dataset,
                method=name,
                parties=k,
                skew=skew,
                epsilon=privacy.epsilon if privacy.is_private else None,
                run_epsilon=e if math.isfinite(e) else None,
                delta=privacy.delta,
                privacy_unit=privacy.unit.value,
                mechanism=privacy.mechanism,
                error_mean=float(errors.mean()),
                error_std=std,
                error_sem=error_sem or 0.0,
                n_runs=int(errors.size),
                n_splits=len(set(splits)),
                fit_seconds_mean=float(np.mean([v.seconds for v in values])),
                auc_mean=auc,
                auc_sem=auc_sem,
                noise_free_error_mean=_mean_sem([v.noise_free_error for v in values], splits)[0],
                noise_free_auc_mean=_mean_sem([v.noise_free_auc for v in values], splits)[0],
                errors=[float(x) for x in errors],
            )
        )
    batch = {(r.parties, r.skew): r for r in rows if r.method == "batch"}
    for r in rows:
        # batch ignores the shares: any of its rows is the reference of a pooled row
        ref = batch.get((r.parties, r.skew)) or (next(iter(batch.values())) if batch else None)
        if ref is not None:
            r.error_vs_batch = r.error_mean / ref.error_mean if ref.error_mean > 0 else None
            r.time_vs_batch = r.fit_seconds_mean / ref.fit_seconds_mean if ref.fit_seconds_mean > 0 else None
    return rows


def write_results(rows: Sequence[ResultRow], config: BenchmarkConfig, path: str | Path) -> Path:
    """Write ``{"benchmark", "created", "config", "rows"}`` as JSON (parents created)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "benchmark": "multiparty",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": {**asdict(config), "skews": [_skew_label(s) for s in config.skews]},
        "note": "error = 1 - test accuracy; privacy_unit says what (epsilon, delta) protects: "
        "equal epsilon across different units is not a like-for-like comparison",
        "rows": [r.to_dict() for r in rows],
    }
    target.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return target
