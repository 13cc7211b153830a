"""Network namespaces joined by veth pairs, and the AnonML services of one round run inside them.

What the namespace tests (``tests/network/test_namespaces.py``) and the benchmark across namespaces
(``benchmarks/network_round.py``) share:

- :class:`Network`: the aggregator's namespace (holding bridge ``br0``) and one namespace per
  peer host, each joined to the bridge by a veth pair, plus a veth from the caller's own
  namespace to the bridge (the caller acts as the admin). Addresses come from
  ``10.77.<n>.0/24``; :meth:`Network.cut` takes a host's link down (``ip link set … down``)
  and :meth:`Network.teardown` deletes every namespace and link it made, processes inside
  first, and says what is left if anything is.
- :class:`Deployment`: the aggregator (``python -m aggregator``) and the peer hosts
  (``python -m peer.simulate``) as real processes started with ``ip netns exec``, every
  service serving https with a certificate from a CA made for the run
  (:class:`~tests.network.certs.TestCA`) and every client verifying against it. The
  aggregator and every relay are reached only through a delay proxy in their namespace
  (:mod:`tests.network.delay_proxy`, :data:`DELAY_MS` each way; the kernel here has no
  ``netem``, which is tried on every host link too).

Host kinds (:meth:`Deployment.start_host`): ``relay`` (serves its relay at its address),
``sender`` (sender-only by policy: no server at all) and ``unreachable`` (it means to relay
and checks whether it can be reached, but its server listens only on its namespace's
loopback, so its registered relay URL refuses every connection from outside — as a peer
behind NAT: this machine has neither ``iptables`` nor ``nft`` to block inbound traffic
otherwise).

Needs root and ``ip netns``: :func:`why_not` says why not.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import requests

from aggregator.settings import AggregatorSettings
from anonml.protocol import Roster
from anonml.serving import CHILD_START_SECONDS, child_environment, ready_line
from peer.simulate import SimulationManifest
from tests.aggregator.helpers import aggregator_settings
from tests.faults.helpers import PeerProcess, write_hosts
from tests.network.certs import TestCA

__all__ = [
    "DELAY",
    "DELAY_MS",
    "Deployment",
    "HostKind",
    "Network",
    "deployment",
    "listening",
    "network",
    "round_trip",
    "why_not",
]

DELAY = "50ms"
DELAY_MS = 50
AGGREGATOR_PORT, AGGREGATOR_PROXY_PORT = 8470, 8480
RELAY_PORT, RELAY_PROXY_PORT = 8471, 8481

HostKind = Literal["relay", "sender", "unreachable"]


def why_not() -> str | None:
    """Why namespaces cannot be made here (not root, no ``ip``, ``ip netns add`` refused); None: they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no 'ip' command (iproute2)"
    probe = f"anml-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"'ip netns add' failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@dataclass
