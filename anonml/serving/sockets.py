"""Where a service listens: the bound socket, its TLS certificate and the URL it is reached at."""

from __future__ import annotations

import random
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, model_validator

__all__ = ["bind", "free_port", "ServerTls", "server_tls", "TlsSettings", "base_url"]


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0 = a free port) with ``SO_REUSEADDR``, not yet listening."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


#: The lowest port :func:`free_port` hands out below the kernel's ephemeral range.
LOWEST_FREE_PORT = 20000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_low() -> int | None:
    """The first port the kernel picks outgoing connections' source ports from (Linux), or None."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` nothing listens on at the time of the call.

    For a server started in another process that must be told its port first
    (another process may still take it before that server binds it). Where the kernel
    says its ephemeral range (Linux), the port is drawn below it: a port from that range
    (what binding port 0 gives) can be taken meanwhile as the source port of any outgoing
    connection on the machine, and a fault test's peer host, told its port and started
    seconds later, once found it in use.
    """
    low = _ephemeral_low()
    if low is not None and low > LOWEST_FREE_PORT + 1000:
        for _ in range(200):
            port = random.randrange(LOWEST_FREE_PORT, low)
            with socket.socket() as probe:
                try:
                    probe.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])

@dataclass(frozen=True)
class ServerTls:
    """The PEM certificate chain (leaf first) and private key a service serves https with.

    Checked when made: both files must load as a matching pair (the TLS
    server context uvicorn builds from them), so a wrong path or a key of
    another certificate is refused at start, naming the files, instead of
    failing every handshake later.
    """

    cert: Path
    key: Path

    def __post_init__(self) -> None:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(self.cert), str(self.key))
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"TLS certificate {self.cert} with key {self.key}: cannot be loaded as a PEM certificate "
                f"chain and its private key ({exc})"
            ) from None


def server_tls(cert: Path | None, key: Path | None) -> ServerTls | None:
    """:class:`ServerTls` from a service's ``tls_cert`` / ``tls_key`` settings (both or neither).

    Raises
    ------
    ValueError
        When only one is given, or they do not load (:class:`ServerTls`).
    """
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        given = "tls_cert" if key is None else "tls_key"
        raise ValueError(f"tls_cert and tls_key go together: got only {given}")
    return ServerTls(cert, key)


class TlsSettings(BaseModel):
    """The settings of a service that may serve https itself (a base of its settings model).

    Attributes
    ----------
    tls_cert, tls_key : Path or None
        PEM certificate chain (leaf first) and its private key; both given: the
        service serves https only (:class:`ServerTls`, checked when the settings
        are made); neither: plain http, for loopback or behind a TLS proxy.
    """

    tls_cert: Path | None = None
    tls_key: Path | None = None

    @model_validator(mode="after")
    def _tls_loads(self) -> TlsSettings:
        server_tls(self.tls_cert, self.tls_key)
        return self

    def server_tls(self) -> ServerTls | None:
        """What the service serves https with, or None (plain http)."""
        return server_tls(self.tls_cert, self.tls_key)


def base_url(host: str, port: int, tls: ServerTls | None) -> str:
    """The URL of a service listening on ``host:port``: https when it serves ``tls``, else http."""
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if tls is not None else 'http'}://{shown}:{port}"
