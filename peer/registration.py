"""One identity's registration for a problem (:func:`signed_registration`): the relay URL and round
relay key it offers (kept, sealed, before the aggregator may list them) and, under admission by
credentials, the credential that admits it (docs/protocol.md, "Participation: one identity in one
problem")."""

from __future__ import annotations

from datetime import UTC, datetime

from anonml.protocol import Registration, check_relay_url, sign_message
from peer.participation import Participation
from peer.phases import Aborted, RelayKeys
from peer.transcript import credential_for

__all__ = ["signed_registration"]


def signed_registration(p: Participation) -> Registration:
    """``p``'s signed registration with a fresh round relay key, kept (sealed) first — or, sender-only,
    with no relay URL and no relay key (its signature covers their absence).

    What :meth:`~peer.participant.Participant.register` sends alone and a host of many identities
    sends in batches (:meth:`~peer.client.AggregatorClient.register_batch`); ``p.keys`` holds the
    round relay key afterwards. Refuses (:class:`~peer.phases.Aborted`) a relay URL no member would
    accept, and a problem admitting by credentials when ``p`` holds none valid.
    """
    url = p.relay_url
    try:  # the form every member checks: refuse here rather than be refused by all of them
        if url is not None:
            check_relay_url(url, allow_loopback_http=p.relay.allow_loopback_http)
    except ValueError as exc:
        raise Aborted(f"this peer's own relay URL cannot be registered: {exc}") from None
    me = bytes(p.node.identity.public)
    credential = None
    if p.problem.draft.admission.mode == "credentials":
        credential = credential_for(p.credentials, p.problem, me, now=datetime.now(UTC))
        if credential is None:
            raise Aborted("this problem admits by credentials and this identity holds no valid one")
    certificate = None
    if url is not None:
        sealed, key, cert = p.node.new_round_relay_key(p.problem.round_id)
        if p.db is not None:  # kept (sealed) before the aggregator may list it: a restart relays
            p.db.save_round_key(p.node.fingerprint, p.problem.round_id, p.problem.id, sealed, bytes(cert))
        p.keys = RelayKeys(key, cert)
        certificate = bytes(cert)
    return sign_message(
        Registration(
            problem_id=p.problem.id,
            aggregator=p.problem.aggregator,
            identity=me,
            relay_url=url,
            relay_certificate=certificate,
            credential=credential,
            signature=bytes(64),
        ),
        p.node.identity,
    )
