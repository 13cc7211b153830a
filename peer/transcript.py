"""The peer's checks of what independent parties vouch for: witness bundles, roster entries, credentials.

Before it releases anything for a stage (a token request, a median answer, a
report or a cover packet), an identity computes the stage's transcript itself
(:func:`anonml.protocol.transcript_hash` of the Problem it accepted, the
Roster it verified and, for ``"bins"``, the Bins it received) and requires a
:class:`~anonml.protocol.CosignatureBundle` in which

- every witness the proposal declares has co-signed exactly that transcript
  under this aggregator's key and this problem (so the roster beacon is the
  one every peer computes, :func:`anonml.protocol.roster_beacon`), and
- at least ``witness_threshold`` of those cosignatures are from witnesses the
  peer's own policy trusts (when its policy names any).

A witness co-signs one transcript per (aggregator, problem, stage), so an
aggregator that shows this peer other bins, another schedule or another copy
of the Problem cannot obtain cosignatures for it: the check fails here and
the peer stops before releasing anything (:func:`verify_bundle`).

:func:`check_roster_entries` verifies each roster entry's registration
signature (identity, relay URL, relay certificate and credential came from
that identity) and, for problems admitting by credentials, each entry's
credential: the aggregator cannot insert uncredentialed Sybils or rewrite a
member's relay URL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from anonml.crypto import CryptoError
from anonml.errors import AnonMLError, ProtocolError
from anonml.protocol import (
    AdmissionCredential,
    Cosignature,
    CosignatureBundle,
    Problem,
    Roster,
    check_credential,
    entry_registration,
    roster_beacon,
    verify_message,
)

__all__ = [
    "verify_bundle",
    "check_roster_entries",
    "trust_refusal",
    "load_credentials",
    "credential_for",
]


def _hex_set(values: Sequence[str]) -> set[bytes]:
    out = set()
    for value in values:
        try:
            out.add(bytes.fromhex(value))
        except ValueError:
            raise AnonMLError(f"policy names a key that is not hex: {value[:20]!r}") from None
    return out


def _check_cosignature(
    cosignature: Cosignature, witness: bytes, *, problem: Problem, stage: str, transcript: bytes
) -> None:
    """One declared witness's cosignature: about this problem and stage, on ``transcript``, verifying."""
    statement = cosignature.statement
    if (
        bytes(statement.aggregator) != bytes(problem.aggregator)
        or statement.problem_id != problem.id
        or statement.stage != stage
    ):
        raise ProtocolError(
            f"witness {witness.hex()[:16]}… co-signed a statement about another problem or stage"
        )
    if bytes(statement.transcript) != bytes(transcript):
        raise ProtocolError(
            f"witness {witness.hex()[:16]}… co-signed transcript "
            f"{bytes(statement.transcript).hex()[:16]}…, "
            f"this peer computed {bytes(transcript).hex()[:16]}…: the aggregator shows peers different "
            f"{stage} documents"
        )
    try:
        verify_message(cosignature, witness)
    except CryptoError as exc:
        raise ProtocolError(f"cosignature of witness {witness.hex()[:16]}… does not verify: {exc}") from None


def verify_bundle(
    bundle: CosignatureBundle,
    *,
    problem: Problem,
    stage: str,
    transcript: bytes,
    trusted: Sequence[str],
    threshold: int,
) -> bytes:
    """Check ``bundle`` against this peer's own ``transcript``; return the beacon it gives.

    Parameters
    ----------
    trusted : sequence of str
        Hex public identities of the witnesses this peer trusts (its policy).
    threshold : int
        Cosignatures needed from ``trusted`` witnesses (ignored when ``trusted`` is empty).

    Returns
    -------
    bytes
        :func:`anonml.protocol.roster_beacon` of the declared witnesses' cosignatures
        (``b""`` for a problem that declares none).

    Raises
    ------
    ProtocolError
        Naming the first check that failed: wrong problem or stage, a cosignature
        by an undeclared witness, on another statement (another transcript:
        equivocation), with a bad signature, a declared witness missing, or too
        few trusted witnesses.
    """
    if bundle.problem_id != problem.id or bundle.stage != stage:
        raise ProtocolError(
            f"cosignature bundle is for {bundle.problem_id} stage {bundle.stage}, "
            f"expected {problem.id} {stage}"
        )
    declared = {bytes(w.identity) for w in problem.draft.witnesses}
    seen: dict[bytes, object] = {}
    for cosignature in bundle.cosignatures:
        witness = bytes(cosignature.witness)
        if witness not in declared:
            raise ProtocolError(
                f"cosignature by witness {witness.hex()[:16]}…, which the proposal does not declare"
            )
        if witness in seen:
            raise ProtocolError(f"witness {witness.hex()[:16]}… appears twice in the bundle")
        _check_cosignature(cosignature, witness, problem=problem, stage=stage, transcript=transcript)
        seen[witness] = cosignature
    missing = declared - set(seen)
    if missing:
        raise ProtocolError(
            f"{len(missing)} declared witness(es) did not co-sign the {stage} transcript "
            f"(e.g. {sorted(missing)[0].hex()[:16]}…)"
        )
    trusted_keys = _hex_set(trusted)
    if trusted_keys:
        have = len(trusted_keys & set(seen))
        if have < threshold:
            raise ProtocolError(
                f"only {have} of the {threshold} cosignatures this peer requires "
                "come from witnesses it trusts"
            )
    return roster_beacon(list(seen.values()))  # type: ignore[arg-type]


