"""The services serve https themselves, and every client verifies their certificates.

A CA made by the test (:mod:`tests.network.certs`) signs certificates for ``127.0.0.1``; the
aggregator, the witness and a peer relay are served by real uvicorn over https on loopback.
A client that trusts that CA (``trust_ca_bundle``, ``ANONML_CA_BUNDLE``, ``requests_verify``)
gets answers; one that trusts only the system store, another CA, or meets a certificate for
another name is refused with an error naming the URL and why. Plain http to anything but
loopback (or a declared test network) is refused before any connection.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
from fastapi import FastAPI
from pydantic import ValidationError

from aggregator.app import create_app, start_server
from anonml import outbound
from anonml.crypto import Identity
from anonml.outbound import OutboundError, fetch
from anonml.privacy import PrivacyLedger
from anonml.serving import ServerTls, child_environment, serve_in_thread
from anonml.store import EventStore
from peer.app import start_peer_server
from peer.client import AggregatorClient
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.policy import PeerPolicy
from peer.settings import PeerSettings
from tests.aggregator.helpers import aggregator_settings
from tests.network.certs import ServerFiles, TestCA
from tests.waiting import wait_until
from witness.app import start_witness_server
from witness.settings import WitnessSettings


@pytest.fixture(autouse=True)
def fresh_trust(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from the process's default trust (read from the environment at first use)."""
    monkeypatch.setattr(outbound, "_trust", None)
    monkeypatch.delenv(outbound.CA_BUNDLE_VARIABLE, raising=False)
    monkeypatch.delenv(outbound.TEST_NETWORKS_VARIABLE, raising=False)


@pytest.fixture
def ca(tmp_path: Path) -> TestCA:
    return TestCA(tmp_path, "round")


@pytest.fixture
def loopback_cert(ca: TestCA) -> ServerFiles:
    return ca.server("loopback", ips=("127.0.0.1",), names=("localhost",))


@pytest.fixture
def https_aggregator(tmp_path: Path, loopback_cert: ServerFiles) -> Iterator[str]:
    settings = aggregator_settings(tmp_path, tls_cert=loopback_cert.cert, tls_key=loopback_cert.key)
    server = start_server(create_app(settings), tls=settings.server_tls())
    try:
        yield server.url
    finally:
        server.stop()


def test_a_peer_that_trusts_the_ca_talks_to_the_aggregator_over_https(https_aggregator: str, ca: TestCA):
    assert https_aggregator.startswith("https://127.0.0.1:")
    outbound.trust_ca_bundle(ca.bundle)
    assert fetch("GET", f"{https_aggregator}/healthz").status == 200
    assert AggregatorClient(https_aggregator).problems() == []  # the peer's own client, same path
    assert outbound.trusted_roots() == f"the CA bundle {ca.bundle}"


def test_the_ca_bundle_variable_is_read_at_the_first_request(
    https_aggregator: str, ca: TestCA, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv(outbound.CA_BUNDLE_VARIABLE, str(ca.bundle))
    assert fetch("GET", f"{https_aggregator}/healthz").status == 200
    # requests (the CLI's admin commands) gets the same choice
    assert outbound.requests_verify() == str(ca.bundle)
    assert requests.get(f"{https_aggregator}/healthz", verify=outbound.requests_verify(), timeout=30).ok


def test_the_system_store_does_not_trust_a_private_ca(https_aggregator: str):
    url = f"{https_aggregator}/healthz"
    with pytest.raises(OutboundError) as caught:
        fetch("GET", url)
    text = str(caught.value)
    assert text.startswith(f"{url}: TLS certificate verification failed: ")
    assert "self-signed certificate in certificate chain" in text  # the chain ends at an untrusted root
    assert "the system's certificate store" in text
    assert outbound.requests_verify() is True
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(url, verify=outbound.requests_verify(), timeout=30)


def test_another_ca_is_refused(https_aggregator: str, tmp_path: Path):
    other = TestCA(tmp_path, "other")
    outbound.trust_ca_bundle(other.bundle)
    url = f"{https_aggregator}/healthz"
    with pytest.raises(OutboundError) as caught:
        fetch("GET", url)
    assert str(caught.value).startswith(f"{url}: TLS certificate verification failed: ")
    assert f"the CA bundle {other.bundle}" in str(caught.value)


def test_a_certificate_for_another_name_is_refused(tmp_path: Path, ca: TestCA):
    elsewhere = ca.server("elsewhere", ips=("10.9.8.7",), names=("relay.example",))
    settings = aggregator_settings(tmp_path, tls_cert=elsewhere.cert, tls_key=elsewhere.key)
    server = start_server(create_app(settings), tls=settings.server_tls())
    try:
        outbound.trust_ca_bundle(ca.bundle)
        url = f"{server.url}/healthz"
        with pytest.raises(OutboundError) as caught:
            fetch("GET", url)
        assert str(caught.value).startswith(f"{url}: TLS certificate verification failed: ")
        assert "IP address mismatch" in str(caught.value)
    finally:
        server.stop()


def test_a_plain_http_client_gets_no_answer_from_an_https_server(https_aggregator: str):
    plain = https_aggregator.replace("https://", "http://")
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"{plain}/healthz", timeout=30)


