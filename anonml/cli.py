"""``anonml`` — the command line (Typer + Rich).

A thin shell: each command parses its options, calls the library, and prints a
Rich table on stdout (or exactly one JSON document with ``--json``, errors
included). Progress and messages go to stderr. Exit codes: 0 success, 1
expected failure (an :class:`~anonml.errors.AnonMLError`, printed as one line),
2 usage error.

Start-up is kept short (``anonml --help`` reads no library code): the library,
SQLAlchemy, NumPy and the command groups ``importer``, ``aggregator``,
``peer`` and ``bench`` are imported only when a command that needs them runs
(:class:`_LazyGroup`). Shell completion: ``anonml --install-completion``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

from anonml.cli_support import (
    ImporterParamsOption,
    complete_importer,
    err,
    error_document,
    expected_errors,
    flags_without_type,
    out,
    parse_json_option,
    print_json,
    styled,
)
from anonml.detection import DEFAULT_MIN_CONFIDENCE
from anonml.errors import AnonMLError

if TYPE_CHECKING:
    from typer._click import Command, Context  # Typer vendors Click; these are its classes

    from anonml.archive import ArchivePlan
    from anonml.store import EventStore, ImportReport

#: Command groups imported on first use: name -> (module with a Typer ``app``, one-line help).
#: The help is repeated here so ``anonml --help`` need not import the module;
#: tests/cli check that it equals the module's own.
LAZY_GROUPS: dict[str, tuple[str, str]] = {
    "importer": ("anonml.commands.importer", "Write and check importer plugins."),
    "aggregator": (
        "anonml.commands.aggregator",
        "Run an aggregator, propose problems, follow them, fetch models.",
    ),
    "peer": ("anonml.commands.peer", "Run the peer daemon; review proposals, budgets and models."),
    "bench": (
        "anonml.commands.bench",
        "Reproducible experiments: test AUC against the per-peer privacy budget ε_T.",
    ),
    "witness": ("anonml.commands.witness", "Run an independent witness that co-signs transcripts."),
    "credential": ("anonml.commands.credential", "Issue and install admission credentials."),
    "relay": ("anonml.commands.relay", "Run an always-on relay that holds no data."),
}


class _LazyGroup(TyperGroup):
    """The top-level group: lists :data:`LAZY_GROUPS` at once, imports one only to run it."""

    _loaded: dict[str, Command] = {}

    def list_commands(self, ctx: Context) -> list[str]:
        return [*super().list_commands(ctx), *LAZY_GROUPS]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name in LAZY_GROUPS:
            if cmd_name in self._loaded:
                return self._loaded[cmd_name]
            # A stand-in good enough for the help listing and completion of names.
            return TyperGroup(name=cmd_name, help=LAZY_GROUPS[cmd_name][1])
        return super().get_command(ctx, cmd_name)

    def resolve_command(
        self, ctx: Context, args: list[str]
    ) -> tuple[str | None, Command | None, list[str]]:
        if args and args[0] in LAZY_GROUPS:
            return args[0], self.load(args[0]), args[1:]
        return super().resolve_command(ctx, args)

    @classmethod
    def load(cls, name: str) -> Command:
        """The real command group ``name`` (imported once)."""
        if name not in cls._loaded:
            module = importlib.import_module(LAZY_GROUPS[name][0])
            command = typer.main.get_command(module.app)
            command.name = name
            cls._loaded[name] = command
        return cls._loaded[name]


app = typer.Typer(
    name="anonml",
    cls=_LazyGroup,
    help="Privacy-preserving machine learning on personal data.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=True,
)
flags_without_type()

datasets_app = typer.Typer(help="Make sample data to try the commands on.", no_args_is_help=True)
app.add_typer(datasets_app, name="datasets")

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="SQLAlchemy URL of the event store.",
        show_default="$ANONML_HOME/events.db",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document (errors too).")]


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("anonml")
        except PackageNotFoundError:  # run from a checkout that is not installed
            from anonml import __version__ as number
        typer.echo(f"anonml {number}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Privacy-preserving machine learning on personal data."""


def _report_dict(r: ImportReport) -> dict[str, Any]:
    return {
        "path": r.path,
        "importer": r.importer,
        "user": r.user,
        "users": r.users,
        "accepted": r.accepted,
        "inserted": r.inserted,
        "duplicate": r.duplicate,
        "rejected": r.rejected,
        "replaced": r.replaced,
        "errors": [str(e) for e in r.errors],
    }


class _ConsoleListener:
    """Tells the user on stderr what ``anonml import`` is doing (see :class:`ImportListener`).

    Remembers the file being stored (:attr:`current`) and those stored (:attr:`finished`), so an
    interrupted import can say what it rolled back and what stays.
    """

    def __init__(self) -> None:
        self.current: Path | None = None
        self.finished: list[Path] = []

    def message(self, text: str) -> None:
        err.print(text)

    def planned(self, plan: ArchivePlan) -> None:
        _print_plan(plan)

    @contextmanager
    def progress(self, path: Path) -> Iterator[Callable[[int], None]]:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TextColumn("{task.completed:,} events"),
            TimeElapsedColumn(),
            console=err,
            transient=True,
        ) as bar:
            task = bar.add_task(f"importing {path.name}", total=None)
            self.current = path
            yield lambda n: bar.update(task, completed=n)
            self.finished.append(path)
            self.current = None


