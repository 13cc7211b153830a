"""``anonml witness serve|identity``: run an independent witness (:mod:`witness`).

A witness co-signs at most one transcript per (aggregator, problem, stage) and
serves the append-only log of what it signed. Peers trust it by naming its
public identity (``anonml witness identity``) in their policy's ``witnesses``;
proposals declare it with its URL in ``ProblemDraft.witnesses``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from anonml.cli_support import TlsCertOption, TlsKeyOption, expected_errors, valid_settings
from anonml.paths import private_dir

app = typer.Typer(help="Run an independent witness that co-signs transcripts.", no_args_is_help=True)

HomeOption = Annotated[
    Path | None,
    typer.Option("--home", help="The witness's folder: identity and log (default $ANONML_HOME/witness)."),
]


def _home(home: Path | None) -> Path:
    from anonml.paths import anonml_home

    return home if home is not None else anonml_home() / "witness"


@app.command()
def serve(
    home: HomeOption = None,
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port (0: a free one).")] = 8472,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
) -> None:
    """Serve the witness in the foreground (Ctrl-C stops it); https with --tls-cert/--tls-key.

    Prints one line on stdout once it listens: ``witness <identity hex> <url>``.
    """
    from witness import WitnessSettings, serve_witness

    with expected_errors():
        settings = valid_settings(
            lambda: WitnessSettings(
                home=_home(home), host=host, port=port, tls_cert=tls_cert, tls_key=tls_key
            ),
            "witness",
        )

        def ready(url: str, witness) -> None:
            print(f"witness {witness.public_identity.hex()} {url}", flush=True)

        serve_witness(settings, ready)


@app.command()
def identity(home: HomeOption = None) -> None:
    """Print the witness's public identity (hex), creating its key file on first use."""
    from anonml.crypto import load_or_create_identity
    from witness import WitnessSettings

    with expected_errors():
        settings = WitnessSettings(home=_home(home))
        private_dir(settings.home, tighten=True)
        print(bytes(load_or_create_identity(settings.identity_file).public).hex())
