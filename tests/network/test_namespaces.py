"""A round across real network stacks: the aggregator and peer hosts in network namespaces of their own.

Three namespaces made by the test — the aggregator's (holding a bridge) and two peer hosts'
— joined by veth pairs, plus one veth from the test's own namespace to the bridge so the test
can act as the admin. Addresses come from ``10.77.<n>.0/24``, declared to the processes in
``ANONML_TEST_NETWORKS`` (relays there are allowed only in loopback test mode:
:func:`anonml.addresses.address_refusal`). Every service serves https with a certificate from
a CA the test makes, and every client verifies against it (``ca_bundle``). With ``tc`` and the
kernel's ``netem``, every peer link gets 50 ms of delay each way.

The aggregator (``python -m aggregator``) and the hosts (``python -m peer.simulate``) are real
processes started with ``ip netns exec``. The round runs to ``done`` with every report that
was issued a token accepted, and its model is fetched over https. The namespaces are deleted
(and the processes in them stopped) in a finalizer.

Needs root and ``ip netns``; skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from anonml.protocol import ModelDocument, verify_message
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


@pytest.fixture
def network() -> Iterator[Network]:
    tag = f"{os.getpid() % 100000}"
    net = Network(tag, f"10.77.{os.getpid() % 250 + 1}")
    try:
        net.build(["p1", "p2"])
        yield net
    finally:
        net.teardown()


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
    try:
        agg = _in_namespace(agg_ns, ["-m", "aggregator"], env, settings.model_dump_json(), logs["aggregator"])
        processes.append(agg)
        url = ready_line(agg, CHILD_START_SECONDS).strip()
        assert url == f"https://{agg_ip}:8470", logs["aggregator"].read_text()

        hosts = write_hosts(tmp_path, {"p1": 3, "p2": 3}, [url])
        for i, (name, (host, _)) in enumerate(hosts.items(), start=2):
            ip = network.address(i)
            cert = ca.server(name, ips=(ip,))
            manifest = SimulationManifest.model_validate_json(host.manifest.read_text())
            manifest = manifest.model_copy(
                update={"host": ip, "port": 8471, "tls_cert": cert.cert, "tls_key": cert.key,
                        "ca_bundle": ca.bundle}
            )
            host.manifest.write_text(manifest.model_dump_json())
            logs[name] = tmp_path / f"{name}.log"
            ns = f"anml-{network.tag}-{name}"
            process = _in_namespace(ns, ["-m", "peer.simulate", str(host.manifest)], env, None, logs[name])
            processes.append(process)
            started = ready_line(process, CHILD_START_SECONDS).strip()
            assert started == f"https://{ip}:8471", logs[name].read_text()

        problem = propose(url, fault_draft())
        wait_until(lambda: status(url, problem.id).registered == 6, "every identity to register", 180)
        close_registration(url, problem.id)
        final = wait_phase(url, problem.id, ("done", "degraded", "failed"), timeout=300)
        model = ModelDocument.model_validate_json(
            requests.get(f"{url}/problems/{problem.id}/model", timeout=30).content
        )
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
    print(json.dumps({
        "phase": final.phase,
        "registered": 6,
        "tokens": final.tokens_issued,
        "reports_accepted": final.reports_accepted,
        "netem_delay": DELAY if network.delayed else f"none ({network.no_delay_reason})",
        "finished_at": time.strftime("%H:%M:%S"),
    }))
