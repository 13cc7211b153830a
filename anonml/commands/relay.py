"""``anonml relay serve``: an always-on relay that holds no data.

Most people run the peer daemon on laptops and phones behind NAT: they can be
sender-only (``anonml peer start --sender-only``) and relay for nobody. Routes
then need members that accept connections; a course platform, a department or
any volunteer can add some with this command. A relay is a peer identity of
its own, in a home of its own (``--home``, default ``$ANONML_HOME/relay``),
admitted like any member (its credentials in ``HOME/credentials``), with the
policy ``relay = True, relay_only = True``:

* it registers for every problem its policy accepts, with its relay URL and
  round relay key, and relays other members' packets;
* it holds no data: its event store is empty and never read, so where the
  partition plan gives it a report or a median answer it sends a stand-in (a
  uniform value through the same mechanism, DESIGN §10) — it sends exactly its
  slot count like every member, and nothing it sends depends on any data;
* its floors, witnesses and credentials are checked like any peer's.

The plan itself is unchanged (a relay is placed like any member), so being a
relay never moves anyone's assignment; what a relay's stand-ins cost the model is
said in ``docs/threat-model.md`` ("Relays").
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from anonml.cli_support import (
    CaBundleOption,
    TlsCertOption,
    TlsKeyOption,
    err,
    expected_errors,
    untrusted,
    valid_settings,
    with_model_options,
)
from anonml.commands.peer import WITNESS_FLAGS, AggregatorOption
from anonml.errors import AnonMLError
from peer.policy import PeerPolicy

app = typer.Typer(help="Run an always-on relay that holds no data.", no_args_is_help=True)

#: ε limits of a relay: it holds no data, so what it "releases" is noise; the ledger still records it,
#: and its lifetime cap (the most the ledger takes) bounds the problems one relay identity joins:
#: past it, a fresh ``--home`` (a new identity) relays on.
RELAY_EPSILON_PER_PROBLEM = 4.0
RELAY_LIFETIME_CAP = 30.0


@app.callback()
def relay() -> None:
    """Run an always-on relay that holds no data."""


@app.command()
@with_model_options(PeerPolicy, WITNESS_FLAGS)
def serve(
    aggregator: AggregatorOption = None,
    home: Annotated[
        Path | None, typer.Option("--home", help="The relay's own folder.", show_default="$ANONML_HOME/relay")
    ] = None,
    host: Annotated[str, typer.Option("--host", help="Interface the relay listens on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Relay port.", min=1, max=65535)] = 8473,
    public_url: Annotated[
        str | None, typer.Option("--public-url", help="How peers reach this relay.")
    ] = None,
    poll: Annotated[float, typer.Option("--poll", help="Seconds between polls.")] = 1.0,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    ca_bundle: CaBundleOption = None,
    **witnesses: Any,
) -> None:
    """Relay for every problem the policy accepts; hold no data, report only stand-ins (module docstring)."""
    from anonml import outbound
    from anonml.commands.peer import _with_policy_changes
    from anonml.paths import anonml_home, private_dir
    from anonml.serving import run_foreground
    from peer.app import create_app, create_daemon
    from peer.settings import PeerSettings

    with expected_errors():
        folder = private_dir(home if home is not None else anonml_home() / "relay", tighten=True)
        settings = valid_settings(
            lambda: PeerSettings.from_env(
                aggregators=aggregator or None,
                store_url="sqlite://",  # in memory and empty: a relay holds no data
                ledger_url=f"sqlite:///{folder / 'ledger.db'}",
                state_url=f"sqlite:///{folder / 'relay.db'}",
                identity_file=folder / "identity.json",
                credentials_dir=folder / "credentials",
                policy_file=folder / "policy.json",
                host=host,
                port=port,
                public_url=public_url,
                poll_seconds=poll,
                tls_cert=tls_cert,
                tls_key=tls_key,
                ca_bundle=ca_bundle,
            ),
            "relay",
        )
        settings = _with_policy_changes(
            settings,
            relay=True,
            relay_only=True,
            auto_accept=True,
            offered_sources=[],
            max_epsilon_per_problem=RELAY_EPSILON_PER_PROBLEM,
            lifetime_epsilon_cap=RELAY_LIFETIME_CAP,
            **witnesses,
        )
        if not settings.aggregators:
            raise AnonMLError("no aggregator to poll: pass --aggregator URL or set ANONML_PEER_AGGREGATORS")
        if settings.ca_bundle is not None:
            outbound.trust_ca_bundle(settings.ca_bundle)
        saved = settings.save_policy()
        daemon = create_daemon(settings)
        daemon.notify = lambda text: err.print(untrusted(text, 1000), highlight=False)
        # the identity in hex: what peers name as a guard (--guard) and witnesses/credentials name
        err.print(f"relay {bytes(daemon.sole_node().identity.public).hex()}", highlight=False)
        err.print(
            f"relaying at {settings.relay_base()}; polling {untrusted(', '.join(settings.aggregators))}; "
            f"policy saved in {untrusted(saved)}",
            highlight=False,
        )
        app_ = create_app(daemon, settings.resolved_local_token())
        tls = settings.server_tls()
        run_foreground(app_, settings.host, settings.port, tls=tls)
