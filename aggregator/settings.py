"""The aggregator's settings: where its database and keys live, who may administer it.

Values come from keyword arguments or from ``ANONML_AGGREGATOR_*`` environment
variables (:meth:`AggregatorSettings.from_env`), validated by pydantic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field

from anonml.environment import settings_from_env
from anonml.paths import anonml_home, stored_token
from anonml.schedule import DEFAULT_REACTION_SECONDS
from anonml.serving import TlsSettings

__all__ = ["AggregatorSettings", "ENV_PREFIX"]

ENV_PREFIX = "ANONML_AGGREGATOR_"


def _home(name: str) -> Path:
    return anonml_home() / "aggregator" / name


class AggregatorSettings(TlsSettings):
    """Everything an aggregator process needs.

    Attributes
    ----------
    db_url : str
        SQLAlchemy URL of its state (default SQLite ``$ANONML_HOME/aggregator/aggregator.db``).
    identity_file : Path
        Its Ed25519/X25519 identity (created on first start, mode 0600).
    identity_passphrase : str or None
        Passphrase of the identity file (None: a plain 0600 file).
    admin_token : str
        Bearer token for admin actions (propose, close, train). Generated and
        stored next to the identity when not given.
    host, port : str, int
        Where uvicorn listens.
    tick_seconds : float
        How often the phase machine looks at the clock.
    intake_grace_seconds : float
        How long after t_r final-hop deliveries are still accepted (network latency).
    max_loss_fraction : float
        A problem that lost more than this fraction of its expected reports
        ends ``degraded`` (its model is still published) instead of ``done``.
    lease_seconds : float
        How long the phase lease (:mod:`aggregator.lease`) stays valid after a
        renewal; the holder renews every quarter of it. A worker that dies or
        hangs hands the phase machine to another after at most this long
        (at once when it stops cleanly or died on the same machine).
    max_body_bytes : int
        Larger request bodies are refused with 413 before parsing.
    allow_loopback_http : bool
        Accept registrations whose relay URL is plain ``http`` on a loopback
        host (test and demo deployments on one machine); otherwise relay URLs
        must be ``https`` (:func:`anonml.protocol.check_relay_url`).
    scale_schedule : bool
        Raise every round's waits (roster, median steps, report delay, send
        and release windows) to the floors :func:`anonml.schedule.schedule_floors`
        gives for its roster size and the measured cost of a registration;
        a proposal's longer values are kept. Off: the proposal's values as they are.
    peer_poll_seconds : float
        How often peers are taken to poll (the reaction term ``r`` of the
        floors); the peer daemon's default is 1 s.
    tls_cert, tls_key : Path or None
        Serve https with this certificate chain and key
        (:class:`anonml.serving.TlsSettings`); neither: plain http.
    admission_concurrency : int
        Requests of one route class (intake, reads, writes) the app works on at once; more wait
        for a slot (:class:`anonml.serving.Admission`). 4: more threads add no throughput to one
        SQLite writer under the GIL, and take the GIL from the event loop that answers the shed.
    admission_wait_share : float
        Share of its client's deadline a request may wait for a slot; one that cannot be served
        within it is answered 503 with ``Retry-After`` (at once when the measured service rate
        says so) instead of queueing past its client's deadline.
    ca_bundle : Path or None
        Verify the certificates of witnesses (every outbound request) against
        this PEM bundle only, instead of the system's store
        (:func:`anonml.outbound.trust_ca_bundle`; default ``$ANONML_CA_BUNDLE``).
    """

    model_config = ConfigDict(extra="forbid")

    db_url: str = Field(default_factory=lambda: f"sqlite:///{_home('aggregator.db')}")
    identity_file: Path = Field(default_factory=lambda: _home("identity.json"))
    identity_passphrase: str | None = None
    admin_token: str = Field(default="", max_length=256)
    host: str = "127.0.0.1"
    port: int = Field(default=8470, ge=0, le=65535)
    tick_seconds: float = Field(default=0.1, gt=0, le=60)
    intake_grace_seconds: float = Field(default=1.0, ge=0, le=3600)
    max_loss_fraction: float = Field(default=0.1, ge=0, le=1)
    lease_seconds: float = Field(default=20.0, ge=1, le=3600)
    max_body_bytes: int = Field(default=1 << 20, ge=4096)
    allow_loopback_http: bool = False
    scale_schedule: bool = True
    peer_poll_seconds: float = Field(default=DEFAULT_REACTION_SECONDS, ge=0, le=3600)
    admission_concurrency: int = Field(default=4, ge=1, le=1024)
    admission_wait_share: float = Field(default=1 / 3, gt=0, lt=1)
    ca_bundle: Path | None = None

    @classmethod
    def from_env(cls, **overrides: Any) -> AggregatorSettings:
        """Settings from ``ANONML_AGGREGATOR_<FIELD>`` variables, then ``overrides``."""
        return settings_from_env(cls, ENV_PREFIX, overrides)

    def resolved_admin_token(self) -> str:
        """The admin token: the configured one, else one stored beside the identity (0600)."""
        if self.admin_token:
            return self.admin_token
        return stored_token(self.identity_file.with_name("admin-token"))
