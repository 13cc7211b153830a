"""A scripted HTTP server on loopback, for the tests that play an aggregator or a relay whole request
by whole request (a hostile one, or one that sheds). Where a test needs the socket byte by byte (one
that trickles, or is cut mid-request), :mod:`tests.loopback` is the one to build on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["ScriptedHandler", "served"]


class ScriptedHandler(BaseHTTPRequestHandler):
    """A quiet request handler with one way to read a body and one way to answer."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's signature
        return

    def body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("content-length", "0")))

    def reply(
        self, status: int, body: bytes = b"", content_type: str | None = "application/json",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Answer ``status`` with ``body`` (no content-type header when ``content_type`` is None)."""
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if content_type is not None:
            self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def served(target: type[BaseHTTPRequestHandler] | ThreadingHTTPServer) -> Iterator[str]:
    """Serve a handler class on a free loopback port, or run a server already bound, in a thread;
    yields the base URL and shuts the server down on the way out."""
    if isinstance(target, ThreadingHTTPServer):
        server = target
    else:
        server = ThreadingHTTPServer(("127.0.0.1", 0), target)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
