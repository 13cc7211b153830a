"""Admission by credentials: the aggregator refuses registrations without one; peers check every entry."""

from __future__ import annotations

import stat
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from anonml.crypto import Identity, save_identity
from anonml.demo import dropout_draft
from anonml.errors import ProtocolError
from anonml.plugins import PluginRef, create
from anonml.protocol import (
    Admission,
    AdmissionCredential,
    Registration,
    RosterEntry,
    sign_message,
)
from peer.policy import PeerPolicy, evaluate_problem
from peer.transcript import check_roster_entries, credential_for, load_credentials, trust_refusal
from tests.aggregator.helpers import (
    close_registration,
    draft,
    post,
    propose,
    roster_document,
    roster_entry,
    roster_of,
    wait_phase,
)

ISSUER = Identity.generate()
SCOPE = "course:6.867-2026"


def credential(
    subject: Identity,
    *,
    issuer: Identity = ISSUER,
    scope: str = SCOPE,
    days: float = 30,
    signer: Identity | None = None,
) -> AdmissionCredential:
    unsigned = AdmissionCredential(
        issuer=bytes(issuer.public),
        subject=bytes(subject.public),
        scope=scope,
        not_after=datetime.now(UTC) + timedelta(days=days),
        signature=bytes(64),
    )
    return sign_message(unsigned, signer or issuer)


def registration(
    peer: Identity, problem, cred: AdmissionCredential | None, relay: str | None = None
):
    relay = relay or f"http://127.0.0.1:9/relay/{peer.public.node_id.hex()}"
    _, cert = peer.new_round_relay_key(problem.round_id)
    return sign_message(
        Registration(
            problem_id=problem.id,
            aggregator=problem.aggregator,
            identity=bytes(peer.public),
            relay_url=relay,
            relay_certificate=bytes(cert),
            credential=cred,
            signature=bytes(64),
        ),
        peer,
    )


def credentials_draft(**kwargs):
    return draft(**kwargs).model_copy(
        update={"admission": Admission(mode="credentials", issuer=bytes(ISSUER.public), scope=SCOPE)}
    )


def test_admission_settings_are_validated():
    with pytest.raises(ValueError, match="names its issuer"):
        Admission(mode="credentials", scope=SCOPE)
    with pytest.raises(ValueError, match="open admission"):
        Admission(mode="open", issuer=bytes(ISSUER.public))


def test_the_aggregator_admits_only_credentialed_registrations(aggregator):
    problem = propose(aggregator.url, credentials_draft())
    url = f"{aggregator.url}/problems/{problem.id}/registrations"
    other_issuer = Identity.generate()
    cases = {
        "missing": lambda me: None,
        "other issuer": lambda me: credential(me, issuer=other_issuer),
        "other scope": lambda me: credential(me, scope="course:other"),
        "other subject": lambda me: credential(Identity.generate()),
        "expired": lambda me: credential(me, days=-1),
        "forged signature": lambda me: credential(me, signer=other_issuer),
    }
    for name, make in cases.items():
        me = Identity.generate()
        response = post(url, registration(me, problem, make(me)))
        assert response.status_code == 403, name
        assert "admission credential rejected" in response.json()["detail"], name
    members = [Identity.generate() for _ in range(4)]
    for me in members:
        assert post(url, registration(me, problem, credential(me))).status_code == 201
    close_registration(aggregator.url, problem.id)
    wait_phase(aggregator.url, problem.id, ("medians", "reporting"), timeout=30)
    roster = roster_of(aggregator.url, problem.id)
    assert {bytes(e.identity) for e in roster.entries} == {bytes(m.public) for m in members}
    check_roster_entries(roster, problem)  # every entry: own signature, valid credential


def test_an_open_problem_takes_no_credential(aggregator):
    problem = propose(aggregator.url, draft())
    me = Identity.generate()
    response = post(
        f"{aggregator.url}/problems/{problem.id}/registrations", registration(me, problem, credential(me))
    )
    assert response.status_code == 422 and "admission is open" in response.json()["detail"]


def _entry(member: Identity, problem, cred, relay="http://127.0.0.1:9/relay/a") -> RosterEntry:
    reg = registration(member, problem, cred, relay)
    return roster_entry(reg, credential=reg.credential)


def _problem(d):
    from tests.aggregator.helpers import signed_problem
    from tests.witness.test_transcript import AGG  # one signing aggregator for these unit checks

    return signed_problem(d, AGG, pid="p-admission", seed=b"\x00" * 32, round_id=3)


def _roster(problem, entries):
    from tests.witness.test_transcript import AGG

    return roster_document(
        problem.id, tuple(entries), round_id=3, seed=b"\x00" * 32, token_key=b"\x01" * 32, signer=AGG
    )


