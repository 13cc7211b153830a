"""Slow clients against every server (issue 24, item 6): slowloris, trickled bodies, readers that never read.

The aggregator and the peer relay run as they are served (real uvicorn on
loopback, :func:`anonml.serving.uvicorn_server`, its default limits), and hundreds
of half-open connections trickle their headers one byte a second: ``/healthz``
still answers, and the server drops every slow connection by its header
deadline. With tighter :class:`~anonml.serving.ConnectionLimits` (so a test
takes seconds): a trickled body is dropped at its deadline, a client that reads
nothing of a large answer is dropped, one client cannot hold more than its share
of connections (the next gets 503 at once), nor all clients together more than
the total.
"""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

from aggregator.app import create_app, start_server
from anonml.crypto import Identity
from anonml.privacy import PrivacyLedger
from anonml.serving import ConnectionLimits, ThreadedServer, bind, start_in_thread, uvicorn_server
from anonml.store import EventStore
from peer.app import start_peer_server
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.policy import PeerPolicy
from tests.aggregator.helpers import aggregator_settings
from tests.waiting import answers_ok, wait_until

#: Half-open connections of the slowloris tests.
SLOW = 300
HEAD = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: "
#: Tight limits for the tests that exercise one limit each (loopback counted per client).
TIGHT = ConnectionLimits(header_seconds=1.0, body_seconds=2.0, write_seconds=2.0, per_client=8,
                         limit_loopback=True)