def trust_refusal(
    problem: Problem,
    *,
    trusted_witnesses: Sequence[str],
    witness_threshold: int,
    require_credentials: bool,
    trusted_issuers: Sequence[str],
) -> str | None:
    """Why this peer's trust settings refuse ``problem`` up front (None: they do not).

    A peer that names witnesses refuses a proposal declaring fewer than
    ``witness_threshold`` of them; ``require_credentials`` refuses open
    admission; a non-empty ``trusted_issuers`` refuses credentials from others.
    """
    draft = problem.draft
    trusted = _hex_set(trusted_witnesses)
    if trusted:
        declared = {bytes(w.identity) for w in draft.witnesses}
        if len(trusted & declared) < witness_threshold:
            return (
                f"the proposal declares {len(trusted & declared)} of the witnesses this peer trusts; "
                f"its policy requires {witness_threshold}"
            )
    if draft.admission.mode == "open":
        if require_credentials:
            return "the proposal admits anyone (open registration); this peer's policy requires credentials"
    else:
        issuers = _hex_set(trusted_issuers)
        if issuers and bytes(draft.admission.issuer) not in issuers:
            return (
                f"credential issuer {bytes(draft.admission.issuer).hex()[:16]}… is not one this peer trusts"
            )
    return None


def check_roster_entries(roster: Roster, problem: Problem) -> None:
    """Every entry carries its member's own registration signature (and a valid credential).

    Credentials must name the entry's identity, come from the proposal's
    issuer for its scope, carry the issuer's signature, and not have expired
    before the problem was proposed (the aggregator refuses expired ones at
    registration; one that expired after its member registered still admitted it).

    Raises
    ------
    ProtocolError
        Naming the first entry that fails.
    """
    admission = problem.draft.admission
    for i, entry in enumerate(roster.entries):
        try:
            verify_message(entry_registration(entry, problem), bytes(entry.identity))
        except CryptoError as exc:
            raise ProtocolError(
                f"roster entry {i}: not the member's own signed registration (identity, relay URL, relay "
                f"certificate or credential changed): {exc}"
            ) from None
        if admission.mode == "credentials":
            try:
                check_credential(
                    entry.credential, admission, bytes(entry.identity), valid_at=problem.created_at
                )
            except (ValueError, CryptoError) as exc:
                raise ProtocolError(f"roster entry {i}: credential not valid: {exc}") from None
        elif entry.credential is not None:
            raise ProtocolError(f"roster entry {i}: carries a credential, but admission is open")


def load_credentials(directory: Path) -> list[AdmissionCredential]:
    """Every ``*.json`` credential in ``directory`` (missing folder: none); a malformed file is an error."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    out = []
    for path in sorted(directory.glob("*.json")):
        try:
            out.append(AdmissionCredential.model_validate_json(path.read_bytes()))
        except (OSError, ValidationError, json.JSONDecodeError) as exc:
            raise AnonMLError(f"{path}: not an admission credential: {exc}") from None
    return out


def credential_for(
    credentials: Sequence[AdmissionCredential], problem: Problem, subject: bytes, *, now: datetime
) -> AdmissionCredential | None:
    """The first of ``credentials`` that admits ``subject`` to ``problem`` at ``now`` (None: none does)."""
    admission = problem.draft.admission
    if admission.mode != "credentials":
        return None
    for credential in credentials:
        try:
            return check_credential(credential, admission, subject, valid_at=now)
        except (ValueError, CryptoError):
            continue
    return None
