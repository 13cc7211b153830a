"""A round across real network stacks: the aggregator and peer hosts in network namespaces of their own.

Three namespaces made by the test — the aggregator's (holding a bridge) and two peer hosts'
— joined by veth pairs, plus one veth from the test's own namespace to the bridge so the test
can act as the admin. Addresses come from ``10.77.<n>.0/24``, declared to the processes in
``ANONML_TEST_NETWORKS`` (relays there are allowed only in loopback test mode:
:func:`anonml.addresses.address_refusal`). Every service serves https with a certificate from
a CA the test makes, and every client verifies against it (``ca_bundle``). Latency: the
aggregator and every relay are reached only through a user-space proxy in their namespace
(:mod:`tests.network.delay_proxy`) that delays each direction by 50 ms — the peers' aggregator
URL and their registered relay URLs name the proxy's port — and, where ``tc`` and the kernel's
``netem`` exist, every peer link gets another 50 ms there (this machine's kernel has no netem).

The aggregator (``python -m aggregator``) and the hosts (``python -m peer.simulate``) are real
processes started with ``ip netns exec``. The round runs to ``done`` with every report that
was issued a token accepted, and its model is fetched over https. The namespaces are deleted
(and the processes in them stopped) in a finalizer.

A second round adds a namespace of *sender-only* identities (issue 27): its host runs no
server at all — ``ss`` inside the namespace lists no listening socket and a connection to
its address is refused (this machine has neither ``iptables`` nor ``nft`` to block inbound
traffic as well) — so it takes part over outbound https connections only.

Needs root and ``ip netns``; skipped with the reason otherwise.
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
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from anonml.protocol import ModelDocument, Roster, verify_message
from anonml.serving import CHILD_START_SECONDS, child_environment, ready_line
from peer.simulate import SimulationManifest
from tests.adversary.malicious import wait_until
from tests.aggregator.helpers import aggregator_settings, close_registration, propose, status, wait_phase
from tests.faults.helpers import fault_draft, write_hosts
from tests.network.certs import TestCA


def _why_not() -> str | None:
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


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))]

DELAY = "50ms"
DELAY_MS = 50


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@dataclass
class Network:
    """The namespaces of one test: the aggregator's (``agg``, with the bridge) and one per peer host."""

    tag: str
    subnet: str  # e.g. 10.77.3 (a /24)
    namespaces: list[str] = field(default_factory=list)
    delayed: list[str] = field(default_factory=list)  # namespaces whose link has netem delay
    no_delay_reason: str = ""

    def address(self, index: int) -> str:
        return f"{self.subnet}.{index}"

    def add(self, name: str) -> str:
        ns = f"anml-{self.tag}-{name}"
        _ip("netns", "add", ns)
        self.namespaces.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        return ns

    def build(self, hosts: list[str]) -> None:
        """The aggregator's namespace with bridge ``br0`` at ``.1``; each host's at ``.2``, ``.3``, …."""
        agg = self.add("agg")
        _ip("-n", agg, "link", "add", "br0", "type", "bridge")
        _ip("-n", agg, "addr", "add", f"{self.address(1)}/24", "dev", "br0")
        _ip("-n", agg, "link", "set", "br0", "up")
        for i, name in enumerate(hosts, start=2):
            ns = self.add(name)
            outside, inside = f"a{self.tag}{i}", f"h{self.tag}{i}"
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", outside, "netns", agg)
            _ip("link", "set", inside, "netns", ns)
            _ip("-n", agg, "link", "set", outside, "master", "br0")
            _ip("-n", agg, "link", "set", outside, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", inside)
            _ip("-n", ns, "link", "set", inside, "up")
            self._delay(ns, inside)
        # The test's own namespace reaches the bridge too (.254): it proposes and watches as the admin.
        mine, theirs = f"t{self.tag}", f"u{self.tag}"
        _ip("link", "add", mine, "type", "veth", "peer", "name", theirs)
        _ip("link", "set", theirs, "netns", agg)
        _ip("-n", agg, "link", "set", theirs, "master", "br0")
        _ip("-n", agg, "link", "set", theirs, "up")
        _ip("addr", "add", f"{self.address(254)}/24", "dev", mine)
        _ip("link", "set", mine, "up")

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

    def teardown(self) -> None:
        for ns in self.namespaces:
            # every process still inside first (a namespace lives on while a process holds it)
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        # the test's own veth end goes with its peer in the deleted namespace; make sure
        subprocess.run(["ip", "link", "del", f"t{self.tag}"], capture_output=True)


def _network(hosts: list[str]) -> Iterator[Network]:
    tag = f"{os.getpid() % 100000}"
    net = Network(tag, f"10.77.{os.getpid() % 250 + 1}")
    try:
        net.build(hosts)
        yield net
    finally:
        net.teardown()


@pytest.fixture
def network() -> Iterator[Network]:
    yield from _network(["p1", "p2"])


@pytest.fixture
def network_with_senders() -> Iterator[Network]:
    yield from _network(["p1", "p2", "s1"])


def _in_namespace(ns: str, args: list[str], env: dict[str, str], stdin_line: str | None, log: Path):
    root, _ = child_environment()
    process = subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        env=env,
        cwd=root,
    )
    if stdin_line is not None:
        assert process.stdin is not None
        process.stdin.write(stdin_line + "\n")
        process.stdin.flush()
    return process


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


