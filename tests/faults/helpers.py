"""What the fault tests share: peer hosts in processes of their own, their files, the problem they run.

A :class:`PeerProcess` is one ``python -m peer.simulate`` host (killed with
SIGKILL, or stopped by closing its stdin), a :class:`Killable` one aggregator
process at a time on one database; :func:`write_hosts` writes the
manifests of simulated identities split over several hosts; :func:`fault_draft`
is the dropout problem with windows a fault fits in on a loaded machine.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from sqlalchemy import create_engine, text

from aggregator.app import ServerProcess, start_server_process
from aggregator.settings import AggregatorSettings
from anonml.crypto import save_identity
from anonml.demo import simulate_peers
from anonml.protocol import Bins, Problem, ProblemDraft, ReportAccount
from anonml.serving import free_port, spawn_child
from peer.simulate import SimulatedIdentity, SimulationManifest
from tests.loopback import Listener
from tests.peer.helpers import mooc_dropout_draft
from tests.waiting import wait_until

__all__ = [
    "ROOT",
    "FEATURES",
    "LOCAL",
    "PeerProcess",
    "write_hosts",
    "fault_draft",
    "releases",
    "Killable",
    "CuttingProxy",
    "host_behind_proxy",
    "propose_and_close",
    "three_hosts",
    "ended_relay_counters",
    "tmpfs",
    "fill",
]

ROOT = Path(__file__).resolve().parents[2]
FEATURES = ["time_on_site_minutes", "video_seconds_watched", "seq_navigations", "distinct_problems"]
LOCAL = "local-token-for-the-fault-test"


@dataclass
class PeerProcess:
    """One ``python -m peer.simulate`` host; killed with SIGKILL or stopped by closing stdin.

    ``stderr``, when given, is the file its log goes to (appended across restarts).
    """

    manifest: Path
    state: Path
    process: subprocess.Popen | None = None
    url: str = ""
    stderr: Path | None = None

    def start(self) -> None:
        # stdin is the host's stop channel (peer.simulate reads it to the end): an empty first line
        self.process = spawn_child(
            ["-m", "peer.simulate", str(self.manifest)], first_line="", stderr=self.stderr
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        # a sender-only host listens on nothing and says so instead of a URL
        assert self.url.startswith("http://") or self.url == "sender-only", "the peer host did not start"

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def status(self) -> dict:
        reply = requests.get(
            f"{self.url}/local/status", headers={"Authorization": f"Bearer {LOCAL}"}, timeout=30
        )
        reply.raise_for_status()
        return reply.json()

    def rows(self, sql: str) -> list[tuple]:
        engine = create_engine(f"sqlite:///{self.state}")
        try:
            with engine.connect() as c:
                return [tuple(r) for r in c.execute(text(sql))]
        finally:
            engine.dispose()

    def log(self) -> str:
        """What the host wrote to its log so far ("" without a log file)."""
        return "" if self.stderr is None or not self.stderr.exists() else self.stderr.read_text()


def write_hosts(
    root: Path, sizes: dict[str, int], aggregators: list[str], *, seed: int = 5, log: bool = False
) -> dict[str, tuple[PeerProcess, list[str]]]:
    """Simulated identities split over hosts (``name → identities``); each host and its ledgers' URLs.

    Each host gets a manifest naming its identities' key files, stores and
    ledgers, a state DB, ``aggregators`` and a fixed relay port (so a restart
    keeps the relay URLs its roster entries name); nothing is started.
    """
    total = sum(sizes.values())
    simulated, _ = simulate_peers(total, root / "sim", weeks=4, history_weeks=2, seed=seed, features=FEATURES)
    assert len(simulated) >= total, f"the simulation made {len(simulated)} peers, {total} needed"
    hosts: dict[str, tuple[PeerProcess, list[str]]] = {}
    first = 0
    for name, size in sizes.items():
        identities = []
        for i, p in enumerate(simulated[first : first + size]):
            key = root / f"{name}-{i}.key"
            save_identity(p.identity, key, None)
            identities.append(
                SimulatedIdentity(
                    identity_file=key, store_url=p.store.url, ledger_url=p.ledger.url, user=p.username
                )
            )
        first += size
        state = root / f"{name}-state.db"
        manifest = SimulationManifest(
            identities=identities,
            state_url=f"sqlite:///{state}",
            aggregators=aggregators,
            port=free_port(),
            local_token=LOCAL,
        )
        path = root / f"{name}.json"
        path.write_text(manifest.model_dump_json())
        stderr = root / f"{name}.log" if log else None
        hosts[name] = (PeerProcess(path, state, stderr=stderr), [i.ledger_url for i in identities])
    for p in simulated:
        p.store.close()
        p.ledger.close()
    return hosts


def fault_draft(*, send_window_seconds: float = 12.0, release_window_seconds: float = 10.0) -> ProblemDraft:
    """The peer tests' dropout problem (no median pool) with windows a fault fits in on a loaded machine."""
    return mooc_dropout_draft(
        report_delay_seconds=6.0,
        send_window_seconds=send_window_seconds,
        release_window_seconds=release_window_seconds,
    )


