"""Loopback ports for tests that start a server in another process and must name its port first."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nothing listens on (at the time of the call)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
