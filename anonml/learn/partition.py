"""Partition plans: which peer reports which feature subsets, from committed randomness.

DESIGN §6: k_p horizontal peer partitions, and per partition k_h feature subsets
of k_s features each; each report is the k_s binned features plus the label.
Membership comes from shared randomness the aggregator cannot steer: it commits
to ``H(seed)`` when proposing a problem, reveals ``seed`` when registration
closes, and the peers are ordered by ``H(seed ‖ beacon ‖ roster digest ‖ peer key)``.
The seed alone does not suffice: the aggregator knows it while registration is
open, so it could re-key fake identities (or choose when to close) until a
victim lands where it wants. The ``beacon`` is
:func:`anonml.protocol.roster_beacon` of the independent witnesses'
deterministic signatures over the roster transcript: fixed only once the
roster is, unknown to the aggregator before the witnesses sign, and each
witness signs one roster per problem, so the aggregator gets one draw.
(``beacon = b""`` — a problem without witnesses — keeps the seed-only order.)
Every peer can recompute the whole plan from public data (commitment, seed,
beacon, signed roster, plan parameters) and check what the aggregator told it
(:func:`verify_assignment`).

The first ``median_pool_size`` peers in that order form a separate pool that
only answers private-median queries (thesis algorithm 1); the next
``calibration_pool_size`` form the calibration pool, which only sends one
(score bin, label) answer once the model exists (:mod:`anonml.learn.calibration`) — for
K ≥ 3 classes its first half (:func:`class_map_groups`) answers (predicted class, label) and the
rest the log-loss changes of the map so built (:meth:`PartitionPlan.class_map_half`,
:meth:`PartitionPlan.choice_half`); the rest are split into the k_p report partitions.
Disjoint pools compose in parallel, so each peer's total ε is the budget of the one thing it
releases.
Without a calibration pool (size 0) the plan is the one it was before the pool
existed, rank for rank.

Only SHA-256 and integer arithmetic decide the plan (no library RNG whose
stream could change between numpy versions), so a plan is stable across
library versions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np

from anonml.errors import ProtocolError

__all__ = [
    "SEED_BYTES",
    "BEACON_BYTES",
    "PeerAssignment",
    "PartitionPlan",
    "commit_seed",
    "roster_digest",
    "membership_order",
    "random_subsets",
    "make_plan",
    "class_map_groups",
    "verify_assignment",
]

SEED_BYTES = 32
BEACON_BYTES = 32
_DOMAIN = b"anonml/partition/v1/"


def _sha256(*parts: bytes) -> bytes:
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.digest()


def _check_seed(seed: bytes) -> bytes:
    if not isinstance(seed, bytes | bytearray) or len(seed) != SEED_BYTES:
        raise ProtocolError(f"partition seed must be {SEED_BYTES} bytes, got {seed!r:.40}")
    return bytes(seed)


def commit_seed(seed: bytes) -> bytes:
    """The commitment ``H(seed)`` published with a proposal (SHA-256, domain-separated)."""
    return _sha256(_DOMAIN, b"commit", _check_seed(seed))


def roster_digest(peer_keys: Sequence[bytes]) -> bytes:
    """SHA-256 over the sorted, length-prefixed peer keys of the closed roster.

    Sorting makes the digest independent of registration order; the length
    prefix makes the encoding injective.
    """
    keys = list(map(bytes, peer_keys))
    if len(set(keys)) != len(keys):
        raise ProtocolError("roster lists a peer key more than once")
    if not all(keys):
        raise ProtocolError("roster holds an empty peer key")
    # One update over the whole encoding: two per key cost 10 ms at 10,000 keys.
    encoded = b"".join([len(key).to_bytes(4, "big") + key for key in sorted(keys)])
    return hashlib.sha256(_DOMAIN + b"roster" + encoded).digest()


@lru_cache(maxsize=4)
def _roster_index(keys: tuple[bytes, ...]) -> tuple[bytes, dict[bytes, int]]:
    """A roster's :func:`roster_digest` and each key's position, computed once per roster.

    A host checks the one roster for each of its identities: a host of 2,500 identities on a
    10,000-member roster hashed and scanned it 2,500 times (16 s of CPU on a quiet machine,
    ``benchmarks/plan.py``).
    """
    return roster_digest(keys), {bytes(key): i for i, key in enumerate(keys)}


def _roster_index_of(peer_keys: Sequence[bytes]) -> tuple[bytes, dict[bytes, int]]:
    """:func:`_roster_index` of any sequence of keys: remembered for tuples of hashable keys."""
    keys = peer_keys if isinstance(peer_keys, tuple) else tuple(peer_keys)
    try:
        return _roster_index(keys)
    except TypeError:  # an unhashable key (a bytearray): computed, not remembered
        return _roster_index.__wrapped__(keys)


def _check_beacon(beacon: bytes) -> bytes:
    if not isinstance(beacon, bytes | bytearray) or len(beacon) not in (0, BEACON_BYTES):
        raise ProtocolError(f"beacon must be empty or {BEACON_BYTES} bytes, got {beacon!r:.40}")
    return bytes(beacon)


def membership_order(seed: bytes, peer_keys: Sequence[bytes], beacon: bytes = b"") -> np.ndarray:
    """Indices into ``peer_keys`` sorted by ``H(seed ‖ beacon ‖ roster digest ‖ peer key)``.

    ``beacon`` is empty (no witnesses) or 32 bytes; the seed and digest are
    32 bytes, so the concatenation is unambiguous.

    Returns
    -------
    ndarray of shape (n_peers,), int
        ``order[r]`` is the index of the peer at rank ``r``.
    """
    return _membership_order(_check_seed(seed), peer_keys, _check_beacon(beacon), roster_digest(peer_keys))


def _membership_order(seed: bytes, peer_keys: Sequence[bytes], beacon: bytes, digest: bytes) -> np.ndarray:
    """:func:`membership_order` with the roster's digest already computed (checked inputs)."""
    prefix = hashlib.sha256(seed + beacon + digest)
    ranks = bytearray()
    for key in peer_keys:
        h = prefix.copy()
        h.update(bytes(key))
        ranks += h.digest()
    # The 32-byte ranks as four big-endian 64-bit words each: their lexicographic order is the bytes'
    # order, and a stable sort keeps the ties (never seen: SHA-256) in roster order, as sorted() does.
    words = np.frombuffer(bytes(ranks), dtype=">u8").reshape(-1, 4).astype(np.uint64)
    return np.lexsort(words.T[::-1]).astype(np.int64)


