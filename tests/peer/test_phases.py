"""The participation machine: only the table's moves, and secrets at rest sealed per identity."""

from __future__ import annotations

import pytest

from anonml.crypto import Identity
from peer.phases import TERMINAL, TRANSITIONS, IllegalTransition, ParticipationPhase, check_transition
from peer.vault import Vault, VaultError

P = ParticipationPhase


def _reachable(start: ParticipationPhase) -> set[ParticipationPhase]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in TRANSITIONS[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_every_phase_is_reachable_from_accepted_and_every_path_ends():
    assert _reachable(P.ACCEPTED) == set(P)
    assert TERMINAL == {P.DONE, P.DEGRADED, P.PARTIAL, P.ABORTED, P.FAILED}
    for phase in set(P) - TERMINAL:  # from anywhere alive, both ways out
        assert {P.ABORTED, P.FAILED} <= TRANSITIONS[phase]


def test_the_machine_refuses_a_skipped_step_a_step_back_and_any_move_out_of_an_end():
    assert check_transition(P.ACCEPTED, P.REGISTERED) is P.REGISTERED
    with pytest.raises(IllegalTransition, match="accepted to reporting"):
        check_transition(P.ACCEPTED, P.REPORTING)  # nothing is sent without a checked roster
    with pytest.raises(IllegalTransition):
        check_transition(P.ANSWERED, P.CONFIRMED)  # a median answer is never given twice
    with pytest.raises(IllegalTransition):
        check_transition(P.RELAYING, P.DONE)  # a model is taken only after reporting
    for end in TERMINAL:
        for phase in P:
            with pytest.raises(IllegalTransition):
                check_transition(end, phase)


def test_the_vault_opens_only_what_the_same_identity_sealed_unaltered():
    me, other = Identity.generate(), Identity.generate()
    sealed = Vault(me).seal(b"round relay key")
    assert b"round relay key" not in sealed
    assert Vault(me).open(sealed) == b"round relay key"  # the key is derived again after a restart
    assert Vault(me).seal(b"x") != Vault(me).seal(b"x")  # a fresh nonce per value
    with pytest.raises(VaultError):
        Vault(other).open(sealed)
    altered = bytearray(sealed)
    altered[-1] ^= 1
    with pytest.raises(VaultError):
        Vault(me).open(bytes(altered))


def test_a_failing_poll_backs_off_doubling_up_to_thirty_seconds():
    from peer.discovery import poll_backoff

    assert [poll_backoff(1.0, f) for f in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert poll_backoff(0.1, 0) == 0.1
    assert poll_backoff(60.0, 3) == 60.0  # never polls faster than configured


def test_a_participation_is_saved_whole_or_not_at_all(database_url):
    """The restart state and the summary the dashboard reads are one transaction."""
    from sqlalchemy.exc import SQLAlchemyError

    from peer.db import PeerDB

    db = PeerDB(database_url)
    try:
        db.save_participation("p-1", "n1", "accepted", '{"sent": 0}', None, reason="", fingerprint="ab" * 8)
        db.save_participation("p-1", "n1", "reporting", '{"sent": 2}', b"sealed", reason="round open")
        (state,) = db.states("n1")
        summary = db.participation("p-1", "n1")
        assert (state.phase, state.facts_json, state.sealed_tokens) == ("reporting", '{"sent": 2}', b"sealed")
        assert (summary.phase, summary.reason) == ("reporting", "round open")
        assert summary.roster_fingerprint == "ab" * 8  # kept when a later save does not name it
        assert summary.updated_at == state.updated_at
        # One statement a save (an upsert): no read of the row, whose stored model can be large.
        from sqlalchemy import event

        statements: list[str] = []

        def seen(conn, cursor, statement, *args) -> None:  # noqa: ANN001 - SQLAlchemy's event signature
            statements.append(statement.split()[0].upper())

        event.listen(db.engine, "before_cursor_execute", seen)
        db.save_participation("p-1", "n1", "reporting", '{"sent": 2}', b"sealed", reason="round open")
        event.remove(db.engine, "before_cursor_execute", seen)
        assert statements == ["INSERT"]
        # A summary that cannot be written takes the new phase of the state row down with it.
        with pytest.raises(SQLAlchemyError):
            db.save_participation("p-1", "n1", "done", "{}", None, model_json=object())  # type: ignore[arg-type]
        (state,) = db.states("n1")
        assert state.phase == "reporting" and db.participation("p-1", "n1").phase == "reporting"
    finally:
        db.close()
