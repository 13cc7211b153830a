"""``anonml bench multiparty``: the multiparty private-learning baselines on one data set.

:mod:`anonml.commands.bench` mounts :func:`multiparty` on the ``bench`` Typer app::

    bench_app.command("multiparty")(multiparty)

Every list option takes comma-separated values and may be repeated
(``--eps 0.1,0.2 --eps 1``). Progress goes to stderr, the results table to
stdout; ``--json -`` prints exactly one JSON document on stdout instead.
"""

from __future__ import annotations

import enum
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from anonml.cli_support import err, expected_errors, out

if TYPE_CHECKING:  # the methods pull in scipy and scikit-learn: import them when a run starts
    from anonml.learn.multiparty.harness import ResultRow

__all__ = ["multiparty"]

DEFAULT_METHODS = "batch,indiv,public,central,pathak,xie_feature,xie_average,psgd,gop,hamm_vote,hamm_soft"


class DatasetName(enum.StrEnum):
    breast_cancer = "breast_cancer"
    adult = "adult"
    digits = "digits"


class ScaleOn(enum.StrEnum):
    public = "public"
    train = "train"


def _split(values: list[str]) -> list[str]:
    return [p.strip() for v in values for p in v.split(",") if p.strip()]


def _numbers(values: list[str], option: str, kind: type) -> list:
    try:
        parsed = [kind(p) for p in _split(values)]
    except ValueError:
        raise typer.BadParameter(
            f"expected comma-separated {kind.__name__}s, got {values}", param_hint=option
        ) from None
    if not parsed:
        raise typer.BadParameter("needs at least one value", param_hint=option)
    return parsed


def _methods(values: list[str]) -> list[str]:
    from anonml.learn.multiparty.common import MultipartyError
    from anonml.learn.multiparty.methods import method_names

    try:
        return method_names(values)
    except MultipartyError as exc:
        raise typer.BadParameter(str(exc), param_hint="--methods") from None


def _skews(values: list[str]) -> tuple[tuple[float, ...] | None, ...]:
    from anonml.learn.multiparty.common import MultipartyError
    from anonml.learn.multiparty.splits import parse_skew

    # Fractions contain commas, so --skew is split only by repetition.
    try:
        return tuple(parse_skew(v) for v in values)
    except MultipartyError as exc:
        raise typer.BadParameter(str(exc), param_hint="--skew") from None


_DatasetOption = Annotated[DatasetName, typer.Option("--dataset", help="Data set to run on.")]
_MethodsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--methods",
        help=(
            f"Comma-separated methods: {DEFAULT_METHODS},anonml, and the NON-PRIVATE reproductions "
            "of the paper's printed sigma gop_printed,psgd_printed; or 'all' (every one of them). "
            f"[default: {DEFAULT_METHODS}]"
        ),
    ),
]
_PartiesOption = Annotated[
    list[str] | None, typer.Option("--parties", help="Numbers of parties K, e.g. 5,10,15. [default: 5]")
]
_SkewOption = Annotated[
    list[str] | None,
    typer.Option(
        "--skew",
        help="'uniform' or K fractions summing to 1, e.g. 0.01,0.29,0.2,0.25,0.25; repeatable. "
        "[default: uniform]",
    ),
]
_EpsOption = Annotated[
    list[str] | None,
    typer.Option("--eps", help="Privacy budgets ε, e.g. 0.1,0.2,1. [default: 0.1,0.2,0.5,1]"),
]
_TrialsOption = Annotated[
    int, typer.Option("--trials", min=1, help="Repetitions with fresh splits and noise.")
]
_FoldsOption = Annotated[int, typer.Option("--folds", min=2, help="Train/test folds per trial (not Adult).")]
_DeltaOption = Annotated[float, typer.Option("--delta", min=0.0, max=1.0, help="δ of psgd and gop.")]
_LamOption = Annotated[float, typer.Option("--lam", min=0.0, help="λ of the ERM-based methods.")]
_HammLamOption = Annotated[float, typer.Option("--hamm-lam", min=0.0, help="λ of Hamm et al.'s ERM.")]
_PublicFractionOption = Annotated[
    float,
    typer.Option(
        "--public-fraction", min=0.0, max=0.9, help="Share of training rows held by the aggregator."
    ),
]
_NormQuantileOption = Annotated[
    float,
    typer.Option(
        "--norm-quantile",
        min=0.01,
        max=1.0,
        help="Quantile of the public rows' norms used as the norm bound.",
    ),
]
_ScaleOnOption = Annotated[
    ScaleOn,
    typer.Option(
        "--scale-on",
        help="Rows the preprocessing is fitted on: the aggregator's public share, or the whole "
        "training fold (with --public-fraction 0; read outside the privacy accounting).",
    ),
]
_PoolOption = Annotated[
    bool,
    typer.Option(
        "--pool-party-free",
        help="One row per method that ignores the parties' shares (GOP, central, batch), "
        "its runs pooled over every K and skew.",
    ),
]
_SeedOption = Annotated[int, typer.Option("--seed", help="Master seed (runs are reproducible).")]
_DataOption = Annotated[
    Path | None, typer.Option("--data", help="Adult folder (default: the copy shipped with anonml).")
]
_JsonOutOption = Annotated[
    str | None, typer.Option("--json", help="Write results JSON to this file ('-' = stdout).")
]
_PlotOption = Annotated[Path | None, typer.Option("--plot", help="Write a PNG of error vs ε.")]


