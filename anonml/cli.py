"""``anonml`` — the command line (Typer + Rich).

A thin shell: each command parses its options, calls the library, and prints a
Rich table on stdout (or exactly one JSON document with ``--json``). Progress
and messages go to stderr. Exit codes: 0 success, 1 expected failure (an
:class:`~anonml.errors.AnonMLError`, printed as one line), 2 usage error.
"""

from __future__ import annotations

import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from anonml.cli_support import err, expected_errors, out, parse_json_option, print_json
from anonml.commands import aggregator as aggregator_commands
from anonml.commands import bench as bench_commands
from anonml.commands import credential as credential_commands
from anonml.commands import importer as importer_commands
from anonml.commands import peer as peer_commands
from anonml.commands import witness as witness_commands
from anonml.detection import DEFAULT_MIN_CONFIDENCE, choose_importer
from anonml.errors import AnonMLError, PluginNotFound, RecordError
from anonml.plugins import PluginRef, available, create, iter_classes
from anonml.store import EventStore

app = typer.Typer(
    name="anonml",
    help="Privacy-preserving machine learning on personal data.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
)
app.add_typer(importer_commands.app, name="importer")
app.add_typer(bench_commands.app, name="bench")
app.add_typer(aggregator_commands.app, name="aggregator")
app.add_typer(peer_commands.app, name="peer")
app.add_typer(witness_commands.app, name="witness")
app.add_typer(credential_commands.app, name="credential")

StoreOption = Annotated[
    str | None,
    typer.Option("--store", help="SQLAlchemy URL of the event store (default: $ANONML_HOME/events.db)."),
]


def _importers(per_importer: dict[str, object]) -> list:
    """One instance of every installed importer, with params given per importer name."""
    classes = {cls.name: cls for cls in iter_classes("importer")}
    unknown = sorted(set(per_importer) - set(classes))
    if unknown:
        raise PluginNotFound("importer", unknown[0], classes, detail="named in --params")
    instances = []
    for name, cls in classes.items():
        options = per_importer.get(name, {})
        if not isinstance(options, dict):
            raise AnonMLError(f"--params: the params of {name!r} must be a JSON object")
        instances.append(cls(options))
    return instances


def _is_archive(path: Path) -> bool:
    return path.is_dir() or zipfile.is_zipfile(path)


