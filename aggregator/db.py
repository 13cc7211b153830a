"""The aggregator's state: SQLAlchemy 2 typed models (SQLite by default, any URL).

Tables
------
``problems``            one row per proposal: the signed Problem, the secret seed and
                        token key, the phase, and the witnesses' cosignature bundles once
                        complete. Small: every status poll and driver tick reads it.
``problem_documents``   the roster / bins / model of a problem once published, one row per
                        (problem, kind) (:func:`read_document`, :func:`publish_document`). Kept out
                        of ``problems`` because in SQLite a column stored after a large value
                        is reached only by walking that value's overflow pages: a 7 MB roster
                        in the row made every read of the row's later columns cost O(roster).
``registrations``       who registered (signed, with its credential), in registration order.
``median_queries``      every IsGreater query asked, signed, with its members.
``median_answers``      one signed bit per (peer, problem); identified by design.
``calibration_questions`` the signed question to a problem's calibration pool and the signed
                        uncalibrated model it is about (:mod:`aggregator.calibration_round`).
``calibration_answers`` one signed (score bin, label) answer per (peer, problem): stored before
                        it is acknowledged, so a restart neither loses nor doubles one.
``report_staging``      reports accepted during the open report round, each with
                        the token it spent (key id, slot, nonce; unique), one row
                        per delivery written in the delivery's own transaction.
``reports``             the anonymous reports, moved here from the staging table
                        when the round closes (:func:`settle_reports`). Nothing
                        here links to a peer: the primary key is 16 random bytes,
                        there is no arrival time, no relay address and no token or
                        issuance id, and on SQLite the table is ``WITHOUT ROWID``
                        so not even the physical row order records arrival order.
``reject_counts``       how many requests were refused, per problem and reason.
``problem_samples``     the counts a status poller reads (registrations, median answers,
                        reports received, refusals by reason), sampled over time by the
                        phase driver for the console's charts (:mod:`aggregator.timeline`):
                        the public status's figures at a second's resolution at most, never
                        a report, a token or a peer.
``model_evaluations``   the latest score of each problem's model on labelled rows its operator
                        supplied (:mod:`aggregator.evaluation`): figures only, never the rows.
``leases``              who drives the phase machine (:mod:`aggregator.lease`): one row
                        per lease, its holder and its expiry on the database's clock.
``spent_tokens`` /      the crypto ledgers (:mod:`anonml.crypto.spent`): redeemed tokens
``token_issuance``      (key id, slot, nonce) and evaluations (key id, peer, slot).

Arrival order. A report and its spent token are stored together, in the
delivery's transaction, in ``report_staging`` — so "token spent ⇔ report
stored" holds at every instant and survives a crash (a staged row is both).
When the round closes, :func:`settle_reports` moves every staged row of the
problem, in an order drawn from the OS CSPRNG, into ``reports`` and
``spent_tokens`` in ONE transaction (the same one that ends the round), and
deletes the staged rows with SQLite's ``secure_delete`` on (the freed pages
are zeroed, :func:`anonml.database.make_engine`); :func:`wipe_log` then
truncates the write-ahead log, whose frames were appended in arrival order.
Why staging rather than holding reports in memory and writing shuffled
batches: an accepted delivery is acknowledged only once it is durable, and
a crash can neither lose an acknowledged report nor leave a spent token
without its report. What the final tables keep: no time, no counter, one
transaction for the whole round (on PostgreSQL every settled row shares one
``xmin``, and the physical order — ``ctid`` — is the shuffled order). What
remains: while the round is open the staging table (and, on PostgreSQL, its
row versions until vacuumed) reflects arrival order — the same information
an aggregator watching its intake live has anyway.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Iterable
from datetime import datetime
from typing import Literal, get_args

from sqlalchemy import (
    ForeignKey,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    delete,
    func,
    insert,
    select,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from anonml.crypto.spent import SpentTokenRow
from anonml.database import BigInt, UTCDateTime, increment, migrate

__all__ = [
    "Base",
    "ProblemRow",
    "ProblemDocumentRow",
    "DocumentKind",
    "DOCUMENT_KINDS",
    "RegistrationRow",
    "MedianQueryRow",
    "MedianAnswerRow",
    "CalibrationQuestionRow",
    "CalibrationAnswerRow",
    "CalibrationChoiceRow",
    "ReportRow",
    "StagedReportRow",
    "RejectRow",
    "LeaseRow",
    "SampleRow",
    "EvaluationRow",
    "create_tables",
    "count_reject",
    "new_report_id",
    "settle_reports",
    "count_reports",
    "wipe_log",
    "published",
    "read_document",
    "read_documents",
    "publish_document",
]




class Base(DeclarativeBase):
    """Datetimes are aware UTC instants; integers are 64-bit on every backend (round ids are 63-bit)."""

    type_annotation_map = {datetime: UTCDateTime(), bytes: LargeBinary(), str: String(256), int: BigInt}


class ProblemRow(Base):
    """A proposal and everything published about it."""

    __tablename__ = "problems"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    problem_json: Mapped[str] = mapped_column(Text)
    seed: Mapped[bytes]  # secret until the roster reveals it
    token_secret: Mapped[bytes]  # the POPRF key (never leaves the aggregator)
    round_id: Mapped[int]
    phase: Mapped[str] = mapped_column(String(16), index=True)
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime]
    phase_started: Mapped[float]  # POSIX time the current phase began
    phase_seconds_json: Mapped[str] = mapped_column(Text, default="{}")
    close_requested: Mapped[bool] = mapped_column(default=False)
    train_requested: Mapped[bool] = mapped_column(default=False)
    # The published roster / bins / model are rows of ``problem_documents`` (module notes).
    roster_cosignatures_json: Mapped[str | None] = mapped_column(Text)  # CosignatureBundle, once complete
    bins_cosignatures_json: Mapped[str | None] = mapped_column(Text)
    t_r: Mapped[float | None]
    median_answered: Mapped[int] = mapped_column(default=0)


#: What a problem publishes, in the order it publishes them.
DocumentKind = Literal["roster", "bins", "model"]
DOCUMENT_KINDS: tuple[DocumentKind, ...] = get_args(DocumentKind)


class ProblemDocumentRow(Base):
    """One published document of a problem: its signed JSON exactly as served.

    A row exists from the transaction that publishes the document on (the same one that moves the
    phase); ``body`` is loaded only when read, so looking a row up by key costs no body.
    """

    __tablename__ = "problem_documents"

    problem_id: Mapped[str] = mapped_column(ForeignKey("problems.id"), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)  # a DocumentKind
    body: Mapped[str] = mapped_column(Text, deferred=True)


class RegistrationRow(Base):
    """One signed registration; ``id`` gives registration order (the roster order)."""

    __tablename__ = "registrations"
    __table_args__ = (UniqueConstraint("problem_id", "identity", name="uq_registration_peer"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    problem_id: Mapped[str] = mapped_column(ForeignKey("problems.id"), index=True)
    identity: Mapped[bytes] = mapped_column(LargeBinary(64))
    relay_url: Mapped[str | None]  # None with the certificate: a sender-only member (it relays for nobody)
    certificate: Mapped[bytes | None] = mapped_column(LargeBinary(136))
    signature: Mapped[bytes] = mapped_column(LargeBinary(64))
    credential_json: Mapped[str | None] = mapped_column(Text)  # AdmissionCredential, when admission needs one


class MedianQueryRow(Base):
    """One IsGreater query of the median search (signed JSON kept as sent)."""

    __tablename__ = "median_queries"

    problem_id: Mapped[str] = mapped_column(ForeignKey("problems.id"), primary_key=True)
    feature: Mapped[int] = mapped_column(primary_key=True)
    step: Mapped[int] = mapped_column(primary_key=True)
    query_json: Mapped[str] = mapped_column(Text)
    open: Mapped[bool] = mapped_column(default=True)


class MedianAnswerRow(Base):
    """One randomised answer; a peer answers once per problem."""

    __tablename__ = "median_answers"
    __table_args__ = (UniqueConstraint("problem_id", "identity", name="uq_median_answer_peer"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    problem_id: Mapped[str] = mapped_column(ForeignKey("problems.id"), index=True)
    feature: Mapped[int]
    step: Mapped[int]
    identity: Mapped[bytes] = mapped_column(LargeBinary(64))
    bit: Mapped[bool]


class CalibrationQuestionRow(Base):
    """The calibration question of a problem (signed JSON as served) and the uncalibrated model
    document it names; ``open`` until the calibration step (K ≥ 3: its first stage) ends.

    K ≥ 3: ``choice_json`` is the second stage's signed question once asked (NULL before, and for
    a binary model), ``choice_open`` True until that stage ends.
    """

    __tablename__ = "calibration_questions"

    problem_id: Mapped[str] = mapped_column(ForeignKey("problems.id"), primary_key=True)
    question_json: Mapped[str] = mapped_column(Text)
    model_json: Mapped[str] = mapped_column(Text, deferred=True)
    open: Mapped[bool] = mapped_column(default=True)
    choice_json: Mapped[str | None] = mapped_column(Text, default=None)
    choice_open: Mapped[bool] = mapped_column(default=False)


class CalibrationAnswerRow(Base):
    """One perturbed (score bin, label) answer; a pool member answers once per problem."""

    __tablename__ = "calibration_answers"
    __table_args__ = (UniqueConstraint("problem_id", "identity", name="uq_calibration_answer_peer"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    problem_id: Mapped[str] = mapped_column(ForeignKey("problems.id"), index=True)
    identity: Mapped[bytes] = mapped_column(LargeBinary(64))
    mechanism_json: Mapped[str] = mapped_column(Text)
    bits: Mapped[bytes] = mapped_column(LargeBinary(64))


class CalibrationChoiceRow(Base):
    """K ≥ 3: one choice-half member's perturbed log-loss steps (JSON list of floats); once per problem."""

    __tablename__ = "calibration_choices"
    __table_args__ = (UniqueConstraint("problem_id", "identity", name="uq_calibration_choice_peer"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    problem_id: Mapped[str] = mapped_column(ForeignKey("problems.id"), index=True)
    identity: Mapped[bytes] = mapped_column(LargeBinary(64))
    report_json: Mapped[str] = mapped_column(Text)


class _Report:
    """What every report row holds: a random key, its problem, (partition, subset), mechanism and bits."""

    id: Mapped[bytes] = mapped_column(LargeBinary(16), primary_key=True, sort_order=-2)
    problem_id: Mapped[str] = mapped_column(String(64), index=True, sort_order=-2)
    partition: Mapped[int]
    subset: Mapped[int]
    mechanism_json: Mapped[str] = mapped_column(Text)
    bits: Mapped[bytes] = mapped_column(LargeBinary(512))


class ReportRow(_Report, Base):
    """An anonymous report: random key, no time, no address, no token (module notes)."""

    __tablename__ = "reports"
    __table_args__ = {"sqlite_with_rowid": False}


class StagedReportRow(_Report, Base):
    """A report accepted while its round is open, with the token it spent (module notes)."""

    __tablename__ = "report_staging"
    __table_args__ = (
        UniqueConstraint("key_id", "slot", "nonce", name="uq_report_staging_token"),
        {"sqlite_with_rowid": False},
    )

    key_id: Mapped[bytes] = mapped_column(LargeBinary(32), sort_order=-1)  # after the key, before the body
    slot: Mapped[bytes] = mapped_column(LargeBinary(64), sort_order=-1)
    nonce: Mapped[bytes] = mapped_column(LargeBinary(32), sort_order=-1)


class RejectRow(Base):
    """Refused requests per problem ("" when the problem is unknown) and reason."""

    __tablename__ = "reject_counts"

    problem_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    reason: Mapped[str] = mapped_column(String(64), primary_key=True)
    count: Mapped[int] = mapped_column(default=0)


class SampleRow(Base):
    """A problem's public counts at one instant (:mod:`aggregator.timeline`)."""

    __tablename__ = "problem_samples"

    problem_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    at: Mapped[float] = mapped_column(primary_key=True)  # POSIX time
    registered: Mapped[int] = mapped_column(default=0)
    median_answers: Mapped[int] = mapped_column(default=0)
    received: Mapped[int] = mapped_column(default=0)
    rejects_json: Mapped[str] = mapped_column(Text, default="{}")  # every refusal by reason, as the status


class EvaluationRow(Base):
    """The latest :class:`~anonml.protocol.ModelEvaluation` of a problem's model (JSON)."""

    __tablename__ = "model_evaluations"

    problem_id: Mapped[str] = mapped_column(ForeignKey("problems.id"), primary_key=True)
    evaluation_json: Mapped[str] = mapped_column(Text)


class LeaseRow(Base):
    """A lease (:mod:`aggregator.lease`): ``holder`` may act until ``expires``.

    ``expires`` is seconds since the epoch on the database server's clock (never a
    worker's), and ``taken`` counts how many times the lease changed hands.
    """

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(256), default="")
    expires: Mapped[float] = mapped_column(default=0.0)
    taken: Mapped[int] = mapped_column(default=0)


def new_report_id() -> bytes:
    """A report's primary key: 16 bytes from the OS CSPRNG (carries no order)."""
    return secrets.token_bytes(16)


def settle_reports(session: Session, problem_id: str, rng: random.Random | None = None) -> int:
    """Move the problem's staged reports and spent tokens to their tables in random order.

    Runs inside the caller's transaction (the one that ends the report
    round); returns how many reports moved. The order is a uniform
    permutation drawn from ``rng`` (default the OS CSPRNG), independent of
    the order the deliveries arrived in; each report gets a fresh random key.
    """
    gen = rng if rng is not None else secrets.SystemRandom()
    staged = list(session.scalars(select(StagedReportRow).where(StagedReportRow.problem_id == problem_id)))
    gen.shuffle(staged)
    if staged:
        session.execute(
            insert(SpentTokenRow),
            [{"key_id": r.key_id, "slot": r.slot, "nonce": r.nonce} for r in staged],
        )
        session.execute(
            insert(ReportRow),
            [
                {
                    "id": new_report_id(),
                    "problem_id": problem_id,
                    "partition": r.partition,
                    "subset": r.subset,
                    "mechanism_json": r.mechanism_json,
                    "bits": r.bits,
                }
                for r in staged
            ],
        )
    session.execute(delete(StagedReportRow).where(StagedReportRow.problem_id == problem_id))
    session.expunge_all()
    return len(staged)


def published(session: Session, problem_id: str) -> dict[DocumentKind, bool]:
    """Which of the problem's documents exist (``roster``, ``bins``, ``model``), in one query.

    Reads the keys of ``problem_documents`` only (the primary key's index answers it), so no
    document body is read: the cheap way to ask "is the roster out?" when the roster is
    megabytes. All False for an unknown problem.
    """
    kinds = set(
        session.scalars(select(ProblemDocumentRow.kind).where(ProblemDocumentRow.problem_id == problem_id))
    )
    return {kind: kind in kinds for kind in DOCUMENT_KINDS}


def read_documents(
    session: Session, problem_id: str, kinds: Iterable[DocumentKind]
) -> dict[DocumentKind, str]:
    """The problem's published documents among ``kinds`` (their JSON as published), in one query;
    a kind not published yet is absent."""
    rows = session.execute(
        select(ProblemDocumentRow.kind, ProblemDocumentRow.body).where(
            ProblemDocumentRow.problem_id == problem_id, ProblemDocumentRow.kind.in_(list(kinds))
        )
    )
    return {kind: body for kind, body in rows}


def read_document(session: Session, problem_id: str, kind: DocumentKind) -> str | None:
    """The problem's published ``kind`` document (its JSON as published), None before it is published."""
    return read_documents(session, problem_id, (kind,)).get(kind)


def publish_document(session: Session, problem_id: str, kind: DocumentKind, body: str) -> None:
    """Store (or replace: a model trained again) the problem's ``kind`` document in the caller's
    transaction, so it becomes visible together with the phase change it belongs to."""
    row = session.get(ProblemDocumentRow, (problem_id, kind))  # the body is deferred: not read
    if row is None:
        session.add(ProblemDocumentRow(problem_id=problem_id, kind=kind, body=body))
    else:
        row.body = body


def count_reports(session: Session, problem_id: str) -> int:
    """Reports accepted for the problem so far: staged (round open) plus settled.

    One statement, so one snapshot: :func:`settle_reports` moves every staged
    row to the settled table in one commit, and two separate counts read
    outside a transaction could straddle it and count each report twice.
    """
    staged, settled = (
        select(func.count()).select_from(table).where(table.problem_id == problem_id).scalar_subquery()
        for table in (StagedReportRow, ReportRow)
    )
    return int(session.scalar(select(staged + settled)) or 0)


def wipe_log(engine: Engine) -> None:
    """Fold SQLite's write-ahead log into the database file and truncate it (no-op elsewhere).

    The log holds pages in commit order (so, staged reports in arrival
    order) until a checkpoint; after :func:`settle_reports` commits, this
    checkpoint copies the settled pages into the file (where deleted rows
    were zeroed by ``secure_delete``) and empties the log.
    """
    if engine.dialect.name != "sqlite":
        return
    with engine.connect() as connection:
        connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")




def create_tables(engine: Engine) -> None:
    """Bring the database to the newest schema: the aggregator's tables and the crypto ledgers.

    A new database is created by the revisions of :mod:`aggregator.migrations`;
    one written before schema versions existed is stamped at the baseline and
    upgraded (:func:`anonml.database.migrate`).
    """
    migrate(engine, "aggregator.migrations")


def count_reject(session: Session, problem_id: str, reason: str) -> None:
    """Add one to the refusal counter of (problem, reason) inside the caller's transaction.

    One upsert on SQLite and PostgreSQL (:func:`anonml.database.increment`):
    two first refusals at once cannot both insert (no unique violation), and
    the increment is atomic.
    """
    increment(session, RejectRow, {"problem_id": problem_id, "reason": reason}, "count")
