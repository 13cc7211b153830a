"""A participation saved and taken up again: what a restart needs of a :class:`~peer.participant.Participant`.

:func:`save` writes the phase and its facts to the state DB (secrets sealed by :mod:`peer.vault`)
before the new phase releases anything; :func:`resume` restores them after a restart, so a peer
killed at any point never releases twice (docs/protocol.md, "Restarts").
"""

from __future__ import annotations

import json
import logging
from typing import Any

from anonml.crypto import (
    Hop,
    RelayKeyCertificate,
    RoundRelayKey,
    Token,
)
from peer.db import ParticipationRow
from peer.participation import Comparisons, Participation
from peer.phases import (
    TERMINAL,
    Outcome,
    ParticipationPhase,
    Preparation,
    RelayKeys,
)

P = ParticipationPhase
log = logging.getLogger("anonml.peer")


def save(p: Participation, model_json: str | None = None) -> None:
    """Write the phase and the facts a restart needs (no-op without a state DB)."""
    if p.db is None:
        return
    fingerprint = p.roster.view.fingerprint if p.roster is not None else p._resumed_fingerprint
    facts: dict[str, Any] = {
        "reason": p.reason,
        "standins": p.standins,
        "shortfall": p.shortfall,
        "confirmed": sorted(p.comparisons.confirmed),
        "asked": sorted(p.comparisons.asked),
        "roster_fingerprint": fingerprint,
        "report_group": p.report_group,
        "window_end": p.window_end,
        "sent": p.sent,
        "paths": None
        if p.paths is None
        else [[[h.node_id.hex(), h.public_key.hex(), h.delay_ms] for h in path] for path in p.paths],
        "lost": p.lost,
        "prediction": p.prediction,
        # sender-only may have been detected (peer.reachability) under a policy that relays
        "relays": p.relays,
        # drawn once: a restart sends these signed bytes again (peer.calibration_answer)
        "calibration_answer": p.stored_calibration_answer,
    }
    sealed = None
    if p.tokens is not None and p.phase not in TERMINAL:  # spent secrets go with the round
        plain = json.dumps([[t.key_id.hex(), t.slot.hex(), t.nonce.hex(), t.output.hex()] for t in p.tokens])
        sealed = p.node.vault.seal(plain.encode())
    elif p.tokens is not None:  # the digests of the nonces stay countable: keep only those
        facts["token_nonces"] = [t.nonce.hex() for t in p.tokens]
    p.db.save_participation(
        p.problem.id,
        p.node.fingerprint,
        p.phase,
        json.dumps(facts),
        sealed,
        reason=p.reason,
        fingerprint=fingerprint,
        model_json=model_json,
    )
    if p.phase in TERMINAL:
        p.db.clear_outbox(p.problem.id, p.node.fingerprint)


def resume(p: Participation, row: ParticipationRow) -> list[tuple[int, float, str, bytes]]:
    """Take up the persisted participation ``row`` after a restart; the packets still to send.

    Restores the phase, the round relay key (if the round has not closed),
    routes and tokens; the roster facts are re-derived from the roster the
    aggregator serves and must have the persisted fingerprint
    (:meth:`restore_roster`). Returns ``(slot, send time, first hop,
    packet)`` of each built packet not sent yet.
    """
    facts = json.loads(row.facts_json)
    if facts.get("relays") is False and p.policy.relay:  # it registered sender-only: it stays so
        p.policy = p.policy.model_copy(update={"relay": False})
    p.phase = ParticipationPhase(row.phase)
    p.reason = facts.get("reason", "")
    p.standins = list(facts.get("standins", []))
    p.shortfall = list(facts.get("shortfall", []))
    p.comparisons = Comparisons(set(facts.get("confirmed", [])), set(facts.get("asked", [])))
    p._resumed_fingerprint = facts.get("roster_fingerprint")
    p._resumed_group = facts.get("report_group")
    p.window_end = facts.get("window_end")
    p.sent = int(facts.get("sent", 0))
    p.stored_calibration_answer = facts.get("calibration_answer")
    vault = p.node.vault
    if p.db is not None:
        key_row = p.db.round_key(p.node.fingerprint, p.problem.round_id)
        if key_row is not None:
            key = RoundRelayKey(p.problem.round_id, vault.open(key_row.sealed_key))
            p.keys = RelayKeys(key, RelayKeyCertificate.from_bytes(key_row.certificate))
    tokens = None
    if row.sealed_tokens is not None:
        tokens = tuple(
            Token(*(bytes.fromhex(x) for x in t)) for t in json.loads(vault.open(row.sealed_tokens))
        )
    if facts.get("paths") is not None:
        paths = tuple(
            tuple(Hop(bytes.fromhex(n), bytes.fromhex(k), int(d)) for n, k, d in path)
            for path in facts["paths"]
        )
        p.preparation = Preparation(paths, tokens)
    if p.phase in TERMINAL:
        p.outcome = Outcome(facts.get("lost"), facts.get("prediction"))
        return []
    pending = []
    if p.db is not None and p.window_end is not None:
        for out in p.db.outbox(p.problem.id, p.node.fingerprint):
            if not out.sent:
                pending.append((out.slot, out.send_at, out.url, vault.open(out.sealed_packet)))
        if p.phase == P.RELAYING:  # killed between storing its packets and the move
            p._move(P.REPORTING)
    return pending
