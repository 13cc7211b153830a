"""How long one relay hop takes on this host now: a short burst of real packets through its own relays.

A round's packet windows must hold the work the relays do in them: every
packet is one request at each of its ``h`` hops, and a host that relays for
many identities (the demo's single host relays for all of them) serves those
requests one after another on one interpreter. What one request costs there
depends on the machine's load at the time — under two busy CPU loops it is
several times the quiet figure — so it is measured, not assumed.

:func:`measure_hop_seconds` opens a throwaway relay round (a random round id,
no roster: bare packets) on ``hops`` of the host's identities, sends
``packets`` cover onions over that route to the host's own relay URL from
``senders`` threads at once, and times until the last hop has delivered every
one to a local sink that stands in for the intake. Each packet takes the path
of a real round's packet: the HTTP route, the peel, the sealed hold in the
state DB, the dispatcher, the outbound post to the next hop, the last hop's
delivery (the releases are due at once: the probe measures the work, not the
waits). ``seconds_per_hop = wall seconds / (packets · hops)`` is then the
inverse of the hop throughput the host sustains under the current load —
``L`` of :func:`anonml.schedule.schedule_floors`. The round is closed after
(its key and replay tags dropped, nothing held), and the relay counters it
moved are given back so the host's figures count only real rounds.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

from anonml.crypto import Hop, Identity, SphinxRelay, WindowSchedule, build_packet
from anonml.errors import AnonMLError
from anonml.outbound import retry_after_seconds
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.relay import RelayRound, StoredReplayCache

__all__ = ["HopProbe", "measure_hop_seconds"]

#: Seconds the probe's relay round stays open at most (it is closed as soon as the burst is through).
PROBE_ROUND_SECONDS = 600.0


@dataclass(frozen=True)
class HopProbe:
    """One probe: ``packets`` onions over ``hops`` relays in ``seconds`` of wall time."""

    packets: int
    hops: int
    seconds: float

    @property
    def seconds_per_hop(self) -> float:
        """Wall seconds per relay request the host sustained: ``seconds / (packets · hops)``."""
        return self.seconds / (self.packets * self.hops)


class _Sink(ThreadingHTTPServer):
    """Takes the last hop's deliveries (``POST /intake``, ``POST /intake/batch``) and counts them."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _SinkHandler)
        self.delivered = 0
        self.cond = threading.Condition()

    def took(self, n: int) -> None:
        with self.cond:
            self.delivered += n
            self.cond.notify_all()

    def wait_for(self, n: int, deadline: float) -> bool:
        with self.cond:
            left = max(0.0, deadline - time.monotonic())
            return self.cond.wait_for(lambda: self.delivered >= n, timeout=left)


class _SinkHandler(BaseHTTPRequestHandler):
    server: _Sink

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path.endswith("/batch"):
            n = len(json.loads(body)["deliveries"])
            reply = json.dumps({"results": [{"status": 202, "detail": ""}] * n}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
        else:
            n, reply = 1, b""
            self.send_response(202)
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)
        self.server.took(n)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's signature
        return  # one line per delivery on stderr says nothing the count does not


@contextmanager
def _sink() -> Iterator[_Sink]:
    sink = _Sink()
    thread = threading.Thread(target=sink.serve_forever, name="probe-sink", daemon=True)
    thread.start()
    try:
        yield sink
    finally:
        sink.shutdown()
        sink.server_close()
        thread.join(timeout=10)


def _open_probe_round(
    host: PeerHost, nodes: Sequence[PeerNode], round_id: int, routes: dict[bytes, str], intake_url: str
) -> list[Hop]:
    """Open relay round ``round_id`` on each of ``nodes`` (in that order, delivering to ``intake_url``)
    and return the onion path through them: one :class:`~anonml.crypto.Hop` per node's fresh round key."""
    now = time.time()
    # The send window is over and the guard covers the release window: every release is due at once.
    schedule = WindowSchedule(now - 2.0, 1.0, now + PROBE_ROUND_SECONDS)
    path = []
    for node in nodes:
        key, cert = node.identity.new_round_relay_key(round_id)
        path.append(Hop.from_certificate(cert, round_id))
        host.relay.open_round(
            RelayRound(
                node_id=node.node_id,
                round_id=round_id,
                relay=SphinxRelay(key, StoredReplayCache(host.db, node.node_id, round_id)),
                schedule=schedule,
                routes=dict(routes),
                destination=bytes(16),
                intake_url=intake_url,
                guard=PROBE_ROUND_SECONDS,
                stages=len(nodes),
                vault=node.vault,  # held packets sealed in the state DB, as in a real round
            )
        )
    return path


