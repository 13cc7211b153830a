"""Every outbound call of a peer ends by its deadline, whatever the other side sends (issue 24, item 5).

The other side is a raw TCP server on loopback (a thread per connection) that
answers in one hostile shape: the headers at once and then the body one byte
every two seconds — over HTTP/1.0, with ``Connection: close``, kept alive, or
chunked —, the status line and headers themselves trickled, a TLS handshake
trickled, or nothing at all (a black hole). Each trickle would take 60 s; a
request with a 2 s deadline must give up well before, and close its
connection (the server sees it closed). A name lookup that never returns is
cut at the deadline as well.

A black-hole aggregator (accepts, never answers) costs a peer host's poll of
it its deadline, after which the next aggregator is asked.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from anonml.model import FeatureSpec
from anonml.outbound import KeepAlive, OutboundError, fetch, post
from anonml.plugins import PluginRef
from peer.client import AggregatorClient, fetch_witness
from peer.db import PeerDB
from peer.discovery import discover
from tests.aggregator.conftest import aggregator  # noqa: F401 - a fixture, registered by import
from tests.aggregator.helpers import draft, propose
from tests.loopback import Listener
from tests.waiting import wait_until

#: Seconds between two trickled bytes, and bytes trickled: the whole answer would take 60 s.
EVERY, BYTES = 2.0, 30
DEADLINE = 2.0
#: The request must have ended by then: the deadline plus a generous margin for a loaded machine.
BOUND = 10.0
HEX = "ab" * 16

BODY = b"x" * BYTES
#: What each shape sends at once, and what it then trickles, byte by byte.
SHAPES: dict[str, tuple[bytes, bytes]] = {
    "http/1.0 body": (b"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n", BODY),
    "connection: close body": (
        b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: %d\r\n\r\n" % BYTES,
        BODY,
    ),
    "keep-alive body": (b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % BYTES, BODY),
    "chunked body": (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n", b"1\r\nx\r\n" * 10),
    "http/1.0 headers": (b"", b"HTTP/1.0 200 OK\r\nx-slow: " + b"y" * BYTES),
    "tls handshake": (b"", b"\x16\x03\x03" + bytes(BYTES - 3)),
    "black hole": (b"", b""),
}


class Trickler(Listener):
    """A TCP server on loopback that reads a request and answers in ``shape`` (module docstring)."""

    def __init__(self, shape: str) -> None:
        self.shape = shape
        self.closed = 0  # connections the client closed (seen as EOF, a reset or a broken pipe)
        super().__init__(backlog=16)

    @property
    def url(self) -> str:
        scheme = "https" if self.shape == "tls handshake" else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def _serve(self, conn: socket.socket) -> None:
        head, trickle = SHAPES[self.shape]
        try:
            if not conn.recv(65536):  # the request (or a TLS ClientHello)
                raise ConnectionResetError
            conn.sendall(head)
            for byte in trickle:
                if self.stop.wait(EVERY):
                    return
                conn.sendall(bytes([byte]))
            # Nothing more to send (or a black hole): hold the connection until the client closes it.
            conn.settimeout(EVERY)
            while not self.stop.is_set():
                try:
                    if not conn.recv(65536):
                        raise ConnectionResetError
                except TimeoutError:
                    continue
        except OSError:
            with self.lock:
                self.closed += 1
        finally:
            conn.close()


@pytest.fixture
def trickler() -> Iterator[Callable[[str], Trickler]]:
    servers: list[Trickler] = []

    def make(shape: str) -> Trickler:
        servers.append(Trickler(shape))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def _ends_in_time(call: Callable[[], object]) -> OutboundError:
    start = time.monotonic()
    with pytest.raises(OutboundError) as caught:
        call()
    elapsed = time.monotonic() - start
    assert elapsed < BOUND, f"gave up after {elapsed:.1f} s (deadline {DEADLINE:g} s; the trickle takes 60 s)"
    return caught.value


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_fetch_gives_up_at_its_deadline_and_closes_its_connection(trickler, shape):
    server = trickler(shape)
    error = _ends_in_time(lambda: fetch("GET", f"{server.url}/problems", deadline=DEADLINE))
    assert server.url in str(error) and f"within {DEADLINE:g} s" in str(error)
    assert server.accepted == 1
    # The connection was closed, not left to the trickler (it would hold a descriptor for 60 s).
    wait_until(lambda: server.closed == 1, 30, "the trickler to see the connection closed")


@pytest.mark.parametrize(
    "shape", ["http/1.0 body", "connection: close body", "chunked body", "http/1.0 headers"]
)
def test_a_packet_post_on_a_kept_alive_pool_gives_up_at_its_deadline(trickler, shape):
    server = trickler(shape)
    keep = KeepAlive()
    try:
        _ends_in_time(
            lambda: post(f"{server.url}/relay/{HEX}", bytes(100), "application/octet-stream",
                         deadline=DEADLINE, keep_alive=keep)
        )
        origin = ("http", "127.0.0.1", int(server.url.rsplit(":", 1)[1]))
        assert keep.take(origin) is None  # a connection that failed is never kept
    finally:
        keep.close()


def test_the_aggregator_client_and_the_fingerprint_fetch_give_up_at_their_deadlines(trickler, monkeypatch):
    """Both use fetch: the client its per-call deadline, the fingerprint fetch its own 5 s."""
    import peer.client

    monkeypatch.setattr(peer.client, "AGGREGATOR_DEADLINE", DEADLINE)
    server = trickler("http/1.0 body")
    _ends_in_time(lambda: AggregatorClient(server.url).problems())
    start = time.monotonic()
    with pytest.raises(OutboundError):
        fetch_witness(f"{trickler('connection: close body').url}/relay/{HEX}", "p-x", allow_loopback=True)
    assert time.monotonic() - start < 5.0 + BOUND - DEADLINE


def test_a_name_lookup_that_never_returns_is_cut_at_the_deadline(monkeypatch):
    real = socket.getaddrinfo
    release = threading.Event()

    def silent_name_server(host, port, *args, **kwargs):
        if host == "relay.invalid" and not kwargs.get("flags", 0) & socket.AI_NUMERICHOST:
            release.wait(120)
            raise socket.gaierror(socket.EAI_AGAIN, "no answer")
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", silent_name_server)
    try:
        error = _ends_in_time(lambda: fetch("GET", "https://relay.invalid/healthz", deadline=DEADLINE))
        assert "relay.invalid" in str(error)
    finally:
        release.set()


# --- a black-hole aggregator ---------------------------------------------------------------------


def _mooc_draft(min_peers: int):
    """A small problem over features the MOOC featurizer computes (what the simulation policy accepts)."""
    features = (FeatureSpec(name="sessions", low=0, high=20), FeatureSpec(name="active_days", low=0, high=14))
    return draft(min_peers=min_peers, kp=1).model_copy(
        update={"features": features, "featurizer": PluginRef(name="mooc_engagement", params={"weeks": 2})}
    )


def test_a_poll_of_a_black_hole_costs_its_deadline_and_the_other_aggregator_is_still_asked(
    trickler, aggregator, tmp_path: Path, monkeypatch  # noqa: F811
):
    import peer.client

    monkeypatch.setattr(peer.client, "AGGREGATOR_DEADLINE", DEADLINE)
    hole = trickler("black hole")
    problem = propose(aggregator.url, _mooc_draft(4))
    db = PeerDB(f"sqlite:///{tmp_path / 'peer.db'}")
    start = time.monotonic()
    found = discover(db, [hole.url, aggregator.url])
    assert time.monotonic() - start < BOUND
    assert [p.id for p in found] == [problem.id] and hole.accepted == 1


# --- a trickling witness -------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["http/1.0 body", "connection: close body", "chunked body", "black hole"])
def test_the_aggregator_gives_up_on_a_trickling_witness_at_its_deadline(trickler, shape):
    """The aggregator's cosign request goes through the same bounded fetch: a witness that
    trickles its answer (60 s in all) costs the round at most the request's deadline."""
    from aggregator.rounds import _ask_witness
    from anonml.crypto import Identity
    from anonml.protocol import TranscriptStatement, WitnessRef

    server = trickler(shape)
    witness = WitnessRef(identity=bytes(Identity.generate().public), url=server.url)
    statement = TranscriptStatement(
        aggregator=bytes(Identity.generate().public),
        problem_id="p-trickle",
        stage="roster",
        transcript=bytes(32),
    )
    start = time.monotonic()
    outcome = _ask_witness(witness, "{}", statement, timeout=DEADLINE)
    assert time.monotonic() - start < BOUND
    assert isinstance(outcome, str) and outcome.startswith("unreachable")
    assert f"within {DEADLINE:g} s" in outcome


