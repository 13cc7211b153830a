"""The peer's HTTP client for one aggregator: typed requests, typed answers, clear errors.

Every response body is parsed by its :mod:`anonml.protocol` model (never
unpickled, never evaluated); a non-2xx answer raises
:class:`~anonml.errors.ProtocolError` carrying the status and the server's reason.
Each thread gets its own ``requests.Session`` (sessions are not thread-safe).
"""

from __future__ import annotations

import threading
from typing import TypeVar

import requests
from pydantic import BaseModel, TypeAdapter, ValidationError

from anonml.errors import ProtocolError
from anonml.protocol import (
    Ack,
    Assignment,
    Bins,
    CosignatureBundle,
    MedianAnswer,
    MedianQuery,
    ModelDocument,
    Problem,
    ProblemStatus,
    Registration,
    RegistrationReceipt,
    Roster,
    RosterWitness,
    TokenBatchRequest,
    TokenBatchResponse,
)

__all__ = ["AggregatorClient", "HTTPRefusal", "fetch_witness"]

_M = TypeVar("_M", bound=BaseModel)
_local = threading.local()


class HTTPRefusal(ProtocolError):
    """The server answered with an error status; ``status`` and the server's ``detail``."""

    def __init__(self, url: str, status: int, detail: str) -> None:
        self.status = status
        self.detail = detail
        super().__init__(f"{url}: HTTP {status}: {detail}")


def _session() -> requests.Session:
    session = getattr(_local, "session", None)
    if session is None:
        session = _local.session = requests.Session()
    return session


def _detail(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    detail = body.get("detail", body) if isinstance(body, dict) else body
    return detail if isinstance(detail, str) else str(detail)[:300]


def _call(
    method: str, url: str, model: type[_M] | TypeAdapter, body: BaseModel | None = None, timeout: float = 15.0
):
    try:
        response = _session().request(
            method,
            url,
            data=None if body is None else body.model_dump_json(),
            headers=None if body is None else {"content-type": "application/json"},
            timeout=timeout,
        )
    except requests.RequestException as exc:
        raise ProtocolError(f"{url}: {exc}") from None
    if response.status_code >= 300:
        raise HTTPRefusal(url, response.status_code, _detail(response))
    try:
        if isinstance(model, TypeAdapter):
            return model.validate_json(response.content)
        return model.model_validate_json(response.content)
    except ValidationError as exc:
        raise ProtocolError(f"{url}: malformed answer: {exc.errors()[0]['msg']}") from None


_PROBLEMS = TypeAdapter(list[Problem])
_QUERIES = TypeAdapter(list[MedianQuery])


class AggregatorClient:
    """Typed calls to one aggregator at ``base_url``."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")

    def _url(self, path: str) -> str:
        return self.base_url + path

    def problems(self, phase: str | None = None) -> list[Problem]:
        return _call("GET", self._url("/problems" + (f"?phase={phase}" if phase else "")), _PROBLEMS)

    def problem(self, problem_id: str) -> Problem:
        return _call("GET", self._url(f"/problems/{problem_id}"), Problem)

    def status(self, problem_id: str) -> ProblemStatus:
        return _call("GET", self._url(f"/problems/{problem_id}/status"), ProblemStatus)

    def register(self, registration: Registration) -> RegistrationReceipt:
        return _call(
            "POST",
            self._url(f"/problems/{registration.problem_id}/registrations"),
            RegistrationReceipt,
            registration,
        )

    def roster(self, problem_id: str) -> Roster:
        return _call("GET", self._url(f"/problems/{problem_id}/roster"), Roster, timeout=60.0)

    def assignment(self, problem_id: str, fingerprint: str) -> Assignment:
        return _call("GET", self._url(f"/problems/{problem_id}/assignments/{fingerprint}"), Assignment)

    def medians(self, problem_id: str) -> list[MedianQuery]:
        return _call("GET", self._url(f"/problems/{problem_id}/medians"), _QUERIES)

    def answer(self, answer: MedianAnswer) -> Ack:
        return _call("POST", self._url(f"/problems/{answer.problem_id}/medians/answers"), Ack, answer)

    def bins(self, problem_id: str) -> Bins:
        return _call("GET", self._url(f"/problems/{problem_id}/bins"), Bins)

    def cosignatures(self, problem_id: str, stage: str) -> CosignatureBundle:
        """Every declared witness's cosignature on the stage's transcript (404 until complete)."""
        return _call("GET", self._url(f"/problems/{problem_id}/cosignatures/{stage}"), CosignatureBundle)

    def tokens(self, request: TokenBatchRequest) -> TokenBatchResponse:
        return _call("POST", self._url(f"/problems/{request.problem_id}/tokens"), TokenBatchResponse, request)

    def model(self, problem_id: str) -> ModelDocument:
        return _call("GET", self._url(f"/problems/{problem_id}/model"), ModelDocument, timeout=60.0)

    @property
    def intake_url(self) -> str:
        return self._url("/intake")


def fetch_witness(relay_url: str, problem_id: str) -> RosterWitness:
    """Ask another peer's relay which roster fingerprint it holds for ``problem_id``."""
    return _call("GET", f"{relay_url.rstrip('/')}/roster/{problem_id}", RosterWitness, timeout=5.0)
