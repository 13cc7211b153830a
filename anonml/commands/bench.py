"""``anonml bench``: reproducible experiments (DESIGN §6) with progress bars, tables and plots.

``app`` is the ``bench`` command group; the CLI mounts it with
``app.add_typer(bench.app, name="bench")``. Its ``adult`` command runs
:func:`anonml.learn.harness.run_benchmark` on Adult's fixed split: a Rich progress bar on
stderr, a results table (mean ± sd test AUC and F1 per method × ε_T) on
stdout, the rows as JSON with ``--json OUT`` (``--json -``: exactly one JSON
document on stdout instead of the table) and a plot with ``--plot OUT.png``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from anonml.cli_support import err, expected_errors, out
from anonml.errors import AnonMLError

if TYPE_CHECKING:  # the harness pulls in scikit-learn: import it when a benchmark runs
    from anonml.datasets import adult as adult_data
    from anonml.learn.harness import ResultRow

_METHODS_HELP = "default, paper, central, majority, ldp_nb, ldp_lr_pm, ldp_lr_hm, marginal_nb, marginal_tan"

__all__ = ["app", "adult", "results_table", "calibration_table"]

app = typer.Typer(
    help="Reproducible experiments: test AUC against the per-peer privacy budget ε_T.",
    no_args_is_help=True,
)


@app.callback()
def bench() -> None:
    """Reproducible experiments: test AUC against the per-peer privacy budget ε_T."""
    # A callback keeps ``adult`` a named subcommand even while it is the group's only one.


def _split(text: str, option: str) -> list[str]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise typer.BadParameter("needs at least one value", param_hint=option)
    return parts


def _epsilons(text: str) -> list[float]:
    try:
        values = [float(p) for p in _split(text, "--eps")]
    except ValueError:
        raise typer.BadParameter(
            f"expected comma-separated numbers, got {text!r}", param_hint="--eps"
        ) from None
    if any(not v > 0 for v in values):
        raise typer.BadParameter(f"every ε must be > 0, got {text!r}", param_hint="--eps")
    return values


def results_table(rows: list[ResultRow]) -> Table:
    """The Rich table of benchmark rows.

    Columns: method, plan ``k_p/k_s/k_h``, ε_T, test AUC and F1 (mean ± sd over
    trials), number of trials, mean fit seconds.
    """
    table = Table(title="AnonML on UCI Adult (test set: adult.test)")
    table.add_column("method", justify="left", min_width=7)
    table.add_column("plan", justify="center", no_wrap=True)
    for name in ("ε_T", "AUC", "F1", "n", "fit s"):
        table.add_column(name, justify="right", no_wrap=True)
    for r in rows:
        plan = "—" if r.kp is None else f"{r.kp}/{r.ks}/{r.kh}"
        eps = "—" if r.epsilon is None else f"{r.epsilon:g}"
        table.add_row(
            r.method,
            plan,
            eps,
            f"{r.auc_mean:.3f} ± {r.auc_std:.3f}",
            f"{r.f1_mean:.3f} ± {r.f1_std:.3f}",
            str(r.trials),
            f"{r.fit_seconds:.2f}",
        )
    return table


def calibration_table(rows: list[ResultRow]) -> Table:
    """Calibration and the shuffle bound per method × ε_T: Brier (and the base rate's), ECE, shuffle ε."""
    table = Table(title="Probabilities and the conditional shuffle bound")
    table.add_column("method", justify="left", min_width=7, no_wrap=True)
    for name in ("ε_T", "Brier", "base", "ECE", "shuffle ε"):
        table.add_column(name, justify="right", no_wrap=True)
    for r in rows:
        table.add_row(
            r.method,
            "—" if r.epsilon is None else f"{r.epsilon:g}",
            "—" if r.brier_mean is None else f"{r.brier_mean:.3f}",
            "—" if r.brier_base is None else f"{r.brier_base:.3f}",
            "—" if r.ece_mean is None else f"{r.ece_mean:.3f}",
            "—" if r.shuffle_epsilon is None else f"{r.shuffle_epsilon:.3g}",
        )
    return table


def _prepare(data: Path | None, plot: Path | None) -> adult_data.AdultDataset:
    """Fail before any computation: a missing plot extra, then the data set (in CLI words)."""
    from anonml.datasets import adult as adult_data
    from anonml.learn.plotting import require_pyplot

    if plot is not None:
        require_pyplot()
    try:
        return adult_data.load(data)
    except adult_data.AdultNotFound as exc:
        raise AnonMLError(exc.advice("pass the folder with --data DIR")) from None


@app.command("adult")
def adult(
    methods: Annotated[
        str, typer.Option("--methods", help=f"Comma-separated methods: {_METHODS_HELP}.")
    ] = "default,paper,central,ldp_nb",
    eps: Annotated[str, typer.Option("--eps", help="Comma-separated per-peer totals ε_T.")] = "0.5,1,2,4",
    trials: Annotated[int, typer.Option("--trials", min=1, help="Simulations per method and ε_T.")] = 20,
    kp: Annotated[
        int | None, typer.Option("--kp", min=1, help="Peer partitions k_p (overrides the plans).")
    ] = None,
    ks: Annotated[int | None, typer.Option("--ks", min=1, help="Features per subset k_s.")] = None,
    kh: Annotated[int | None, typer.Option("--kh", min=1, help="Subsets per partition k_h.")] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the rows as JSON to OUT ('-' for stdout).")
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Save an AUC-vs-ε plot (needs matplotlib).")
    ] = None,
    data: Annotated[
        Path | None,
        typer.Option(
            "--data",
            help="Folder with adult.data and adult.test, plain or .gz (else $ANONML_ADULT_DIR, "
            "then the copy shipped with anonml).",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of every simulated trial.")] = 0,
) -> None:
    """Test AUC and F1 of AnonML's default and paper modes on UCI Adult, with non-private ceilings.

    ε_T is every peer's total privacy loss under sequential composition (median
    queries are answered by a separate peer pool, each peer once with ε_T).
    """
    from anonml.learn.harness import (
        count_trials,
        expand_methods,
        plot_results,
        run_benchmark,
        write_results,
    )

    names = _split(methods, "--methods")
    epsilons = _epsilons(eps)
    try:
        plans = expand_methods(names, kp=kp, ks=ks, kh=kh)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--methods") from None
    with expected_errors():
        dataset = _prepare(data, plot)
        columns = (
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=err, transient=False) as progress:
            task = progress.add_task("adult", total=count_trials(plans, len(epsilons), trials))

            def tick(description: str) -> None:
                progress.update(task, advance=1, description=description)

            rows = run_benchmark(
                dataset,
                methods=names,
                epsilons=epsilons,
                trials=trials,
                kp=kp,
                ks=ks,
                kh=kh,
                seed=seed,
                on_trial=tick,
            )
        if json_out is not None and str(json_out) == "-":
            typer.echo(json.dumps([r.model_dump() for r in rows], indent=2))
        else:
            out.print(results_table(rows))
            out.print(calibration_table(rows))
            if json_out is not None:
                err.print(f"wrote {write_results(rows, json_out)}")
        if plot is not None:
            err.print(f"wrote {plot_results(rows, plot)}")


def _mount_multiparty() -> None:
    from anonml.commands.bench_multiparty import multiparty

    app.command("multiparty")(multiparty)


_mount_multiparty()
