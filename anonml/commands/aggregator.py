"""``anonml aggregator serve|propose|close|status|train|model|evaluate``: run and drive an aggregator.

``serve`` runs the FastAPI service in the foreground; the other commands talk
to a running aggregator over HTTP (``--url``, default ``$ANONML_AGGREGATOR_URL``
or ``http://127.0.0.1:8470``). Admin commands send the bearer token from
``--token``, ``$ANONML_AGGREGATOR_ADMIN_TOKEN``, or the token file ``serve``
writes beside its identity.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from anonml.cli_support import (
    CaBundleOption,
    JsonOption,
    TlsCertOption,
    TlsKeyOption,
    ensure_port_free,
    err,
    expected_errors,
    out,
    print_json,
    untrusted,
    valid_settings,
)
from anonml.errors import AnonMLError
from anonml.phases import ProblemPhase

if TYPE_CHECKING:
    from peer.client import AggregatorClient

# pydantic, the API client, Rich tables and anonml.protocol (with the crypto it loads) are imported inside
# the commands that use them: `anonml aggregator --help` must not pay for them.

app = typer.Typer(
    help="Run an aggregator, propose problems, follow them, fetch models.", no_args_is_help=True
)

DEFAULT_URL = "http://127.0.0.1:8470"

UrlOption = Annotated[
    str | None, typer.Option("--url", help="Aggregator base URL (default $ANONML_AGGREGATOR_URL or :8470).")
]
TokenOption = Annotated[
    str | None, typer.Option("--token", help="Admin token (default $ANONML_AGGREGATOR_ADMIN_TOKEN or file).")
]
ProblemIdArgument = Annotated[str, typer.Argument(help="Problem id.")]


def _url(url: str | None) -> str:
    return (url or os.environ.get("ANONML_AGGREGATOR_URL") or DEFAULT_URL).rstrip("/")


def _token(token: str | None) -> str:
    if token:
        return token
    if os.environ.get("ANONML_AGGREGATOR_ADMIN_TOKEN"):
        return os.environ["ANONML_AGGREGATOR_ADMIN_TOKEN"]
    from aggregator.settings import AggregatorSettings

    path = AggregatorSettings.from_env().identity_file.with_name("admin-token")
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    raise AnonMLError(
        f"no admin token: pass --token, set ANONML_AGGREGATOR_ADMIN_TOKEN, or run serve once ({path})"
    )


def _client(url: str | None, token: str | None = None, *, admin: bool = False) -> AggregatorClient:
    """The aggregator's API client (:class:`peer.client.AggregatorClient`) at ``--url``; with ``admin``,
    holding the admin token (``--token``, the environment or the token file)."""
    from peer.client import AggregatorClient

    return AggregatorClient(_url(url), _token(token) if admin else None)


@app.command()
def serve(
    db: Annotated[
        str | None,
        typer.Option(
            "--db", help="SQLAlchemy URL of its state.", show_default="$ANONML_HOME/aggregator/aggregator.db"
        ),
    ] = None,
    host: Annotated[
        str | None, typer.Option("--host", help="Interface to listen on.", show_default="127.0.0.1")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", help="Port to listen on.", show_default="8470 or $ANONML_AGGREGATOR_PORT"),
    ] = None,
    identity: Annotated[
        Path | None,
        typer.Option(
            "--identity", help="Identity key file.", show_default="$ANONML_HOME/aggregator/identity.json"
        ),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            min=1,
            max=64,
            help="Worker processes sharing the port and the database (more than 1 needs PostgreSQL); "
            "one at a time advances phases.",
        ),
    ] = 1,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    ca_bundle: CaBundleOption = None,
) -> None:
    """Run the aggregator service in the foreground (Ctrl-C stops it); https with --tls-cert/--tls-key."""
    from aggregator.app import check_workers
    from aggregator.app import serve as run
    from aggregator.settings import AggregatorSettings
    from aggregator.state import load_or_create_identity
    from anonml.serving import base_url

    with expected_errors():
        settings = valid_settings(
            lambda: AggregatorSettings.from_env(
                db_url=db,
                host=host,
                port=port,
                identity_file=identity,
                tls_cert=tls_cert,
                tls_key=tls_key,
                ca_bundle=ca_bundle,
            ),
            "aggregator",
        )
        base = base_url(settings.host, settings.port, settings.server_tls())
        check_workers(settings.db_url, workers)
        ensure_port_free(settings.host, settings.port, what="the aggregator")
        ident = load_or_create_identity(settings)
        settings.resolved_admin_token()
        err.print(f"aggregator {ident.public.fingerprint_text()}", highlight=False)
        err.print(
            f"listening on {base} (OpenAPI at /docs); console at {base}/console; "
            f"admin token in {settings.identity_file.with_name('admin-token')}"
            + (f"; {workers} worker processes" if workers > 1 else ""),
            highlight=False,
        )
        run(settings, workers)


@app.command()
def propose(
    file: Annotated[Path, typer.Argument(help="A ProblemDraft as JSON.")],
    url: UrlOption = None,
    token: TokenOption = None,
    registration_seconds: Annotated[
        float | None,
        typer.Option("--registration-seconds", min=1, help="Registration closes this many seconds from now."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Publish a problem (plugins by name, version and params) and print its id."""
    from pydantic import ValidationError

    from anonml.protocol import ProblemDraft

    with expected_errors():
        try:
            raw = json.loads(file.read_text(encoding="utf-8"))
        except OSError as exc:
            raise AnonMLError(f"{file}: cannot read ({exc.strerror})") from None
        except json.JSONDecodeError as exc:
            raise AnonMLError(f"{file}:{exc.lineno}: invalid JSON: {exc.msg}") from None
        if not isinstance(raw, dict):
            raise AnonMLError(f"{file}: expected a JSON object (a ProblemDraft)")
        schedule = raw.setdefault("schedule", {})
        if registration_seconds is not None or "registration_deadline" not in schedule:
            seconds = registration_seconds if registration_seconds is not None else 600.0
            schedule["registration_deadline"] = (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()
        try:
            draft = ProblemDraft.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise AnonMLError(f"{file}: {where}: {first['msg']}") from None
        problem = _client(url, token, admin=True).propose(draft)
    if as_json:
        print_json(problem.model_dump(mode="json"))
        return
    out.print(untrusted(problem.id, 64))
    err.print(f"registration closes at {draft.schedule.registration_deadline.isoformat()}", highlight=False)


@app.command()
def close(
    problem_id: ProblemIdArgument,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Close registration now (the roster is published on the next tick)."""
    with expected_errors():
        _client(url, token, admin=True).close(problem_id)
    err.print(f"registration of {problem_id} closed", highlight=False)


@app.command()
def status(
    problem_id: ProblemIdArgument,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Phase, counts per phase, refusals by reason, phase times."""
    from rich.table import Table

    with expected_errors():
        st = _client(url).status(problem_id)
    if as_json:
        print_json(st.model_dump(mode="json"))
        return
    table = Table("what", "value")
    table.add_row("problem", f"{untrusted(st.id, 64)} — {untrusted(st.title, 80)}")
    table.add_row("phase", untrusted(st.phase + (f" ({st.message})" if st.message else ""), 300))
    for name in (
        "registered",
        "roster_size",
        "median_pool",
        "median_answers",
        "report_peers",
        "tokens_issued",
        "reports_accepted",
    ):
        table.add_row(name.replace("_", " "), f"{getattr(st, name):,}")
    table.add_row("model available", "yes" if st.model_available else "no")
    if st.reports is not None:
        table.add_row("reports expected / received", f"{st.reports.expected:,} / {st.reports.received:,}")
        table.add_row("reports lost", untrusted(st.reports.describe(), 300))
    if st.calibration_pool:
        table.add_row("calibration pool", f"{st.calibration_pool:,}")
    if st.calibration is not None:
        cal = st.calibration
        awaiting = st.phase == ProblemPhase.CALIBRATING
        text = f"awaiting answers: {cal.received:,} of {cal.expected:,}" if awaiting else cal.describe()
        table.add_row("calibration", untrusted(text, 300))
    if st.shuffle is not None:
        sh = st.shuffle
        table.add_row("local ε per peer (the guarantee)", f"{sh.local_epsilon:g}")
        table.add_row(
            "central (ε, δ) if shuffled" + (" (planned)" if sh.planned else ""),
            f"({sh.epsilon:.3g}, {sh.delta:.1e}) over groups of ≥ {sh.smallest_group:,} reports; "
            + untrusted(sh.assumptions, 600),
        )
    for reason, count in sorted(st.rejects.items()):
        table.add_row(f"refused: {untrusted(reason, 200)}", f"{count:,}")
    for phase, seconds in st.phase_seconds.items():
        table.add_row(f"time: {untrusted(phase, 64)}", f"{seconds:.2f} s")
    out.print(table)


@app.command()
def train(
    problem_id: ProblemIdArgument,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Close the report round now and train (or train again)."""
    with expected_errors():
        _client(url, token, admin=True).train(problem_id)
    err.print(
        f"training of {problem_id} requested; follow it with 'anonml aggregator status'", highlight=False
    )


@app.command()
def model(
    problem_id: ProblemIdArgument,
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the model document.")],
    url: UrlOption = None,
) -> None:
    """Download the signed model document (checked against the problem's key) as JSON."""
    from anonml.protocol import verify_message

    with expected_errors():
        client = _client(url)
        problem, document = client.problem(problem_id), client.model(problem_id)
        try:
            verify_message(problem, bytes(problem.aggregator))
            verify_message(document, bytes(problem.aggregator))
        except AnonMLError as exc:
            raise AnonMLError(
                f"model of {problem_id} is not signed by the problem's aggregator: {exc}"
            ) from None
        output.write_text(document.model_dump_json(indent=1), encoding="utf-8")
    metrics = ", ".join(f"{k}={v:g}" for k, v in document.metrics.items())
    err.print(
        f"wrote {untrusted(output)} ({untrusted(metrics)})",
        highlight=False,
    )


@app.command()
def evaluate(
    problem_id: ProblemIdArgument,
    data: Annotated[
        Path,
        typer.Argument(help="Labelled rows as CSV, as 'anonml featurize --output rows.csv' writes them."),
    ],
    label: Annotated[str, typer.Option("--label", help="The label's column.")] = "label",
    name: Annotated[
        str | None, typer.Option("--name", help="What to call these rows (default: the file's name).")
    ] = None,
    url: UrlOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Score the published model on labelled rows the peers never saw (admin); the console shows it too.

    The aggregator keeps the figures, not the rows. Each measure comes beside the best constant
    predictor on the same rows (their base rate, class shares or median).
    """
    from rich.table import Table

    with expected_errors():
        try:
            body = data.read_bytes()
        except OSError as exc:
            raise AnonMLError(f"{data}: cannot read the evaluation rows ({exc.strerror})") from None
        evaluation = _client(url, token, admin=True).evaluate(
            problem_id, body, label=label, name=data.name if name is None else name
        )
    if as_json:
        print_json(evaluation.model_dump(mode="json"))
        return
    table = Table("measure", "this model", "best constant on these rows")
    for key, value in evaluation.metrics.items():
        constant = evaluation.trivial.get(key)
        table.add_row(key.replace("_", " "), f"{value:.4f}", "" if constant is None else f"{constant:.4f}")
    err.print(
        f"{evaluation.rows:,} rows of {untrusted(str(data))}, label {untrusted(evaluation.label, 120)}",
        highlight=False,
    )
    out.print(table)