def _run_with_progress(*args: Any, **options: Any) -> list[ResultRow]:
    """:func:`~anonml.learn.multiparty.harness.run_multiparty_benchmark` under a progress bar on stderr."""
    from anonml.learn.multiparty.harness import run_multiparty_benchmark

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as progress:
        task = progress.add_task("multiparty", total=None)

        def step(done: int, total: int, what: str) -> None:
            progress.update(task, completed=done, total=total, description=what)

        return run_multiparty_benchmark(*args, progress=step, **options)


def multiparty(
    dataset: _DatasetOption = DatasetName.breast_cancer,
    methods: _MethodsOption = None,
    parties: _PartiesOption = None,
    skew: _SkewOption = None,
    eps: _EpsOption = None,
    trials: _TrialsOption = 1,
    folds: _FoldsOption = 5,
    delta: _DeltaOption = 0.05,
    lam: _LamOption = 1e-2,
    hamm_lam: _HammLamOption = 1e-4,
    public_fraction: _PublicFractionOption = 0.1,
    norm_quantile: _NormQuantileOption = 0.5,
    scale_on: _ScaleOnOption = ScaleOn.public,
    pool_party_free: _PoolOption = False,
    seed: _SeedOption = 0,
    data: _DataOption = None,
    json_out: _JsonOutOption = None,
    plot: _PlotOption = None,
) -> None:
    """Compare multiparty private-learning baselines (Pathak, Hamm, Xie, Rajkumar) on one data set.

    Each row is one (method, parties K, skew, ε) over trials × folds, with the
    privacy unit its ε refers to: equal ε across different units is not a
    like-for-like comparison.
    """
    from anonml.learn.plotting import require_pyplot

    with expected_errors():
        # Typer list options default to None; the defaults live here (no mutable defaults).
        names = _methods(methods or [DEFAULT_METHODS])
        ks = _numbers(parties or ["5"], "--parties", int)
        budgets = _numbers(eps or ["0.1,0.2,0.5,1"], "--eps", float)
        skews = _skews(skew or ["uniform"])
        to_stdout = json_out == "-"
        if plot is not None:  # a missing plot extra fails now, not after the computation
            require_pyplot()
        rows = _run_with_progress(
            dataset.value,
            names,
            ks,
            skews,
            budgets,
            trials,
            folds=folds,
            delta=delta,
            lam=lam,
            hamm_lam=hamm_lam,
            public_fraction=public_fraction,
            norm_quantile=norm_quantile,
            scale_on=scale_on.value,
            pool_party_free=pool_party_free,
            seed=seed,
            data_path=data,
            json_path=None if json_out in (None, "-") else Path(json_out),
        )
        if plot is not None:
            from anonml.learn.multiparty.plot import plot_results  # noqa: PLC0415

            err.print(f"plot written to {plot_results(rows, plot)}", highlight=False)
    if to_stdout:
        sys.stdout.write(json.dumps({"rows": [r.to_dict() for r in rows]}, indent=2) + "\n")
        return
    if json_out is not None:
        err.print(f"results written to {json_out}", highlight=False)
    out.print(_table(rows, dataset.value))


def _epsilon_text(row: ResultRow) -> str:
    """ε of a private row; a printed-condition reproduction's nominal ε says it is not private."""
    if row.epsilon is not None:
        return f"{row.epsilon:g}"
    return "∞" if row.run_epsilon is None else f"{row.run_epsilon:g} (NON-PRIVATE)"


def _table(rows: list[ResultRow], dataset: str) -> Table:
    from anonml.learn.multiparty.harness import POOLED

    table = Table(title=f"multiparty baselines on {dataset} (error = 1 - accuracy, mean ± s.e.)")
    for column in ("method", "K", "skew", "ε", "δ", "unit", "error", "AUC", "× batch", "fit s"):
        table.add_column(column, justify="left" if column in ("method", "skew", "unit") else "right")
    for r in sorted(rows, key=lambda r: (r.parties, r.skew, r.method, r.epsilon or 0.0)):
        table.add_row(
            r.method,
            "all" if (r.parties, r.skew) == POOLED else str(r.parties),
            r.skew,
            _epsilon_text(r),
            f"{r.delta:g}",
            r.privacy_unit,
            f"{r.error_mean:.3f} ± {r.error_sem:.3f}",
            "—" if r.auc_mean is None else f"{r.auc_mean:.3f}",
            "—" if r.error_vs_batch is None else f"{r.error_vs_batch:.2f}",
            f"{r.fit_seconds_mean:.3f}",
        )
    table.caption = "privacy unit: what (ε, δ) protects — record, party, or none; units differ across methods"
    return table
