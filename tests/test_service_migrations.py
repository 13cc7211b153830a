"""Schema versions of the service databases: a peer's state DB, the aggregator's, a witness's.

Each fixture writes the schema the landed code created before these databases
had schema versions (``metadata.create_all`` as of commit c584252; the SQL is
what SQLite recorded for it), with rows, and opens it with the current code:
the rows survive, the file is stamped at the baseline and upgraded to the head,
and what the revisions build is exactly what the models declare.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import MetaData, func, select
from sqlalchemy.orm import DeclarativeBase, Session

from aggregator.db import Base as AggregatorBase
from aggregator.db import (
    ProblemRow,
    RegistrationRow,
    RejectRow,
    count_reject,
    count_reports,
    create_tables,
    published,
    read_document,
)
from anonml.crypto import Identity
from anonml.crypto.spent import CryptoBase
from anonml.database import make_engine, migrate
from anonml.errors import SchemaError
from anonml.protocol import Cosignature, CosignRequest, TranscriptStatement, sign_message
from peer.db import PeerDB
from peer.db import _Base as PeerBase
from tests.test_migrations import _old_database, _revision
from witness import Witness, WitnessRefusal
from witness.db import Base as WitnessBase

PEER, AGGREGATOR, WITNESS = "peer.migrations.state", "aggregator.migrations", "witness.migrations"
HEADS = {PEER: "peer_0005", AGGREGATOR: "aggregator_0008", WITNESS: "witness_0002"}
VERSION_TABLES = {PEER: "anonml_schema_peer", AGGREGATOR: "anonml_schema_aggregator",
                  WITNESS: "anonml_schema_witness"}
NODE = "ab" * 32

#: A peer host's state DB as the landed code created it (no relay counts), with a round in progress.
OLD_PEER_DDL = f"""
CREATE TABLE peer_proposals (problem_id VARCHAR(64) NOT NULL, aggregator_url VARCHAR(256) NOT NULL,
    problem_json TEXT NOT NULL, seen_at DATETIME NOT NULL, PRIMARY KEY (problem_id));
CREATE TABLE peer_decisions (problem_id VARCHAR(64) NOT NULL, node VARCHAR(64) NOT NULL,
    verdict VARCHAR(16) NOT NULL, reason TEXT NOT NULL, epsilon DOUBLE NOT NULL, decided_at DATETIME NOT NULL,
    PRIMARY KEY (problem_id, node));
CREATE TABLE peer_participations (problem_id VARCHAR(64) NOT NULL, node VARCHAR(64) NOT NULL,
    status VARCHAR(32) NOT NULL, reason TEXT NOT NULL, roster_fingerprint VARCHAR(64), model_json TEXT,
    updated_at DATETIME NOT NULL, PRIMARY KEY (problem_id, node));
CREATE TABLE peer_participation_state (problem_id VARCHAR(64) NOT NULL, node VARCHAR(64) NOT NULL,
    phase VARCHAR(32) NOT NULL, facts_json TEXT NOT NULL, sealed_tokens BLOB, updated_at DATETIME NOT NULL,
    PRIMARY KEY (problem_id, node));
CREATE TABLE peer_round_keys (node VARCHAR(64) NOT NULL, round_id BIGINT NOT NULL,
    problem_id VARCHAR(64) NOT NULL, sealed_key BLOB NOT NULL, certificate BLOB NOT NULL,
    PRIMARY KEY (node, round_id));
CREATE TABLE peer_outbox (problem_id VARCHAR(64) NOT NULL, node VARCHAR(64) NOT NULL, slot INTEGER NOT NULL,
    send_at FLOAT NOT NULL, url TEXT NOT NULL, sealed_packet BLOB NOT NULL, sent BOOLEAN NOT NULL,
    PRIMARY KEY (problem_id, node, slot));
CREATE TABLE peer_held_packets (id INTEGER NOT NULL, node VARCHAR(64) NOT NULL, round_id BIGINT NOT NULL,
    release_at FLOAT NOT NULL, deadline FLOAT NOT NULL, url TEXT NOT NULL, content_type VARCHAR(64) NOT NULL,
    what VARCHAR(32) NOT NULL, sealed BLOB NOT NULL, PRIMARY KEY (id));
