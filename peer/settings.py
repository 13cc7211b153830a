"""The peer daemon's settings: its stores, keys, relay address, aggregators and policy.

From keyword arguments or ``ANONML_PEER_*`` environment variables
(:meth:`PeerSettings.from_env`; lists as comma-separated text, the policy as
JSON in ``ANONML_PEER_POLICY``), validated by pydantic.

The policy holds across commands: ``anonml peer start`` saves the policy it
runs with in ``policy_file`` (``$ANONML_HOME/peer/policy.json``, mode 0600,
:meth:`PeerSettings.save_policy`), and every later command — ``peer accept``,
``peer proposals``, the next ``peer start`` — reads it
(:meth:`PeerSettings.from_env`) unless a policy is given explicitly. The
lifetime cap is moreover stored in the ledger itself by every host built with
the policy (:class:`peer.host.PeerHost`;
:meth:`anonml.privacy.PrivacyLedger.set_lifetime_cap`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field

from anonml.environment import settings_from_env
from anonml.errors import AnonMLError
from anonml.paths import anonml_home, stored_token, write_secret
from anonml.serving import TlsSettings, base_url
from peer.policy import PeerPolicy

__all__ = ["PeerSettings", "ENV_PREFIX", "load_policy"]

ENV_PREFIX = "ANONML_PEER_"


def _home(name: str) -> Path:
    # Only named here: whatever writes a file there creates its folders (0700), so reading commands
    # leave no home behind; `anonml peer start` creates (or tightens) the home itself.
    return anonml_home(create=False) / "peer" / name


def load_policy(path: Path) -> PeerPolicy:
    """The policy saved at ``path``; a clear error naming the file when it is not valid."""
    try:
        return PeerPolicy.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AnonMLError(f"{path}: not a valid saved peer policy ({exc}); fix or remove it") from None


class PeerSettings(TlsSettings):
    """Everything one peer daemon needs.

    Attributes
    ----------
    store_url : str or None
        Its event store (default ``$ANONML_HOME/events.db``).
    user : str or None
        Which user of the store is this person (default: the store's only user).
    ledger_url : str
        Its privacy ledger (default ``$ANONML_HOME/ledger.db``).
    state_url : str
        Proposals seen, decisions, participations, models (``$ANONML_HOME/peer/peer.db``).
    identity_file, identity_passphrase
        Its Ed25519/X25519 identity (created on first start, mode 0600).
    host, port : str, int
        Where its relay listens. ``public_url`` is how other peers reach it
        (default ``https://host:port`` when it serves TLS, else ``http://host:port``).
    tls_cert, tls_key : Path or None
        Serve the relay over https with this certificate chain and key
        (:class:`anonml.serving.TlsSettings`); neither: plain http (loopback
        test mode, or behind a TLS proxy named by ``public_url``).
    ca_bundle : Path or None
        Verify the certificates of aggregators and other members' relays against
        this PEM bundle only, instead of the system's store
        (:func:`anonml.outbound.trust_ca_bundle`; default ``$ANONML_CA_BUNDLE``).
    aggregators : list of str
        Aggregator base URLs to poll.
    poll_seconds : float
        Poll interval of the worker.
    roster_comparisons : int
        How many other roster members to compare the roster fingerprint with
        (through their relays; a second layer beside the witness service).
    credentials_dir : Path
        Admission credentials (``anonml credential install``), one JSON file each
        (default ``$ANONML_HOME/peer/credentials``).
    local_token : str
        Bearer token of the local status API (generated and stored when empty).
    policy_file : Path
        Where ``peer start`` saves the policy and every command reads it.
    policy : PeerPolicy
        The saved policy when ``policy_file`` exists and no other is given.
    """

    model_config = ConfigDict(extra="forbid")

    store_url: str | None = None
    user: str | None = None
    ledger_url: str = Field(default_factory=lambda: f"sqlite:///{anonml_home(create=False) / 'ledger.db'}")
    state_url: str = Field(default_factory=lambda: f"sqlite:///{_home('peer.db')}")
    identity_file: Path = Field(default_factory=lambda: _home("identity.json"))
    identity_passphrase: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8471, ge=0, le=65535)
    public_url: str | None = Field(default=None, pattern=r"^https?://[^\s/]+(:\d+)?$")
    aggregators: list[str] = Field(default_factory=list)
    poll_seconds: float = Field(default=1.0, gt=0, le=3600)
    roster_comparisons: int = Field(default=2, ge=0, le=16)
    credentials_dir: Path = Field(default_factory=lambda: _home("credentials"))
    local_token: str = ""
    policy_file: Path = Field(default_factory=lambda: _home("policy.json"))
    policy: PeerPolicy = PeerPolicy()
    ca_bundle: Path | None = None

    @classmethod
    def from_env(cls, **overrides: Any) -> PeerSettings:
        """Settings from ``ANONML_PEER_<FIELD>`` variables, then ``overrides`` (None = unset)."""
        parsers = {"aggregators": lambda raw: [u.strip() for u in raw.split(",") if u.strip()],
                   "policy": json.loads}
        settings = settings_from_env(cls, ENV_PREFIX, overrides, parsers)
        explicit = overrides.get("policy") is not None or (ENV_PREFIX + "POLICY") in os.environ
        if not explicit and settings.policy_file.exists():
            settings = settings.model_copy(update={"policy": load_policy(settings.policy_file)})
        return settings

    def save_policy(self) -> Path:
        """Write ``policy`` to ``policy_file`` (mode 0600, replaced atomically); return the path."""
        path = self.policy_file
        tmp = path.with_name(path.name + ".tmp")
        tmp.unlink(missing_ok=True)
        write_secret(tmp, self.policy.model_dump_json(indent=2) + "\n")
        os.replace(tmp, path)
        return path

    def relay_base(self, port: int | None = None) -> str:
        """The base URL other peers use for this daemon's relay."""
        if self.public_url is not None:
            return self.public_url
        return base_url(self.host, port if port is not None else self.port, self.server_tls())

    def resolved_local_token(self) -> str:
        """The local API token: the configured one, else one stored beside the identity (0600)."""
        if self.local_token:
            return self.local_token
        return stored_token(self.identity_file.with_name("local-token"))