@app.command("import")
def import_(
    paths: Annotated[
        list[Path], typer.Argument(help="Export files, folders or .zip archives.", show_default=False)
    ],
    importer: Annotated[
        str | None, typer.Option("--importer", "-i", help="Importer name (default: detect per file).")
    ] = None,
    params: Annotated[
        str | None,
        typer.Option(
            "--params",
            help="JSON or @file.json: the importer's params with --importer; otherwise "
            '{"<importer>": {params}, ...} for the detected importers.',
        ),
    ] = None,
    user: Annotated[str | None, typer.Option("--user", help="Import as this user.")] = None,
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad", help="Import good records and report bad ones.")
    ] = False,
    min_confidence: Annotated[
        float, typer.Option("--min-confidence", min=0.0, max=1.0, help="Lowest detect confidence used.")
    ] = DEFAULT_MIN_CONFIDENCE,
    on_tie: Annotated[
        str, typer.Option("--on-tie", help="In archives: 'pick' (first by name) or 'skip' a tied file.")
    ] = "pick",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Archives: show which importer reads each file, import nothing.")
    ] = False,
    store: StoreOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON report.")] = False,
) -> None:
    """Import raw exports into the event store: one transaction per file or per archive.

    A folder or a .zip (a Google Takeout, an Apple Health or Fitbit export, a
    browser profile) is walked: each inner file goes to the importer most
    confident it can read it, and skipped files are listed with the reason.
    """
    from importers.archive import import_plan, walk_archive

    with expected_errors():
        if on_tie not in ("pick", "skip"):
            raise AnonMLError(f"--on-tie must be 'pick' or 'skip', not {on_tie!r}")
        event_store = EventStore(store)
        given = parse_json_option(params, "--params")
        if importer:
            candidates = [create("importer", PluginRef(name=importer, params=given))]
        else:
            candidates = _importers(given)
        reports = []
        for path in paths:
            if not path.exists():
                raise RecordError(path, None, "no such file or folder")
            if not importer and _is_archive(path):
                with walk_archive(path, candidates, min_confidence=min_confidence, on_tie=on_tie) as plan:
                    _print_plan(plan)
                    if dry_run:
                        continue
                    result = import_plan(plan, event_store, user=user, skip_bad=skip_bad)
                for failed in result.failed:
                    err.print(f"failed {failed}", highlight=False, markup=False)
                for report in result.imported:
                    for bad in report.errors:
                        err.print(f"skipped {bad}", highlight=False, markup=False)
                reports.extend(result.imported)
                continue
            if importer:
                chosen, why = candidates[0], f"{importer} (as asked)"
            else:
                detection = choose_importer(path, candidates, min_confidence)
                if detection.chosen is None:
                    raise PluginNotFound(
                        "importer",
                        f"for {path}",
                        [i.name for i in candidates],
                        detail=f"{detection.explain()}; choose one with --importer",
                    )
                chosen, why = detection.chosen, detection.explain()
            err.print(f"{path}: {why}", highlight=False)
            with Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TextColumn("{task.completed:,} events"),
                TimeElapsedColumn(),
                console=err,
                transient=True,
            ) as progress:
                task = progress.add_task(f"importing {path.name}", total=None)
                report = event_store.import_file(
                    path,
                    chosen,
                    user=user,
                    skip_bad=skip_bad,
                    on_event=lambda n, task=task: progress.update(task, completed=n),
                )
            for bad in report.errors:
                err.print(f"skipped {bad}", highlight=False, markup=False)
            reports.append(report)
        if as_json:
            print_json(
                [
                    {
                        "path": r.path,
                        "importer": r.importer,
                        "user": r.user,
                        "accepted": r.accepted,
                        "inserted": r.inserted,
                        "duplicate": r.duplicate,
                        "rejected": r.rejected,
                        "errors": [str(e) for e in r.errors],
                    }
                    for r in reports
                ]
            )
            return
        if dry_run:
            return
        table = Table("file", "importer", "user", "accepted", "new", "duplicate", "rejected")
        for r in reports:
            table.add_row(
                r.path, r.importer, r.user, f"{r.accepted:,}", f"{r.inserted:,}",
                f"{r.duplicate:,}", f"{r.rejected:,}",
            )
        out.print(table)