def releases(ledger_url: str) -> list[tuple]:
    """Every release row of a peer's privacy ledger (read with SQL, as another process would)."""
    engine = create_engine(ledger_url)
    try:
        with engine.connect() as c:
            names = [r[0] for r in c.execute(text("SELECT name FROM sqlite_master WHERE type='table'"))]
            table = next(n for n in names if "release" in n and "attribute" not in n)
            return [tuple(r) for r in c.execute(text(f"SELECT * FROM {table}"))]
    finally:
        engine.dispose()


@dataclass
class Killable:
    """One aggregator at a time on ``settings``; :meth:`kill` is SIGKILL, :meth:`restart` a new process."""

    settings: AggregatorSettings
    db_path: Path
    current: ServerProcess | None = None
    killed: list[ServerProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        assert self.current is not None
        return self.current.url

    def start(self) -> Killable:
        self.current = start_server_process(self.settings)
        return self

    def kill(self) -> None:
        assert self.current is not None
        self.current.process.kill()  # SIGKILL: no shutdown handler runs
        assert self.current.process.wait(timeout=30) == -9
        self.killed.append(self.current)
        self.current = None

    def restart(self) -> Killable:
        self.kill()
        return self.start()

    def rows(self, sql: str, *args: object) -> list[tuple]:
        with sqlite3.connect(self.db_path) as con:
            return list(con.execute(sql, args))


class CuttingProxy(Listener):
    """A loopback TCP proxy in front of an aggregator that runs ``on_cut`` at the first request
    whose request line contains ``trigger`` — and drops that request, as a dead server would.

    It lets a fault test kill the real aggregator process at an exact protocol step (e.g. the
    first assignment request after the roster is co-signed) instead of guessing it with a sleep.
    Peers are given :attr:`url`; :attr:`target` is where requests go (set it to a restarted
    aggregator's URL); with ``drop``, every request whose request line holds it goes unanswered.
    A request while the target is down is answered by closing the connection
    (counted in :attr:`refused`), which the peer sees as an unreachable server.

    With :attr:`body_mark` set (:meth:`arm`), the proxy reads each whole request first and cuts
    only at one whose body also holds the mark — so a test can arm the cut for a later stage's
    request (``"stage":"bins"``) before the earlier stage's retries are let through.
    """

    def __init__(
        self, target: str, trigger: bytes, on_cut: Callable[[], None], *, drop: bytes | None = None
    ) -> None:
        self.target = target
        self.trigger = trigger
        self.on_cut = on_cut
        self.drop = drop  # requests whose request line holds it are always dropped (counted)
        self.body_mark: bytes | None = None
        self.cut = threading.Event()
        self.refused = 0
        self.dropped = 0
        self._lock = threading.Lock()  # its own: on_cut runs under it, and must not hold up accepting
        super().__init__()
        self.url = f"http://127.0.0.1:{self.port}"

    def _serve(self, client: socket.socket) -> None:
        with client:
            head = b""
            while b"\r\n" not in head and len(head) < 65536:
                chunk = client.recv(65536)
                if not chunk:
                    return
                head += chunk
            request_line = head.split(b"\r\n", 1)[0]
            mark = self.body_mark
            if mark is not None:
                head = _whole_request(client, head)
            with self._lock:
                fire = self.trigger in request_line and not self.cut.is_set()
                fire = fire and (mark is None or mark in head.partition(b"\r\n\r\n")[2])
                if fire:
                    self.on_cut()
                    self.cut.set()
            if fire:
                return  # the request that met the kill gets no answer
            if self.drop is not None and self.drop in request_line:
                with self._lock:
                    self.dropped += 1
                return
            host, port = urlsplit(self.target).hostname, urlsplit(self.target).port
            try:
                upstream = socket.create_connection((host, port), timeout=5)
            except OSError:
                with self._lock:
                    self.refused += 1
                return
            with upstream:
                upstream.sendall(head)
                _pump(client, upstream)


    def arm(self, body_mark: bytes) -> None:
        """Cut again, at the next trigger request whose body holds ``body_mark``."""
        with self._lock:
            self.body_mark = body_mark
            self.cut.clear()


def _whole_request(client: socket.socket, data: bytes) -> bytes:
    """``data`` read on from ``client`` to the end of the request's headers and its
    ``Content-Length`` body (what arrived so far, if the client closes first)."""
    while b"\r\n\r\n" not in data and len(data) < 1 << 20:
        chunk = client.recv(65536)
        if not chunk:
            return data
        data += chunk
    headers, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in headers.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = client.recv(65536)
        if not chunk:
            break
        body += chunk
    return headers + b"\r\n\r\n" + body


@contextlib.contextmanager
def host_behind_proxy(
    root: Path, identities: int, trigger: bytes, *, kill: bool = True, drop: bytes | None = None
) -> Iterator[tuple[Killable, CuttingProxy, PeerProcess]]:
    """A :class:`Killable` aggregator on ``root``, a :class:`CuttingProxy` before it (firing at
    ``trigger``, killing the aggregator when ``kill``; dropping ``drop``) and one started, logging host
    ``h`` of ``identities`` that sees only the proxy. All three are stopped on leaving."""
    from tests.aggregator.helpers import aggregator_settings

    agg = Killable(aggregator_settings(root, port=0), root / "aggregator.db").start()
    proxy = CuttingProxy(agg.url, trigger, agg.kill if kill else lambda: None, drop=drop)
    host, _ = write_hosts(root, {"h": identities}, [proxy.url], log=True)["h"]
    host.start()
    try:
        yield agg, proxy, host
    finally:
        host.stop()
        proxy.close()
        if agg.current is not None:
            agg.current.stop()


@contextlib.contextmanager
def three_hosts(
    root: Path, per_host: int
) -> Iterator[tuple[ServerProcess, PeerProcess, PeerProcess, PeerProcess]]:
    """An aggregator process on ``root`` and three started, logging hosts ``a``, ``b``, ``c`` of
    ``per_host`` identities each, all using it; every one is stopped on leaving."""
    from tests.aggregator.helpers import aggregator_settings

    aggregator = start_server_process(aggregator_settings(root, port=0))
    sizes = {"a": per_host, "b": per_host, "c": per_host}
    hosts = [host for host, _ in write_hosts(root, sizes, [aggregator.url], log=True).values()]
    for host in hosts:
        host.start()
    try:
        yield aggregator, *hosts
    finally:
        for host in hosts:
            host.stop()
        aggregator.stop()


def ended_relay_counters(hosts: list[PeerProcess], timeout: float = 120.0) -> list[dict]:
    """Once every participation of each of ``hosts`` ended (done, degraded, partial or failed): their
    relay counters, in order."""
    ended = ("done", "degraded", "partial", "failed")
    for host in hosts:
        wait_until(
            lambda host=host: all(r[0] in ended for r in host.rows("SELECT phase FROM peer_participations")),
            timeout,
            "every live participation to end",
        )
    return [host.status()["relay"] for host in hosts]


def check_two_live_hosts_account(
    account: ReportAccount, live: list[dict], draft: ProblemDraft, per_host: int
) -> None:
    """What holds when host C of :func:`three_hosts` failed in the send window and ``a``, ``b`` (``live``:
    their :func:`ended_relay_counters`) ran the round to its end.

    The account is exact: expected = 3 ``per_host`` kh = received + lost, and lost = late + refused +
    not arrived. Each live host found one relay host dead (C, and only C). The live relays delivered
    the intake's stored reports plus every repeat it refused (received + duplicates). Each live sender
    accounts for every report (delivered + lost in transit = 2 ``per_host`` kh, counted against the
    receipts), and what they count lost is within the account's loss.
    """
    assert account.expected == 3 * per_host * draft.kh and account.received + account.lost == account.expected
    assert account.lost == account.late + sum(account.refused.values()) + account.not_arrived
    assert all(h.get("host relay hosts found dead", 0) == 1 for h in live), live
    delivered = sum(h.get("delivered", 0) for h in live)
    assert delivered == account.received + account.duplicates, (delivered, account)
    lost_live = sum(h.get("reports lost in transit", 0) for h in live)
    assert sum(h.get("reports delivered", 0) for h in live) + lost_live == 2 * per_host * draft.kh, live
    assert lost_live <= account.lost


def _pump(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways between ``a`` and ``b`` until either side closes."""
    socks = [a, b]
    for s in socks:
        s.settimeout(None)
    while True:
        ready, _, _ = select.select(socks, [], [], 60)
        if not ready:
            return
        for s in ready:
            data = s.recv(65536)
            if not data:
                return
            (b if s is a else a).sendall(data)


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A real tmpfs of ``size`` (``"4m"``) mounted at ``path`` (created) for the block; lazily
    unmounted after. The test is skipped, saying why, where mounting is not permitted (not root, or
    a container without the capability); CI runs as root."""
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs at {path} here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> Path:
    """Write a file in ``directory`` until the filesystem has no byte left (ENOSPC), unbuffered."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 512, 1):  # big writes, then the last partial blocks
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    finally:
        os.close(fd)
    return filler


#: Every identity of a host has sent a copy of its report: one sent row per identity in its outbox.
ALL_SENT_ONE = "SELECT count(DISTINCT node) FROM peer_outbox WHERE sent = 1"


def published_bins(url: str, pid: str) -> Bins | None:
    """The problem's bins once the aggregator published them, else None."""
    reply = requests.get(f"{url}/problems/{pid}/bins", timeout=30)
    return Bins.model_validate_json(reply.content) if reply.status_code == 200 else None


def propose_and_close(
    url: str, draft: ProblemDraft, members: int, timeout: float = 120.0, *, or_deadline: bool = False
) -> Problem:
    """Propose ``draft`` at ``url``, wait until ``members`` identities registered, close registration
    (``or_deadline``: see :func:`tests.aggregator.helpers.close_registration`): the problem."""
    from tests.aggregator.helpers import close_registration, propose, status

    problem = propose(url, draft)
    wait_until(lambda: status(url, problem.id).registered == members, timeout, "every identity to register")
    close_registration(url, problem.id, or_deadline=or_deadline)
    return problem


def open_round(url: str, draft: ProblemDraft, members: int, timeout: float = 120.0) -> tuple[Problem, Bins]:
    """:func:`propose_and_close` (the deadline may close it first), then wait for the bins: the problem
    and its bins (the send window is ``[t_s, t_s + delta]``)."""
    problem = propose_and_close(url, draft, members, timeout, or_deadline=True)
    return problem, wait_until(lambda: published_bins(url, problem.id), timeout, "the bins")


#: The latest point of the send window (a fraction of it) at which a fault test fails its host: the
#: live hosts must still find it dead and send around it before the window closes. Waiting for every
#: identity's first copy alone put the kill at 0.98 of the window once under CI's load, and with no
#: time left to find the dead host the routes through it lost 12 of 24 reports.
FAULT_BY_FRACTION = 0.6


def round_with_copies_sent(
    url: str, draft: ProblemDraft, members: int, faulty_rows: Callable[[str], list], per_host: int,
    timeout: float = 120.0,
) -> tuple[Problem, Bins]:
    """:func:`open_round`, then wait until every identity of the host about to fail (``faulty_rows``
    runs SQL in its state database) sent one copy of its report, or :data:`FAULT_BY_FRACTION` of the
    send window passed.

    A report none of whose copies left its sender is lost whatever the protocol does, so a fault
    made now costs only what the routes lose (:func:`reports_with_no_copy_out` counts the others).
    """
    problem, bins = open_round(url, draft, members, timeout)
    by = bins.t_s + FAULT_BY_FRACTION * bins.delta
    wait_until(lambda: faulty_rows(ALL_SENT_ONE)[0][0] == per_host or time.time() >= by,
               timeout + by - time.time(), "every identity of the failing host to send a copy")
    return problem, bins


def reports_with_no_copy_out(faulty_rows: Callable[[str], list], per_host: int, kh: int) -> int:
    """Reports of the failed host none of whose copies it had sent (read after the fault: what its
    state database holds then), which no route can deliver."""
    return (per_host - faulty_rows(ALL_SENT_ONE)[0][0]) * kh