@app.command("import")
def import_(
    paths: Annotated[
        list[Path], typer.Argument(help="Export files, folders or .zip archives.", show_default=False)
    ],
    importer: Annotated[
        str | None,
        typer.Option("--importer", "-i", help="Importer name.", show_default="detect per file",
                     autocompletion=complete_importer),
    ] = None,
    params: ImporterParamsOption = None,
    user: Annotated[
        str | None,
        typer.Option("--user", help="Import as this user.", show_default="as the file says, else me"),
    ] = None,
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad/--no-skip-bad", help="Import good records and report bad ones.")
    ] = False,
    min_confidence: Annotated[
        float, typer.Option("--min-confidence", min=0.0, max=1.0, help="Lowest detect confidence used.")
    ] = DEFAULT_MIN_CONFIDENCE,
    on_tie: Annotated[
        str, typer.Option("--on-tie", help="In archives: 'pick' (first by name) or 'skip' a tied file.")
    ] = "pick",
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run/--no-dry-run", help="Show which importer reads each file, import nothing."
        ),
    ] = False,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace/--no-replace",
            help="Replace earlier imports of the same file (e.g. after fixing its timezone) "
            "instead of adding to them.",
        ),
    ] = False,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Import raw exports into the event store: one transaction per file or per archive.

    A folder or a .zip (a Google Takeout, an Apple Health or Fitbit export, a
    browser profile) is walked: each inner file goes to the importer most
    confident it can read it, and skipped files are listed with the reason.
    Files are imported in the order given; if one fails, what was committed
    before it, the failure and the files not tried are all reported.
    """
    from anonml.importing import ImportOptions, check_paths, import_paths, resolve_candidates
    from anonml.store import EventStore, sqlite_file

    with expected_errors():
        options = ImportOptions(
            importer=importer, user=user, skip_bad=skip_bad, min_confidence=min_confidence,
            on_tie=on_tie, dry_run=dry_run, replace=replace,  # type: ignore[arg-type]  # checked
        )
        check_paths(paths)  # found before anything is committed
        candidates = resolve_candidates(importer, parse_json_option(params, "--params"))
        created = sqlite_file(store)  # a SQLite store this command creates, if it does not exist yet
        created = created if created is not None and not created.exists() else None
        event_store = EventStore(store)
    listener = _ConsoleListener()
    try:
        result = import_paths(paths, event_store, candidates, options, listener)
    except KeyboardInterrupt:
        _report_interrupted(event_store, created, listener)
    if created is not None and not result.reports:
        _discard_new_store(event_store, created)  # nothing committed: leave no empty events.db behind
    if result.error is not None:
        _report_partial_import(result.error, result.failed, list(result.reports),
                               list(result.not_tried), as_json)
    if as_json:
        print_json([_report_dict(r) for r in result.reports])
        return
    if not dry_run:
        _print_reports(list(result.reports))


def _print_reports(reports: list[ImportReport]) -> None:
    from rich.table import Table

    table = Table("file", "importer", "user", "accepted", "new", "duplicate", "rejected")
    for r in reports:
        table.add_row(
            r.path, r.importer, r.user, f"{r.accepted:,}", f"{r.inserted:,}",
            f"{r.duplicate:,}", f"{r.rejected:,}",
        )
    out.print(table)


def _report_partial_import(
    exc: AnonMLError, failed: Path, committed: list[ImportReport], not_tried: list[Path], as_json: bool
) -> None:
    """A file of several failed: what is in the store, what failed, what was not tried; exit 1."""
    if as_json:
        document = error_document(exc)
        document.update(
            imported=[_report_dict(r) for r in committed],
            failed=str(failed),
            not_tried=[str(p) for p in not_tried],
        )
        print_json(document)
    elif committed:
        _print_reports(committed)
    err.print(styled(("error:", "bold red"), f" {exc}"))
    if committed or not_tried:
        done = ", ".join(f"{r.path} ({r.inserted:,} new)" for r in committed) or "nothing"
        err.print(f"committed before it: {done}")
        err.print(f"failed (nothing of it stored): {failed}")
        err.print(f"not tried: {', '.join(map(str, not_tried)) or 'nothing'}")
    raise typer.Exit(code=1)


def _discard_new_store(event_store: EventStore, created: Path) -> None:
    """Remove the SQLite store this command created (and its journal files) while nothing is in it."""
    if event_store.imports():
        return  # something was committed after all: keep it
    event_store.close()
    for suffix in ("", "-journal", "-wal", "-shm"):
        created.with_name(created.name + suffix).unlink(missing_ok=True)


def _report_interrupted(
    event_store: EventStore, created: Path | None, listener: _ConsoleListener
) -> NoReturn:
    """Ctrl-C: one line saying what is stored (each file is one transaction), exit code 130."""
    if created is not None:
        _discard_new_store(event_store, created)
    event_store.close()
    doing = f"the import of {listener.current}" if listener.current else "the running import"
    done = len(listener.finished)
    err.print(styled(("interrupted:", "bold red"),
                     f" {doing} was rolled back (nothing of it stored); "
                     f"{done:,} file(s) imported before it stay stored"))
    raise typer.Exit(code=130)


def _existing_store(url: str | None) -> EventStore | None:
    """The event store at ``url`` if it exists; None for a SQLite file not created yet.

    Reading commands use this so that asking never creates ``events.db``
    (nor ``$ANONML_HOME``) as a side effect.
    """
    from anonml.store import EventStore, sqlite_file

    where = sqlite_file(url)
    if where is not None and not where.exists():
        return None
    return EventStore(url)


@app.command()
def events(
    store: StoreOption = None,
    user: Annotated[str | None, typer.Option("--user", help="Only this user's events.")] = None,
    by_import: Annotated[
        bool, typer.Option("--by-import/--by-type", help="Show what each import brought, or per type.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """What the event store holds: per source and type, counts and date range."""
    from dataclasses import asdict

    from rich.table import Table

    with expected_errors():
        event_store = _existing_store(store)
        if event_store is None:
            err.print("no event store yet: nothing imported (anonml import FILE)")
        if by_import:
            records = event_store.imports() if event_store is not None else []
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
        rows = event_store.summary(user=user) if event_store is not None else []
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
    user: Annotated[
        list[str] | None, typer.Option("--user", help="Only these users.", show_default="every user")
    ] = None,
) -> None:
    """Turn every user's events into a feature matrix for scikit-learn."""
    from rich.progress import Progress

    from anonml.featurize import build_matrix, check_inputs, write_matrix
    from anonml.plugins import PluginRef, create

    with expected_errors():
        if output.suffix.lower() not in {".csv", ".npz"}:
            raise AnonMLError(f"{output}: unknown output format {output.suffix!r}; use .csv or .npz")
        given = parse_json_option(params, "--params")
        unknown = set(given) - {"instancer", "featurizer"}
        if unknown:
            raise AnonMLError(f"--params: unknown keys {sorted(unknown)}; use instancer, featurizer")
        inst = create("instancer", PluginRef(name=instancer, params=given.get("instancer", {})))
        feat = create("featurizer", PluginRef(name=featurizer, params=given.get("featurizer", {})))
        event_store = _existing_store(store)
        if event_store is None:
            raise AnonMLError(
                "the event store does not exist yet: import something first (anonml import FILE)"
            )
        users = check_inputs(event_store, feat, user)
        with Progress(console=err, transient=True) as progress:
            task = progress.add_task("featurizing users", total=len(users))
            matrix = build_matrix(
                (event_store.dataset(u) for u in users),
                inst,
                feat,
                on_dataset=lambda _d: progress.advance(task),
            )
        if len(matrix) == 0:
            raise AnonMLError(
                f"no rows: instancer {instancer!r} made no instance from the events of "
                f"{len(users):,} user(s); check its params (--params) against 'anonml events'"
            )
        write_matrix(matrix, output)
    err.print(f"wrote {len(matrix):,} rows x {len(matrix.features)} features to {output}")