CREATE TABLE peer_replay_tags (node VARCHAR(64) NOT NULL, round_id BIGINT NOT NULL, tag BLOB NOT NULL,
    PRIMARY KEY (node, round_id, tag));
INSERT INTO peer_proposals VALUES ('p-1', 'http://127.0.0.1:8000', '{{"id": "p-1"}}',
                                   '2026-11-23 13:00:00.000000');
INSERT INTO peer_decisions VALUES ('p-1', '{NODE}', 'accept', 'within budget', 1.5,
                                   '2026-11-23 13:00:01.000000');
INSERT INTO peer_participations VALUES ('p-1', '{NODE}', 'reporting', '', 'fp', NULL,
                                        '2026-11-23 13:00:02.000000');
INSERT INTO peer_participation_state VALUES ('p-1', '{NODE}', 'reporting', '{{"window_end": 1.0}}', X'0102',
                                             '2026-11-23 13:00:02.000000');
INSERT INTO peer_round_keys VALUES ('{NODE}', 9007199254740993, 'p-1', X'aa', X'bb');
INSERT INTO peer_outbox VALUES ('p-1', '{NODE}', 0, 12.5, 'http://127.0.0.1:9/relay/x', X'cc', 1);
INSERT INTO peer_held_packets VALUES (1, '{NODE}', 9007199254740993, 20.0, 30.0, 'http://127.0.0.1:9/intake',
                                      'application/json', 'delivered', X'dd');
INSERT INTO peer_replay_tags VALUES ('{NODE}', 9007199254740993, X'{"ee" * 32}');
"""
ROUND = 9007199254740993  # 2^53 + 1: a 63-bit round id, exact through the upgrade

#: The aggregator's database as the landed code created it, with a problem in its report round.
OLD_AGGREGATOR_DDL = """
CREATE TABLE problems (id VARCHAR(64) NOT NULL, problem_json TEXT NOT NULL, seed BLOB NOT NULL,
    token_secret BLOB NOT NULL, round_id INTEGER NOT NULL, phase VARCHAR(16) NOT NULL, message TEXT NOT NULL,
    created_at DATETIME NOT NULL, phase_started DOUBLE NOT NULL, phase_seconds_json TEXT NOT NULL,
    close_requested BOOLEAN NOT NULL, train_requested BOOLEAN NOT NULL, roster_json TEXT, bins_json TEXT,
    model_json TEXT, roster_cosignatures_json TEXT, bins_cosignatures_json TEXT, t_r DOUBLE,
    median_answered INTEGER NOT NULL, PRIMARY KEY (id));
CREATE INDEX ix_problems_phase ON problems (phase);
CREATE TABLE reports (id BLOB NOT NULL, problem_id VARCHAR(64) NOT NULL, partition INTEGER NOT NULL,
    subset INTEGER NOT NULL, mechanism_json TEXT NOT NULL, bits BLOB NOT NULL, PRIMARY KEY (id))
    WITHOUT ROWID;
CREATE INDEX ix_reports_problem_id ON reports (problem_id);
CREATE TABLE report_staging (id BLOB NOT NULL, problem_id VARCHAR(64) NOT NULL, key_id BLOB NOT NULL,
    slot BLOB NOT NULL, nonce BLOB NOT NULL, partition INTEGER NOT NULL, subset INTEGER NOT NULL,
    mechanism_json TEXT NOT NULL, bits BLOB NOT NULL, PRIMARY KEY (id),
    CONSTRAINT uq_report_staging_token UNIQUE (key_id, slot, nonce)) WITHOUT ROWID;
CREATE INDEX ix_report_staging_problem_id ON report_staging (problem_id);
CREATE TABLE reject_counts (problem_id VARCHAR(64) NOT NULL, reason VARCHAR(64) NOT NULL,
    count INTEGER NOT NULL, PRIMARY KEY (problem_id, reason));