class Network:
    """The namespaces of one run: the aggregator's (``agg``, with the bridge) and one per peer host."""

    tag: str
    subnet: str  # e.g. 10.77.3 (a /24)
    namespaces: list[str] = field(default_factory=list)
    hosts: dict[str, int] = field(default_factory=dict)  # host name -> its address's last octet
    delayed: list[str] = field(default_factory=list)  # namespaces whose link has netem delay
    no_delay_reason: str = ""

    def address(self, index: int) -> str:
        return f"{self.subnet}.{index}"

    def namespace(self, name: str) -> str:
        return f"anml-{self.tag}-{name}"

    def host_address(self, name: str) -> str:
        return self.address(self.hosts[name])

    def add(self, name: str) -> str:
        ns = self.namespace(name)
        _ip("netns", "add", ns)
        self.namespaces.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        return ns

    def _host_link(self, index: int) -> str:
        """The host end (inside the host's namespace) of host ``index``'s veth pair."""
        return f"h{self.tag}{index}"

    def build(self, hosts: list[str]) -> None:
        """The aggregator's namespace with bridge ``br0`` at ``.1``; each host's at ``.2``, ``.3``, …."""
        agg = self.add("agg")
        _ip("-n", agg, "link", "add", "br0", "type", "bridge")
        _ip("-n", agg, "addr", "add", f"{self.address(1)}/24", "dev", "br0")
        _ip("-n", agg, "link", "set", "br0", "up")
        for i, name in enumerate(hosts, start=2):
            ns = self.add(name)
            self.hosts[name] = i
            outside, inside = f"a{self.tag}{i}", self._host_link(i)
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", outside, "netns", agg)
            _ip("link", "set", inside, "netns", ns)
            _ip("-n", agg, "link", "set", outside, "master", "br0")
            _ip("-n", agg, "link", "set", outside, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", inside)
            _ip("-n", ns, "link", "set", inside, "up")
            self._delay(ns, inside)
        # The caller's own namespace reaches the bridge too (.254): it proposes and watches as the admin.
        mine, theirs = f"t{self.tag}", f"u{self.tag}"
        _ip("link", "add", mine, "type", "veth", "peer", "name", theirs)
        _ip("link", "set", theirs, "netns", agg)
        _ip("-n", agg, "link", "set", theirs, "master", "br0")
        _ip("-n", agg, "link", "set", theirs, "up")
        _ip("addr", "add", f"{self.address(254)}/24", "dev", mine)
        _ip("link", "set", mine, "up")

    def cut(self, name: str) -> None:
        """Take host ``name``'s only link down (``ip link set <veth> down`` inside its namespace):
        from now on nothing it sends leaves and nothing reaches it, its processes still running."""
        _ip("-n", self.namespace(name), "link", "set", self._host_link(self.hosts[name]), "down")

    def _delay(self, ns: str, dev: str) -> None:
        if shutil.which("tc") is None:
            self.no_delay_reason = "no 'tc' command"
            return
        done = subprocess.run(
            ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "netem", "delay", DELAY],
            capture_output=True, text=True,
        )
        if done.returncode == 0:
            self.delayed.append(ns)
        else:
            self.no_delay_reason = f"tc netem: {done.stderr.strip()}"

    def teardown(self) -> list[str]:
        """Delete every namespace and link this network made; what is left of them (empty: nothing)."""
        for ns in self.namespaces:
            # every process still inside first (a namespace lives on while a process holds it)
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        # the caller's own veth end goes with its peer in the deleted namespace; make sure
        subprocess.run(["ip", "link", "del", f"t{self.tag}"], capture_output=True)
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        left = [ns for ns in self.namespaces if ns in listed]
        if subprocess.run(["ip", "link", "show", f"t{self.tag}"], capture_output=True).returncode == 0:
            left.append(f"link t{self.tag}")
        return left


@contextmanager
def network(hosts: list[str]) -> Iterator[Network]:
    """A :class:`Network` of ``hosts``, torn down on leaving (also on failure); an error names what
    the teardown could not remove."""
    tag = f"{os.getpid() % 100000}"
    net = Network(tag, f"10.77.{os.getpid() % 250 + 1}")
    try:
        net.build(hosts)
        yield net
    finally:
        left = net.teardown()
        if left:
            raise RuntimeError(f"the network's teardown left {left}")