def random_subsets(
    seed: bytes, n_features: int, *, n_partitions: int, n_subsets: int, subset_size: int
) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Random non-overlapping feature subsets for every partition, balanced across partitions.

    The features are ordered by ``H(seed ‖ "features" ‖ index)``; slot ``s`` of the
    run of ``k_p·k_h·k_s`` slots takes feature ``order[s mod F]``. Within one
    partition the ``k_h·k_s ≤ F`` consecutive slots are distinct, so its subsets
    never overlap, and across partitions every feature is used ⌊·⌋ or ⌈·⌉ times
    (the thesis draws subsets at random; dealing them out in a random cyclic
    order keeps that randomness and avoids leaving a feature out by chance).
    """
    seed = _check_seed(seed)
    per_partition = n_subsets * subset_size
    if min(n_features, n_partitions, n_subsets, subset_size) < 1:
        raise ValueError("n_features, k_p, k_h and k_s must all be at least 1")
    if per_partition > n_features:
        raise ValueError(
            f"k_h·k_s = {n_subsets}·{subset_size} = {per_partition} exceeds the "
            f"{n_features} features: subsets of one partition could not be disjoint"
        )
    keys = [_sha256(_DOMAIN, b"features", seed, i.to_bytes(4, "big")) for i in range(n_features)]
    order = sorted(range(n_features), key=keys.__getitem__)
    plan = []
    for p in range(n_partitions):
        base = p * per_partition
        plan.append(
            tuple(
                tuple(sorted(order[(base + h * subset_size + s) % n_features] for s in range(subset_size)))
                for h in range(n_subsets)
            )
        )
    return tuple(plan)


@dataclass(frozen=True)
class PeerAssignment:
    """What one peer does in a problem.

    ``role`` is ``"median"`` (answers one private-median query; ``index`` is its
    rank within the median pool), ``"calibration"`` (sends one calibration answer;
    ``index`` is its rank within the calibration pool) or ``"report"`` (``index``
    is its partition and ``subsets`` the feature subsets it reports, one report each).
    """

    role: Literal["median", "calibration", "report"]
    index: int
    subsets: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True, eq=False)
class PartitionPlan:
    """A fixed partition plan (DESIGN §6).

    Attributes
    ----------
    seed : bytes
        The revealed 32-byte seed.
    beacon : bytes
        The witnesses' beacon (empty without witnesses).
    roster : bytes
        :func:`roster_digest` of the closed roster.
    order : ndarray of shape (n_peers,)
        Roster indices in membership order.
    median_pool_size : int
        The first this many peers in ``order`` form the median pool.
    bounds : tuple of int
        Report partition ``p`` is ``order[bounds[p]:bounds[p + 1]]``.
    subsets : tuple
        ``subsets[p]`` is the tuple of k_h feature subsets of partition ``p``.
    calibration_pool_size : int
        The next this many peers in ``order`` (after the median pool) form the calibration pool.
    """

    seed: bytes
    beacon: bytes
    roster: bytes
    order: np.ndarray
    median_pool_size: int
    bounds: tuple[int, ...]
    subsets: tuple[tuple[tuple[int, ...], ...], ...]
    calibration_pool_size: int = 0

    @property
    def n_partitions(self) -> int:
        return len(self.subsets)

    @property
    def commitment(self) -> bytes:
        return commit_seed(self.seed)

    def median_pool(self) -> np.ndarray:
        """Roster indices of the median pool, in membership order."""
        return self.order[: self.median_pool_size]

    def calibration_pool(self) -> np.ndarray:
        """Roster indices of the calibration pool, in membership order."""
        return self.order[self.median_pool_size : self.median_pool_size + self.calibration_pool_size]

    def class_map_half(self) -> np.ndarray:
        """K ≥ 3: the calibration pool's map half, its first members in plan order
        (:func:`class_map_groups`): they report (predicted class, label)."""
        n_map, _ = class_map_groups(self.calibration_pool_size)
        return self.calibration_pool()[:n_map]

    def choice_half(self) -> np.ndarray:
        """K ≥ 3: the calibration pool's choice half, the members after the map half: they report
        the log-loss changes of mixing the map into the model."""
        n_map, _ = class_map_groups(self.calibration_pool_size)
        return self.calibration_pool()[n_map:]

    def members(self, partition: int) -> np.ndarray:
        """Roster indices of report partition ``partition``, in membership order."""
        if not 0 <= partition < self.n_partitions:
            raise IndexError(f"partition {partition} out of range 0..{self.n_partitions - 1}")
        return self.order[self.bounds[partition] : self.bounds[partition + 1]]

    def partition_sizes(self) -> list[int]:
        return [self.bounds[p + 1] - self.bounds[p] for p in range(self.n_partitions)]

    def smallest_partition(self) -> int:
        """Peers in the smallest report partition (0 without one): the fewest reports any of its
        (partition, subset) groups shuffles among, which the shuffle bound rests on (DESIGN §11)."""
        return min(self.partition_sizes(), default=0)

    def assignment_of_rank(self, rank: int) -> PeerAssignment:
        """The assignment of the peer at membership rank ``rank``."""
        if rank < self.median_pool_size:
            return PeerAssignment("median", rank)
        if rank < self.median_pool_size + self.calibration_pool_size:
            return PeerAssignment("calibration", rank - self.median_pool_size)
        p = int(np.searchsorted(self.bounds, rank, side="right")) - 1
        return PeerAssignment("report", p, self.subsets[p])

    def assignment(self, roster_index: int) -> PeerAssignment:
        """The assignment of the peer at ``roster_index`` in the roster list."""
        ranks = np.flatnonzero(self.order == roster_index)
        if ranks.size != 1:
            raise ProtocolError(f"peer {roster_index} is not on the roster")
        return self.assignment_of_rank(int(ranks[0]))


def class_map_groups(n_pool: int) -> tuple[int, int]:
    """K ≥ 3: the calibration pool's (map half, choice half) sizes; the map half gets the odd peer."""
    return n_pool - n_pool // 2, n_pool // 2


