"""``anonml peer start|proposals|accept|ledger|predict``: take part in problems, privately.

``start`` runs the daemon (relay + worker) in the foreground. The other
commands read and write the same local state (``$ANONML_HOME/peer/peer.db``,
the ledger, the identity), so they work whether or not the daemon runs:
``accept`` records the decision and the running daemon picks it up at its
next poll.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from anonml.cli_support import err, expected_errors, out, print_json
from anonml.errors import AnonMLError

if TYPE_CHECKING:
    from peer.host import PeerHost
    from peer.settings import PeerSettings

app = typer.Typer(help="Run the peer daemon; review proposals, budgets and models.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]
AggregatorOption = Annotated[
    list[str] | None, typer.Option("--aggregator", "-a", help="Aggregator base URL (repeatable).")
]


def _settings(**overrides: object) -> PeerSettings:
    from peer.settings import PeerSettings

    return PeerSettings.from_env(**overrides)


@app.command()
def start(
    aggregator: AggregatorOption = None,
    host: Annotated[
        str | None, typer.Option("--host", help="Interface for the relay.", show_default="127.0.0.1")
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", help="Relay port.", show_default="8471 or $ANONML_PEER_PORT")
    ] = None,
    public_url: Annotated[
        str | None, typer.Option("--public-url", help="How other peers reach this relay.")
    ] = None,
    store: Annotated[
        str | None, typer.Option("--store", help="Event store URL.", show_default="$ANONML_HOME/events.db")
    ] = None,
    user: Annotated[str | None, typer.Option("--user", help="Which user of the store you are.")] = None,
    auto_accept: Annotated[
        bool | None, typer.Option(
            "--auto-accept/--ask", help="Accept proposals within the policy.", show_default="ask"
        )
    ] = None,
    max_epsilon: Annotated[
        float | None, typer.Option("--max-epsilon", help="Largest ε per problem.", show_default="1.0")
    ] = None,
    lifetime_cap: Annotated[
        float | None, typer.Option("--lifetime-cap", help="Largest total ε ever.", show_default="10.0")
    ] = None,
    poll: Annotated[
        float | None, typer.Option("--poll", help="Seconds between polls.", show_default="1.0")
    ] = None,
) -> None:
    """Run the peer daemon: relay for other peers and take part in accepted problems."""
    import uvicorn

    from peer.app import create_app, create_daemon

    with expected_errors():
        settings = _settings(
            aggregators=aggregator or None,
            host=host,
            port=port,
            public_url=public_url,
            store_url=store,
            user=user,
            poll_seconds=poll,
        )
        changes = {
            k: v
            for k, v in {
                "auto_accept": auto_accept,
                "max_epsilon_per_problem": max_epsilon,
                "lifetime_epsilon_cap": lifetime_cap,
            }.items()
            if v is not None
        }
        if changes:
            settings = settings.model_copy(update={"policy": settings.policy.model_copy(update=changes)})
        if not settings.aggregators:
            raise AnonMLError("no aggregator to poll: pass --aggregator URL or set ANONML_PEER_AGGREGATORS")
        host_ = create_daemon(settings)
        node = next(iter(host_.nodes.values()))
        err.print(f"peer {node.identity.public.fingerprint_text()}", highlight=False)
        err.print(
            f"relay at {settings.relay_base()}; polling {', '.join(settings.aggregators)}; "
            f"policy: ε ≤ {settings.policy.max_epsilon_per_problem:g} per problem, "
            f"lifetime ≤ {settings.policy.lifetime_epsilon_cap:g}, "
            f"{'auto-accept' if settings.policy.auto_accept else 'ask first'}",
            highlight=False,
        )
        app_ = create_app(host_, settings.resolved_local_token())
        uvicorn.run(app_, host=settings.host, port=settings.port, access_log=False, log_level="warning")


def _local() -> tuple[PeerSettings, PeerHost]:
    from peer.app import create_daemon

    settings = _settings()
    return settings, create_daemon(settings)


@app.command()
def proposals(aggregator: AggregatorOption = None, as_json: JsonOption = False) -> None:
    """Problems seen (fetched now from --aggregator URLs too), with this peer's decision and why."""
    from anonml.protocol import Problem
    from peer.policy import evaluate_problem

    with expected_errors():
        settings, host = _local()
        try:
            if aggregator:
                host.aggregators = list(aggregator)
                host.discover()
            node = next(iter(host.nodes.values()))
            rows = []
            for view in host.db.proposals(node.fingerprint):
                problem = Problem.model_validate_json(view.problem_json)
                verdict, reason = view.verdict, view.reason
                if verdict is None:
                    decision = evaluate_problem(problem, settings.policy, host.committed(node))
                    verdict, reason = f"({decision.verdict})", decision.reason
                d = problem.draft
                rows.append(
                    {
                        "id": problem.id,
                        "title": d.title,
                        "aggregator": view.aggregator_url,
                        "epsilon": d.epsilon,
                        "instancer": d.instancer.name,
                        "featurizer": d.featurizer.name,
                        "features": [f.name for f in d.features],
                        "deadline": d.schedule.registration_deadline.isoformat(),
                        "decision": verdict,
                        "reason": reason,
                        "status": view.status,
                    }
                )
        finally:
            host.close()
    if as_json:
        print_json(rows)
        return
    table = Table("id", "title", "ε", "plugins", "decision", "reason", "status")
    for r in rows:
        table.add_row(
            r["id"],
            r["title"],
            f"{r['epsilon']:g}",
            f"{r['instancer']} × {r['featurizer']}",
            r["decision"],
            r["reason"],
            r["status"] or "",
        )
    out.print(table)


