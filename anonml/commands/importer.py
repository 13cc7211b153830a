"""``anonml importer new|check|params``: the plugin author's commands, and an importer's params."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from anonml.cli_support import (
    ImporterParamsOption,
    JsonOption,
    complete_importer,
    err,
    expected_errors,
    out,
    parse_json_option,
    print_json,
    styled,
)

app = typer.Typer(help="Write and check importer plugins.", no_args_is_help=True)


@app.command()
def new(
    name: Annotated[str, typer.Argument(help="snake_case importer name, e.g. 'garmin'.")],
    directory: Annotated[Path, typer.Option("--dir", help="Where to create the package.")] = Path("."),
) -> None:
    """Scaffold a third-party importer package (pyproject, importer, sample, test)."""
    from anonml.importer_kit import scaffold_importer

    with expected_errors():
        root = scaffold_importer(name, directory)
    err.print(f"created {root}")
    err.print(f"next: cd {root} && pip install -e '.[dev]' && pytest")


@app.command()
def check(
    path: Annotated[Path, typer.Argument(help="An export file to try the importer on.")],
    importer: Annotated[
        str | None,
        typer.Option("--importer", "-i", help="Importer name (default: detect).",
                     autocompletion=complete_importer),
    ] = None,
    params: ImporterParamsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run an importer on a file: events, types, fields, time range, rejects, idempotence."""
    from anonml.importer_kit import check_importer
    from anonml.importing import choose_for_file, resolve_candidates

    with expected_errors():
        candidates = resolve_candidates(importer, parse_json_option(params, "--params"))
        chosen, _ = choose_for_file(path, candidates, named=bool(importer))
        report = check_importer(path, chosen)
    if as_json:
        print_json(report.as_dict())
    else:
        _print_report(report)
    if report.fatal is not None:
        raise typer.Exit(code=1)


@app.command()
def params(
    name: Annotated[str, typer.Argument(help="Importer name (see 'anonml plugins').",
                                        autocompletion=complete_importer)],
    as_json: JsonOption = False,
) -> None:
    """List an importer's params: name, type, default, bounds, description.

    Give them as --params '{"timezone": "Europe/Amsterdam"}' (the importer named
    with --importer, or the one detected), or per importer as {"NAME": {...}}.
    """
    from rich.table import Table

    from anonml.importing import importer_params

    with expected_errors():
        specs = importer_params(name)
    if as_json:
        print_json({"importer": name, "params": [spec.as_dict() for spec in specs]})
        return
    if not specs:
        out.print(f"{name} takes no params")
        return
    table = Table("param", "type", "default", "bounds", "description", title=f"params of {name}")
    for spec in specs:
        table.add_row(spec.name, spec.type, spec.default, spec.bounds, spec.description)
    out.print(table)


def _print_report(report) -> None:
    from rich.table import Table

    out.print(styled((report.path, "bold"), f" — importer {report.importer} {report.version} "
                     f"(detect confidence {report.confidence:.2f})"))
    if report.fatal:
        out.print(styled(("failed:", "red"), f" {report.fatal}"))
        return
    out.print(f"{report.events:,} events ({report.static_events:,} static); "
              f"time range {report.first or '—'} … {report.last or '—'}; {report.timezone}")
    table = Table("type", "events", "fields (kinds)")
    for typ, count in report.types.items():
        fields = ", ".join(f"{f}: {'/'.join(k)}" for f, k in report.fields.get(typ, {}).items())
        table.add_row(typ, f"{count:,}", fields)
    out.print(table)
    for reject in report.rejects:
        where = f"line {reject['line']}" if reject["line"] is not None else str(reject["record"])
        out.print(styled(("rejected", "yellow"), f" {where}: {reject['reason']}"))
    verdict = "yes" if report.idempotent else f"NO ({report.second_import_added} added again)"
    out.print(f"first import adds {report.first_import_added:,}; a second import adds nothing: {verdict}")