@app.command()
def events(
    store: StoreOption = None,
    user: Annotated[str | None, typer.Option("--user", help="Only this user's events.")] = None,
    by_import: Annotated[
        bool, typer.Option("--by-import", help="Show what each import brought instead.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """What the event store holds: per source and type, counts and date range."""
    with expected_errors():
        event_store = EventStore(store)
        if by_import:
            records = event_store.imports()
            if as_json:
                print_json([asdict(r) for r in records])
                return
            table = Table("id", "importer", "version", "file", "user", "when", "accepted", "new",
                          "duplicate", "rejected")
            for r in records:
                table.add_row(
                    str(r.id), r.importer, r.importer_version, r.path, r.user,
                    r.started_at.strftime("%Y-%m-%d %H:%M:%S"), f"{r.accepted:,}", f"{r.added:,}",
                    f"{r.duplicate:,}", f"{r.rejected:,}",
                )
            out.print(table)
            return
        rows = event_store.summary(user=user)
        if as_json:
            print_json(
                [
                    {
                        "source": r.source,
                        "type": r.type,
                        "count": r.count,
                        "first": r.first.isoformat() if r.first else None,
                        "last": r.last.isoformat() if r.last else None,
                    }
                    for r in rows
                ]
            )
            return
        table = Table("source", "type", "events", "first", "last")
        for r in rows:
            table.add_row(
                r.source, r.type, f"{r.count:,}",
                r.first.isoformat() if r.first else "—", r.last.isoformat() if r.last else "—",
            )
        out.print(table)


@app.command()
def featurize(
    instancer: Annotated[str, typer.Option("--instancer", help="Registered instancer name.")],
    featurizer: Annotated[str, typer.Option("--featurizer", help="Registered featurizer name.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="out.csv or out.npz")],
    params: Annotated[
        str | None,
        typer.Option(
            "--params",
            help='JSON {"instancer": {...}, "featurizer": {...}} or @file.json with the same.',
        ),
    ] = None,
    store: StoreOption = None,
    user: Annotated[list[str] | None, typer.Option("--user", help="Only these users.")] = None,
) -> None:
    """Turn every user's events into a feature matrix for scikit-learn."""
    from anonml.featurize import build_matrix, write_matrix

    with expected_errors():
        if output.suffix.lower() not in {".csv", ".npz"}:
            raise AnonMLError(f"{output}: unknown output format {output.suffix!r}; use .csv or .npz")
        given = parse_json_option(params, "--params")
        unknown = set(given) - {"instancer", "featurizer"}
        if unknown:
            raise AnonMLError(f"--params: unknown keys {sorted(unknown)}; use instancer, featurizer")
        inst = create("instancer", PluginRef(name=instancer, params=given.get("instancer", {})))
        feat = create("featurizer", PluginRef(name=featurizer, params=given.get("featurizer", {})))
        event_store = EventStore(store)
        users = user or event_store.users()
        with Progress(console=err, transient=True) as progress:
            task = progress.add_task("featurizing users", total=len(users))
            matrix = build_matrix(
                (event_store.dataset(u) for u in users),
                inst,
                feat,
                on_dataset=lambda _d: progress.advance(task),
            )
        write_matrix(matrix, output)
        err.print(
            f"wrote {len(matrix):,} rows x {len(matrix.features)} features to {output}",
            highlight=False,
        )


@app.command()
def plugins(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """List installed importers, instancers and featurizers."""
    infos = [info for kind in ("importer", "instancer", "featurizer") for info in available(kind)]
    if as_json:
        print_json([asdict(i) for i in infos])
        return
    table = Table("kind", "name", "version", "package", "description")
    for i in infos:
        table.add_row(i.kind, i.name, i.version, i.distribution or "", i.description)
    out.print(table)


@app.command()
def demo(
    students: Annotated[
        int, typer.Option("--students", min=40, max=100_000, help="Simulated students.")
    ] = 400,
    weeks: Annotated[int, typer.Option("--weeks", min=3, max=52, help="Course length in weeks.")] = 8,
    epsilon: Annotated[
        float, typer.Option("--epsilon", min=0.1, max=20.0, help="Each peer's total privacy budget.")
    ] = 3.0,
    seed: Annotated[int, typer.Option("--seed", help="Simulation seed.")] = 0,
) -> None:
    """The whole AnonML protocol on loopback with simulated MOOC students; no data needed.

    Students' edX logs go through the importer into per-peer stores; an
    aggregator and a peer host start on loopback; the dropout problem is
    proposed, peers register, answer private-median queries and send perturbed
    reports over 3-hop onion routes with one-time tokens; the model is trained,
    published and scored on held-out students against the non-private model.
    """
    from rich.progress import BarColumn, MofNCompleteColumn

    from anonml.demo import run_demo

    with expected_errors(), Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, transient=True,
    ) as progress:
        tasks: dict[str, int] = {}

        def report(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = progress.add_task(phase, total=total)
            progress.update(tasks[phase], completed=done, total=total)

        result = run_demo(students, weeks=weeks, seed=seed, epsilon=epsilon, progress=report)
    table = Table("what", "value", title="AnonML demo")
    for what, value in result.rows():
        table.add_row(what, value)
    out.print(table)


def _print_plan(plan) -> None:
    """Which importer reads each file of an archive, and what was skipped (stderr)."""
    table = Table("file", "importer", "confidence", "note", title=f"{plan.source}")
    for f in plan.files:
        table.add_row(f.member, f.importer.name, f"{f.confidence:.2f}", f.note)
    err.print(table)
    if plan.skipped:
        skipped = Table("skipped file", "reason", "detail")
        for s in plan.skipped:
            skipped.add_row(s.member, str(s.reason.value), s.detail)
        err.print(skipped)


def main() -> None:  # pragma: no cover - console entry
    app()