CREATE TABLE registrations (id INTEGER NOT NULL, problem_id VARCHAR(64) NOT NULL, identity BLOB NOT NULL,
    relay_url VARCHAR(256) NOT NULL, certificate BLOB NOT NULL, signature BLOB NOT NULL, credential_json TEXT,
    PRIMARY KEY (id), CONSTRAINT uq_registration_peer UNIQUE (problem_id, identity),
    FOREIGN KEY(problem_id) REFERENCES problems (id));
CREATE INDEX ix_registrations_problem_id ON registrations (problem_id);
CREATE TABLE median_queries (problem_id VARCHAR(64) NOT NULL, feature INTEGER NOT NULL, step INTEGER NOT NULL,
    query_json TEXT NOT NULL, open BOOLEAN NOT NULL, PRIMARY KEY (problem_id, feature, step),
    FOREIGN KEY(problem_id) REFERENCES problems (id));
CREATE TABLE median_answers (id INTEGER NOT NULL, problem_id VARCHAR(64) NOT NULL, feature INTEGER NOT NULL,
    step INTEGER NOT NULL, identity BLOB NOT NULL, bit BOOLEAN NOT NULL, PRIMARY KEY (id),
    CONSTRAINT uq_median_answer_peer UNIQUE (problem_id, identity),
    FOREIGN KEY(problem_id) REFERENCES problems (id));
CREATE INDEX ix_median_answers_problem_id ON median_answers (problem_id);
CREATE TABLE spent_tokens (key_id BLOB NOT NULL, slot BLOB NOT NULL, nonce BLOB NOT NULL,
    PRIMARY KEY (key_id, slot, nonce)) WITHOUT ROWID;
CREATE TABLE token_issuance (id INTEGER NOT NULL, key_id BLOB NOT NULL, peer_id BLOB NOT NULL,
    slot BLOB NOT NULL, issued_at DATETIME NOT NULL, PRIMARY KEY (id),
    CONSTRAINT uq_token_issuance_peer_slot UNIQUE (key_id, peer_id, slot));
INSERT INTO problems VALUES ('p-1', '{"id": "p-1"}', X'01', X'02', 7, 'reporting', '',
    '2026-11-23 13:00:00.000000', 1795000000.5, '{"registration": 2.0}', 1, 0, '{}', '{}', NULL, NULL, NULL,
    1795000100.0, 3);
INSERT INTO registrations VALUES (1, 'p-1', X'11', 'http://127.0.0.1:9001/relay', X'12', X'13', NULL);
INSERT INTO registrations VALUES (2, 'p-1', X'21', 'http://127.0.0.1:9002/relay', X'22', X'23', NULL);
INSERT INTO median_queries VALUES ('p-1', 0, 0, '{}', 0);
INSERT INTO median_answers VALUES (1, 'p-1', 0, 0, X'11', 1);
INSERT INTO reports VALUES (X'00000000000000000000000000000001', 'p-1', 0, 0, '{}', X'01');
INSERT INTO report_staging VALUES (X'00000000000000000000000000000002', 'p-1', X'aa', X'bb', X'cc', 0, 1,
                                   '{}', X'02');
INSERT INTO reject_counts VALUES ('p-1', 'intake: late', 4);
INSERT INTO spent_tokens VALUES (X'a1', X'b1', X'c1');
INSERT INTO token_issuance VALUES (1, X'a1', X'11', X'b1', '2026-11-23 13:00:05.000000');
"""

#: A witness's log as the landed code created it; the row is added by the test (a real cosignature).
OLD_WITNESS_DDL = """
CREATE TABLE cosignatures (id INTEGER NOT NULL, aggregator BLOB NOT NULL, problem_id VARCHAR(64) NOT NULL,
    stage VARCHAR(8) NOT NULL, transcript BLOB NOT NULL, cosignature_json TEXT NOT NULL,
    PRIMARY KEY (id), CONSTRAINT uq_one_transcript_per_stage UNIQUE (aggregator, problem_id, stage))
    ;