def test_the_witness_and_a_peer_relay_serve_https(tmp_path: Path, ca: TestCA, loopback_cert: ServerFiles):
    outbound.trust_ca_bundle(ca.bundle)
    witness = start_witness_server(
        WitnessSettings(home=tmp_path / "w", port=0, tls_cert=loopback_cert.cert, tls_key=loopback_cert.key)
    )
    node = PeerNode(Identity.generate(), EventStore("sqlite://"), PrivacyLedger("sqlite://"))
    host = PeerHost([node], PeerDB("sqlite://"), PeerPolicy(), [], rng=np.random.default_rng(1))
    relay = start_peer_server(host, tls=ServerTls(loopback_cert.cert, loopback_cert.key))
    try:
        assert witness.url.startswith("https://") and relay.url.startswith("https://")
        assert host.relay_base == relay.url  # the URL the peer registers is the https one
        assert fetch("GET", f"{witness.url}/healthz").status == 200
        assert fetch("GET", f"{relay.url}/healthz").status == 200
        # an unknown round on the relay: answered (404) over TLS, not a handshake failure
        assert fetch("GET", f"{relay.url}/relay/{node.node_id.hex()}/roster/p-x").status == 404
    finally:
        relay.stop()
        host.close()
        witness.stop()
        witness.witness.close()


@pytest.mark.parametrize(
    "url",
    ["http://10.1.2.3:8470/healthz", "http://192.0.2.10/x", "http://relay.example:80/relay/ab",
     "http://[2001:db8::1]:80/"],
)
def test_plain_http_beyond_loopback_is_refused_before_connecting(url: str):
    with pytest.raises(OutboundError) as caught:
        fetch("GET", url, deadline=30.0)
    assert str(caught.value) == (
        f"{url}: plain http goes only to a loopback host (or to a test network named in "
        "ANONML_TEST_NETWORKS); use https"
    )


