"""The one raw TCP listener the hostile-server and fault tests build their servers on.

A test that plays a misbehaving server (one that trickles, drops, never answers, or is cut at an
exact request) needs a socket it controls byte by byte, which no HTTP framework gives. Each such
server subclasses :class:`Listener` and says only what it does with one connection.
"""

from __future__ import annotations

import abc
import socket
import threading

__all__ = ["Listener"]


class Listener(abc.ABC):
    """A TCP listener on ``address`` (loopback by default, any free port) whose accept thread counts
    each connection in :attr:`accepted` and hands it to :meth:`_serve`, in a thread of its own, until
    :meth:`close`.

    Subclasses set their own attributes before calling ``__init__``: the accept thread starts here,
    and a connection may be served at once.
    """

    def __init__(self, address: str = "127.0.0.1", backlog: int | None = None) -> None:
        self.sock = socket.create_server((address, 0), backlog=backlog)  # None: the system's default
        self.sock.settimeout(0.2)  # how long :meth:`close` waits, at most, for the accept thread
        self.port: int = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.accepted = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:  # the accept timed out (look at the stop flag again) or the socket closed
                continue
            with self.lock:
                self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @abc.abstractmethod
    def _serve(self, conn: socket.socket) -> None:
        """Do with one accepted connection what this server does (and close it)."""

    def close(self) -> None:
        """Stop accepting; connections being served see :attr:`stop` set."""
        self.stop.set()
        self._thread.join(10)
        self.sock.close()