"""


def test_a_peer_state_db_written_before_schema_versions_keeps_its_round_and_gains_relay_counts(tmp_path):
    url = _old_database(tmp_path / "state.db", OLD_PEER_DDL)
    db = PeerDB(url)
    try:
        proposal = db.proposal("p-1")
        assert proposal is not None and proposal.aggregator_url == "http://127.0.0.1:8000"
        assert proposal.seen_at == datetime(2026, 11, 23, 13, 0, tzinfo=UTC)
        assert db.accepted_epsilon(NODE) == {"p-1": 1.5}
        # The two rows of a participation became one (peer_0005), keeping the summary and the facts.
        participation = db.participation("p-1", NODE)
        assert participation is not None and participation.phase == "reporting"
        (state,) = db.states(NODE)
        assert (state.phase, state.sealed_tokens) == ("reporting", b"\x01\x02")
        assert (state.facts_json, state.roster_fingerprint) == ('{"window_end": 1.0}', "fp")
        key = db.round_key(NODE, ROUND)
        assert key is not None and (key.sealed_key, key.certificate) == (b"\xaa", b"\xbb")
        assert [(r.slot, r.sent, r.sealed_packet) for r in db.outbox("p-1", NODE)] == [(0, True, b"\xcc")]
        (held,) = db.held(NODE)
        assert (held.id, held.round_id, held.what, held.sealed) == (1, ROUND, "delivered", b"\xdd")
        assert db.replay_tags(NODE, ROUND) == [b"\xee" * 32]
        # The table the upgrade added: the round held one packet before the upgrade, which
        # had no count (it starts from 0); what is held or relayed from now on is counted.
        assert db.relay_count(NODE, ROUND) == 0
        intake = "http://127.0.0.1:9/intake"
        second = db.hold(NODE, ROUND, 21.0, 30.0, intake, "application/json", "delivered", b"\xde")
        db.hold_many([], [], {(NODE, ROUND): 1})  # a cover packet that ended here: counted, not held
        assert second == 2 and db.relay_count(NODE, ROUND) == 2
        db.forget_replay_tags(NODE, ROUND)  # the round closed: tags and count go
        assert db.relay_count(NODE, ROUND) == 0 and db.replay_tags(NODE, ROUND) == []
    finally:
        db.close()
    assert _revision(url, PEER) == HEADS[PEER]
    PeerDB(url).close()  # opened again at the head: nothing to do
    assert _revision(url, PEER) == HEADS[PEER]


def test_a_peer_state_db_at_the_baseline_revision_is_upgraded_in_place(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    engine = make_engine(url)
    with engine.begin() as connection:  # what the first release with schema versions left
        from alembic import command

        from anonml.database import _config

        command.upgrade(_config(PEER, connection), "peer_0001")
    engine.dispose()
    with sqlite3.connect(tmp_path / "state.db") as con:
        con.execute("INSERT INTO peer_replay_tags VALUES (?, ?, ?)", (NODE, 5, b"\x01" * 32))
    con.close()
    assert _revision(url, PEER) == "peer_0001"
    db = PeerDB(url)
    try:
        assert db.replay_tags(NODE, 5) == [b"\x01" * 32] and db.relay_count(NODE, 5) == 0
    finally:
        db.close()
    assert _revision(url, PEER) == HEADS[PEER]


def test_an_aggregator_database_written_before_schema_versions_keeps_its_problem(tmp_path):
    url = _old_database(tmp_path / "aggregator.db", OLD_AGGREGATOR_DDL)
    engine = make_engine(url)
    try:
        create_tables(engine)
        with Session(engine) as s, s.begin():
            problem = s.get(ProblemRow, "p-1")
            assert problem is not None
            assert (problem.phase, problem.round_id, problem.median_answered, problem.t_r) == (
                "reporting", 7, 3, 1795000100.0
            )
            assert problem.created_at == datetime(2026, 11, 23, 13, 0, tzinfo=UTC) and problem.close_requested
            registered = s.scalars(select(RegistrationRow.identity).order_by(RegistrationRow.id)).all()
            assert registered == [b"\x11", b"\x21"]  # the roster order survives
            assert count_reports(s, "p-1") == 2  # one settled, one staged
            count_reject(s, "p-1", "intake: late")
            s.add(RegistrationRow(problem_id="p-1", identity=b"\x31", relay_url="http://127.0.0.1:9003/relay",
                                  certificate=b"\x32", signature=b"\x33"))
        with Session(engine) as s:
            assert s.get(RejectRow, ("p-1", "intake: late")).count == 5
            assert s.scalar(select(func.max(RegistrationRow.id))) == 3
    finally:
        engine.dispose()
    assert _revision(url, AGGREGATOR) == HEADS[AGGREGATOR]
    with sqlite3.connect(tmp_path / "aggregator.db") as con:
        assert con.execute("SELECT count(*) FROM spent_tokens").fetchone() == (1,)
        assert con.execute("SELECT count(*) FROM token_issuance").fetchone() == (1,)
    con.close()


#: Documents as an aggregator at aggregator_0007 stored them in ``problems``: the roster large enough
#: to span overflow pages, all with text a re-encoding would change (non-ASCII, spacing, key order).
DOCUMENTS_0007 = {
    "roster": '{"entries": [' + ", ".join(f'{{"relay": "h\u00e9{i}", "z": 1, "a": 2}}' for i in range(20_000))
    + "]}",
    "bins": '{ "edges" : [[0.5, 1e-07]], "note": "é ✓" }',
    "model": '{"model": {"privacy": null}, "metrics": {"auc": 0.71000000000000001}}',
}


def _aggregator_at_0007(path: Path, *, model: bool) -> str:
    """An aggregator database built by the revisions up to aggregator_0007, holding problem p-1 in
    its report round (``model``: done, with its model) with a registration, and problem p-2 in
    registration with no document."""
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    with engine.begin() as connection:
        from alembic import command

        from anonml.database import _config

        command.upgrade(_config(AGGREGATOR, connection), "aggregator_0007")
    engine.dispose()
    problem = (
        "INSERT INTO problems (id, problem_json, seed, token_secret, round_id, phase, message, created_at, "
        "phase_started, phase_seconds_json, close_requested, train_requested, roster_json, bins_json, "
        "model_json, roster_cosignatures_json, bins_cosignatures_json, t_r, median_answered) "
        "VALUES (?, ?, ?, ?, ?, ?, '', '2026-11-23 13:00:00.000000', 1795000000.5, '{}', 1, 0, "
        "?, ?, ?, ?, ?, ?, ?)"
    )
    with sqlite3.connect(path) as con:
        phase, docs = ("done" if model else "reporting"), DOCUMENTS_0007
        con.execute(problem, ("p-1", '{"id": "p-1"}', b"\x01", b"\x02", ROUND, phase, docs["roster"],
                              docs["bins"], docs["model"] if model else None,
                              '{"stage": "roster"}', '{"stage": "bins"}', 1795000100.0, 3))
        con.execute(problem, ("p-2", '{"id": "p-2"}', b"\x03", b"\x04", 8, "registration",
                              None, None, None, None, None, None, 0))
        con.execute("INSERT INTO registrations VALUES (1, 'p-1', X'11', 'http://127.0.0.1:9001/relay', "
                    "X'12', X'13', NULL)")
    con.close()
    return url


def test_an_aggregator_database_at_0007_moves_its_documents_to_their_table_byte_for_byte(tmp_path):
    """aggregator_0008: every published document reads back identical through the accessors, the
    problem's other fields and its registrations are intact, and ``problems`` holds no document."""
    url = _aggregator_at_0007(tmp_path / "aggregator.db", model=True)
    assert _revision(url, AGGREGATOR) == "aggregator_0007"
    engine = make_engine(url)
    try:
        create_tables(engine)
        with Session(engine) as s:
            for kind, body in DOCUMENTS_0007.items():
                assert read_document(s, "p-1", kind) == body  # type: ignore[arg-type]
            assert published(s, "p-1") == {"roster": True, "bins": True, "model": True}
            assert published(s, "p-2") == {"roster": False, "bins": False, "model": False}
            assert read_document(s, "p-2", "roster") is None
            row = s.get(ProblemRow, "p-1")
            assert row is not None
            assert (row.phase, row.round_id, row.seed, row.token_secret, row.t_r, row.median_answered) == (
                "done", ROUND, b"\x01", b"\x02", 1795000100.0, 3
            )
            assert (row.roster_cosignatures_json, row.bins_cosignatures_json) == (
                '{"stage": "roster"}', '{"stage": "bins"}'
            )
            assert row.created_at == datetime(2026, 11, 23, 13, 0, tzinfo=UTC) and row.close_requested
            assert s.scalars(select(RegistrationRow.problem_id)).all() == ["p-1"]
    finally:
        engine.dispose()
    assert _revision(url, AGGREGATOR) == HEADS[AGGREGATOR]
    with sqlite3.connect(tmp_path / "aggregator.db") as con:
        columns = {c[1] for c in con.execute("PRAGMA table_info(problems)")}
        assert not columns & {"roster_json", "bins_json", "model_json"}
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    con.close()