def test_peers_catch_rewritten_relay_urls_and_uncredentialed_or_borrowed_entries():
    problem = _problem(credentials_draft())
    members = [Identity.generate() for _ in range(3)]
    good = [_entry(m, problem, credential(m)) for m in members]
    check_roster_entries(_roster(problem, good), problem)
    # The aggregator points a member's relay at an address of its choosing (signature stays the member's).
    moved = good[1].model_copy(update={"relay_url": "http://127.0.0.1:6666/relay/a"})
    with pytest.raises(ProtocolError, match="roster entry 1: not the member's own signed registration"):
        check_roster_entries(_roster(problem, [good[0], moved, good[2]]), problem)
    # A Sybil the aggregator made: it can sign the registration itself, but has no credential...
    sybil = Identity.generate()
    with pytest.raises(ProtocolError, match="roster entry 3: credential not valid"):
        check_roster_entries(_roster(problem, [*good, _entry(sybil, problem, None)]), problem)
    # ...and cannot borrow a member's (it names the member).
    with pytest.raises(ProtocolError, match="credential names another identity"):
        check_roster_entries(
            _roster(problem, [*good, _entry(sybil, problem, credential(members[0]))]), problem
        )
    # Stripping a credential from a real member breaks that member's signature.
    stripped = good[0].model_copy(update={"credential": None})
    with pytest.raises(ProtocolError, match="roster entry 0"):
        check_roster_entries(_roster(problem, [stripped, *good[1:]]), problem)


def test_policy_trust_settings_refuse_up_front():
    open_problem = _problem(draft())
    cred_problem = _problem(credentials_draft())
    assert trust_refusal(
        open_problem, trusted_witnesses=[], witness_threshold=1, require_credentials=True, trusted_issuers=[]
    ) == ("the proposal admits anyone (open registration); this peer's policy requires credentials")
    assert (
        trust_refusal(
            cred_problem,
            trusted_witnesses=[],
            witness_threshold=1,
            require_credentials=True,
            trusted_issuers=[bytes(ISSUER.public).hex()],
        )
        is None
    )
    refused = trust_refusal(
        cred_problem,
        trusted_witnesses=[],
        witness_threshold=1,
        require_credentials=False,
        trusted_issuers=[bytes(Identity.generate().public).hex()],
    )
    assert refused is not None and "not one this peer trusts" in refused
    trusting = trust_refusal(
        open_problem,
        trusted_witnesses=[bytes(Identity.generate().public).hex()],
        witness_threshold=1,
        require_credentials=False,
        trusted_issuers=[],
    )
    assert trusting is not None and "declares 0 of the witnesses" in trusting
    # The same through the policy, for a problem the peer can run (plugins installed, auto-accept on).
    featurizer = create("featurizer", PluginRef(name="mooc_engagement", params={"weeks": 2}))
    runnable = _problem(
        dropout_draft(featurizer.features(), history_weeks=2, weeks=4, epsilon=2.0, min_peers=4)
    )
    policy = PeerPolicy(auto_accept=True, max_epsilon_per_problem=4.0, require_witnesses=False)
    assert evaluate_problem(runnable, policy, 0.0).verdict == "accept"
    policy = PeerPolicy(
        auto_accept=True, max_epsilon_per_problem=4.0, require_witnesses=False, require_credentials=True
    )
    decision = evaluate_problem(runnable, policy, 0.0)
    assert decision.verdict == "refuse" and "requires credentials" in decision.reason
    with pytest.raises(ValueError, match="128 hex digits"):
        PeerPolicy(witnesses=["abc"])


def test_cli_issues_and_installs_a_credential_the_peer_then_uses(tmp_path: Path):
    key = tmp_path / "issuer.json"
    save_identity(ISSUER, key, None)
    me = Identity.generate()
    issued = tmp_path / "cred.json"
    run = lambda *args: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "anonml", "credential", *args], capture_output=True, text=True, timeout=120
    )
    done = run(
        "issue",
        "--issuer-key",
        str(key),
        "--subject",
        bytes(me.public).hex(),
        "--scope",
        SCOPE,
        "--days",
        "2",
        "--out",
        str(issued),
    )
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(issued.stat().st_mode) == 0o600
    folder = tmp_path / "credentials"
    done = run("install", str(issued), "--dir", str(folder))
    assert done.returncode == 0, done.stderr
    installed = load_credentials(folder)
    assert len(installed) == 1 and bytes(installed[0].subject) == bytes(me.public)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in folder.iterdir())
    problem = _problem(credentials_draft())
    assert credential_for(installed, problem, bytes(me.public), now=datetime.now(UTC)) == installed[0]
    assert (
        credential_for(installed, problem, bytes(Identity.generate().public), now=datetime.now(UTC)) is None
    )
    # A tampered credential is refused at install.
    tampered = tmp_path / "tampered.json"
    tampered.write_text(issued.read_text().replace(SCOPE, "course:other"))
    done = run("install", str(tampered), "--dir", str(folder))
    assert done.returncode == 1 and "signature does not verify" in done.stderr
    done = run("issue", "--issuer-key", str(key), "--subject", "zz", "--scope", SCOPE)
    assert done.returncode == 1 and "--subject" in done.stderr