def test_a_black_hole_aggregator_never_holds_up_a_running_hosts_work_for_another(
    trickler, aggregator, tmp_path: Path, monkeypatch  # noqa: F811
):
    """A host's worker polls a black hole (first in its list) and a real aggregator: each aggregator
    has a lane of its own, so the real problem is discovered, accepted and registered while the
    black hole still holds its request open (its deadline here is 60 s; sequential polls would
    register nothing before it passed)."""
    import numpy as np

    import peer.client
    from anonml.crypto import Identity
    from anonml.privacy import PrivacyLedger
    from anonml.store import EventStore
    from peer.participant import PeerNode
    from tests.aggregator.helpers import status
    from tests.peer.helpers import simulation_host

    monkeypatch.setattr(peer.client, "AGGREGATOR_DEADLINE", 60.0)
    hole = trickler("black hole")
    problem = propose(aggregator.url, _mooc_draft(4))
    nodes = [
        PeerNode(Identity.generate(), EventStore("sqlite://"), PrivacyLedger("sqlite://"), rng=rng)
        for rng in (np.random.default_rng(1), np.random.default_rng(2))
    ]  # fmt: skip
    host = simulation_host(nodes, tmp_path / "peer.db", aggregator.url)
    host.aggregators = [hole.url, aggregator.url]
    host.relay_base = "http://127.0.0.1:9"  # never contacted: registration only
    host.worker.start()
    try:
        wait_until(
            lambda: status(aggregator.url, problem.id).registered == 2, 50, "both identities to register"
        )
        assert hole.accepted >= 1 and hole.closed == 0, "the black hole's poll had already given up"
    finally:
        host.close()