@app.command()
def accept(
    problem_id: Annotated[str, typer.Argument(help="Problem id (see 'anonml peer proposals').")],
) -> None:
    """Accept a proposal (beyond the automatic policy, never past the lifetime cap)."""
    from anonml.protocol import Problem
    from peer.policy import evaluate_problem

    with expected_errors():
        settings, host = _local()
        try:
            row = host.db.proposal(problem_id)
            if row is None:
                raise AnonMLError(f"no proposal {problem_id!r} seen yet; run 'anonml peer proposals -a URL'")
            problem = Problem.model_validate_json(row.problem_json)
            node = next(iter(host.nodes.values()))
            decision = evaluate_problem(problem, settings.policy, host.committed(node), manual=True)
            host.db.decide(
                problem_id, node.fingerprint, decision.verdict, decision.reason, problem.draft.epsilon
            )
        finally:
            host.close()
        if not decision.accept:
            raise AnonMLError(f"cannot accept {problem_id}: {decision.reason}")
    err.print(
        f"accepted {problem_id} (ε = {problem.draft.epsilon:g}); the running daemon joins at its next poll",
        highlight=False,
    )


@app.command()
def ledger(
    problem: Annotated[str | None, typer.Option("--problem", help="Only this problem.")] = None,
    as_json: JsonOption = False,
) -> None:
    """What this peer released, and the ε it spent (per problem and in total)."""
    with expected_errors():
        settings, host = _local()
        try:
            node = next(iter(host.nodes.values()))
            releases = node.ledger.releases(peer=node.fingerprint, problem=problem)
            problems = sorted({r.problem for r in releases})
            budgets = {p: node.ledger.budget(node.fingerprint, p) for p in problems}
        finally:
            host.close()
    if as_json:
        print_json(
            {
                "releases": [
                    {
                        "problem": r.problem,
                        "round": r.round,
                        "attributes": list(r.attributes),
                        "mechanism": r.mechanism,
                        "epsilon": r.epsilon,
                        "pool": r.pool,
                        "recorded_at": r.recorded_at.isoformat(),
                    }
                    for r in releases
                ],
                "problems": {
                    p: {
                        "total": b.total,
                        "cap": b.cap,
                        "releases": b.n_releases,
                        "per_attribute": dict(b.per_attribute),
                    }
                    for p, b in budgets.items()
                },
                "lifetime_total": sum(b.total for b in budgets.values()),
            }
        )
        return
    table = Table("problem", "round", "attributes", "mechanism", "ε", "when")
    for r in releases:
        table.add_row(
            r.problem,
            str(r.round),
            ", ".join(r.attributes),
            r.mechanism,
            f"{r.epsilon:.4g}",
            r.recorded_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
    out.print(table)
    totals = Table("problem", "ε spent (sequential composition)", "cap", "releases")
    for p, b in budgets.items():
        totals.add_row(p, f"{b.total:.4g}", "—" if b.cap is None else f"{b.cap:g}", str(b.n_releases))
    out.print(totals)
    out.print(f"lifetime total: ε = {sum(b.total for b in budgets.values()):.4g}")


@app.command()
def predict(
    problem_id: Annotated[str, typer.Argument(help="Problem id.")], as_json: JsonOption = False
) -> None:
    """Predict for yourself with the problem's downloaded model (its signature checked)."""
    from anonml.learn import AnonMLClassifier
    from anonml.protocol import ModelDocument, Problem, verify_message
    from peer.client import AggregatorClient
    from peer.features import local_example

    with expected_errors():
        settings, host = _local()
        try:
            row = host.db.proposal(problem_id)
            if row is None:
                raise AnonMLError(f"no problem {problem_id!r} seen by this peer")
            problem = Problem.model_validate_json(row.problem_json)
            node = next(iter(host.nodes.values()))
            part = host.db.participation(problem_id, node.fingerprint)
            if part is not None and part.model_json is not None:
                document = ModelDocument.model_validate_json(part.model_json)
            else:
                document = AggregatorClient(row.aggregator_url).model(problem_id)
            verify_message(document, bytes(problem.aggregator))
            model = AnonMLClassifier.from_json(json.dumps(document.model))
            example = local_example(problem, node.store, settings.user)
            proba = float(model.predict_proba(example.x[None, :])[0, 1])
            label = model.predict(example.x[None, :])[0].item()
        finally:
            host.close()
    result = {
        "problem": problem_id,
        "probability": proba,
        "prediction": label,
        "features": dict(zip([f.name for f in problem.draft.features], example.x.tolist(), strict=True)),
    }
    if as_json:
        print_json(result)
        return
    out.print(f"{problem.draft.title}: P(label = 1) = {proba:.3f} → {result['prediction']}")
