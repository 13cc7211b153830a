"""A malicious aggregator and honest peers, as real services on loopback, for adversary tests.

The aggregator is the project's own app (:func:`aggregator.app.create_app`) on
its own database (``database_url``: a SQLite file, or PostgreSQL) under real
uvicorn, with one ASGI layer in front of it that lets a test deviate from the
protocol the way an aggregator that holds its own signing key can:

* **Equivocation per peer.** Every route is also served under a per-victim
  prefix ``/v/<tag>/…`` (give that peer ``adversary.url_for(tag)`` as its
  aggregator URL). :meth:`MaliciousAggregator.equivocate` installs a rewrite for
  one (tag, kind) — kind is one of :data:`KINDS`: ``problems``, ``problem``,
  ``status``, ``roster``, ``assignment``, ``bins``, ``medians`` — that receives
  the honest answer parsed into its protocol model and returns what that peer
  is shown instead; the result is re-signed with the aggregator's key (so it
  verifies against the key pinned in the proposal) unless ``resign=False``.
  Tag ``None`` rewrites the un-prefixed (everyone's) answers.
  :meth:`MaliciousAggregator.equivocate_raw` rewrites the bytes instead, for
  answers no protocol model can hold (signed by :meth:`MaliciousAggregator.sign_raw`). A host fetches
  the roster and bins once for all the identities it runs, so give each victim
  its own host (:func:`start_peers`) to show it its own view.
* **Tagged tokens.** :meth:`MaliciousAggregator.issue_tokens_with` answers the
  token requests of peer ``tag`` itself, evaluated under another key (a
  per-victim tagging key) with a DLEQ proof that is valid *for that key*: the
  attack the one-proof token response must stop (the peer checks the proof
  against the key the roster pins, before unblinding).
* **Hostile parameters.** :func:`hostile` revalidates a draft with any
  changes (``kp``, ``hops``, ``pool_fraction``, ``min_peers``, …) through the
  aggregator's own admin API (:meth:`MaliciousAggregator.propose`).
* **Sybils.** :meth:`MaliciousAggregator.register_sybil` registers an identity
  the aggregator controls (a test-side :class:`~tests.aggregator.helpers.WirePeer`);
  :meth:`MaliciousAggregator.isolated_roster` and
  :meth:`MaliciousAggregator.assignment_for` build the signed roster and the
  matching assignment for a chosen set of members (e.g. {victim, Sybil}).
* **What each peer did.** :meth:`MaliciousAggregator.seen` lists the requests
  (method, path) that arrived under a tag: e.g. whether a victim asked for
  tokens or posted a median answer.

Honest peers are real :class:`~peer.host.PeerHost` processes-in-threads
(:func:`peer.app.start_peer_server`), each identity with its own event store
and ledger (SQLite files under the test's ``tmp_path``): :func:`start_peers`
returns :class:`HonestPeers`, whose assertions read what the peer itself
stored — :meth:`HonestPeers.assert_ledger_empty`,
:meth:`HonestPeers.assert_refused`.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import requests
from pydantic import BaseModel, TypeAdapter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aggregator.app import ServerHandle, create_app, start_server
from aggregator.settings import AggregatorSettings
from aggregator.state import AggregatorState
from anonml.crypto import Identity, TokenIssuer, TokenKey
from anonml.crypto.spent import MemoryIssuanceLedger
from anonml.demo import DEMO_FEATURES, SimulatedPeer, simulate_peers
from anonml.learn import roster_plan
from anonml.privacy import Release
from anonml.protocol import (
    Assignment,
    Bins,
    MedianQuery,
    Problem,
    ProblemDraft,
    ProblemStatus,
    Roster,
    TokenBatchRequest,
    TokenBatchResponse,
    sign_message,
    signing_context,
)
from anonml.serving import HttpMiddleware
from peer.app import PeerServer, start_peer_server
from peer.db import PeerDB
from peer.host import PeerHost
from peer.participant import PeerNode
from peer.policy import PeerPolicy
from tests.aggregator.helpers import ADMIN, WirePeer, post, propose, status, wait_phase
from tests.peer.helpers import mooc_dropout_draft
from tests.waiting import wait_until

__all__ = [
    "KINDS",
    "MaliciousAggregator",
    "start_adversary",
    "HonestPeers",
    "start_peers",
    "students",
    "mooc_draft",
    "hostile",
    "wait_until",
]

#: Route kinds a rewrite can target: (method, path pattern after the prefix, response model).
KINDS: dict[str, tuple[str, re.Pattern[str], Any]] = {
    "problems": ("GET", re.compile(r"^/problems$"), list[Problem]),
    "problem": ("GET", re.compile(r"^/problems/[^/]+$"), Problem),
    "status": ("GET", re.compile(r"^/problems/[^/]+/status$"), ProblemStatus),
    "roster": ("GET", re.compile(r"^/problems/[^/]+/roster$"), Roster),
    "assignment": ("GET", re.compile(r"^/problems/[^/]+/assignments/[^/]+$"), Assignment),
    "bins": ("GET", re.compile(r"^/problems/[^/]+/bins$"), Bins),
    "medians": ("GET", re.compile(r"^/problems/[^/]+/medians$"), list[MedianQuery]),
}
_PREFIX = re.compile(r"^/v/([A-Za-z0-9_-]{1,64})(/.*)$")
_TOKENS = re.compile(r"^/problems/[^/]+/tokens$")

Rewrite = Callable[[Any], Any]


class _Equivocator(HttpMiddleware):
    """ASGI layer: strip ``/v/<tag>``, note the request, rewrite the answer if a hook is set."""

    def __init__(self, app: ASGIApp, adversary: MaliciousAggregator) -> None:
        super().__init__(app)
        self.adversary = adversary

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        tag, path = None, scope["path"]
        match = _PREFIX.match(path)
        if match is not None:
            tag, path = match.group(1), match.group(2)
            scope = dict(scope, path=path, raw_path=path.encode())
        self.adversary._note(tag, scope["method"], path)
        tagging = self.adversary._tagging_key(tag)
        if tagging is not None and scope["method"] == "POST" and _TOKENS.match(path):
            await self._answer_tokens(tagging, receive, send)
            return
        hook = self.adversary._hook(tag, scope["method"], path)
        if hook is None:
            await self.app(scope, receive, send)
            return
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, capture)
        body, code = b"".join(chunks), int(start.get("status", 500))
        if code == 200:
            body = hook(body)
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": code, "headers": headers})
        await send({"type": "http.response.body", "body": body})


    @staticmethod
    async def _answer_tokens(key: TokenKey, receive: Receive, send: Send) -> None:
        """Evaluate the request under ``key``, with a proof valid for ``key``, shaped as the real answer."""
        chunks: list[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        request = TokenBatchRequest.model_validate_json(b"".join(chunks))
        items = [(bytes(r.slot), bytes(r.blinded)) for r in request.requests]
        answer = TokenIssuer(key, MemoryIssuanceLedger()).issue_batch(bytes(request.identity), items)
        body = TokenBatchResponse(
            evaluated=tuple(bytes(z) for z in answer.evaluated), proof=bytes(answer.proof)
        ).model_dump_json().encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@dataclass
class MaliciousAggregator:
    """The real aggregator with hooks (module docstring)."""

    url: str
    settings: AggregatorSettings
    state: AggregatorState
    db_url: str
    handle: ServerHandle | None = None
    _hooks: dict[tuple[str | None, str], Callable[[bytes], bytes]] = field(default_factory=dict)
    _seen: dict[str | None, list[tuple[str, str]]] = field(default_factory=dict)
    _tagging: dict[str | None, TokenKey] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def identity(self) -> Identity:
        """The aggregator's signing identity (the one its proposals pin)."""
        return self.state.identity

    def url_for(self, tag: str) -> str:
        """The base URL under which peer ``tag`` is shown its own answers."""
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tag):
            raise ValueError(f"tag {tag!r} must be 1-64 letters, digits, '-' or '_'")
        return f"{self.url}/v/{tag}"

    # -- hooks -----------------------------------------------------------------------
    def equivocate(self, tag: str | None, kind: str, rewrite: Rewrite, *, resign: bool = True) -> None:
        """Show peer ``tag`` (None: everyone) ``rewrite(honest answer)`` for route ``kind``.

        The honest answer is parsed into its protocol model (a list for
        ``problems`` and ``medians``); what ``rewrite`` returns is signed with
        the aggregator's key (each element of a list) unless ``resign=False``.
        """
        if kind not in KINDS:
            raise ValueError(f"unknown route kind {kind!r}; one of {', '.join(KINDS)}")
        adapter = TypeAdapter(KINDS[kind][2])

        def hook(body: bytes) -> bytes:
            shown = rewrite(adapter.validate_json(body))
            if resign:
                shown = [self.sign(m) for m in shown] if isinstance(shown, list) else self.sign(shown)
            return adapter.dump_json(shown)

        with self._lock:
            self._hooks[(tag, kind)] = hook

    def equivocate_raw(self, tag: str | None, kind: str, rewrite: Callable[[bytes], bytes]) -> None:
        """Show peer ``tag`` (None: everyone) ``rewrite(honest body)`` for route ``kind``, byte for byte.

        For answers no protocol model can hold (a NaN, a field the schema
        refuses): the rewrite signs what it wants signed itself (:meth:`sign_raw`).
        """
        if kind not in KINDS:
            raise ValueError(f"unknown route kind {kind!r}; one of {', '.join(KINDS)}")
        with self._lock:
            self._hooks[(tag, kind)] = rewrite

    def sign_raw(self, body: dict[str, Any], message_type: type[BaseModel]) -> dict[str, Any]:
        """``body`` (a ``message_type`` as JSON) with the aggregator's signature over its canonical
        bytes, computed as :func:`~anonml.protocol.signing_bytes` does, whether or not it validates."""
        unsigned = {k: v for k, v in body.items() if k != "signature"}
        canonical = json.dumps(unsigned, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        context = signing_context(message_type.model_construct())
        signature = self.identity.sign(canonical.encode("ascii"), context=context)
        return {**body, "signature": base64.b64encode(signature).decode("ascii")}

    def issue_tokens_with(self, tag: str | None, key: TokenKey) -> None:
        """Answer peer ``tag``'s token requests under ``key`` (a tagging key), proof valid for ``key``."""
        with self._lock:
            self._tagging[tag] = key

    def _tagging_key(self, tag: str | None) -> TokenKey | None:
        with self._lock:
            return self._tagging.get(tag)

    def honest(self, tag: str | None, kind: str) -> None:
        """Remove the rewrite of ``kind`` for ``tag``."""
        with self._lock:
            self._hooks.pop((tag, kind), None)

    def sign(self, message: Any) -> Any:
        """``message`` signed with the aggregator's key (messages without a signature: unchanged)."""
        if "signature" not in type(message).model_fields:
            return message
        return sign_message(message.model_copy(update={"signature": bytes(64)}), self.identity)

    def seen(self, tag: str | None) -> list[tuple[str, str]]:
        """(method, path) of every request that arrived under ``tag``, in order."""
        with self._lock:
            return list(self._seen.get(tag, []))

    def _note(self, tag: str | None, method: str, path: str) -> None:
        with self._lock:
            self._seen.setdefault(tag, []).append((method, path))

    def _hook(self, tag: str | None, method: str, path: str) -> Callable[[bytes], bytes] | None:
        with self._lock:
            for (hook_tag, kind), hook in self._hooks.items():
                want, pattern, _ = KINDS[kind]
                if hook_tag == tag and method == want and pattern.match(path):
                    return hook
        return None

    # -- the admin side ----------------------------------------------------------------
    def propose(self, draft: ProblemDraft) -> Problem:
        """Publish ``draft`` through the aggregator's own admin API (its validation applies)."""
        return propose(self.url, draft)

    def close(self, problem: Problem) -> None:
        response = requests.post(f"{self.url}/problems/{problem.id}/close", headers=ADMIN, timeout=30)
        assert response.status_code == 200, response.text

    def status(self, problem: Problem) -> ProblemStatus:
        return status(self.url, problem.id)

    def wait_phase(self, problem: Problem, *phases: str, timeout: float = 60.0) -> ProblemStatus:
        return wait_phase(self.url, problem.id, phases, timeout=timeout)

    def register_sybil(self, problem: Problem, relay_base: str = "http://127.0.0.1:9") -> WirePeer:
        """Register one identity the aggregator controls (relay URL ``relay_base/relay/<its node>``)."""
        sybil = WirePeer()
        registration = sybil.registration(problem)
        assert sybil.key is not None
        node = sybil.identity.public.node_id.hex()
        registration = sign_message(
            registration.model_copy(update={"relay_url": f"{relay_base}/relay/{node}"}),
            sybil.identity,
        )
        response = post(f"{self.url}/problems/{problem.id}/registrations", registration)
        assert response.status_code == 201, response.text
        return sybil

    def roster(self, problem: Problem, timeout: float = 30.0) -> Roster:
        """The honest signed roster, once registration has closed (waits for it)."""
        wait_until(lambda: self.status(problem).phase != "registration", timeout, "registration to close")
        response = requests.get(f"{self.url}/problems/{problem.id}/roster", timeout=30)
        assert response.status_code == 200, response.text
        return Roster.model_validate_json(response.content)

    def isolated_roster(self, problem: Problem, honest: Roster, members: Sequence[bytes]) -> Roster:
        """``honest`` cut down to ``members`` (public identities), median pool resized, signed."""
        keep = {bytes(m) for m in members}
        entries = tuple(e for e in honest.entries if bytes(e.identity) in keep)
        assert len(entries) == len(keep), "every member must be on the honest roster"
        return self.sign(
            honest.model_copy(
                update={"entries": entries, "median_pool_size": problem.draft.median_pool_size(len(entries))}
            )
        )

    def assignment_for(self, problem: Problem, roster: Roster, identity: bytes) -> Assignment:
        """The signed assignment the plan derived from ``roster`` gives ``identity``."""
        keys = [bytes(e.identity) for e in roster.entries]
        plan = roster_plan(problem.draft, roster)
        mine = plan.assignment(keys.index(bytes(identity)))
        return self.sign(
            Assignment(
                problem_id=problem.id,
                identity=bytes(identity),
                role=mine.role,
                index=mine.index,
                subsets=mine.subsets,
                signature=bytes(64),
            )
        )


def start_adversary(tmp_path: Path, db_url: str) -> MaliciousAggregator:
    """Serve the aggregator on ``db_url`` (files in ``tmp_path``) with the hooks; stop: ``.handle.stop()``."""
    settings = AggregatorSettings(
        db_url=db_url,
        identity_file=tmp_path / "aggregator-identity.json",
        admin_token=ADMIN["Authorization"].removeprefix("Bearer "),
        tick_seconds=0.05,
        intake_grace_seconds=0.5,
        allow_loopback_http=True,
    )
    app = create_app(settings)
    adversary = MaliciousAggregator("", settings, app.state.aggregator, db_url)
    app.add_middleware(_Equivocator, adversary=adversary)
    adversary.handle = start_server(app)
    adversary.url = adversary.handle.url
    return adversary


# -- problems ------------------------------------------------------------------------------


def mooc_draft(*, min_peers: int, epsilon: float = 2.0, **changes: Any) -> ProblemDraft:
    """The demo's dropout problem with short windows, then ``changes`` (see :func:`hostile`)."""
    d = mooc_dropout_draft(epsilon=epsilon, min_peers=min_peers, median_step_seconds=1.5)
    return hostile(d, **changes) if changes else d


def hostile(draft: ProblemDraft, *, pool_fraction: float | None = None, **changes: Any) -> ProblemDraft:
    """``draft`` with ``changes`` (and ``median.pool_fraction``), revalidated as the aggregator would."""
    body = draft.model_dump()
    body.update(changes)
    if pool_fraction is not None:
        body["median"] = {**body["median"], "pool_fraction": pool_fraction}
    return ProblemDraft.model_validate(body)


# -- honest peers --------------------------------------------------------------------------


def students(tmp_path: Path, n: int, *, seed: int = 3) -> list[SimulatedPeer]:
    """``n`` simulated students with an example each: own event store, identity and ledger files."""
    peers, _ = simulate_peers(
        n, tmp_path / "students", weeks=4, history_weeks=2, seed=seed, features=list(DEMO_FEATURES)
    )
    return peers


@dataclass
class HonestPeers:
    """One real peer host (relay + worker under uvicorn) and the identities it runs."""

    server: PeerServer
    nodes: list[PeerNode]

    @property
    def host(self) -> PeerHost:
        return self.server.host

    def node(self, which: int | PeerNode = 0) -> PeerNode:
        return which if isinstance(which, PeerNode) else self.nodes[which]

    def decision(self, problem: Problem, which: int | PeerNode = 0) -> tuple[str, str] | None:
        """(verdict, reason) this identity recorded for ``problem``, or None if not decided yet."""
        row = self.host.db.decision(problem.id, self.node(which).fingerprint)
        return None if row is None else (row.verdict, row.reason)

    def participation(self, problem: Problem, which: int | PeerNode = 0) -> tuple[str, str] | None:
        """(status, reason) of this identity's participation, or None."""
        row = self.host.db.participation(problem.id, self.node(which).fingerprint)
        return None if row is None else (row.phase, row.reason)

    def releases(self, which: int | PeerNode = 0) -> list[Release]:
        node = self.node(which)
        return node.ledger.releases(peer=node.fingerprint)

    def wait_decided(self, problem: Problem, timeout: float = 60.0) -> None:
        """Every identity has decided on ``problem``."""
        wait_until(
            lambda: all(self.decision(problem, n) is not None for n in self.nodes),
            timeout,
            f"every peer to decide on {problem.id}",
        )

    def wait_stopped(self, problem: Problem, which: int | PeerNode = 0, timeout: float = 60.0) -> str:
        """Wait until this identity refused, aborted, failed or finished; return the reason shown."""

        def stopped() -> bool:
            decision = self.decision(problem, which)
            if decision is not None and decision[0] == "refuse":
                return True
            part = self.participation(problem, which)
            return part is not None and part[0] in ("aborted", "failed", "done", "degraded", "partial")

        wait_until(stopped, timeout, f"peer {self.node(which).fingerprint[:12]} to stop in {problem.id}")
        decision = self.decision(problem, which)
        if decision is not None and decision[0] == "refuse":
            return decision[1]
        part = self.participation(problem, which)
        assert part is not None
        return part[1]

    def assert_ledger_empty(self, which: int | PeerNode = 0) -> None:
        """This identity released nothing: no report, no median answer, in its own ledger."""
        releases = self.releases(which)
        assert releases == [], f"the peer released {len(releases)} times: {releases[:3]}"

    def assert_refused(
        self, problem: Problem, reason: str, which: int | PeerNode = 0, timeout: float = 60.0
    ) -> str:
        """This identity refused (or aborted) ``problem`` saying ``reason``, and released nothing."""
        said = self.wait_stopped(problem, which, timeout)
        part = self.participation(problem, which)
        assert part is None or part[0] not in ("done", "degraded", "partial"), (
            f"the peer took part to the end: {part}"
        )
        assert reason in said, f"expected the reason to mention {reason!r}; the peer said {said!r}"
        self.assert_ledger_empty(which)
        return said

    def stop(self) -> None:
        self.server.stop()
        self.host.db.close()
        for node in self.nodes:
            node.ledger.close()
            node.store.close()


def start_peers(
    tmp_path: Path,
    aggregator_url: str,
    peers: Sequence[SimulatedPeer],
    policy: PeerPolicy,
    *,
    name: str = "peers",
    roster_comparisons: int = 2,
    seed: int = 0,
) -> HonestPeers:
    """Serve one host for ``peers`` polling ``aggregator_url``; its state DB in ``tmp_path / name.db``."""
    nodes = [
        PeerNode(p.identity, p.store, p.ledger, user=p.username, rng=np.random.default_rng(seed + i))
        for i, p in enumerate(peers)
    ]
    host = PeerHost(
        nodes,
        PeerDB(f"sqlite:///{tmp_path / (name + '.db')}"),
        policy,
        [aggregator_url],
        poll_seconds=0.1,
        workers=4,
        **{_COMPARISONS: roster_comparisons},
    )
    return HonestPeers(start_peer_server(host), nodes)


#: The PeerHost keyword for how many members each identity compares the roster with
#: (named ``witnesses`` before the witness service took that word).
_COMPARISONS = (
    "roster_comparisons"
    if "roster_comparisons" in PeerHost.__init__.__code__.co_varnames
    else "witnesses"
)