class SlowClients:
    """``n`` connections to ``port`` that send ``head`` and then one more byte each every second."""

    def __init__(self, port: int, n: int, head: bytes = HEAD) -> None:
        self.socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(n)]
        self.answers = {id(s): b"" for s in self.socks}
        self._closed: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        for sock in self.socks:
            sock.sendall(head)
        self._thread = threading.Thread(target=self._drip, daemon=True)
        self._thread.start()

    def _drip(self) -> None:
        while not self._stop.wait(1.0):
            for sock in self.socks:
                if id(sock) in self.closed_ids():
                    continue
                try:
                    sock.send(b"a")
                except OSError:
                    self._mark(sock)

    def _mark(self, sock: socket.socket) -> None:
        with self._lock:
            self._closed.add(id(sock))

    def closed_ids(self) -> set[int]:
        with self._lock:
            return set(self._closed)

    def closed(self) -> int:
        """How many the server has closed (each read to its end: an answer, then EOF or a reset)."""
        poller = select.poll()
        by_fd = {}
        for sock in self.socks:
            if id(sock) not in self.closed_ids():
                poller.register(sock.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
                by_fd[sock.fileno()] = sock
        for fd, _ in poller.poll(0):
            sock = by_fd[fd]
            try:
                data = sock.recv(65536)
            except OSError:
                self._mark(sock)
                continue
            if data:
                self.answers[id(sock)] += data
            else:
                self._mark(sock)
        return len(self.closed_ids())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for sock in self.socks:
            sock.close()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _open(server: ThreadedServer) -> int:
    return len(server.server.server_state.connections)


def _slowloris(server: ThreadedServer) -> None:
    """Hundreds of trickled headers: held, ``/healthz`` answers meanwhile, all dropped by the deadline."""
    slow = SlowClients(_port(server.url), SLOW)
    try:
        wait_until(lambda: _open(server) >= SLOW, 60, f"the server to hold the {SLOW} slow connections")
        assert requests.get(f"{server.url}/healthz", timeout=30).status_code == 200
        wait_until(lambda: slow.closed() == SLOW, 120, "the server to drop every slow connection")
        assert all(answer == b"" for answer in slow.answers.values())  # dropped, never answered
        wait_until(lambda: _open(server) <= 1, 30, "the server to let go of them")
    finally:
        slow.close()


def test_slowloris_against_the_aggregator(tmp_path: Path, database_url: str):
    server = start_server(create_app(aggregator_settings(tmp_path, db_url=database_url)))
    try:
        _slowloris(server)
    finally:
        server.stop()


def test_slowloris_against_the_peer_relay():
    node = PeerNode(Identity.generate(), EventStore("sqlite://"), PrivacyLedger("sqlite://"))
    host = PeerHost([node], PeerDB("sqlite://"), PeerPolicy(allow_loopback_http=True), [],
                    rng=np.random.default_rng(1))
    server = start_peer_server(host)
    try:
        _slowloris(server)
        # The relay route still answers after the attack (an unknown round: 404, not a hang).
        reply = requests.get(f"{server.url}/relay/{node.node_id.hex()}/roster/p-x", timeout=30)
        assert reply.status_code == 404
    finally:
        server.stop()
        host.close()


@pytest.fixture
def tight_aggregator(tmp_path: Path, database_url: str) -> Iterator[ThreadedServer]:
    sock = bind("127.0.0.1", 0)
    server = uvicorn_server(create_app(aggregator_settings(tmp_path, db_url=database_url)), limits=TIGHT)
    thread = start_in_thread(server, sock, name="aggregator")
    handle = ThreadedServer(f"http://127.0.0.1:{sock.getsockname()[1]}", server, thread)
    yield handle
    handle.stop()


def test_a_body_trickled_past_its_deadline_is_dropped(tight_aggregator):
    head = (b"POST /problems/p-x/registrations HTTP/1.1\r\nhost: 127.0.0.1\r\n"
            b"content-type: application/json\r\ncontent-length: 1000\r\n\r\n{")
    slow = SlowClients(_port(tight_aggregator.url), 4, head)
    try:
        wait_until(lambda: slow.closed() == 4, 60, "the trickled bodies to be dropped")
        assert all(answer == b"" for answer in slow.answers.values())
    finally:
        slow.close()
    assert requests.get(f"{tight_aggregator.url}/healthz", timeout=30).status_code == 200


def test_one_client_holds_at_most_its_share_of_connections(tight_aggregator):
    slow = SlowClients(_port(tight_aggregator.url), TIGHT.per_client)
    try:
        wait_until(lambda: _open(tight_aggregator) >= TIGHT.per_client, 60, "the slow connections to be held")
        with socket.create_connection(("127.0.0.1", _port(tight_aggregator.url)), timeout=30) as extra:
            extra.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            answer = extra.recv(4096)
        assert answer.startswith(b"HTTP/1.1 503 "), answer  # refused at once, not queued
        wait_until(lambda: slow.closed() == TIGHT.per_client, 60, "the slow connections to be dropped")
    finally:
        slow.close()
    wait_until(lambda: answers_ok(f"{tight_aggregator.url}/healthz"), 30, "/healthz to answer again")


def test_the_total_of_connections_is_capped(tmp_path: Path):
    """Loopback clients are exempt from the per-client cap by default, not from the total."""
    limits = ConnectionLimits(header_seconds=1.0, total=12)
    app = Starlette(routes=[Route("/healthz", lambda request: StreamingResponse(iter([b"ok"])))])
    sock = bind("127.0.0.1", 0)
    server = uvicorn_server(app, lifespan="off", limits=limits)
    handle = ThreadedServer(f"http://127.0.0.1:{sock.getsockname()[1]}", server,
                            start_in_thread(server, sock, name="capped"))
    try:
        slow = SlowClients(_port(handle.url), 12)
        try:
            wait_until(lambda: _open(handle) >= 12, 60, "the slow connections to be held")
            with socket.create_connection(("127.0.0.1", _port(handle.url)), timeout=30) as extra:
                extra.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
                assert extra.recv(4096).startswith(b"HTTP/1.1 503 ")
            wait_until(lambda: slow.closed() == 12, 60, "the slow connections to be dropped")
        finally:
            slow.close()
        wait_until(lambda: answers_ok(f"{handle.url}/healthz"), 30, "/healthz to answer again")
    finally:
        handle.stop()


def test_a_client_that_never_reads_its_answer_is_dropped():
    chunk = bytes(1 << 16)

    async def endless(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(4096):  # 256 MiB: far more than any socket buffer
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    sock = bind("127.0.0.1", 0)
    server = uvicorn_server(endless, lifespan="off", limits=TIGHT)
    handle = ThreadedServer(f"http://127.0.0.1:{sock.getsockname()[1]}", server,
                            start_in_thread(server, sock, name="endless"))
    reader = socket.socket()
    try:
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.connect(("127.0.0.1", _port(handle.url)))
        reader.sendall(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        wait_until(lambda: _open(handle) == 1, 60, "the request to be taken")
        wait_until(lambda: _open(handle) == 0, 60, "the server to drop the client that reads nothing")
    finally:
        reader.close()
        handle.stop()


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),  # the same /64: one client
        ("127.0.0.1", None),
        ("::1", None),
    ],
)
def test_clients_are_counted_by_address_and_ipv6_by_its_64(address, key):
    assert ConnectionLimits().client_key((address, 5000)) == key
    if key is None:
        assert ConnectionLimits(limit_loopback=True).client_key((address, 5000)) is not None


def test_limits_refuse_nonsense():
    with pytest.raises(ValueError, match="header_seconds"):
        ConnectionLimits(header_seconds=0)
    with pytest.raises(ValueError, match="per_client"):
        ConnectionLimits(per_client=0)