def listening(ns: str) -> list[str]:
    """The listening TCP sockets inside ``ns`` (``ss -ltnH``), one line each."""
    done = subprocess.run(["ip", "netns", "exec", ns, "ss", "-ltnH"], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ss in {ns}: {done.stderr.strip()}")
    return [line for line in done.stdout.splitlines() if line.strip()]


def round_trip(url: str, times: int = 3) -> float:
    """Fewest seconds a ``GET url`` on a new connection (TLS handshake included) took of ``times``.

    The least is what the path costs; the rest is this (shared, loaded) machine's scheduling.
    """
    taken = []
    for _ in range(times):
        start = time.monotonic()
        reply = requests.get(url, timeout=60)
        if reply.status_code != 200:
            raise RuntimeError(f"GET {url}: HTTP {reply.status_code}")
        taken.append(time.monotonic() - start)
    return min(taken)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


@dataclass
class Deployment:
    """The aggregator and the peer hosts of one round across a :class:`Network` (module docstring).

    ``url`` is the aggregator itself (the admin's), ``slow_url`` its delay proxy (what peers use);
    ``hosts`` the started peer hosts by name (:class:`~tests.faults.helpers.PeerProcess`: state DB,
    ``/local/status`` at its address for a host that serves).
    """

    network: Network
    root: Path
    ca: TestCA
    env: dict[str, str]
    url: str = ""
    slow_url: str = ""
    processes: list[subprocess.Popen] = field(default_factory=list)
    logs: dict[str, Path] = field(default_factory=dict)
    hosts: dict[str, PeerProcess] = field(default_factory=dict)

    def _spawn(self, ns: str, args: list[str], stdin_line: str | None, log: Path) -> subprocess.Popen:
        root, _ = child_environment()
        process = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            text=True,
            env=self.env,
            cwd=root,
        )
        self.processes.append(process)
        if stdin_line is not None:
            assert process.stdin is not None
            process.stdin.write(stdin_line + "\n")
            process.stdin.flush()
        return process

    def delayed(self, ns: str, ip: str, listen: int, target: int) -> None:
        """A delay proxy in ``ns``: ``ip:listen`` → ``ip:target``, :data:`DELAY_MS` each way."""
        log = self.root / f"proxy-{ns}.log"
        args = ["-m", "tests.network.delay_proxy", ip, str(listen), ip, str(target), str(DELAY_MS)]
        proxy = self._spawn(ns, args, None, log)
        if ready_line(proxy, CHILD_START_SECONDS).strip() != "ready":
            raise RuntimeError(f"the delay proxy in {ns} did not start: {log.read_text()[-2000:]}")

    def start_aggregator(self, **overrides: object) -> None:
        """The aggregator in the first namespace at ``.1`` (https) and its delay proxy in front."""
        ip = self.network.address(1)
        cert = self.ca.server("aggregator", ips=(ip,))
        settings: AggregatorSettings = aggregator_settings(
            self.root, host=ip, port=AGGREGATOR_PORT, tls_cert=cert.cert, tls_key=cert.key,
            ca_bundle=self.ca.bundle, **overrides,
        )
        ns = self.network.namespaces[0]
        self.logs["aggregator"] = self.root / "aggregator.log"
        agg = self._spawn(ns, ["-m", "aggregator"], settings.model_dump_json(), self.logs["aggregator"])
        self.url = ready_line(agg, CHILD_START_SECONDS).strip()
        if self.url != f"https://{ip}:{AGGREGATOR_PORT}":
            raise RuntimeError(f"the aggregator did not start: {self.logs['aggregator'].read_text()[-4000:]}")
        self.delayed(ns, ip, AGGREGATOR_PROXY_PORT, AGGREGATOR_PORT)
        self.slow_url = f"https://{ip}:{AGGREGATOR_PROXY_PORT}"  # every exchange crosses the delay

    def start_hosts(
        self, sizes: dict[str, int], kinds: dict[str, HostKind] | None = None, **policy: object
    ) -> None:
        """Peer hosts of ``sizes`` (host name → identities), each of its kind (default ``relay``),
        every one with the manifest fields ``policy`` (e.g. ``max_hostile_route``)."""
        kinds = kinds or {}
        for name, (host, _) in write_hosts(self.root, sizes, [self.slow_url], seed=5).items():
            self.start_host(name, host, kinds.get(name, "relay"), **policy)

    def start_host(self, name: str, host: PeerProcess, kind: HostKind, **policy: object) -> None:
        """Start ``host`` (its manifest written by :func:`~tests.faults.helpers.write_hosts`) in the
        namespace of ``name`` as a host of ``kind`` (module docstring); wait until it says it runs."""
        ip, ns = self.network.host_address(name), self.network.namespace(name)
        manifest = SimulationManifest.model_validate_json(host.manifest.read_text())
        update: dict[str, object] = {"ca_bundle": self.ca.bundle, **policy}
        if kind == "sender":  # no server, no proxy: it only connects out (and verifies against the CA)
            update["relay"] = False
        else:
            cert = self.ca.server(name, ips=(ip,))
            # unreachable: it serves on its namespace's loopback only and claims its address anyway
            bind = ip if kind == "relay" else "127.0.0.1"
            if kind == "relay":
                self.delayed(ns, ip, RELAY_PROXY_PORT, RELAY_PORT)
            update |= {
                "host": bind, "port": RELAY_PORT, "tls_cert": cert.cert, "tls_key": cert.key,
                "public_url": f"https://{ip}:{RELAY_PROXY_PORT}",
            }
            if kind == "unreachable":  # it means to relay: only the check tells it nobody can reach it
                update["check_reachability"] = True
        host.manifest.write_text(manifest.model_copy(update=update).model_dump_json())
        self.logs[name] = host.stderr = self.root / f"{name}.log"
        process = self._spawn(ns, ["-m", "peer.simulate", str(host.manifest)], None, self.logs[name])
        host.process = process
        started = ready_line(process, CHILD_START_SECONDS).strip()
        expected = "sender-only" if kind == "sender" else f"https://{bind}:{RELAY_PORT}"
        if started != expected:
            log = self.logs[name].read_text()[-4000:]
            raise RuntimeError(f"host {name} did not start ({started!r}): {log}")
        host.url = f"https://{ip}:{RELAY_PORT}" if kind == "relay" else ""
        self.hosts[name] = host
        if kind != "relay":  # nothing reaches it from outside (for a sender: nothing listens)
            with socket.socket() as probe:
                probe.settimeout(10)
                if probe.connect_ex((ip, RELAY_PORT)) == 0 or probe.connect_ex((ip, RELAY_PROXY_PORT)) == 0:
                    raise RuntimeError(f"host {name} ({kind}) accepted a connection from outside")

    def final_counters(self, name: str) -> dict[str, int]:
        """Stop host ``name`` (its stdin closed) and return the counters it printed on closing (the
        relay's and the host's, as its ``/local/status``, which answers loopback only, would give)."""
        process = self.hosts[name].process
        assert process is not None
        try:
            out, _ = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
            raise RuntimeError(f"host {name} did not stop within 60 s of its stdin closing") from None
        lines = out.strip().splitlines()
        if process.returncode != 0 or not lines:
            why = f"exited {process.returncode} without its counters: {out[-500:]!r}"
            raise RuntimeError(f"host {name} {why}")
        return json.loads(lines[-1])

    def roster(self, problem_id: str) -> Roster:
        reply = requests.get(f"{self.url}/problems/{problem_id}/roster", timeout=30)
        return Roster.model_validate_json(reply.content)

    def print_logs(self) -> None:
        for name, log in self.logs.items():
            if log.exists():
                print(f"--- {name} ---\n{log.read_text()[-4000:]}")

    def stop(self) -> None:
        for process in self.processes:
            _stop(process)


@contextmanager
def deployment(net: Network, root: Path) -> Iterator[Deployment]:
    """A :class:`Deployment` over ``net`` with a CA made under ``root``; every process it started is
    stopped on leaving, and on failure the services' logs are printed first.

    The caller's own HTTP clients (:mod:`requests`) must verify against ``ca.bundle``
    (``REQUESTS_CA_BUNDLE``): the test sets it with ``monkeypatch``, the benchmark in its environment.
    """
    ca = TestCA(root, "netns")
    _, env = child_environment()
    env |= {"ANONML_TEST_NETWORKS": f"{net.subnet}.0/24", "ANONML_CA_BUNDLE": str(ca.bundle)}
    d = Deployment(net, root, ca, env)
    try:
        yield d
    except BaseException:
        d.print_logs()
        raise
    finally:
        d.stop()
