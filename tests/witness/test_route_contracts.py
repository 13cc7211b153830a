"""The witness's route contracts in process: no token taken or needed, the body cap, JSON-only bodies,
refusals that log nothing, unknown and malformed ids and the route listing — every route the app
serves, read from the app itself, driven through FastAPI's TestClient over one app per module
(``witness_app``; the real stack is served under uvicorn in ``test_service.py``). Each test asks
about its own problems only, so the tests share the app whatever their order.
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import FastAPI
from fastapi.testclient import TestClient

from anonml import protocol
from anonml.crypto import Identity
from tests.route_contracts import DOC_ROUTES, openapi_operations, served_routes
from witness.service import Witness
from witness.settings import WitnessSettings

#: A body that is not JSON: parsed as JSON only, never unpickled.
PICKLE = b"\x80\x04pickle"
JSON = {"content-type": "application/json"}
AGGREGATOR = Identity.generate()
#: The witness's body cap when its settings do not set one (what ``witness_app`` serves with).
CAP = WitnessSettings.model_fields["max_body_bytes"].default
KNOWN_ROUTES = {
    ("POST", "/cosign"),
    ("GET", "/log"),
    ("GET", "/cosignatures/{aggregator}/{problem_id}/{stage}"),
    ("GET", "/identity"),
    ("GET", "/healthz"),
}



def _app(client: TestClient) -> FastAPI:
    app = client.app
    assert isinstance(app, FastAPI)
    return app


def _witness(client: TestClient) -> Witness:
    return _app(client).state.witness


def _request(problem: str, transcript: bytes = b"\x05" * 32, *, signer: Identity = AGGREGATOR) -> bytes:
    """A cosign request for ``problem``'s roster stage, naming AGGREGATOR, signed by ``signer``."""
    statement = protocol.TranscriptStatement(
        aggregator=bytes(AGGREGATOR.public), problem_id=problem, stage="roster", transcript=transcript
    )
    signed = protocol.sign_message(protocol.CosignRequest(statement=statement, signature=bytes(64)), signer)
    return signed.model_dump_json().encode()


def _url(path: str, problem: str, stage: str = "roster") -> str:
    return path.format(aggregator=bytes(AGGREGATOR.public).hex(), problem_id=problem, stage=stage)


def test_the_routes_come_from_the_app_and_openapi_lists_every_one(witness_app: TestClient) -> None:
    served = served_routes(_app(witness_app))
    assert served >= KNOWN_ROUTES, KNOWN_ROUTES - served
    listed = {(m, p) for m, p, _ in openapi_operations(witness_app)}
    assert listed == served - DOC_ROUTES  # nothing served outside the schema but the docs
    assert witness_app.get("/docs").status_code == 200


def test_the_witness_takes_no_token_and_answers_every_read_without_one(witness_app: TestClient) -> None:
    """A witness's log and cosignatures are public by design (anyone audits them): no route asks for a
    token, so none can be left open by mistake. A route added with one fails here until it is tested."""
    document = witness_app.get("/openapi.json").json()
    assert "securitySchemes" not in document.get("components", {})
    for method, path, op in openapi_operations(witness_app):
        assert not any(p["in"] == "header" for p in op.get("parameters", [])), (method, path)
    witness = _witness(witness_app)
    assert witness_app.get("/healthz").json() == {"status": "ok", "identity": witness.public_identity.hex()}
    assert witness_app.get("/identity").json()["identity"] == witness.public_identity.hex()
    assert witness_app.get("/log", params={"start": 10**6}).json() == []


def test_every_post_refuses_a_body_over_the_cap_or_not_json_and_logs_nothing(witness_app: TestClient) -> None:
    problem = "p-refused"
    posts = [p for m, p, _ in openapi_operations(witness_app) if m == "POST"]
    assert posts == ["/cosign"]
    witness = _witness(witness_app)
    logged = len(witness.log(0, 1000))
    valid = _request(problem)
    over = valid + b" " * (CAP + 1 - len(valid))  # well-formed JSON, one byte over

    def streamed() -> Iterator[bytes]:  # no Content-Length: refused once the bytes read pass the cap
        yield over[: CAP // 2]
        yield over[CAP // 2 :]

    impostor = Identity.generate()
    for path in posts:
        for body in (over, streamed()):
            answer = witness_app.post(path, content=body, headers=JSON)
            assert answer.status_code == 413, (path, answer.text)
        for body, where in (
            (PICKLE, "malformed cosign request at body"),
            (b"", "malformed cosign request at body"),
            (b"[]", "malformed cosign request at body"),
            (b'{"statement": null, "signature": ""}', "malformed cosign request at statement"),
            (valid[:-1], "malformed cosign request at body"),  # cut short
        ):
            answer = witness_app.post(path, content=body, headers=JSON)
            assert answer.status_code == 422, (body[:20], answer.text)
            assert answer.json()["detail"].startswith(where), (body[:20], answer.text)
        # Parsed as JSON whatever the type says: the same bytes under another type are the same request.
        answer = witness_app.post(path, content=PICKLE, headers={"content-type": "application/octet-stream"})
        assert answer.status_code == 422
        forged = witness_app.post(path, content=_request(problem, signer=impostor), headers=JSON)
        assert forged.status_code == 403 and "not signed by the aggregator" in forged.json()["detail"]
    assert len(witness.log(0, 1000)) == logged  # nothing of any of them was logged
    lookup = _url("/cosignatures/{aggregator}/{problem_id}/{stage}", problem)
    assert witness_app.get(lookup).status_code == 404
    # The valid request, within the cap, is co-signed and logged: the refusals were the bodies'.
    signed = witness_app.post("/cosign", content=valid, headers=JSON)
    assert signed.status_code == 200, signed.text
    assert len(witness.log(0, 1000)) == logged + 1
    found = witness_app.get(lookup)
    assert found.status_code == 200 and found.content == signed.content


def test_unknown_cosignatures_are_404_and_malformed_ids_422(witness_app: TestClient) -> None:
    lookup = "/cosignatures/{aggregator}/{problem_id}/{stage}"
    assert ("GET", lookup) in served_routes(_app(witness_app))
    signing_key = bytes(AGGREGATOR.public)[:32].hex()
    for stage in protocol.STAGES:
        stranger = bytes(Identity.generate().public).hex()
        for aggregator in (bytes(AGGREGATOR.public).hex(), signing_key, stranger):
            url = lookup.format(aggregator=aggregator, problem_id="p-unknown", stage=stage)
            answer = witness_app.get(url)
            assert answer.status_code == 404, (stage, answer.text)
            assert answer.json()["detail"] == f"no cosignature for p-unknown stage {stage}"
    for aggregator, problem, stage in (
        (signing_key, "p-unknown", "medians"),  # not a stage that is co-signed
        ("zz" * 32, "p-unknown", "roster"),  # not hex
        ("00" * 33, "p-unknown", "roster"),  # neither 32 nor 64 bytes
        (signing_key, "P_Unknown", "roster"),  # not a problem id
        (signing_key, "p-" + "x" * 70, "roster"),
    ):
        answer = witness_app.get(lookup.format(aggregator=aggregator, problem_id=problem, stage=stage))
        assert answer.status_code == 422, (aggregator, problem, stage, answer.text)
    for params in ({"start": -1}, {"limit": 0}, {"limit": 1001}, {"start": "x"}, {"start": 2**62}):
        assert witness_app.get("/log", params=params).status_code == 422, params
    assert witness_app.get("/nope").status_code == 404
    assert witness_app.get("/cosign").status_code == 405
    assert witness_app.post("/log", content=b"[]", headers=JSON).status_code == 405