def test_the_documents_revision_downgrades_back_into_the_problem_row(tmp_path):
    """aggregator_0008 down: the columns come back holding the documents (NULL where none), the
    table goes, and the rows survive."""
    url = _aggregator_at_0007(tmp_path / "aggregator.db", model=False)
    engine = make_engine(url)
    try:
        create_tables(engine)
        with engine.begin() as connection:
            from alembic import command

            from anonml.database import _config

            command.downgrade(_config(AGGREGATOR, connection), "aggregator_0007")
    finally:
        engine.dispose()
    assert _revision(url, AGGREGATOR) == "aggregator_0007"
    with sqlite3.connect(tmp_path / "aggregator.db") as con:
        rows = con.execute(
            "SELECT id, roster_json, bins_json, model_json, phase, round_id FROM problems ORDER BY id"
        ).fetchall()
        tables = {t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert con.execute("SELECT count(*) FROM registrations").fetchone() == (1,)
    con.close()
    assert rows == [
        ("p-1", DOCUMENTS_0007["roster"], DOCUMENTS_0007["bins"], None, "reporting", ROUND),
        ("p-2", None, None, None, "registration", 8),
    ]
    assert "problem_documents" not in tables


def _request(signer: Identity, problem: str, transcript: bytes) -> CosignRequest:
    statement = TranscriptStatement(
        aggregator=bytes(signer.public), problem_id=problem, stage="roster", transcript=transcript
    )
    return sign_message(CosignRequest(statement=statement, signature=bytes(64)), signer)


def _old_witness_log(tmp_path: Path, identity: Identity, first: CosignRequest) -> Cosignature:
    """A witness log as the landed code created it before schema versions, holding ``first``'s real
    cosignature at index 0; returns that cosignature."""
    cosignature = Witness(identity, tmp_path / "scratch" / "w.db").cosign(first)
    _old_database(tmp_path / "witness.db", OLD_WITNESS_DDL)
    with sqlite3.connect(tmp_path / "witness.db") as con:
        con.execute(
            "INSERT INTO cosignatures VALUES (1, ?, 'p-0001', 'roster', ?, ?)",
            (
                bytes(first.statement.aggregator),
                bytes(first.statement.transcript),
                cosignature.model_dump_json(),
            ),
        )
    con.close()
    return cosignature


def test_a_witness_log_written_before_schema_versions_keeps_its_entries_and_its_rule(tmp_path):
    identity, aggregator = Identity.generate(), Identity.generate()
    first = _request(aggregator, "p-0001", b"\x01" * 32)
    cosignature = _old_witness_log(tmp_path, identity, first)
    witness = Witness(identity, tmp_path / "witness.db")
    try:
        (entry,) = witness.log()
        assert entry.index == 0 and entry.cosignature == cosignature
        assert witness.cosign(first) == cosignature  # the same transcript: the same cosignature
        with pytest.raises(WitnessRefusal, match="log index 0") as refused:
            witness.cosign(_request(aggregator, "p-0001", b"\x02" * 32))
        assert refused.value.status == 409  # one transcript per (aggregator, problem, stage), still
        witness.cosign(_request(aggregator, "p-0002", b"\x03" * 32))
        assert [e.index for e in witness.log()] == [0, 1]
    finally:
        witness.close()
    assert _revision(f"sqlite:///{tmp_path / 'witness.db'}", WITNESS) == HEADS[WITNESS]


def test_a_witness_log_upgraded_to_signing_key_slots_refuses_a_swapped_encryption_key(tmp_path):
    """witness_0002: the rule keys on the aggregator's Ed25519 half, for rows written before it too."""
    identity, seed = Identity.generate(), bytes(range(32))
    aggregator, swapped = Identity(seed, b"\x01" * 32), Identity(seed, b"\x02" * 32)
    _old_witness_log(tmp_path, identity, _request(aggregator, "p-0001", b"\x01" * 32))
    witness = Witness(identity, tmp_path / "witness.db")
    try:
        with pytest.raises(WitnessRefusal, match="log index 0"):
            witness.cosign(_request(swapped, "p-0001", b"\x02" * 32))
        witness.cosign(_request(swapped, "p-0002", b"\x02" * 32))  # index 1: AUTOINCREMENT kept
        assert [e.index for e in witness.log()] == [0, 1]
    finally:
        witness.close()


def test_a_witness_log_that_recorded_the_swapped_key_attack_is_kept_and_refused(tmp_path):
    """Two transcripts for one signing key in a log of revision 0001: the upgrade names them and stops."""
    identity, seed = Identity.generate(), bytes(range(32))
    aggregator, swapped = Identity(seed, b"\x01" * 32), Identity(seed, b"\x02" * 32)
    _old_database(tmp_path / "witness.db", OLD_WITNESS_DDL)
    with sqlite3.connect(tmp_path / "witness.db") as con:
        for row, who in ((1, aggregator), (2, swapped)):
            con.execute(
                "INSERT INTO cosignatures VALUES (?, ?, 'p-0001', 'roster', ?, '{}')",
                (row, bytes(who.public), bytes([row]) * 32),
            )
    con.close()
    with pytest.raises(RuntimeError, match="rows 1 and 2 co-sign two transcripts"):
        Witness(identity, tmp_path / "witness.db")
    with sqlite3.connect(tmp_path / "witness.db") as con:
        assert con.execute("SELECT count(*) FROM cosignatures").fetchone() == (2,)  # nothing rewritten
    con.close()


def _metadata(*bases: type[DeclarativeBase]) -> MetaData:
    merged = MetaData()
    for base in bases:
        for table in base.metadata.tables.values():
            table.to_metadata(merged)
    return merged


@pytest.mark.parametrize(
    ("package", "bases"),
    [
        (PEER, (PeerBase,)),
        (AGGREGATOR, (AggregatorBase, CryptoBase)),
        (WITNESS, (WitnessBase,)),
    ],
)
def test_migrations_build_exactly_the_tables_the_models_declare(package: str, bases: tuple[type, ...]):
    engine = make_engine("sqlite://")
    assert migrate(engine, package) == HEADS[package]
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLES[package]})
        assert compare_metadata(context, _metadata(*bases)) == []


@pytest.mark.parametrize("package", [PEER, AGGREGATOR])
def test_a_half_made_service_database_is_refused_not_stamped(tmp_path: Path, package: str):
    ddl = OLD_PEER_DDL if package == PEER else OLD_AGGREGATOR_DDL
    first = ddl.split(";")[0] + ";"  # one table of the baseline, not the others
    url = _old_database(tmp_path / "half.db", first)
    engine = make_engine(url)
    try:
        with pytest.raises(SchemaError, match="not a database this version can upgrade"):
            migrate(engine, package)
    finally:
        engine.dispose()