@app.command()
def plugins(as_json: JsonOption = False) -> None:
    """List installed importers, instancers and featurizers."""
    from dataclasses import asdict

    from rich.table import Table

    from anonml.plugins import available

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
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

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
    shortfall = result.explanation()
    table = Table("what", "value", title="AnonML demo" + (" — FELL SHORT" if shortfall else ""))
    for what, value in result.rows():
        table.add_row(what, value)
    out.print(table)
    if shortfall:
        err.print(styled((shortfall, "bold red")))
        raise typer.Exit(1)


@datasets_app.command("mooc")
def datasets_mooc(
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder to write the logs into.")],
    students: Annotated[
        int, typer.Option("--students", min=1, max=100_000, help="Simulated students.")
    ] = 100,
    weeks: Annotated[int, typer.Option("--weeks", min=1, max=52, help="Course length in weeks.")] = 8,
    seed: Annotated[int, typer.Option("--seed", help="Simulation seed (same seed, same bytes).")] = 0,
    as_json: JsonOption = False,
) -> None:
    """Simulated MOOC students' edX tracking logs (one per student), with their dropout weeks.

    Writes tracking.log-<username>[.gz] files and truth.csv (username, dropout
    week, events) into the folder; import them with 'anonml import FOLDER'.
    """
    from anonml.datasets.mooc import write_sample

    with expected_errors():
        sample = write_sample(output, students, weeks=weeks, seed=seed)
    if as_json:
        print_json(sample)
        return
    err.print(
        f"wrote {sample['logs']:,} edX tracking logs ({sample['events']:,} events, "
        f"{sample['dropouts']:,} students drop out) and {sample['truth']} to {output}"
    )
    err.print(f"next: anonml import {output}")


def _print_plan(plan: ArchivePlan) -> None:
    """Which importer reads each file of an archive, and what was skipped (stderr)."""
    from rich.table import Table

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
