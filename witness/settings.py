"""Where a witness keeps its state and where it listens."""

from __future__ import annotations

from pathlib import Path

from pydantic import ConfigDict, Field

from anonml.serving import TlsSettings

__all__ = ["WitnessSettings"]


class WitnessSettings(TlsSettings):
    """A witness's settings.

    Attributes
    ----------
    home : Path
        Its folder (made 0700): ``identity.json`` (its Ed25519/X25519 identity,
        0600) and ``witness.db`` (the log, 0600).
    identity_passphrase : str or None
        Passphrase of the key file (None: a plain 0600 file).
    host, port : str, int
        Where it listens (port 0: a free one).
    max_body_bytes : int
        Largest request body read (a cosign request is about 500 bytes).
    tls_cert, tls_key : Path or None
        Serve https with this certificate chain and key
        (:class:`anonml.serving.TlsSettings`); neither: plain http.
    """

    model_config = ConfigDict(extra="forbid")

    home: Path
    identity_passphrase: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8472, ge=0, le=65535)
    max_body_bytes: int = Field(default=8192, ge=1024, le=1 << 20)

    @property
    def identity_file(self) -> Path:
        return self.home / "identity.json"

    @property
    def db_path(self) -> Path:
        return self.home / "witness.db"
