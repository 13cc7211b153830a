"""``anonml peer start|proposals|accept|ledger|predict``: take part in problems, privately.

``start`` runs the daemon (relay + worker) in the foreground and tells the
person on stderr what it does (``--quiet`` for less). It saves the policy it
runs with in the peer's home (``$ANONML_HOME/peer/policy.json``, 0600); the
lifetime cap is stored in the ledger itself (as by every host, however built);
every other command reads the saved policy. The other commands read and write the same local state
(``$ANONML_HOME/peer/peer.db``, the ledger, the identity), so they work
whether or not the daemon runs: ``accept`` records the decision and the
running daemon picks it up at its next poll. The read-only ones
(``proposals`` without ``-a``, ``ledger``, ``predict``) create nothing: with
no local state yet they say so.

Every string that came from an aggregator (titles, descriptions, reasons) is
printed through :func:`anonml.cli_support.untrusted`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from anonml.cli_support import (
    CaBundleOption,
    JsonOption,
    ModelFlag,
    TlsCertOption,
    TlsKeyOption,
    err,
    expected_errors,
    out,
    print_json,
    untrusted,
    valid_settings,
    with_model_options,
)
from anonml.errors import AnonMLError
from peer.policy import PeerPolicy

if TYPE_CHECKING:
    from anonml.privacy import PrivacyLedger
    from peer.db import PeerDB
    from peer.settings import PeerSettings

app = typer.Typer(help="Run the peer daemon; review proposals, budgets and models.", no_args_is_help=True)

#: Longest proposal title shown (the rest is cut with an ellipsis).
TITLE_LIMIT = 80

AggregatorOption = Annotated[
    list[str] | None, typer.Option("--aggregator", "-a", help="Aggregator base URL (repeatable).")
]


def _settings(**overrides: object) -> PeerSettings:
    """The peer's settings; their CA bundle, if any, is what every command's https requests trust."""
    from anonml import outbound
    from peer.settings import PeerSettings

    settings = PeerSettings.from_env(**overrides)
    if settings.ca_bundle is not None:
        outbound.trust_ca_bundle(settings.ca_bundle)
    return settings


_HostOption = Annotated[
    str | None, typer.Option("--host", help="Interface for the relay.", show_default="127.0.0.1")
]
_PortOption = Annotated[
    int | None, typer.Option("--port", help="Relay port.", show_default="8471 or $ANONML_PEER_PORT")
]
_PublicUrlOption = Annotated[
    str | None, typer.Option("--public-url", help="How other peers reach this relay.")
]
_StoreOption = Annotated[
    str | None, typer.Option("--store", help="Event store URL.", show_default="$ANONML_HOME/events.db")
]
_UserOption = Annotated[str | None, typer.Option("--user", help="Which user of the store you are.")]
#: The witness fields of the policy, which ``relay serve`` takes too.
WITNESS_FLAGS = (
    ModelFlag(
        "witnesses",
        "--witness",
        "Hex identity of a witness you trust (repeatable; `anonml witness identity` prints it).",
    ),
    ModelFlag("witness_threshold", "--witness-threshold", "Cosignatures needed from trusted witnesses."),
)

_PollOption = Annotated[
    float | None, typer.Option("--poll", help="Seconds between polls.", show_default="1.0")
]
#: The policy's fields ``peer start`` takes as options: type, default and bounds from
#: :class:`peer.policy.PeerPolicy` (:func:`~anonml.cli_support.with_model_options`).
POLICY_FLAGS = (
    ModelFlag("auto_accept", "--auto-accept/--ask", "Accept proposals within the policy."),
    ModelFlag("max_epsilon_per_problem", "--max-epsilon", "Largest ε per problem."),
    ModelFlag("lifetime_epsilon_cap", "--lifetime-cap", "Largest total ε ever."),
    ModelFlag("min_roster_size", "--min-roster-size", "Fewest roster members to report among."),
    ModelFlag("min_anonymity_set", "--min-anonymity-set", "Fewest peers in the smallest report partition."),
    ModelFlag("min_hops", "--min-hops", "Fewest relays on a route."),
    ModelFlag("max_pool_fraction", "--max-pool-fraction", "Largest median-pool fraction."),
    ModelFlag("offered_sources", "--offer-source", "An event source you offer (repeatable; default: all)."),
    *WITNESS_FLAGS,
    ModelFlag(
        "require_credentials",
        "--require-credentials/--allow-open",
        "Refuse problems anyone may register for.",
    ),
    ModelFlag(
        "trusted_issuers", "--trusted-issuer", "Hex identity of a credential issuer you accept (repeatable)."
    ),
    ModelFlag(
        "relay",
        "--relay/--sender-only",
        "Relay for others, or for nobody (behind NAT: outbound connections only).",
    ),
    ModelFlag("guards", "--guard", "Hex identity of a relay you trust for the first hop (repeatable)."),
)
_QuietOption = Annotated[
    bool, typer.Option("--quiet", "-q", help="Print only the start-up lines, not what the peer does.")
]


@app.command()
@with_model_options(PeerPolicy, POLICY_FLAGS)
def start(
    aggregator: AggregatorOption = None,
    host: _HostOption = None,
    port: _PortOption = None,
    public_url: _PublicUrlOption = None,
    store: _StoreOption = None,
    user: _UserOption = None,
    poll: _PollOption = None,
    quiet: _QuietOption = False,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    ca_bundle: CaBundleOption = None,
    **policy: Any,
) -> None:
    """Run the peer daemon: relay for other peers and take part in accepted problems.

    With --tls-cert/--tls-key the relay is served over https (its default URL
    then https://host:port); --ca-bundle names the CAs that aggregators' and
    other relays' certificates must chain to. With --sender-only the peer registers
    no relay (nobody connects to it; the server then only serves its own dashboard).

    The policy (the saved one, changed by the options given) is saved in the
    peer's home for every other command, and its lifetime cap is stored in
    the ledger, which refuses any release past it.
    """
    from anonml.paths import anonml_home
    from anonml.serving import run_foreground
    from peer.app import create_app, create_daemon

    with expected_errors():
        anonml_home()  # the daemon writes there: create it, or tighten it to 0700
        settings = valid_settings(
            lambda: _settings(
                aggregators=aggregator or None,
                host=host,
                port=port,
                public_url=public_url,
                store_url=store,
                user=user,
                poll_seconds=poll,
                tls_cert=tls_cert,
                tls_key=tls_key,
                ca_bundle=ca_bundle,
            ),
            "peer",
        )
        settings = _with_policy_changes(settings, **policy)
        if not settings.aggregators:
            raise AnonMLError("no aggregator to poll: pass --aggregator URL or set ANONML_PEER_AGGREGATORS")
        saved = settings.save_policy()
        host_ = create_daemon(settings)  # stores the policy's lifetime cap in the ledger
        node = host_.sole_node()
        if not quiet:
            host_.notify = lambda text: err.print(untrusted(text, 1000), highlight=False)
        err.print(f"peer {node.identity.public.fingerprint_text()}", highlight=False)
        relay = f"relay at {settings.relay_base()}" if settings.policy.relay else "sender-only (no relay)"
        err.print(f"{relay}; polling {untrusted(', '.join(settings.aggregators))}", highlight=False)
        err.print(f"policy (saved in {untrusted(saved)}): {_policy_text(settings)}", highlight=False)
        app_ = create_app(host_, settings.resolved_local_token())  # the token file exists from here
        err.print(_dashboard_text(settings), highlight=False)
        tls = settings.server_tls()
        run_foreground(app_, settings.host, settings.port, tls=tls)


def _dashboard_text(settings: PeerSettings) -> str:
    """Where the person's pages are (``/ui``, answered on loopback only) and which token opens them."""
    where = (
        "ANONML_PEER_LOCAL_TOKEN"
        if settings.local_token
        else untrusted(settings.identity_file.with_name("local-token"))
    )
    if settings.host in ("127.0.0.1", "localhost", "0.0.0.0", "::", "::1"):
        host = "[::1]" if settings.host == "::1" else "127.0.0.1"
        scheme = "https" if settings.server_tls() is not None else "http"
        url = f"{scheme}://{host}:{settings.port}/ui/"
        return f"dashboard at {url} (this machine only; the local token is in {where})"
    return f"no dashboard: it answers on loopback only, and the relay listens on {untrusted(settings.host)}"


def _with_policy_changes(settings: PeerSettings, **changes: object) -> PeerSettings:
    """``settings`` with the policy fields given (not None) changed, validated like any policy.

    Raises
    ------
    AnonMLError
        Naming the first invalid field.
    """
    from pydantic import ValidationError

    from peer.policy import PeerPolicy

    given = {k: v for k, v in changes.items() if v is not None}
    if not given:
        return settings
    try:
        policy = PeerPolicy.model_validate(settings.policy.model_dump() | given)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise AnonMLError(f"invalid policy: {where}: {first['msg']}") from None
    return settings.model_copy(update={"policy": policy})


def _policy_text(settings: PeerSettings) -> str:
    policy = settings.policy
    sources = untrusted(", ".join(policy.offered_sources)) if policy.offered_sources is not None else "all"
    return (
        f"ε ≤ {policy.max_epsilon_per_problem:g} per problem, lifetime ≤ {policy.lifetime_epsilon_cap:g}, "
        f"{'auto-accept' if policy.auto_accept else 'ask first'}; floors: {policy.floors_text()}; "
        f"sources offered: {sources}; witnesses trusted: {len(policy.witnesses)} "
        f"(need {policy.witness_threshold}{'' if policy.require_witnesses else ', not required'}); "
        f"{'credentials required' if policy.require_credentials else 'open registration accepted'}"
    )


def _sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL (None for other databases and in-memory SQLite)."""
    if url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
        return Path(url.removeprefix("sqlite:///"))
    return None


def _exists(url: str) -> bool:
    """Whether the database at ``url`` exists (non-SQLite databases are assumed to)."""
    path = _sqlite_path(url)
    return path is None or path.exists()


@dataclass
class _ReadOnly:
    """What exists of the local state, opened without creating anything."""

    settings: PeerSettings
    fingerprint: str | None
    db: PeerDB | None
    ledger: PrivacyLedger | None

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
        if self.ledger is not None:
            self.ledger.close()


@contextmanager
def _read_only(*, create_db: bool = False) -> Iterator[_ReadOnly]:
    """Open the identity, state DB and ledger that exist; create none (but the DB if ``create_db``)."""
    from anonml.crypto import load_identity
    from anonml.privacy import PrivacyLedger
    from peer.db import PeerDB

    settings = _settings()
    fingerprint = None
    if settings.identity_file.exists():
        identity = load_identity(settings.identity_file, settings.identity_passphrase)
        fingerprint = identity.fingerprint.hex()
    db = PeerDB(settings.state_url) if create_db or _exists(settings.state_url) else None
    ledger = PrivacyLedger(settings.ledger_url) if _exists(settings.ledger_url) else None
    state = _ReadOnly(settings, fingerprint, db, ledger)
    try:
        yield state
    finally:
        state.close()


def _nothing_yet(what: str, settings: PeerSettings) -> None:
    err.print(
        f"{what}: no local peer state yet in {untrusted(settings.state_url)} "
        "(run 'anonml peer start -a URL', or 'anonml peer proposals -a URL' to fetch proposals)",
        highlight=False,
    )


@app.command()
def proposals(aggregator: AggregatorOption = None, as_json: JsonOption = False) -> None:
    """Problems seen (fetched now from --aggregator URLs too), with this peer's decision and why.

    Decisions not taken yet are evaluated with the saved policy, floors
    included; without ``--aggregator`` nothing is created.
    """
    from peer.discovery import discover
    from peer.records import proposal_verdicts

    with expected_errors(), _read_only(create_db=bool(aggregator)) as local:
        settings = local.settings
        if local.db is None:
            if as_json:
                print_json([])
            _nothing_yet("no proposals", settings)
            return
        if aggregator:
            discover(local.db, list(aggregator), pinned=settings.policy.aggregator_keys)
        rows = []
        for seen in proposal_verdicts(local.db, local.ledger, local.fingerprint or "", settings.policy):
            d = seen.problem.draft
            rows.append(
                {
                    "id": seen.problem.id,
                    "title": d.title,
                    "aggregator": seen.aggregator_url,
                    "epsilon": d.epsilon,
                    "median_epsilon": d.median_epsilon,
                    "kp": d.kp,
                    "hops": d.hops,
                    "pool_fraction": d.median.pool_fraction,
                    "min_peers": d.min_peers,
                    "instancer": d.instancer.name,
                    "featurizer": d.featurizer.name,
                    "features": [f.name for f in d.features],
                    "deadline": d.schedule.registration_deadline.isoformat(),
                    "admission": seen.admission,
                    "decision": seen.verdict if seen.decided else f"({seen.verdict})",
                    "reason": seen.reason,
                    "status": seen.status,
                }
            )
    if as_json:
        print_json(rows)
        return
    err.print(f"policy: {_policy_text(settings)}", highlight=False)
    table = Table("id", "title", "ε", "k_p · hops · pool", "plugins", "decision", "reason", "status")
    for r in rows:
        table.add_row(
            untrusted(r["id"], 64),
            untrusted(r["title"], TITLE_LIMIT),
            f"{r['epsilon']:g}",
            f"{r['kp']} · {r['hops']} · {r['pool_fraction']:g}",
            untrusted(f"{r['instancer']} × {r['featurizer']}", 80),
            untrusted(r["decision"], 16),
            untrusted(r["reason"] or "", 300),
            untrusted(r["status"] or "", 32),
        )
    out.print(table)
    for r in rows:
        if r["admission"].startswith("open"):
            err.print(f"{untrusted(r['id'], 64)}: admission {r['admission']}", highlight=False)


@app.command()
def accept(
    problem_id: Annotated[str, typer.Argument(help="Problem id (see 'anonml peer proposals').")],
) -> None:
    """Accept a proposal (beyond the automatic policy, never past the lifetime cap)."""
    from anonml.protocol import Problem
    from peer.app import load_or_create_identity
    from peer.records import decide_by_hand

    with expected_errors(), _read_only(create_db=True) as local:
        settings, db = local.settings, local.db
        row = db.proposal(problem_id) if db is not None else None
        if db is None or row is None:
            raise AnonMLError(f"no proposal {problem_id!r} seen yet; run 'anonml peer proposals -a URL'")
        problem = Problem.model_validate_json(row.problem_json)
        fingerprint = local.fingerprint or load_or_create_identity(settings).fingerprint.hex()
        decide_by_hand(db, local.ledger, settings.policy, fingerprint, problem_id, accept=True)
    err.print(
        f"accepted {untrusted(problem_id, 64)} (ε = {problem.draft.epsilon:g}); "
        "the running daemon joins at its next poll",
        highlight=False,
    )


@app.command()
def ledger(
    problem: Annotated[str | None, typer.Option("--problem", help="Only this problem.")] = None,
    as_json: JsonOption = False,
) -> None:
    """What this peer released, and the ε it spent (per problem and in total). Creates no database or key.

    Each release is marked when its problem failed, this peer stopped after
    releasing, the problem ended degraded, or reports were lost on the way.
    Beside each problem's local ε (the guarantee) stands the central (ε, δ)
    its reports also satisfy if they stay unlinkable among their partition's
    honest members (shuffle amplification, labelled with those assumptions).
    """
    from peer.records import release_marks, shuffle_bounds

    with expected_errors(), _read_only() as local:
        releases, budgets, cap, marks, bounds = [], {}, None, {}, {}
        if local.ledger is not None and local.fingerprint is not None:
            marks = release_marks(local.db, local.fingerprint)
            releases = local.ledger.releases(peer=local.fingerprint, problem=problem)
            problems = sorted({r.problem for r in releases})
            budgets = {p: local.ledger.budget(local.fingerprint, p) for p in problems}
            cap = local.ledger.lifetime_cap(local.fingerprint)
            bounds = shuffle_bounds(local.db, local.fingerprint, releases)
        elif not as_json:
            err.print(
                f"nothing released: no ledger at {untrusted(local.settings.ledger_url)} "
                "or no peer identity yet",
                highlight=False,
            )
    if as_json:
        print_json(_ledger_document(releases, budgets, cap, marks, bounds))
        return
    _print_ledger(releases, budgets, cap, marks, bounds)


def _ledger_document(releases: list, budgets: dict, cap: float | None, marks: dict, bounds: dict) -> dict:
    """``anonml peer ledger --json``: every release with its mark, per problem the budget and bound."""
    return {
        "releases": [
            {
                "problem": r.problem,
                "round": r.round,
                "attributes": list(r.attributes),
                "mechanism": r.mechanism,
                "epsilon": r.epsilon,
                "pool": r.pool,
                "recorded_at": r.recorded_at.isoformat(),
                "mark": marks.get(r.problem, ""),
            }
            for r in releases
        ],
        "problems": {
            p: {
                "total": b.total,
                "cap": b.cap,
                "releases": b.n_releases,
                "per_attribute": dict(b.per_attribute),
                "shuffle": None if bounds[p][0] is None else bounds[p][0].to_dict(),
                "shuffle_note": bounds[p][1],
            }
            for p, b in budgets.items()
        },
        "lifetime_total": sum(b.total for b in budgets.values()),
        "lifetime_cap": cap,
    }


def _print_ledger(releases: list, budgets: dict, cap: float | None, marks: dict, bounds: dict) -> None:
    """The releases table, the per-problem totals (local ε beside the shuffle bound), the lifetime line."""
    from anonml.privacy.amplification import ASSUMPTIONS, SIGNED_ANSWERS_NOT_SHUFFLED

    table = Table("problem", "round", "attributes", "mechanism", "ε", "when", "mark")
    for r in releases:
        table.add_row(
            untrusted(r.problem, 64),
            str(r.round),
            ", ".join(r.attributes),
            r.mechanism,
            f"{r.epsilon:.4g}",
            r.recorded_at.strftime("%Y-%m-%d %H:%M:%S"),
            untrusted(marks.get(r.problem, ""), 300),
        )
    out.print(table)
    totals = Table(
        "problem", "local ε (the guarantee)", "cap", "releases", "central (ε, δ) if shuffled*", "on"
    )
    for p, b in budgets.items():
        cap_text = "—" if b.cap is None else f"{b.cap:g}"
        bound, note = bounds[p]
        central = "—" if bound is None else f"({bound.epsilon:.3g}, {bound.delta:.1e})"
        totals.add_row(untrusted(p, 64), f"{b.total:.4g}", cap_text, str(b.n_releases), central, note)
    out.print(totals)
    # A peer's problems are protocol rounds: their median and calibration answers are signed.
    out.print(f"* {ASSUMPTIONS}{SIGNED_ANSWERS_NOT_SHUFFLED}.", highlight=False)
    out.print(
        f"lifetime total: ε = {sum(b.total for b in budgets.values()):.4g}"
        + ("" if cap is None else f" (cap {cap:g}, enforced by the ledger)")
    )


@app.command()
def predict(
    problem_id: Annotated[str, typer.Argument(help="Problem id.")], as_json: JsonOption = False
) -> None:
    """Predict for yourself with the problem's downloaded model (its signature checked).

    Creates no database or key.
    """
    from anonml.paths import default_store_url
    from anonml.protocol import ModelDocument, Problem
    from anonml.store import EventStore
    from peer.client import AggregatorClient
    from peer.features import predict_locally

    with expected_errors(), _read_only() as local:
        settings = local.settings
        row = local.db.proposal(problem_id) if local.db is not None else None
        if row is None:
            raise AnonMLError(f"no problem {problem_id!r} seen by this peer")
        problem = Problem.model_validate_json(row.problem_json)
        part = local.db.participation(problem_id, local.fingerprint) if local.fingerprint else None
        if part is not None and part.model_json is not None:
            document = ModelDocument.model_validate_json(part.model_json)
        else:
            document = AggregatorClient(row.aggregator_url).model(problem_id)
        store_url = settings.store_url or default_store_url("events.db")
        if not _exists(store_url):
            raise AnonMLError(f"no event store at {store_url}: import your data first ('anonml import …')")
        store = EventStore(store_url)
        try:
            mine = predict_locally(
                problem, document, store, settings.user, sources=settings.policy.offered_sources
            )
        finally:
            store.close()
    result = {
        "problem": problem_id,
        "label": problem.draft.label.kind,
        "probability": mine.probability,
        "prediction": mine.label,
        "answer": mine.answer,
        "features": mine.features,
    }
    if as_json:
        print_json(result)
        return
    title = untrusted(problem.draft.title, TITLE_LIMIT)
    if mine.kind == "binary":
        out.print(f"{title}: P(label = 1) = {mine.probability:.3f} → {mine.label}")
    elif mine.kind == "classes":
        out.print(f"{title}: {untrusted(str(mine.answer), 64)} (P = {mine.probability:.3f})")
    else:
        spec = problem.draft.label
        where = f"{spec.bins} bins of [{spec.low:g}, {spec.high:g}]"
        out.print(f"{title}: {float(mine.answer):.4g} (expected value over {where})")
