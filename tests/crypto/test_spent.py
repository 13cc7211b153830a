"""Spent sets and issuance ledgers: once only, atomically, also under concurrency on a real SQLite file."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from anonml.crypto.exceptions import AlreadyIssued, InvalidEncoding, TokenSpent
from anonml.crypto.poprf import TokenKey
from anonml.crypto.spent import (
    IssuanceRow,
    MemoryIssuanceLedger,
    MemorySpentSet,
    SpentTokenRow,
    SqlIssuanceLedger,
    SqlSpentSet,
    create_crypto_tables,
    record_spent,
)
from anonml.crypto.tokens import TokenIssuer, TokenVerifier, finalize_tokens, request_tokens

KEY_ID = bytes(range(32))
SLOT = b"slot-1"


@pytest.fixture()
def engine(tmp_path: Path) -> Engine:
    eng = create_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    yield eng
    eng.dispose()


@pytest.mark.parametrize("kind", ["memory", "sql"])
def test_spend_once_then_refuse(kind: str, engine: Engine) -> None:
    spent = MemorySpentSet() if kind == "memory" else SqlSpentSet(engine)
    nonce = bytes(32)
    assert not spent.is_spent(KEY_ID, SLOT, nonce)
    spent.spend(KEY_ID, SLOT, nonce)
    assert spent.is_spent(KEY_ID, SLOT, nonce)
    with pytest.raises(TokenSpent):
        spent.spend(KEY_ID, SLOT, nonce)
    # Any one component different is a different token.
    spent.spend(KEY_ID, SLOT + b"x", nonce)
    spent.spend(bytes(32), SLOT, nonce)
    spent.spend(KEY_ID, SLOT, b"\x01" * 32)


@pytest.mark.parametrize("kind", ["memory", "sql"])
def test_issuance_once_per_key_peer_slot(kind: str, engine: Engine) -> None:
    ledger = MemoryIssuanceLedger() if kind == "memory" else SqlIssuanceLedger(engine)
    ledger.record(KEY_ID, b"peer", SLOT)
    assert ledger.has_issued(KEY_ID, b"peer", SLOT)
    with pytest.raises(AlreadyIssued):
        ledger.record(KEY_ID, b"peer", SLOT)
    ledger.record(KEY_ID, b"peer2", SLOT)
    ledger.record(KEY_ID, b"peer", SLOT + b"x")
    assert not ledger.has_issued(KEY_ID, b"peer3", SLOT)


def test_bad_ledger_keys_are_rejected(engine: Engine) -> None:
    for spent in (MemorySpentSet(), SqlSpentSet(engine)):
        with pytest.raises(InvalidEncoding):
            spent.spend(KEY_ID[:31], SLOT, bytes(32))
        with pytest.raises(InvalidEncoding):
            spent.spend(KEY_ID, b"", bytes(32))


def test_sql_spent_set_survives_a_new_engine(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'persist.db'}"
    first = create_engine(url)
    SqlSpentSet(first).spend(KEY_ID, SLOT, bytes(32))
    first.dispose()
    second = create_engine(url)
    with pytest.raises(TokenSpent):
        SqlSpentSet(second).spend(KEY_ID, SLOT, bytes(32))
    second.dispose()


def test_record_spent_belongs_to_the_callers_transaction(engine: Engine) -> None:
    create_crypto_tables(engine)
    nonce = b"\x07" * 32
    with pytest.raises(RuntimeError), Session(engine) as s, s.begin():
        record_spent(s, KEY_ID, SLOT, nonce)
        raise RuntimeError("storing the report failed")  # rolls the spend back too
    spent = SqlSpentSet(engine)
    assert not spent.is_spent(KEY_ID, SLOT, nonce)
    with Session(engine) as s, s.begin():
        record_spent(s, KEY_ID, SLOT, nonce)
        with pytest.raises(TokenSpent):  # the session stays usable after a refused spend
            record_spent(s, KEY_ID, SLOT, nonce)
    assert spent.is_spent(KEY_ID, SLOT, nonce)


def _race(n_threads: int, attempt: Callable[[], object], expected: type[Exception]) -> tuple[int, list]:
    """Run ``attempt`` in ``n_threads`` threads released together; count successes and errors."""
    barrier = threading.Barrier(n_threads)
    successes: list[object] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        barrier.wait()
        try:
            out = attempt()
        except BaseException as exc:  # collected and asserted on below
            with lock:
                errors.append(exc)
        else:
            with lock:
                successes.append(out)

    threads = [threading.Thread(target=run) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert all(isinstance(e, expected) for e in errors), errors
    return len(successes), errors


def test_concurrent_redemptions_of_one_token_exactly_one_succeeds(engine: Engine) -> None:
    key = TokenKey.generate(np.random.default_rng(1))
    rng = np.random.default_rng(2)
    verifier = TokenVerifier(key, SqlSpentSet(engine))
    issuer = TokenIssuer(key, MemoryIssuanceLedger())
    for i in range(12):
        slot = f"slot-{i}".encode()
        request = request_tokens(key.public_key, slot, rng=rng)
        token = finalize_tokens(request, issuer.issue(b"peer", slot, request.message(), rng=rng))[0]
        redemption = token.redeem(b"report")
        n_ok, errors = _race(2 + i % 3, lambda r=redemption: verifier.redeem(r, b"report"), TokenSpent)
        assert n_ok == 1 and len(errors) == 1 + i % 3
    with Session(engine) as s:
        assert s.scalar(select(func.count()).select_from(SpentTokenRow)) == 12


def test_concurrent_issuance_requests_exactly_one_succeeds(engine: Engine) -> None:
    key = TokenKey.generate(np.random.default_rng(3))
    issuer = TokenIssuer(key, SqlIssuanceLedger(engine))
    message = request_tokens(key.public_key, SLOT, rng=np.random.default_rng(4)).message()
    n_ok, errors = _race(4, lambda: issuer.issue(b"peer", SLOT, message), AlreadyIssued)
    assert n_ok == 1 and len(errors) == 3
    with Session(engine) as s:
        assert s.scalar(select(func.count()).select_from(IssuanceRow)) == 1


def test_memory_spent_set_is_atomic_under_threads() -> None:
    spent = MemorySpentSet()
    n_ok, errors = _race(8, lambda: spent.spend(KEY_ID, SLOT, bytes(32)), TokenSpent)
    assert n_ok == 1 and len(errors) == 7