def _send_burst(first: str, onions: Sequence[bytes], senders: int, timeout: float) -> Counter[int]:
    """POST every onion to the first hop's URL from ``senders`` threads at once; the count of each
    final HTTP status (a 503 is retried after its ``Retry-After``, within ``timeout`` per packet)."""
    local = threading.local()

    def send(packet: bytes) -> int:
        session = getattr(local, "session", None) or requests.Session()
        local.session = session
        headers = {"content-type": "application/octet-stream"}
        deadline = time.monotonic() + timeout
        while True:
            reply = session.post(first, data=packet, headers=headers, timeout=timeout)
            # 503 is the relay's "overloaded, try again" (beside two busy loops 5 of 40 got it):
            # waited out and counted in the measured time, so the windows only grow with it.
            wait = min(retry_after_seconds(reply.headers.get("retry-after")) or 0.5, 2.0)
            if reply.status_code != 503 or time.monotonic() + wait > deadline:
                return reply.status_code
            time.sleep(wait)

    with ThreadPoolExecutor(max_workers=senders, thread_name_prefix="probe") as pool:
        return Counter(pool.map(send, onions))


def measure_hop_seconds(
    host: PeerHost,
    *,
    packets: int = 40,
    hops: int = 3,
    senders: int = 8,
    timeout: float = 120.0,
) -> HopProbe:
    """Time ``packets`` cover onions over ``hops`` of ``host``'s identities (module docstring).

    Parameters
    ----------
    host : PeerHost
        A host whose server is up (:attr:`PeerHost.relay_base` set) with at least ``hops`` identities.
    packets, hops, senders : int
        The burst: how many onions, over how many relays, sent by how many threads at once.
    timeout : float
        Seconds the whole burst may take.

    Raises
    ------
    AnonMLError
        When the host cannot be probed (no server, too few identities) or the burst did not get
        through in ``timeout`` (naming how many of the packets were delivered).
    """
    if packets < 1 or hops < 1 or senders < 1:
        raise AnonMLError(f"a probe needs packets, hops, senders ≥ 1, got {packets}, {hops}, {senders}")
    if host.relay_base is None:
        raise AnonMLError("the host has no relay URL yet: start its server before probing it")
    nodes: Sequence[PeerNode] = list(host.nodes.values())[:hops]
    if len(nodes) < hops:
        raise AnonMLError(f"a {hops}-hop probe needs {hops} identities on the host, it has {len(nodes)}")
    round_id = secrets.randbits(63)  # not any problem's round: ids are drawn from 2^64 at random
    base = host.relay_base.rstrip("/")
    routes = {n.node_id: f"{base}/relay/{n.node_id.hex()}" for n in nodes}
    before = Counter(host.relay.counters)
    with _sink() as sink:
        intake_url = f"http://127.0.0.1:{sink.server_address[1]}/intake"
        path = _open_probe_round(host, nodes, round_id, routes, intake_url)
        try:
            intake = Identity.generate().public.relay_key
            onions = [
                build_packet(path, None, None, round_id=round_id, destination=bytes(16), intake_key=intake)
                for _ in range(packets)
            ]
            started = time.monotonic()
            codes = _send_burst(routes[nodes[0].node_id], onions, senders, timeout)
            if codes.get(202, 0) != packets:
                raise AnonMLError(f"the relay probe's first hop refused packets: statuses {dict(codes)}")
            if not sink.wait_for(packets, started + timeout):
                raise AnonMLError(
                    f"the relay probe delivered {sink.delivered} of {packets} packets in {timeout:.0f} s"
                )
            seconds = time.monotonic() - started
            # A hop counts "forwarded" when the next hop's answer is read, which may come after the
            # last hop delivered: wait for those counts too, so the probe gives back all it moved.
            done = {"forwarded": packets * (hops - 1), "delivered": packets}
            while any(host.relay.counters[k] - before[k] < n for k, n in done.items()):
                if time.monotonic() > started + timeout:
                    raise AnonMLError(f"the relay probe's hops did not settle in {timeout:.0f} s")
                time.sleep(0.01)
        finally:
            for node in nodes:
                host.relay.close_round(node.node_id, round_id)
            moved = Counter(host.relay.counters)
            moved.subtract(before)
            for what, n in moved.items():
                if n:
                    host.relay.count(what, -n)
    return HopProbe(packets=packets, hops=hops, seconds=seconds)
