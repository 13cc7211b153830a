"""The one HTTP client of the aggregator's API — the peer's, the CLI's, the demo's and the benchmarks'.

Typed requests, typed answers, clear errors; with an admin token it also proposes, closes,
trains and evaluates (:class:`AggregatorClient`).

Every response body is parsed by its :mod:`anonml.protocol` model (never
unpickled, never evaluated); a non-2xx answer raises
:class:`~anonml.errors.ProtocolError` carrying the status and the server's reason.
Every call goes through :func:`anonml.outbound.fetch`: a total deadline for the
whole exchange and a cap on the answer's size (larger for the roster and the
model), so neither the aggregator nor a member's relay can hold the peer's
worker by answering slowly or without end.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlencode

from pydantic import BaseModel, TypeAdapter, ValidationError

from anonml.addresses import connect_check
from anonml.errors import ProtocolError
from anonml.outbound import AGGREGATOR_DEADLINE, REPLY_CAP, AddressCheck, OutboundError, Reply, fetch
from anonml.phases import ProblemPhase
from anonml.protocol import (
    MAX_BATCH_ITEMS,
    Ack,
    Assignment,
    AssignmentBatch,
    AssignmentBatchRequest,
    BatchResults,
    Bins,
    CalibrationAnswer,
    CalibrationRequest,
    ChoiceAnswer,
    CosignatureBundle,
    MedianAnswer,
    MedianAnswerBatch,
    MedianQuery,
    ModelDocument,
    ModelEvaluation,
    Problem,
    ProblemDraft,
    ProblemStatus,
    ReachabilityRequest,
    ReachabilityResult,
    Registration,
    RegistrationBatch,
    RegistrationReceipt,
    ReportReceipts,
    Roster,
    RosterWitness,
    TokenBatchRequest,
    TokenBatchResponse,
)

__all__ = [
    "AggregatorClient",
    "HTTPRefusal",
    "fetch_witness",
    "transient",
    "backoff_delay",
    "retry_wait",
    "with_retries",
    "TRANSIENT_STATUSES",
]

_M = TypeVar("_M", bound=BaseModel)
_R = TypeVar("_R")
#: Bytes a roster or a model document may have (each member's entry is a few hundred bytes).
LARGE_REPLY_CAP = 64 << 20


class HTTPRefusal(ProtocolError):
    """The server answered with an error status; ``status`` and the server's ``detail``."""

    def __init__(self, url: str, status: int, detail: str, retry_after: float | None = None) -> None:
        self.status = status
        self.detail = detail
        self.retry_after = retry_after  # seconds its Retry-After asked to wait, if it gave one
        super().__init__(f"{url}: HTTP {status}: {detail}")


