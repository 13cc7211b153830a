"""``python -m peer.simulate MANIFEST``: host the identities a manifest names, in one process.

For tests and benchmarks that need peers in processes of their own — above
all, a peer host killed mid-round (SIGKILL) and started again on the same
files, which must take up its participations and relay duties
(:meth:`peer.host.PeerHost.resume`). The manifest (JSON,
:class:`SimulationManifest`) names each identity's key file, event store and
ledger, the host's state DB, the aggregators, the relay port (fixed, so a
restarted host keeps the relay URLs its roster entries name) and the local
token for ``GET /local/status``; optionally the address the relay binds
(``host``, default loopback), the URL others reach it at when something fronts it
(``public_url``, default the bound address), the certificate and key it serves https with
(``tls_cert``/``tls_key``) and the CA bundle it verifies others against
(``ca_bundle``) — the network-namespace tests run hosts on their own addresses.
``relay = false`` makes every identity sender-only: the process then listens on
no port at all (no relay, no status API) and only opens connections;
``relay_only`` makes them relays that hold no data (``anonml relay serve``);
``max_hostile_route`` is the policy's figure (small simulated rosters with few
relays need a larger one than a real peer's default); ``check_reachability``
makes a relaying host ask each aggregator whether its relay URL can be reached
before its identities register relays, and register them sender-only if not
(:mod:`peer.reachability`; off by default, as for every simulation policy).

The process prints its relay base URL on stdout once it serves (a sender-only
host: ``sender-only``), then runs until its stdin closes (or it is killed); on
closing it prints its counters (what ``GET /local/status`` gives as ``relay``:
the relay's and the host's, as one JSON object on one line) — the only way to
read them for a host in a network namespace, whose status API answers loopback only. Policy:
:meth:`~peer.policy.PeerPolicy.for_simulation` with auto-accept; never for
a real person's peer.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from anonml.crypto import load_identity
from anonml.outbound import OutboundError, trust_ca_bundle
from anonml.privacy import PrivacyLedger
from anonml.serving import server_tls
from anonml.store import EventStore
from peer.app import start_peer_server
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.policy import PeerPolicy

__all__ = ["SimulatedIdentity", "SimulationManifest", "main"]


class SimulatedIdentity(BaseModel):
    """One hosted identity's files."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    identity_file: Path
    store_url: str
    ledger_url: str
    user: str | None = None


class SimulationManifest(BaseModel):
    """What one simulated peer host runs (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    identities: list[SimulatedIdentity] = Field(min_length=1)
    state_url: str
    aggregators: list[str] = Field(min_length=1)
    port: int = Field(ge=1, le=65535)
    local_token: str = Field(min_length=16)
    poll_seconds: float = Field(default=0.1, gt=0)
    roster_comparisons: int = Field(default=2, ge=0)
    max_epsilon_per_problem: float = Field(default=4.0, gt=0)
    workers: int = Field(default=4, ge=1)
    host: str = "127.0.0.1"
    public_url: str | None = Field(default=None, pattern=r"^https?://[^\s/]+(:\d+)?$")
    tls_cert: Path | None = None
    tls_key: Path | None = None
    ca_bundle: Path | None = None
    relay: bool = True
    relay_only: bool = False
    max_hostile_route: float = Field(default=0.01, ge=0, le=1)
    check_reachability: bool = False


def build_host(manifest: SimulationManifest) -> PeerHost:
    """The host of the manifest's identities (nothing started)."""
    nodes = [
        PeerNode(
            load_identity(i.identity_file), EventStore(i.store_url), PrivacyLedger(i.ledger_url), user=i.user
        )
        for i in manifest.identities
    ]
    return PeerHost(
        nodes,
        PeerDB(manifest.state_url),
        PeerPolicy.for_simulation(
            auto_accept=True,
            max_epsilon_per_problem=manifest.max_epsilon_per_problem,
            relay=manifest.relay,
            relay_only=manifest.relay_only,
            max_hostile_route=manifest.max_hostile_route,
            check_reachability=manifest.check_reachability,
        ),
        manifest.aggregators,
        poll_seconds=manifest.poll_seconds,
        roster_comparisons=manifest.roster_comparisons,
        workers=manifest.workers,
        relay_base=manifest.public_url,
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m peer.simulate MANIFEST.json", file=sys.stderr)
        return 2
    path = Path(args[0])
    try:
        manifest = SimulationManifest.model_validate_json(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"error: manifest {path}: {exc}", file=sys.stderr)
        return 2
    try:
        tls = server_tls(manifest.tls_cert, manifest.tls_key)
        if manifest.ca_bundle is not None:
            trust_ca_bundle(manifest.ca_bundle)
    except (ValueError, OutboundError) as exc:
        print(f"error: manifest {path}: {exc}", file=sys.stderr)
        return 2
    host = build_host(manifest)
    if not manifest.relay:  # sender-only: nothing listens; the worker only opens connections
        host.start()
        print("sender-only", flush=True)
        sys.stdin.read()
        print(json.dumps(host.status().relay), flush=True)
        host.close()
        return 0
    server = start_peer_server(host, manifest.local_token, bind=manifest.host, port=manifest.port, tls=tls)
    print(server.url, flush=True)
    sys.stdin.read()  # returns at EOF: the parent closed our stdin
    print(json.dumps(host.status().relay), flush=True)
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