def test_a_declared_test_network_may_be_reached_over_plain_http(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(outbound.TEST_NETWORKS_VARIABLE, "192.0.2.0/24")
    with pytest.raises(OutboundError) as caught:
        fetch("GET", "http://192.0.2.10:9/x", deadline=0.5)  # TEST-NET-1: nothing answers there
    assert "plain http" not in str(caught.value)  # it tried to connect
    with pytest.raises(OutboundError, match="plain http goes only"):
        fetch("GET", "http://198.51.100.10:9/x", deadline=0.5)  # outside the declared network
    monkeypatch.setenv(outbound.TEST_NETWORKS_VARIABLE, "192.0.2.0/24,not-a-net")
    with pytest.raises(OutboundError, match="ANONML_TEST_NETWORKS: 'not-a-net' is not a network prefix"):
        fetch("GET", "http://192.0.2.10:9/x", deadline=0.5)


def test_plain_http_on_loopback_still_works(tmp_path: Path):
    server = start_server(create_app(aggregator_settings(tmp_path)))
    try:
        assert server.url.startswith("http://127.0.0.1:")
        assert fetch("GET", f"{server.url}/healthz").status == 200
    finally:
        server.stop()


def test_a_bundle_that_is_not_pem_is_refused_naming_the_file(tmp_path: Path):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(OutboundError, match=f"CA bundle {junk}: not a readable PEM file"):
        outbound.trust_ca_bundle(junk)
    with pytest.raises(OutboundError, match=f"CA bundle {tmp_path / 'missing.pem'}: not a readable PEM file"):
        outbound.trust_ca_bundle(tmp_path / "missing.pem")


def test_tls_settings_are_checked_when_made(tmp_path: Path, ca: TestCA, loopback_cert: ServerFiles):
    other = ca.server("other", ips=("127.0.0.1",))
    with pytest.raises(ValidationError, match="tls_cert and tls_key go together: got only tls_cert"):
        PeerSettings(tls_cert=loopback_cert.cert)
    with pytest.raises(ValidationError, match=f"TLS certificate {loopback_cert.cert} with key {other.key}"):
        WitnessSettings(home=tmp_path, tls_cert=loopback_cert.cert, tls_key=other.key)
    with pytest.raises(ValidationError, match="cannot be loaded"):
        aggregator_settings(tmp_path, tls_cert=tmp_path / "absent.pem", tls_key=loopback_cert.key)
    files = {"tls_cert": loopback_cert.cert, "tls_key": loopback_cert.key}
    settings = PeerSettings(host="127.0.0.1", port=8471, **files)
    assert settings.relay_base() == "https://127.0.0.1:8471"
    assert PeerSettings(host="127.0.0.1", port=8471).relay_base() == "http://127.0.0.1:8471"


def test_the_serve_commands_refuse_a_key_of_another_certificate(tmp_path: Path, ca: TestCA):
    one, two = ca.server("one", ips=("127.0.0.1",)), ca.server("two", ips=("127.0.0.1",))
    root, env = child_environment()
    env["ANONML_HOME"] = str(tmp_path / "home")
    commands = [
        ["aggregator", "serve", "--port", "0"],
        ["witness", "serve", "--home", str(tmp_path / "w"), "--port", "0"],
        ["peer", "start", "--aggregator", "https://127.0.0.1:1", "--port", "0"],
    ]
    tls = ["--tls-cert", str(one.cert), "--tls-key", str(two.key)]
    for command in commands:
        done = subprocess.run(
            [sys.executable, "-m", "anonml", *command, *tls],
            cwd=root, env=env, capture_output=True, text=True, timeout=300,
        )
        assert done.returncode == 1, (command, done.stderr)
        assert "invalid" in done.stderr and "tls" in done.stderr.lower(), (command, done.stderr)
        assert str(one.cert) in done.stderr and "Traceback" not in done.stderr, (command, done.stderr)


def test_a_tls_service_stops_while_a_kept_alive_client_reads_nothing_more(
    ca: TestCA, loopback_cert: ServerFiles
):
    """An idle kept-alive client that never answers the server's TLS close (a relay's peer, a proxy)
    does not hold a stopping service: the connection is aborted, not closed (asyncio waits up to 30 s
    for the client's close_notify, and the namespace tests' teardowns took those 30 s)."""
    app = FastAPI()

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    tls = ServerTls(loopback_cert.cert, loopback_cert.key)
    served = serve_in_thread(app, "127.0.0.1", 0, name="tls-stop", tls=tls)
    port = int(served.url.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(ca.bundle))
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    client = context.wrap_socket(raw, server_hostname="127.0.0.1")
    try:
        client.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
            answer += client.recv(4096)
        assert answer.startswith(b"HTTP/1.1 200")
        stopping = threading.Thread(target=served.stop, daemon=True)
        stopping.start()
        # The client now reads nothing: with a TLS close the server would wait for its close_notify.
        wait_until(lambda: not served.thread.is_alive(), 20, "the server thread to end")
    finally:
        client.close()