#: Answers that say "not now" rather than "no" (RFC 9110 §15.5.9, §15.6; RFC 6585 §4; RFC 8470 §5.2):
#: timeout, too early, too many requests, and every 5xx. Any other refusal is the server's answer.
TRANSIENT_STATUSES = frozenset({408, 425, 429})


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` may pass if the call is made again: no answer at all (unreachable, reset,
    over its deadline: :class:`~peer.dispatch.OutboundError`) or a "not now" status
    (:data:`TRANSIENT_STATUSES`, 5xx). A malformed answer or any other refusal is not: it is what
    the server chose to say, and it ends the participation that asked."""
    if isinstance(exc, HTTPRefusal):
        return exc.status >= 500 or exc.status in TRANSIENT_STATUSES
    return isinstance(exc, OutboundError)


def backoff_delay(
    attempt: int, *, base: float = 0.25, cap: float = 4.0, rng: random.Random | None = None
) -> float:
    """Seconds before try ``attempt + 1``: "full jitter", uniform on ``[0, min(cap, base · 2^attempt)]``.

    Spreading each wait over the whole interval (Brooker, "Exponential backoff and jitter",
    AWS Architecture Blog, 2015) keeps the peers a restarted aggregator meets from coming back in
    one wave; the cap keeps a retry within a phase's few-second windows.
    """
    return (rng or random).uniform(0.0, min(cap, base * 2.0**attempt))


def retry_wait(
    attempt: int, exc: BaseException | None = None, *, rng: random.Random | None = None
) -> float:
    """Seconds before try ``attempt + 1`` after ``exc``: :func:`backoff_delay`, and when the server
    said how long to wait (``Retry-After`` on a 429 or 503, RFC 9110 §10.2.3; RFC 6585 §4) that
    long first — never sooner, so a shed request does not come back into the same queue — plus the
    jittered backoff, so the many clients one overloaded server shed at once come back spread out."""
    delay = backoff_delay(attempt, rng=rng)
    after = exc.retry_after if isinstance(exc, HTTPRefusal) else None
    return delay if after is None else after + delay


def with_retries(
    call: Callable[[], _R],
    *,
    until: float,
    on_retry: Callable[[BaseException], None] | None = None,
    rng: random.Random | None = None,
) -> _R:
    """``call()``, made again after each :func:`transient` failure (waiting :func:`retry_wait`: the
    server's Retry-After, if any, plus jittered backoff) until a try would start at or after
    ``until`` (``time.time()``, the phase's deadline); then the last failure is raised. A failure
    that is not transient is raised at once. ``on_retry`` is told of each failure tried again."""
    attempt = 0
    while True:
        try:
            return call()
        except Exception as exc:
            if not transient(exc):
                raise
            wait = retry_wait(attempt, exc, rng=rng)
            if time.time() + wait >= until:
                raise
            if on_retry is not None:
                on_retry(exc)
            time.sleep(wait)
            if time.time() >= until:  # a loaded machine overslept the wait: no try past the deadline
                raise
            attempt += 1


def _detail(reply: Reply) -> str:
    try:
        body = json.loads(reply.body)
    except ValueError:
        return reply.text[:200]
    detail = body.get("detail", body) if isinstance(body, dict) else body
    return detail[:300] if isinstance(detail, str) else str(detail)[:300]


def _call(
    method: str,
    url: str,
    model: type[_M] | TypeAdapter,
    body: BaseModel | bytes | None = None,
    timeout: float | None = None,
    max_bytes: int = REPLY_CAP,
    address_check: AddressCheck | None = None,
    *,
    content_type: str = "application/json",
    token: str | None = None,
):
    """``method url`` with ``body`` (a message as JSON, or raw bytes of ``content_type``), its answer
    parsed by ``model``; ``token``: the admin bearer token. A refusal raises :class:`HTTPRefusal`."""
    if isinstance(body, BaseModel):
        body = body.model_dump_json().encode("utf-8")
    reply = fetch(
        method,
        url,
        body,
        None if body is None else content_type,
        deadline=AGGREGATOR_DEADLINE if timeout is None else timeout,
        max_bytes=max_bytes,
        address_check=address_check,
        authorization=None if token is None else f"Bearer {token}",
    )
    if reply.status >= 300:
        raise HTTPRefusal(url, reply.status, _detail(reply), reply.retry_after)
    try:
        if isinstance(model, TypeAdapter):
            return model.validate_json(reply.body)
        return model.model_validate_json(reply.body)
    except ValidationError as exc:
        raise ProtocolError(f"{url}: malformed answer: {exc.errors()[0]['msg']}") from None


_ENTRIES = TypeAdapter(list[Any])
log = logging.getLogger("anonml.peer")
_QUERIES = TypeAdapter(list[MedianQuery])


#: Seconds an admin action may take (proposing signs the problem; training runs in the background).
ADMIN_DEADLINE = 60.0


class AggregatorClient:
    """Typed calls to one aggregator at ``base_url``; ``admin_token`` for its operator's actions."""

    def __init__(self, base_url: str, admin_token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.admin_token = admin_token

    def _url(self, path: str) -> str:
        return self.base_url + path

    def _admin(self, path: str, model: type[_M], body: BaseModel | bytes | None = None, **kwargs: Any) -> _M:
        """``POST path`` as the operator (``Authorization: Bearer <admin token>``)."""
        if not self.admin_token:
            raise ProtocolError(f"{self._url(path)}: an admin action needs the aggregator's admin token")
        kwargs.setdefault("timeout", ADMIN_DEADLINE)
        return _call("POST", self._url(path), model, body, token=self.admin_token, **kwargs)

    def propose(self, draft: ProblemDraft) -> Problem:
        """Publish ``draft``; the aggregator's signed :class:`Problem` (admin)."""
        return self._admin("/problems", Problem, draft)

    def close(self, problem_id: str) -> ProblemStatus:
        """Close registration now (admin); the roster is published on the next tick."""
        return self._admin(f"/problems/{problem_id}/close", ProblemStatus)

    def train(self, problem_id: str) -> ProblemStatus:
        """Close the report round now and train, or train again (admin)."""
        return self._admin(f"/problems/{problem_id}/train", ProblemStatus)

    def evaluate(
        self, problem_id: str, rows_csv: bytes, *, label: str = "label", name: str
    ) -> ModelEvaluation:
        """Score the published model on labelled CSV rows (``label`` their label's column, ``name``
        what to call them) the peers never saw (admin)."""
        query = urlencode({"label": label, "name": name})
        path = f"/problems/{problem_id}/evaluation?{query}"
        return self._admin(path, ModelEvaluation, rows_csv, content_type="text/csv", timeout=120.0)

    def problems(self, phase: ProblemPhase | None = None) -> list[Problem]:
        """The aggregator's problems (``phase``: only those in it), each entry validated on its own.

        A malformed entry is left out and logged: it never hides the well-formed
        ones (whose signatures the caller still checks).
        """
        url = self._url("/problems" + (f"?phase={phase}" if phase else ""))
        problems, malformed = [], []
        for i, entry in enumerate(_call("GET", url, _ENTRIES, max_bytes=LARGE_REPLY_CAP)):
            try:
                problems.append(Problem.model_validate_json(json.dumps(entry)))
            except ValidationError as exc:
                malformed.append(f"entry {i}: {exc.errors()[0]['msg']}")
        if malformed:
            shown = "; ".join(malformed[:3])
            log.warning("%s: %d malformed problem(s) left out: %s", url, len(malformed), shown)
        return problems

    def problem(self, problem_id: str) -> Problem:
        return _call("GET", self._url(f"/problems/{problem_id}"), Problem)

    def status(self, problem_id: str) -> ProblemStatus:
        return _call("GET", self._url(f"/problems/{problem_id}/status"), ProblemStatus)

    def reachability(self, request: ReachabilityRequest) -> ReachabilityResult:
        """Ask the aggregator to connect to the signer's relay URL (:mod:`peer.reachability`).

        The deadline covers the aggregator's own probe (5 s at most) and the way there and back.
        """
        return _call("POST", self._url("/reachability"), ReachabilityResult, request, timeout=30.0)

    def register(self, registration: Registration) -> RegistrationReceipt:
        return _call(
            "POST",
            self._url(f"/problems/{registration.problem_id}/registrations"),
            RegistrationReceipt,
            registration,
        )

    def register_batch(self, problem_id: str, registrations: Sequence[Registration]) -> BatchResults:
        """Many identities' registrations in one request; one result per registration, in order."""
        path = f"/problems/{problem_id}/registrations/batch"
        return self._batch(path, RegistrationBatch(registrations=tuple(registrations)), "registrations")

    def _batch(self, path: str, body: RegistrationBatch | MedianAnswerBatch, what: str) -> BatchResults:
        """POST a batch; its results, one per item, in order (a :class:`ProtocolError` otherwise)."""
        results = _call("POST", self._url(path), BatchResults, body, timeout=60.0, max_bytes=LARGE_REPLY_CAP)
        n = len(body.registrations if isinstance(body, RegistrationBatch) else body.answers)
        if len(results.results) != n:
            raise ProtocolError(f"the aggregator answered {len(results.results)} results for {n} {what}")
        return results

    def roster(self, problem_id: str) -> Roster:
        url = self._url(f"/problems/{problem_id}/roster")
        return _call("GET", url, Roster, timeout=60.0, max_bytes=LARGE_REPLY_CAP)

    def assignment(self, problem_id: str, fingerprint: str) -> Assignment:
        return _call("GET", self._url(f"/problems/{problem_id}/assignments/{fingerprint}"), Assignment)

    def assignments(self, problem_id: str, fingerprints: Sequence[str]) -> dict[str, Assignment]:
        """The signed assignments of ``fingerprints`` (hex), by fingerprint: one request per
        :data:`~anonml.protocol.MAX_BATCH_ITEMS`. Each is checked by its identity as it would
        check the single route's answer (signature, identity, problem)."""
        out: dict[str, Assignment] = {}
        for start in range(0, len(fingerprints), MAX_BATCH_ITEMS):
            chunk = tuple(fingerprints[start : start + MAX_BATCH_ITEMS])
            batch = _call(
                "POST",
                self._url(f"/problems/{problem_id}/assignments"),
                AssignmentBatch,
                AssignmentBatchRequest(problem_id=problem_id, fingerprints=chunk),
                max_bytes=LARGE_REPLY_CAP,
            )
            if len(batch.assignments) != len(chunk):
                raise ProtocolError(
                    f"the aggregator answered {len(batch.assignments)} assignments for {len(chunk)} asked"
                )
            out.update(zip(chunk, batch.assignments, strict=True))
        return out

    def medians(self, problem_id: str) -> list[MedianQuery]:
        return _call("GET", self._url(f"/problems/{problem_id}/medians"), _QUERIES)

    def asked_medians(self, problem_id: str) -> list[MedianQuery]:
        """Every median query asked, closed ones too (which members were asked at all)."""
        return _call("GET", self._url(f"/problems/{problem_id}/medians/asked"), _QUERIES)

    def answer(self, answer: MedianAnswer) -> Ack:
        return _call("POST", self._url(f"/problems/{answer.problem_id}/medians/answers"), Ack, answer)

    def answer_batch(self, problem_id: str, answers: Sequence[MedianAnswer]) -> BatchResults:
        """Many identities' median answers in one request; one result per answer, in order."""
        path = f"/problems/{problem_id}/medians/answers/batch"
        return self._batch(path, MedianAnswerBatch(answers=tuple(answers)), "median answers")

    def calibration(self, problem_id: str) -> CalibrationRequest:
        """The calibration question and the uncalibrated model it names (404 until asked)."""
        url = self._url(f"/problems/{problem_id}/calibration")
        return _call("GET", url, CalibrationRequest, timeout=60.0, max_bytes=LARGE_REPLY_CAP)

    def answer_calibration(self, answer: CalibrationAnswer) -> Ack:
        url = self._url(f"/problems/{answer.problem_id}/calibration/answers")
        return _call("POST", url, Ack, answer)

    def answer_choice(self, answer: ChoiceAnswer) -> Ack:
        """A K ≥ 3 choice-half member's answer to the second calibration question."""
        url = self._url(f"/problems/{answer.problem_id}/calibration/choices")
        return _call("POST", url, Ack, answer)

    def bins(self, problem_id: str) -> Bins:
        return _call("GET", self._url(f"/problems/{problem_id}/bins"), Bins)

    def cosignatures(self, problem_id: str, stage: str) -> CosignatureBundle:
        """Every declared witness's cosignature on the stage's transcript (404 until complete)."""
        return _call("GET", self._url(f"/problems/{problem_id}/cosignatures/{stage}"), CosignatureBundle)

    def tokens(self, request: TokenBatchRequest) -> TokenBatchResponse:
        return _call("POST", self._url(f"/problems/{request.problem_id}/tokens"), TokenBatchResponse, request)

    def model(self, problem_id: str) -> ModelDocument:
        return _call(
            "GET",
            self._url(f"/problems/{problem_id}/model"),
            ModelDocument,
            timeout=60.0,
            max_bytes=LARGE_REPLY_CAP,
        )

    def receipts(self, problem_id: str) -> ReportReceipts:
        url = self._url(f"/problems/{problem_id}/receipts")
        return _call("GET", url, ReportReceipts, timeout=60.0, max_bytes=LARGE_REPLY_CAP)

    @property
    def intake_url(self) -> str:
        return self._url("/intake")


def fetch_witness(relay_url: str, problem_id: str, *, allow_loopback: bool) -> RosterWitness:
    """Ask another peer's relay which roster fingerprint it holds for ``problem_id``.

    ``relay_url`` must already have passed :func:`anonml.protocol.check_relay_address`
    (the caller checks every roster entry before fetching anything); the
    connection goes only to a global address (loopback too with
    ``allow_loopback``), :class:`~anonml.outbound.RefusedAddress` otherwise; the
    answer is bounded to 5 s and 4 KiB.
    """
    return _call(
        "GET",
        f"{relay_url.rstrip('/')}/roster/{problem_id}",
        RosterWitness,
        timeout=5.0,
        max_bytes=4096,
        address_check=connect_check(allow_loopback=allow_loopback),
    )
