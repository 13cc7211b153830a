"""The witness service over real HTTP: one transcript per (aggregator, problem, stage), an append-only log."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from fastapi.testclient import TestClient

from anonml import protocol
from anonml.crypto import Identity
from witness import WitnessSettings, start_witness_server

AGGREGATOR = Identity.generate()
JSON = {"content-type": "application/json"}


def request(
    transcript: bytes,
    *,
    problem: str = "p-0001",
    stage: str = "roster",
    signer: Identity = AGGREGATOR,
    aggregator: Identity = AGGREGATOR,
) -> protocol.CosignRequest:
    statement = protocol.TranscriptStatement(
        aggregator=bytes(aggregator.public), problem_id=problem, stage=stage, transcript=transcript
    )
    return protocol.sign_message(
        protocol.CosignRequest(statement=statement, signature=bytes(64)), signer
    )  # raw, for bad bodies


def cosign(url: str, body: protocol.CosignRequest | str | bytes) -> requests.Response:
    data = body if isinstance(body, str | bytes) else body.model_dump_json()
    return requests.post(f"{url}/cosign", data=data, headers=JSON, timeout=30)


def test_first_transcript_is_cosigned_the_same_again_and_any_other_refused(witness):
    first = cosign(witness.url, request(b"\x01" * 32))
    assert first.status_code == 200, first.text
    signed = protocol.Cosignature.model_validate_json(first.content)
    assert bytes(signed.witness) == witness.identity
    assert bytes(signed.statement.transcript) == b"\x01" * 32
    protocol.verify_message(signed, witness.identity)  # raises if not the witness's signature
    again = cosign(witness.url, request(b"\x01" * 32))
    assert again.status_code == 200 and again.content == first.content  # idempotent, byte for byte
    other = cosign(witness.url, request(b"\x02" * 32))
    assert other.status_code == 409
    detail = other.json()["detail"]
    assert "already co-signed transcript " + "01" * 32 in detail and "log index 0" in detail
    # Other stage, other problem, other aggregator: separate triples.
    assert cosign(witness.url, request(b"\x02" * 32, stage="bins")).status_code == 200
    assert cosign(witness.url, request(b"\x02" * 32, problem="p-0002")).status_code == 200
    other_agg = Identity.generate()
    assert (
        cosign(witness.url, request(b"\x02" * 32, signer=other_agg, aggregator=other_agg)).status_code == 200
    )
    log = [
        protocol.WitnessLogEntry.model_validate(e)
        for e in requests.get(f"{witness.url}/log", timeout=30).json()
    ]
    assert [e.index for e in log] == [0, 1, 2, 3]
    assert [e.cosignature.statement.stage for e in log] == ["roster", "bins", "roster", "roster"]
    assert log[0].cosignature == signed


def test_requests_not_signed_by_the_named_aggregator_are_refused(witness):
    impostor = Identity.generate()
    forged = request(b"\x03" * 32, signer=impostor)  # claims AGGREGATOR, signed by someone else
    response = cosign(witness.url, forged)
    assert response.status_code == 403 and "not signed by the aggregator" in response.json()["detail"]
    # An aggregator "identity" that is not a valid curve point is refused the same way.
    statement = protocol.TranscriptStatement(
        aggregator=b"\xff" * 64, problem_id="p-0001", stage="roster", transcript=b"\x03" * 32
    )
    junk = protocol.CosignRequest(statement=statement, signature=b"\x01" * 64)
    response = cosign(witness.url, junk)
    assert response.status_code == 403 and "not a valid prime-order point" in response.json()["detail"]
    # Nothing was recorded: the real aggregator can still have another transcript co-signed.
    assert cosign(witness.url, request(b"\x04" * 32)).status_code == 200
    assert len(requests.get(f"{witness.url}/log", timeout=30).json()) == 1


@pytest.mark.parametrize(
    "body, where",
    [
        ("{", "malformed cosign request"),
        ('{"statement": {}, "signature": "AAAA"}', "statement"),
        (request(b"\x01" * 31 + b"\x00").model_dump_json().replace('"roster"', '"medians"'), "stage"),
    ],
    # Named, not shown: the third body holds a fresh signature, and pytest-xdist needs every worker
    # to collect the same test ids.
    ids=["cut JSON", "empty statement", "unknown stage"],
)
def test_malformed_bodies_are_refused_naming_where(witness_app: TestClient, body: str, where: str):
    response = witness_app.post("/cosign", content=body, headers=JSON)
    assert response.status_code == 422 and where in response.json()["detail"]
    assert witness_app.get("/log").json() == []  # refused before anything is logged


def test_oversized_bodies_are_refused_before_parsing(witness_app: TestClient):
    response = witness_app.post("/cosign", content=b"x" * 20_000, headers=JSON)
    assert response.status_code == 413
    assert witness_app.get("/log").json() == []


def test_lookup_and_log_pages_validate_their_input(witness):
    agg = bytes(AGGREGATOR.public).hex()
    assert requests.get(f"{witness.url}/cosignatures/{agg}/p-0001/roster", timeout=30).status_code == 404
    for i in range(5):
        assert cosign(witness.url, request(bytes([i]) * 32, problem=f"p-000{i}")).status_code == 200
    found = requests.get(f"{witness.url}/cosignatures/{agg}/p-0003/roster", timeout=30)
    assert found.status_code == 200
    assert (
        bytes(protocol.Cosignature.model_validate_json(found.content).statement.transcript) == bytes([3]) * 32
    )
    assert requests.get(f"{witness.url}/cosignatures/{agg}/p-0003/bins", timeout=30).status_code == 404
    assert requests.get(f"{witness.url}/cosignatures/{agg}/p-0003/medians", timeout=30).status_code == 422
    assert requests.get(f"{witness.url}/cosignatures/zz/p-0003/roster", timeout=30).status_code == 422
    page = requests.get(f"{witness.url}/log", params={"start": 2, "limit": 2}, timeout=30).json()
    assert [e["index"] for e in page] == [2, 3]
    for bad in ({"start": -1}, {"limit": 0}, {"limit": 1001}, {"start": "x"}):
        assert requests.get(f"{witness.url}/log", params=bad, timeout=30).status_code == 422
    ident = requests.get(f"{witness.url}/identity", timeout=30).json()
    assert ident["identity"] == witness.identity.hex()


def test_concurrent_different_transcripts_get_exactly_one_cosignature(witness):
    transcripts = [bytes([i + 1]) * 32 for i in range(12)]
    with ThreadPoolExecutor(6) as pool:
        responses = list(pool.map(lambda t: cosign(witness.url, request(t, problem="p-race")), transcripts))
    codes = sorted(r.status_code for r in responses)
    assert codes.count(200) == 1 and codes.count(409) == 11
    assert len(requests.get(f"{witness.url}/log", timeout=30).json()) == 1


def test_state_survives_a_restart_and_files_are_private(tmp_path: Path):
    settings = WitnessSettings(home=tmp_path / "w", port=0)
    first = start_witness_server(settings)
    try:
        assert cosign(first.url, request(b"\x07" * 32)).status_code == 200
        identity = first.identity
    finally:
        first.stop()
    second = start_witness_server(settings)
    try:
        assert second.identity == identity  # the same key file
        refused = cosign(second.url, request(b"\x08" * 32))
        assert refused.status_code == 409  # the log outlived the process: still one transcript
        assert cosign(second.url, request(b"\x07" * 32)).status_code == 200
    finally:
        second.stop()
    assert stat.S_IMODE((tmp_path / "w").stat().st_mode) == 0o700
    for name in os.listdir(tmp_path / "w"):
        assert stat.S_IMODE((tmp_path / "w" / name).stat().st_mode) == 0o600, name


def test_the_witness_imports_no_other_role():
    code = (
        "import sys, witness, anonml.commands.witness; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('aggregator', 'peer')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_cli_serve_runs_a_witness_process(tmp_path: Path):
    from witness import start_witness_process

    process = start_witness_process(tmp_path / "w")
    try:
        assert requests.get(f"{process.url}/healthz", timeout=30).json()["identity"] == process.identity.hex()
        assert cosign(process.url, request(b"\x09" * 32)).status_code == 200
        assert cosign(process.url, request(b"\x0a" * 32)).status_code == 409
    finally:
        process.stop()
    shown = subprocess.run(
        [sys.executable, "-m", "anonml", "witness", "identity", "--home", str(tmp_path / "w")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0 and shown.stdout.strip() == process.identity.hex()


def test_a_swapped_encryption_key_does_not_win_a_second_slot(witness):
    """Issue 24, item 3: the aggregator keeps its Ed25519 key and swaps the X25519 half of its identity.

    Before, the witness keyed its one-transcript rule on the whole 64-byte identity, so the swapped
    identity was a new slot with the same signing key (and the same fingerprint). Now it is the same
    slot: refused, and looking the slot up under either identity finds the first transcript.
    """
    seed = os.urandom(32)
    original = Identity(seed, os.urandom(32))
    swapped = Identity(seed, os.urandom(32))
    assert bytes(original.public)[:32] == bytes(swapped.public)[:32]
    assert bytes(original.public) != bytes(swapped.public)
    first = cosign(witness.url, request(b"\x31" * 32, problem="p-swap", signer=original, aggregator=original))
    assert first.status_code == 200, first.text
    for transcript in (b"\x32" * 32, b"\x31" * 32):  # another transcript, or the same one re-addressed
        second = cosign(
            witness.url, request(transcript, problem="p-swap", signer=swapped, aggregator=swapped)
        )
        assert second.status_code == 409 and "signing key" in second.json()["detail"], second.text
    for name in (bytes(swapped.public).hex(), bytes(swapped.public)[:32].hex()):
        found = requests.get(f"{witness.url}/cosignatures/{name}/p-swap/roster", timeout=30)
        assert found.status_code == 200 and found.content == first.content


def test_every_cosignature_carries_a_vrf_proof_whose_output_is_the_beacon_share(witness):
    answer = cosign(witness.url, request(b"\x41" * 32, problem="p-vrf"))
    signed = protocol.Cosignature.model_validate_json(answer.content)
    beta = protocol.witness_vrf_output(signed)  # verifies under the witness's Ed25519 key
    assert len(beta) == 64
    assert protocol.roster_beacon([signed]) == protocol.roster_beacon([signed])
    tampered = signed.model_copy(
        update={"statement": signed.statement.model_copy(update={"problem_id": "p-vrg"})}
    )
    with pytest.raises(protocol.ProtocolError, match="does not verify"):
        protocol.witness_vrf_output(tampered)  # a proof is bound to its statement


def test_api_docs_load_nothing_from_elsewhere(witness):
    """``/docs`` is Swagger UI from the app's own files (issue 29, item 9), as on the other services."""
    page = requests.get(f"{witness.url}/docs", timeout=30)
    assert page.status_code == 200 and "swagger" in page.text.lower()
    assert not re.findall(r"""(?:src|href)=["']https?://""", page.text), "an external load on /docs"
