"""Registration and roster: signed registrations (with relay URL and certificate, or none for a
sender-only peer), the roster and each member's assignment, and the relay-address checks.

The protocol as a whole: docs/protocol.md.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    Field,
    model_validator,
)

from anonml.addresses import RESOLVE_SECONDS, Resolver, host_refusal, is_loopback_host, resolved_refusal
from anonml.protocol.messages import (
    B64,
    PROTOCOL_VERSION,
    CertificateBytes,
    IdentityBytes,
    SignatureBytes,
    WireMessage,
    verify_message,
)
from anonml.protocol.problems import Admission, Problem

__all__ = [
    "AdmissionCredential",
    "MAX_BATCH_ITEMS",
    "Registration",
    "RegistrationBatch",
    "RegistrationReceipt",
    "RosterEntry",
    "entry_registration",
    "check_credential",
    "Roster",
    "Assignment",
    "AssignmentBatchRequest",
    "AssignmentBatch",
    "RosterWitness",
    "check_relay_url",
    "check_relay_address",
    "check_own_relay_url",
    "REACHABILITY_SKEW_SECONDS",
    "ReachabilityRequest",
    "ReachabilityAnswer",
    "ReachabilityResult",
]


class AdmissionCredential(WireMessage):
    """An issuer's signed statement that ``subject`` may register for problems of ``scope``.

    Signed by ``issuer`` (e.g. a course platform) over :func:`signing_bytes`;
    valid until ``not_after``. One credential names one identity, so Sybils
    need one credential each from the issuer.
    """

    issuer: IdentityBytes
    subject: IdentityBytes
    scope: str = Field(min_length=1, max_length=200, pattern=r"^[\x21-\x7e ]*$")
    not_after: AwareDatetime
    signature: SignatureBytes


#: Items (registrations, assignments, deliveries, relay packets) one batch request may carry;
#: more is refused with 422.
MAX_BATCH_ITEMS = 256


class _MemberStatement(WireMessage):
    """What a member states about itself, in its :class:`Registration` and again in its :class:`RosterEntry`.

    Its identity, its relay (URL and certificate) and its admission credential:
    both relay fields for a member that relays, neither for a sender-only member.
    Declared once so that a roster entry carries exactly the fields its
    registration signed (:func:`entry_registration` copies them back).
    """

    identity: IdentityBytes
    relay_url: str | None = Field(default=None, pattern=r"^https?://[^\s]{1,200}$")
    relay_certificate: CertificateBytes | None = None
    credential: AdmissionCredential | None = None

    @model_validator(mode="after")
    def _relay_together(self) -> _MemberStatement:
        if (self.relay_url is None) != (self.relay_certificate is None):
            raise ValueError(
                "relay_url and relay_certificate go together: both for a member that relays, "
                "neither for a sender-only member"
            )
        return self

    @property
    def relays(self) -> bool:
        """Whether this member relays (both relay fields present) or is sender-only (neither)."""
        return self.relay_url is not None

    def member_statement(self) -> dict[str, Any]:
        """The fields of :class:`_MemberStatement`, by name, as this message holds them."""
        return {name: getattr(self, name) for name in _MemberStatement.model_fields}


class Registration(_MemberStatement):
    """A peer joins a problem: its identity, its relay (if it relays), its signed round relay key.

    ``aggregator`` names the aggregator identity the peer registers with (the
    Problem's): a registration signed for one aggregator key is worthless in a
    copy of the problem shown under another.

    ``relay_url`` and ``relay_certificate`` are both given by a member that
    relays and both None for a *sender-only* member (behind NAT: it opens
    connections and accepts none). Either way the member's signature covers
    them, so relay capability is the member's own signed statement: an
    aggregator can neither make a sender-only member a relay (routing others'
    packets to an address it chose) nor strip a relay from a member.
    """

    problem_id: str
    aggregator: IdentityBytes
    signature: SignatureBytes


class RegistrationBatch(WireMessage):
    """Registrations of many identities in one request (a host of many peers), each signed by its own.

    Answered with :class:`BatchResults`: each item gets the status and detail
    its own ``POST …/registrations`` would have got.
    """

    registrations: tuple[Registration, ...] = Field(min_length=1, max_length=MAX_BATCH_ITEMS)


class RegistrationReceipt(WireMessage):
    problem_id: str
    fingerprint: str
    registered: int


class RosterEntry(_MemberStatement):
    """One member as it registered: ``registration_signature`` is its own signature over its
    :class:`Registration` (:func:`entry_registration` rebuilds it), so every peer can check that
    the identity, relay URL, relay certificate and credential came from that identity — and so
    whether it relays at all (both relay fields None: a sender-only member)."""

    registration_signature: SignatureBytes


def entry_registration(entry: RosterEntry, problem: Problem) -> Registration:
    """The signed :class:`Registration` a roster entry claims its member sent to ``problem``'s
    aggregator (verify it with :func:`verify_message` against ``entry.identity``)."""
    return Registration(
        problem_id=problem.id,
        aggregator=problem.aggregator,
        signature=entry.registration_signature,
        **entry.member_statement(),
    )


def check_credential(
    credential: AdmissionCredential | None, admission: Admission, subject: bytes, *, valid_at: datetime
) -> AdmissionCredential:
    """Return ``credential`` if it admits ``subject`` under ``admission`` at ``valid_at``.

    Checks, in order: one is present, its issuer and scope are the admission's,
    it names ``subject``, it has not expired at ``valid_at``, and the issuer's
    signature. Raises :class:`ValueError` naming the first that fails (and
    :class:`~anonml.crypto.InvalidSignature` for a bad signature).
    """
    if admission.mode != "credentials":
        raise ValueError("this problem's admission is open: it takes no credential")
    if credential is None:
        raise ValueError(f"admission needs a credential from issuer {bytes(admission.issuer).hex()[:16]}…")
    if bytes(credential.issuer) != bytes(admission.issuer) or credential.scope != admission.scope:
        raise ValueError(
            f"credential is from issuer {bytes(credential.issuer).hex()[:16]}… "
            f"for scope {credential.scope!r}; "
            f"the problem admits issuer {bytes(admission.issuer).hex()[:16]}… scope {admission.scope!r}"
        )
    if bytes(credential.subject) != bytes(subject):
        raise ValueError("credential names another identity")
    if credential.not_after <= valid_at:
        raise ValueError(f"credential expired at {credential.not_after.isoformat()}")
    return verify_message(credential, bytes(credential.issuer))


class Roster(WireMessage):
    """The closed roster: members, the pinned token key, the revealed seed. Signed by ``aggregator``."""

    v: Literal[1] = PROTOCOL_VERSION
    problem_id: str
    aggregator: IdentityBytes
    round_id: int
    entries: tuple[RosterEntry, ...]
    token_key: B64(32)
    seed: B64(32)
    median_pool_size: int = Field(ge=0)
    signature: SignatureBytes


class Assignment(WireMessage):
    """What the aggregator says one peer does, signed; the peer re-derives it from the seed.

    ``role`` is ``"median"`` (``index`` = rank in the median pool), ``"calibration"``
    (``index`` = rank in the calibration pool) or ``"report"`` (``index`` = partition,
    ``subsets`` = its k_h feature subsets).
    """

    problem_id: str
    identity: IdentityBytes
    role: Literal["median", "calibration", "report"]
    index: int = Field(ge=0)
    subsets: tuple[tuple[int, ...], ...] = ()
    signature: SignatureBytes


class AssignmentBatchRequest(WireMessage):
    """The members (fingerprints, hex) whose signed assignments one request asks for.

    A host of many identities asks once per :data:`MAX_BATCH_ITEMS` of them
    instead of once per identity.
    """

    problem_id: str
    fingerprints: tuple[Annotated[str, Field(pattern=r"^[0-9a-fA-F]{64}$")], ...] = Field(
        min_length=1, max_length=MAX_BATCH_ITEMS
    )


class AssignmentBatch(WireMessage):
    """One signed :class:`Assignment` per fingerprint asked, in the order asked."""

    assignments: tuple[Assignment, ...] = Field(max_length=MAX_BATCH_ITEMS)


class RosterWitness(WireMessage):
    """A peer's signed statement of the roster fingerprint it holds (served by its relay)."""

    problem_id: str
    identity: IdentityBytes
    fingerprint: str = Field(pattern=r"^[0-9a-f]{64}$")
    signature: SignatureBytes


_RELAY_URL = re.compile(
    r"^(?P<scheme>https?)://(?P<host>[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?|\[::1\])"
    r"(?::(?P<port>[0-9]{1,5}))?/relay/(?P<node>[0-9a-f]{32})$"
)


def _relay_host(url: str, *, allow_loopback_http: bool) -> str:
    """The host of ``url`` once it has the relay form and a host allowed by its text; ValueError else."""
    if not isinstance(url, str) or len(url) > 300:
        raise ValueError("a relay URL is a string of at most 300 characters")
    match = _RELAY_URL.fullmatch(url)
    if match is None:
        raise ValueError(
            f"relay URL {url[:80]!r} is not of the form https://host[:port]/relay/<32 hex digits> "
            "(no userinfo, query or fragment)"
        )
    if match["port"] is not None and not 1 <= int(match["port"]) <= 65535:
        raise ValueError(f"relay URL {url[:80]!r} has port {match['port']} out of range")
    host = match["host"]
    if match["scheme"] == "http":
        if not is_loopback_host(host):
            raise ValueError(f"relay URL {url[:80]!r}: plain http is allowed on loopback only")
        if not allow_loopback_http:
            raise ValueError(
                f"relay URL {url[:80]!r}: plain http (loopback) is allowed only in test mode "
                "(allow_loopback_http)"
            )
    refusal = host_refusal(host, allow_loopback=allow_loopback_http)
    if refusal is not None:
        raise ValueError(f"relay URL {url[:80]!r}: its host {host!r} is {refusal}")
    return host


def check_relay_url(url: str, *, allow_loopback_http: bool) -> str:
    """``url`` if it has the one relay form and a global host; :class:`ValueError` naming what is wrong.

    The form: ``https://host[:port]/relay/<node id, 32 lowercase hex>``, where
    host is a DNS name or IPv4 address (lowercase; ``[::1]`` for IPv6
    loopback); no userinfo, query, fragment, percent-escapes or trailing
    slash. ``http`` is accepted only for a loopback host (``127.0.0.0/8``,
    ``localhost``, ``[::1]``) and only with ``allow_loopback_http`` (test and
    demo deployments). The host must be a global address by its text
    (:func:`anonml.addresses.host_refusal`): no private, loopback (outside that
    test mode), link-local, multicast, unspecified or reserved address, no
    numeric form other than a dotted quad, no special-use name (``localhost``,
    ``*.internal``, ``*.local``, …). Checked by the aggregator at registration
    and by every peer on every roster entry before it fetches anything from it,
    so a registrant cannot make other peers request an arbitrary URL (blind SSRF
    through a query string, another path, credentials, or an internal host).
    What a *name* resolves to is checked where it is connected to
    (:func:`check_relay_address`): a pure function of the text here.
    """
    _relay_host(url, allow_loopback_http=allow_loopback_http)
    return url


def check_own_relay_url(url: str, node_id: bytes, *, allow_loopback_http: bool) -> str:
    """``url`` if it passes :func:`check_relay_url` and ends with ``/relay/<node_id hex>``: the relay
    URL a member with that node id may state as its own (:class:`ValueError` naming what is wrong)."""
    check_relay_url(url, allow_loopback_http=allow_loopback_http)
    if not url.endswith("/relay/" + node_id.hex()):
        raise ValueError("the relay URL must end in /relay/<the registrant's node id>")
    return url


def check_relay_address(
    url: str,
    *,
    allow_loopback_http: bool,
    timeout: float = RESOLVE_SECONDS,
    resolver: Resolver | None = None,
) -> str:
    """Return ``url`` if :func:`check_relay_url` passes and its host resolves to global addresses only.

    Called by a peer just before it connects to another member's relay (roster
    witness, first hop, next hop): every address the name resolves to, within
    ``timeout`` seconds, must be global (:func:`anonml.addresses.resolved_refusal`;
    ``resolver`` defaults to :func:`socket.getaddrinfo`). :class:`ValueError`
    naming the address otherwise, or when the name does not resolve in time.
    """
    host = _relay_host(url, allow_loopback_http=allow_loopback_http)
    refusal = resolved_refusal(host, allow_loopback=allow_loopback_http, timeout=timeout, resolver=resolver)
    if refusal is not None:
        raise ValueError(f"relay URL {url[:80]!r}: its host {host!r} is {refusal}")
    return url


#: Seconds a :class:`ReachabilityRequest` is good for after it was issued (either way: clocks differ).
REACHABILITY_SKEW_SECONDS = 300.0


class ReachabilityRequest(WireMessage):
    """A peer asks an aggregator to connect to its relay URL from outside, before it registers a relay.

    Signed by the identity whose relay URL it is (the URL has the one relay
    form, :func:`check_relay_url`, and ends with that identity's node id);
    ``aggregator`` names the aggregator asked and ``issued_at`` (UNIX seconds)
    bounds a replay to :data:`REACHABILITY_SKEW_SECONDS`. The aggregator
    requests ``GET {relay_url}/reachability/{challenge hex}``; the peer's relay
    answers a challenge it is waiting for with a :class:`ReachabilityAnswer`
    holding 32 random bytes it drew for it, and the aggregator hands them back
    in its :class:`ReachabilityResult`. So *reachable* is proven (the secret
    left the peer's relay only over that connection), while *unreachable* is
    the aggregator's word — lying costs the peer only its relaying, which the
    relay floors bound (``docs/threat-model.md``, "Relays").
    """

    aggregator: IdentityBytes
    identity: IdentityBytes
    relay_url: str = Field(pattern=r"^https?://[^\s]{1,200}$")
    challenge: B64(32)
    issued_at: float = Field(ge=0)
    signature: SignatureBytes


class ReachabilityAnswer(WireMessage):
    """A relay's answer to the aggregator's probe: the secret it drew for the challenge."""

    answer: B64(32)


class ReachabilityResult(WireMessage):
    """What the aggregator saw when it connected to ``relay_url``: the relay's answer, or why none."""

    relay_url: str
    reachable: bool
    answer: B64(32) | None = None
    reason: str = Field(default="", max_length=500)

    @model_validator(mode="after")
    def _answer_when_reachable(self) -> ReachabilityResult:
        if self.reachable != (self.answer is not None):
            raise ValueError("a reachable result carries the relay's answer, an unreachable one none")
        return self
