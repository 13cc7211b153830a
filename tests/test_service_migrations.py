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
from aggregator.db import ProblemRow, RegistrationRow, RejectRow, count_reject, count_reports, create_tables
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
HEADS = {PEER: "peer_0005", AGGREGATOR: "aggregator_0007", WITNESS: "witness_0002"}
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