def test_a_round_runs_to_done_over_https_across_namespaces(
    network: Network, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    _round_across_namespaces(network, tmp_path, monkeypatch, {"p1": 3, "p2": 3})


# 6 relaying identities and 2 sender-only: f = 0.2·8/6, a route hostile end to end 0.267³ ≈ 0.019,
# above the default 0.01: these simulated peers accept up to 0.05 (docs/threat-model.md, "Relays").
SENDERS_MAX_HOSTILE_ROUTE = 0.05


def test_sender_only_peers_in_a_namespace_accepting_no_connection_take_part_over_https(
    network_with_senders: Network, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    _round_across_namespaces(
        network_with_senders, tmp_path, monkeypatch, {"p1": 3, "p2": 3, "s1": 2}, senders={"s1"}
    )


def _listening(ns: str) -> list[str]:
    """The listening TCP sockets inside ``ns`` (``ss -ltnH``), one line each."""
    done = subprocess.run(["ip", "netns", "exec", ns, "ss", "-ltnH"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line.strip()]


def _round_across_namespaces(
    network: Network,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sizes: dict[str, int],
    senders: frozenset[str] | set[str] = frozenset(),
) -> None:
    """Run one round with the identities of ``sizes`` (host name → identities) across ``network``;
    the hosts named in ``senders`` are sender-only (no server, nothing listening)."""
    ca = TestCA(tmp_path, "netns")
    agg_ip = network.address(1)
    agg_cert = ca.server("aggregator", ips=(agg_ip,))
    prefix = f"{network.subnet}.0/24"
    _, env = child_environment()
    env |= {"ANONML_TEST_NETWORKS": prefix, "ANONML_CA_BUNDLE": str(ca.bundle)}
    # the test's own clients (requests, through the aggregator helpers) verify against the same CA
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca.bundle))

    settings = aggregator_settings(
        tmp_path, host=agg_ip, port=8470, tls_cert=agg_cert.cert, tls_key=agg_cert.key, ca_bundle=ca.bundle
    )
    agg_ns = network.namespaces[0]
    processes: list[subprocess.Popen] = []
    logs = {"aggregator": tmp_path / "aggregator.log"}

    def delayed(ns: str, ip: str, listen: int, target: int) -> None:
        """A delay proxy in ``ns``: ``ip:listen`` → ``ip:target``, DELAY_MS each way."""
        log = tmp_path / f"proxy-{ns}.log"
        args = ["-m", "tests.network.delay_proxy", ip, str(listen), ip, str(target), str(DELAY_MS)]
        proxy = _in_namespace(ns, args, env, None, log)
        processes.append(proxy)
        assert ready_line(proxy, CHILD_START_SECONDS).strip() == "ready", log.read_text()

    try:
        agg = _in_namespace(agg_ns, ["-m", "aggregator"], env, settings.model_dump_json(), logs["aggregator"])
        processes.append(agg)
        url = ready_line(agg, CHILD_START_SECONDS).strip()
        assert url == f"https://{agg_ip}:8470", logs["aggregator"].read_text()
        delayed(agg_ns, agg_ip, 8480, 8470)
        slow_url = f"https://{agg_ip}:8480"  # what the peers use: every exchange crosses the delay
        direct, proxied = _round_trip(f"{url}/healthz"), _round_trip(f"{slow_url}/healthz")
        # a request and its answer each wait DELAY_MS in the proxy: a lower bound, whatever the load
        assert proxied >= 2 * DELAY_MS / 1000, (direct, proxied)

        hosts = write_hosts(tmp_path, sizes, [slow_url])
        policy = {"max_hostile_route": SENDERS_MAX_HOSTILE_ROUTE} if senders else {}
        for i, (name, (host, _)) in enumerate(hosts.items(), start=2):
            ip = network.address(i)
            ns = f"anml-{network.tag}-{name}"
            manifest = SimulationManifest.model_validate_json(host.manifest.read_text())
            if name in senders:  # no server, no proxy: it only connects out (and verifies against the CA)
                manifest = manifest.model_copy(update={"relay": False, "ca_bundle": ca.bundle, **policy})
            else:
                cert = ca.server(name, ips=(ip,))
                delayed(ns, ip, 8481, 8471)
                manifest = manifest.model_copy(
                    update={"host": ip, "port": 8471, "tls_cert": cert.cert, "tls_key": cert.key,
                            "ca_bundle": ca.bundle, "public_url": f"https://{ip}:8481", **policy}
                )
            host.manifest.write_text(manifest.model_dump_json())
            logs[name] = tmp_path / f"{name}.log"
            process = _in_namespace(ns, ["-m", "peer.simulate", str(host.manifest)], env, None, logs[name])
            processes.append(process)
            started = ready_line(process, CHILD_START_SECONDS).strip()
            expected = "sender-only" if name in senders else f"https://{ip}:8471"
            assert started == expected, logs[name].read_text()
            if name in senders:
                assert _listening(ns) == []  # nothing in the namespace accepts a connection
                with socket.socket() as probe:  # and from outside, its address refuses one
                    probe.settimeout(10)
                    assert probe.connect_ex((ip, 8471)) != 0

        started_at = time.monotonic()
        problem = propose(url, fault_draft())
        members = sum(sizes.values())
        wait_until(lambda: status(url, problem.id).registered == members, "every identity to register", 180)
        close_registration(url, problem.id)
        final = wait_phase(url, problem.id, ("done", "degraded", "failed"), timeout=300)
        elapsed = time.monotonic() - started_at
        model = ModelDocument.model_validate_json(
            requests.get(f"{url}/problems/{problem.id}/model", timeout=30).content
        )
        roster = _roster(url, problem.id)
    except BaseException:
        for name, log in logs.items():
            if log.exists():
                print(f"--- {name} ---\n{log.read_text()[-4000:]}")
        raise
    finally:
        for process in processes:
            _stop(process)

    assert final.phase == "done", final.message
    assert final.tokens_issued > 0 and final.reports_accepted == final.tokens_issued, final
    assert final.reports.lost == 0, final.reports
    verify_message(model, bytes(problem.aggregator))
    assert model.reports == final.reports
    # every relay URL in the roster is a proxy's: the onion traffic crossed the delay too
    relay_urls = {entry.relay_url.split("/relay/")[0] for entry in roster.entries if entry.relay_url}
    relaying = [i for i, name in enumerate(sizes, start=2) if name not in senders]
    assert relay_urls == {f"https://{network.address(i)}:8481" for i in relaying}, relay_urls
    sender_only = sum(size for name, size in sizes.items() if name in senders)
    assert sum(not entry.relays for entry in roster.entries) == sender_only
    print(json.dumps({
        "phase": final.phase,
        "registered": members,
        "sender_only": sender_only,
        "tokens": final.tokens_issued,
        "reports_accepted": final.reports_accepted,
        "healthz_direct_s": round(direct, 3),
        "healthz_through_delay_proxy_s": round(proxied, 3),
        "proxy_delay_ms_each_way": DELAY_MS,
        "netem_delay": DELAY if network.delayed else f"none ({network.no_delay_reason})",
        "propose_to_final_s": round(elapsed, 1),
    }))


def _round_trip(url: str, times: int = 3) -> float:
    """Fewest seconds a ``GET url`` on a new connection (TLS handshake included) took of ``times``.

    The least is what the path costs; the rest is this (shared, loaded) machine's scheduling.
    """
    taken = []
    for _ in range(times):
        start = time.monotonic()
        assert requests.get(url, timeout=60).status_code == 200
        taken.append(time.monotonic() - start)
    return min(taken)


def _roster(url: str, problem_id: str) -> Roster:
    return Roster.model_validate_json(requests.get(f"{url}/problems/{problem_id}/roster", timeout=30).content)