def make_plan(
    seed: bytes,
    peer_keys: Sequence[bytes],
    n_features: int,
    *,
    n_partitions: int,
    n_subsets: int = 1,
    subset_size: int = 1,
    subsets: Sequence[Sequence[int]] | None = None,
    median_pool_size: int = 0,
    beacon: bytes = b"",
    calibration_pool_size: int = 0,
) -> PartitionPlan:
    """Build the partition plan every party can recompute.

    Parameters
    ----------
    seed : bytes
        The 32-byte seed revealed when registration closed.
    peer_keys : sequence of bytes
        The peers' public keys, as listed in the signed roster.
    n_features : int
        Number of features F of the problem.
    n_partitions, n_subsets, subset_size : int
        k_p, k_h and k_s.
    subsets : sequence of sequences of int, optional
        Subsets chosen by the data scientist, each of k_s distinct features.
        Partition ``p`` reports subsets ``(p·k_h + h) mod len(subsets)`` for
        ``h < k_h``. When omitted, :func:`random_subsets` draws them from the seed.
    median_pool_size : int, default=0
        Peers set apart to answer median queries only.
    beacon : bytes, default=b""
        :func:`anonml.protocol.roster_beacon` of the witnesses' cosignatures on
        the roster transcript (module docstring); empty without witnesses.
    calibration_pool_size : int, default=0
        Peers set apart, after the median pool, to send one calibration answer only.

    Raises
    ------
    ValueError
        When the numbers do not fit (too few peers, bad subsets).
    ProtocolError
        On a malformed seed or roster.
    """
    n_peers = len(peer_keys)
    if median_pool_size < 0 or calibration_pool_size < 0:
        raise ValueError(
            f"pool sizes must be >= 0, got median {median_pool_size}, calibration {calibration_pool_size}"
        )
    set_apart = median_pool_size + calibration_pool_size
    if n_peers - set_apart < n_partitions:
        pools = f"a median pool of {median_pool_size}" + (
            f" and a calibration pool of {calibration_pool_size}" if calibration_pool_size else ""
        )
        raise ValueError(f"{n_peers} peers minus {pools} cannot fill {n_partitions} partitions")
    if subsets is None:
        chosen = random_subsets(
            seed, n_features, n_partitions=n_partitions, n_subsets=n_subsets, subset_size=subset_size
        )
    else:
        chosen = _given_subsets(subsets, n_features, n_partitions, n_subsets, subset_size)
    seed, beacon, digest = _check_seed(seed), _check_beacon(beacon), roster_digest(peer_keys)
    order = _membership_order(seed, peer_keys, beacon, digest)
    report = n_peers - set_apart
    sizes = [report // n_partitions + (1 if p < report % n_partitions else 0) for p in range(n_partitions)]
    bounds = tuple(int(b) for b in np.cumsum([set_apart, *sizes]))
    return PartitionPlan(
        seed=seed,
        beacon=beacon,
        roster=digest,
        order=order,
        median_pool_size=median_pool_size,
        bounds=bounds,
        subsets=chosen,
        calibration_pool_size=calibration_pool_size,
    )


def _given_subsets(
    subsets: Sequence[Sequence[int]],
    n_features: int,
    n_partitions: int,
    n_subsets: int,
    subset_size: int,
) -> tuple[tuple[tuple[int, ...], ...], ...]:
    if len(subsets) == 0:
        raise ValueError("subsets is empty")
    clean: list[tuple[int, ...]] = []
    for i, subset in enumerate(subsets):
        features = tuple(int(f) for f in subset)
        if len(features) != subset_size:
            raise ValueError(f"subsets[{i}] has {len(features)} features, k_s is {subset_size}")
        if len(set(features)) != len(features):
            raise ValueError(f"subsets[{i}] repeats a feature: {features}")
        if any(not 0 <= f < n_features for f in features):
            raise ValueError(f"subsets[{i}] = {features} names a feature outside 0..{n_features - 1}")
        clean.append(tuple(sorted(features)))
    return tuple(
        tuple(clean[(p * n_subsets + h) % len(clean)] for h in range(n_subsets)) for p in range(n_partitions)
    )


def verify_assignment(
    claimed: PeerAssignment,
    plan: PartitionPlan,
    *,
    commitment: bytes,
    peer_keys: Sequence[bytes],
    my_key: bytes,
) -> PeerAssignment:
    """Peer-side check of the assignment the aggregator announced.

    ``plan`` is the :func:`make_plan` the peer computed itself from the public
    inputs: the seed revealed at close, the signed roster's keys, the draft's
    k_p, k_h, k_s and subsets, the roster's median pool, and the ``beacon`` it
    derived from the verified witness cosignatures (a process checking many
    hosted identities against one roster computes it once).

    Returns the peer's assignment if and only if the plan's seed matches the
    commitment ``H(seed)`` made at proposal time, the plan is of this roster,
    the peer is on it, and the claim equals the plan's assignment.

    Raises
    ------
    ProtocolError
        Naming the first check that failed.
    """
    if commit_seed(plan.seed) != bytes(commitment):
        raise ProtocolError("revealed seed does not match the commitment H(seed) of the proposal")
    digest, index = _roster_index_of(peer_keys)
    if digest != plan.roster:
        raise ProtocolError("the partition plan was computed for another roster")
    roster_index = index.get(bytes(my_key))
    if roster_index is None:
        raise ProtocolError("this peer's key is not on the closed roster")
    actual = plan.assignment(roster_index)
    if actual != claimed:
        raise ProtocolError(f"announced assignment {claimed} differs from the one the seed gives: {actual}")
    return actual
