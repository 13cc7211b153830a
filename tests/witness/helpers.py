"""Asking a witness to co-sign, as an aggregator would (signed CosignRequest over real HTTP)."""

from __future__ import annotations

import requests

from anonml.crypto import Identity
from anonml.protocol import CosignRequest, TranscriptStatement, sign_message


def ask_witness(
    url: str,
    signer: Identity,
    problem_id: str,
    transcript: bytes,
    *,
    stage: str = "roster",
    aggregator: bytes | None = None,
) -> requests.Response:
    """POST a cosign request for ``transcript`` signed by ``signer``.

    The statement names ``aggregator`` (default: the signer itself).
    """
    statement = TranscriptStatement(
        aggregator=bytes(signer.public) if aggregator is None else aggregator,
        problem_id=problem_id,
        stage=stage,
        transcript=transcript,
    )
    body = sign_message(CosignRequest(statement=statement, signature=bytes(64)), signer).model_dump_json()
    return requests.post(f"{url}/cosign", data=body, headers={"content-type": "application/json"}, timeout=30)
