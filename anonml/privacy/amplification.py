"""Privacy amplification by shuffling: the central (ε, δ) of unlinkable ε₀-LDP reports.

AnonML's reports reach the aggregator over onion routes with one-time tokens,
so among the members of one partition the aggregator sees a multiset of
reports it cannot link to their senders. If that holds, the aggregator's view
of ``n`` reports, each from an ε₀-LDP randomiser, is also (ε, δ)-DP in the
central sense for an ε much smaller than ε₀. This module computes that ε.

Bound (Feldman, McMillan & Talwar, "Hiding among the clones: a simple and
nearly optimal analysis of privacy amplification by shuffling", FOCS 2021,
Theorem 3.2): for any ε₀-LDP randomiser and ``n`` users, the shuffled output
on neighbouring data sets is a post-processing of one of the pair

    P = (A + Δ, C − A + 1 − Δ),   Q = (A + 1 − Δ, C − A + Δ),
    C ~ Bin(n − 1, e^{−ε₀}),  A ~ Bin(C, 1/2),  Δ ~ Bern(e^{ε₀} / (e^{ε₀} + 1)):

each other user is, with probability e^{−ε₀}, a "clone" that looks like the
differing user's either input with probability 1/2 each. So the output is
(ε, δ)-DP with ``δ(ε) = max(E_ε(P‖Q), E_ε(Q‖P))``, the hockey-stick divergence
``E_ε(P‖Q) = Σ_o max(0, P(o) − e^ε Q(o))``. :func:`shuffle_delta` sums it
over the support (binomial tails below ~1e-30 dropped);
:func:`shuffle_epsilon` inverts it by bisection. ``P/Q ≤ e^{ε₀}`` pointwise,
so the result never exceeds ε₀. The paper's closed form (its Theorem 3.1),

    ε ≤ log(1 + (e^{ε₀} − 1)/(e^{ε₀} + 1) · (8·√(e^{ε₀}·log(4/δ))/√n + 8·e^{ε₀}/n)),
    valid for ε₀ ≤ log(n / (16·log(2/δ))),

is :func:`closed_form_epsilon`; the numerical bound is never above it.

Assumptions, stated wherever the figure is shown: the reports of a group are
unlinkable to their senders (the onion routes and tokens work, the aggregator
does not see who sent what), and every member of the group is an honest peer
whose report was randomised (a member colluding with the aggregator, or a
dummy peer it controls, shrinks ``n``). The local ε stays the headline
guarantee: it needs no such assumption.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np
from pydantic.dataclasses import dataclass as pydantic_dataclass

from anonml.records import JsonRecord

__all__ = [
    "ASSUMPTIONS",
    "ShuffleBound",
    "shuffle_delta",
    "shuffle_epsilon",
    "closed_form_epsilon",
    "local_epsilon_for",
    "largest_local_epsilon",
    "CentralTarget",
    "CentralTargetUnmet",
    "MIN_LOCAL_EPSILON",
    "default_delta",
    "report_pool_bound",
    "unlinkable_pools_bound",
    "MEDIAN_NOT_SHUFFLED",
    "SIGNED_ANSWERS_NOT_SHUFFLED",
]

#: The label carried with every amplified figure.
ASSUMPTIONS = (
    "central (ε, δ) by shuffling (Feldman, McMillan & Talwar 2021, numerical clone bound): "
    "holds only if each group's reports are unlinkable to their senders and every member "
    "is an honest peer; the local ε needs neither"
)
_LOG_TAIL = -70.0


def _check(epsilon0: float, n: int) -> None:
    if not (epsilon0 > 0 and math.isfinite(epsilon0)):
        raise ValueError(f"local epsilon must be a finite number > 0, got {epsilon0}")
    if int(n) != n or n < 1:
        raise ValueError(f"group size n must be an integer >= 1, got {n}")


def default_delta(n: int) -> float:
    """δ used when none is given: ``min(1e-6, 0.1/n)``, well below the 1/n of a single peer."""
    return min(1e-6, 0.1 / max(int(n), 1))


@lru_cache(maxsize=64)
def _pair(epsilon0: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The masses of P and Q over every outcome (c, a) with non-negligible probability.

    Outcome (c, a): ``c`` clones, first coordinate ``a``. ``P = w_c·(q₁·b(a−1) + (1−q₁)·b(a))``
    and ``Q = w_c·((1−q₁)·b(a−1) + q₁·b(a))`` with ``w_c = Bin(c; n−1, e^{−ε₀})`` and
    ``b = Bin(·; c, 1/2)``. Tails of either binomial below ``e^{−70}`` (~1e-30,
    far below any δ used) are dropped, which only lowers both divergences by less.
    """
    # scipy.stats costs a second at import, scipy.special 0.3 s: only when a bound is computed
    from scipy.special import gammaln
    from scipy.stats import binom

    p_clone = math.exp(-epsilon0)
    q1 = 1.0 / (1.0 + math.exp(-epsilon0))  # e^{ε0}/(e^{ε0}+1), overflow-free
    cs = np.arange(n)
    log_w = binom.logpmf(cs, n - 1, p_clone)
    cs = cs[log_w > _LOG_TAIL]
    log_w = log_w[log_w > _LOG_TAIL]
    half = int(math.ceil(6.0 * math.sqrt(max(int(cs.max()), 1)))) + 2  # > 11.8 sd of A (sd = √c/2)
    offsets = np.arange(-half, half + 2)
    a = np.floor(cs / 2.0).astype(np.int64)[:, None] + offsets[None, :]  # (C, W) candidate a values
    c = cs[:, None]

    def log_b(k: np.ndarray) -> np.ndarray:
        inside = (k >= 0) & (k <= c)
        kk = np.clip(k, 0, c)
        out = gammaln(c + 1) - gammaln(kk + 1) - gammaln(c - kk + 1) - c * math.log(2.0)
        return np.where(inside, out, -np.inf)

    below = np.exp(log_b(a - 1) + log_w[:, None])
    at = np.exp(log_b(a) + log_w[:, None])
    valid = (a >= 0) & (a <= c + 1)
    p = np.where(valid, q1 * below + (1.0 - q1) * at, 0.0)
    q = np.where(valid, (1.0 - q1) * below + q1 * at, 0.0)
    return p.ravel(), q.ravel()


def shuffle_delta(epsilon: float, epsilon0: float, n: int) -> float:
    """``δ(ε)`` of ``n`` shuffled ε₀-LDP reports (FMT 2021, Theorem 3.2).

    Parameters
    ----------
    epsilon : float
        The central ε (≥ 0) at which δ is evaluated.
    epsilon0 : float
        Each report's local ε₀.
    n : int
        Reports shuffled together (the differing user included).

    Returns
    -------
    float
        ``max(E_ε(P‖Q), E_ε(Q‖P))`` in [0, 1], summed over the whole support
        but for binomial tails below ~1e-30.
    """
    _check(epsilon0, n)
    if epsilon < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    if epsilon >= epsilon0:
        return 0.0
    p, q = _pair(float(epsilon0), int(n))
    e_eps = math.exp(epsilon)
    forward = float(np.sum(np.clip(p - e_eps * q, 0.0, None)))
    backward = float(np.sum(np.clip(q - e_eps * p, 0.0, None)))
    return float(min(1.0, max(forward, backward)))


def _bisect(above: Callable[[float], bool], low: float, high: float, tol: float) -> tuple[float, float]:
    """Halve ``[low, high]`` until it is at most ``tol`` wide, keeping ``above(high)`` and not ``above(low)``.

    For a predicate that is false below some point and true from it on, the
    returned ``(low, high)`` bracket that point; each caller keeps the end that
    satisfies its own bound (``high`` for the smallest ε meeting a δ, ``low``
    for the largest ε₀ within a target).
    """
    while high - low > tol:
        mid = 0.5 * (low + high)
        if above(mid):
            high = mid
        else:
            low = mid
    return low, high


def shuffle_epsilon(epsilon0: float, n: int, delta: float | None = None, *, tol: float = 1e-6) -> float:
    """The smallest central ε with ``δ(ε) ≤ delta`` for ``n`` shuffled ε₀-LDP reports.

    ``δ(ε)`` is non-increasing in ε and 0 at ε₀, so the answer lies in
    ``[0, ε₀]`` and is found by bisection to ``tol`` (rounded up: the
    returned ε always satisfies the bound).

    Parameters
    ----------
    epsilon0 : float
    n : int
    delta : float, optional
        Default :func:`default_delta` of ``n``.
    """
    _check(epsilon0, n)
    delta = default_delta(n) if delta is None else float(delta)
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if n == 1 or shuffle_delta(0.0, epsilon0, n) <= delta:
        return epsilon0 if n == 1 else 0.0
    _, high = _bisect(lambda e: shuffle_delta(e, epsilon0, n) <= delta, 0.0, float(epsilon0), tol)
    return high


def closed_form_epsilon(epsilon0: float, n: int, delta: float) -> float | None:
    """FMT 2021 Theorem 3.1's closed-form ε, or None outside its range ``ε₀ ≤ log(n/(16 log(2/δ)))``."""
    _check(epsilon0, n)
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    limit = n / (16.0 * math.log(2.0 / delta))
    if limit <= 1.0 or epsilon0 > math.log(limit):
        return None
    e0 = math.exp(epsilon0)
    inner = 8.0 * math.sqrt(e0 * math.log(4.0 / delta)) / math.sqrt(n) + 8.0 * e0 / n
    return math.log1p((e0 - 1.0) / (e0 + 1.0) * inner)


def local_epsilon_for(
    target_epsilon: float,
    n: int,
    delta: float | None = None,
    *,
    max_epsilon0: float = 20.0,
    tol: float = 1e-4,
) -> float:
    """The largest local ε₀ whose shuffled central ε (groups of ``n``) stays within ``target_epsilon``.

    For an aggregator that states a central target: the central ε grows with
    ε₀, so bisection finds the largest ε₀ ≤ ``max_epsilon0`` meeting it
    (rounded down: the returned ε₀ always meets the target). At worst this is
    the target itself (n = 1: no amplification).
    """
    if not (target_epsilon > 0 and math.isfinite(target_epsilon)):
        raise ValueError(f"target epsilon must be a finite number > 0, got {target_epsilon}")
    _check(target_epsilon, n)
    delta = default_delta(n) if delta is None else float(delta)
    if shuffle_epsilon(max_epsilon0, n, delta) <= target_epsilon:
        return float(max_epsilon0)
    low, _ = _bisect(
        lambda e: shuffle_epsilon(e, n, delta) > target_epsilon,
        float(min(target_epsilon, max_epsilon0)),
        float(max_epsilon0),
        tol,
    )
    return low


#: The smallest local ε a central target may ask for: below it a report carries next to nothing.
MIN_LOCAL_EPSILON = 0.01


class CentralTargetUnmet(ValueError):
    """No local ε ≥ :data:`MIN_LOCAL_EPSILON` meets a central (ε, δ) target with the groups at hand."""


def largest_local_epsilon(
    central_of: Callable[[float], float | None],
    target_epsilon: float,
    *,
    floor: float = MIN_LOCAL_EPSILON,
    max_epsilon0: float = 20.0,
    tol: float = 1e-3,
    what: str = "the groups",
) -> float:
    """The largest local ε₀ in ``[floor, max_epsilon0]`` whose central ε stays within ``target_epsilon``.

    ``central_of(ε₀)`` is the central ε (at the target's δ) that a fit with
    local ε₀ would have — for a fit whose group sizes depend on ε₀ (its pools
    are sized by ε₀) the caller recomputes them for each ε₀ — or None when it
    has no bound (a group of one report). The central ε of fixed groups grows
    with ε₀ (FMT 2021: more local noise hides better), so bisection on
    ``central_of(ε₀) > target`` finds the boundary to ``tol``; the returned
    ε₀ always meets the target and ``ε₀ + tol`` does not (unless it is
    ``max_epsilon0``, which meets it).

    Raises
    ------
    CentralTargetUnmet
        When even ``floor`` misses the target (or has no bound), naming ``what``.
    """
    if not (target_epsilon > 0 and math.isfinite(target_epsilon)):
        raise ValueError(f"target epsilon must be a finite number > 0, got {target_epsilon}")

    def misses(e0: float) -> bool:
        central = central_of(e0)
        return central is None or central > target_epsilon

    if misses(floor):
        central = central_of(floor)
        got = "no shuffle bound (a group of one report)" if central is None else f"central ε {central:.4g}"
        raise CentralTargetUnmet(
            f"central target ε={target_epsilon:g} cannot be met by {what}: even local ε={floor:g} "
            f"gives {got}; more peers per group (or a larger target) are needed"
        )
    if not misses(max_epsilon0):
        return float(max_epsilon0)
    low, _ = _bisect(misses, float(floor), float(max_epsilon0), tol)
    return low


@pydantic_dataclass(frozen=True)
class CentralTarget(JsonRecord):
    """A central (ε, δ) asked for, the local ε chosen (or set) for it, and what the groups give.

    Attributes
    ----------
    epsilon, delta : float
        The central target.
    local_epsilon : float
        Each peer's local ε (its total; the headline guarantee, which needs no assumption).
    central_epsilon : float
        The shuffle bound's central ε at ``delta`` for the groups the fit had
        (:func:`unlinkable_pools_bound`); ``met`` when at most ``epsilon``.
    smallest_group : int
        The fewest reports shuffled together in any group.
    met : bool
    assumptions : str
        What the central figure rests on (:data:`ASSUMPTIONS` + :data:`MEDIAN_NOT_SHUFFLED`).
    """

    epsilon: float
    delta: float
    local_epsilon: float
    central_epsilon: float
    smallest_group: int
    met: bool
    assumptions: str

    @classmethod
    def of(
        cls,
        epsilon: float,
        delta: float,
        local_epsilon: float,
        bound: ShuffleBound | None,
        smallest_group: int = 1,
    ) -> CentralTarget:
        """The record of ``bound`` (computed at ``delta``) against the target ``(epsilon, delta)``.

        Without a bound (a group of one report: nothing to hide among) the
        central ε is the local ε itself, which holds with δ = 0 and needs no
        assumption; ``smallest_group`` is then the fewest reports per group.
        """
        if bound is None:
            central, smallest, assumptions = float(local_epsilon), int(smallest_group), "local ε only"
        else:
            central, smallest = float(bound.epsilon), int(bound.smallest_group)
            assumptions = bound.assumptions
        return cls(
            epsilon=float(epsilon),
            delta=float(delta),
            local_epsilon=float(local_epsilon),
            central_epsilon=central,
            smallest_group=smallest,
            met=bool(central <= epsilon and (bound is None or bound.delta <= delta)),
            assumptions=assumptions,
        )


@pydantic_dataclass(frozen=True)
class ShuffleBound(JsonRecord):
    """A central (ε, δ) by shuffling, with what it rests on.

    Attributes
    ----------
    epsilon : float
        Largest central ε over the peer pools (each pool composed as its peers' releases are).
    delta : float
    smallest_group : int
        The fewest reports shuffled together in any group (the weakest group decides).
    assumptions : str
        :data:`ASSUMPTIONS` (plus :data:`MEDIAN_NOT_SHUFFLED` for a problem's bound).
    pools : tuple of str
        The peer pools whose reports the bound covers (``"report"``, and
        ``"calibration"`` in the library); empty when built from bare groups.
    peers_outside : int or None
        Peers of the problem the bound does not cover (the median pool's, who
        keep only their local ε); None when the count is not known (the
        protocol's bound before the median round has run).
    """

    epsilon: float
    delta: float
    smallest_group: int
    assumptions: str = ASSUMPTIONS
    pools: tuple[str, ...] = ()
    peers_outside: int | None = None

    @classmethod
    def of_groups(cls, groups: list[tuple[float, int, int]], delta: float | None = None) -> ShuffleBound:
        """The bound of a problem whose peers fall in disjoint pools.

        Parameters
        ----------
        groups : list of (ε₀, k, n)
            One entry per pool: each peer of the pool releases ``k`` reports of
            ε₀ each, every report shuffled among (at least) ``n`` reports of the
            same kind. Within a pool, k shuffled releases compose to
            ``(k·ε, k·δ_each)`` with ``δ_each = δ/k``; disjoint pools compose in
            parallel, so the problem's ε is the largest pool's.
        delta : float, optional
            Total δ per peer; default :func:`default_delta` of the smallest group.
        """
        if not groups:
            raise ValueError("no groups")
        smallest = min(int(n) for _, _, n in groups)
        delta = default_delta(smallest) if delta is None else float(delta)
        worst = max(k * shuffle_epsilon(e0, int(n), delta / k) for e0, k, n in groups)
        return cls(float(worst), float(delta), smallest)


#: What a protocol problem's bound adds to :data:`ASSUMPTIONS`: the median pool is outside it.
MEDIAN_NOT_SHUFFLED = (
    "; it covers the pools of unlinkable reports only (the report pool, and the "
    "calibration pool where there is one): median answers are signed by their peers, "
    "so a median-pool peer keeps its local ε"
)
#: The end of a protocol round's bound when the problem has a calibration pool (in place of
#: :data:`MEDIAN_NOT_SHUFFLED`, which describes the library's simulated pools, where the calibration
#: pool's reports are anonymous): the protocol's calibration answers are signed and sent directly.
SIGNED_ANSWERS_NOT_SHUFFLED = (
    "; it covers the report pool only: median and calibration answers are signed by their peers "
    "and sent directly, so a median- or calibration-pool peer keeps its local ε"
)


def unlinkable_pools_bound(
    pools: dict[str, tuple[float, int, int]], peers_outside: int | None = None, delta: float | None = None
) -> ShuffleBound | None:
    """The shuffle bound of a problem over the pools whose reports are unlinkable.

    DESIGN §11: a report reaches the aggregator unlinkable among the members
    of its partition, so the clone bound applies to it; a median answer is
    signed by its peer and gets no amplification. The bound therefore covers
    only the pools named here and states how many peers it leaves out.

    Parameters
    ----------
    pools : dict of str to (ε₀, k, n)
        Per unlinkable pool: each of its peers releases ``k`` reports of ε₀,
        each shuffled among at least ``n`` reports (the pool's fewest per
        group). Composed by :meth:`ShuffleBound.of_groups` (k-fold within a
        pool, parallel across pools, δ by :func:`default_delta` of the
        smallest group).
    peers_outside : int, optional
        Peers of the problem outside every pool (the median pool's): they keep
        only their local ε.
    delta : float, optional
        Total δ per peer (a central target's); default :func:`default_delta` of
        the smallest group.

    Returns
    -------
    ShuffleBound or None
        None when some pool shuffles fewer than 2 reports per group (one report
        hides among nobody). The assumptions carry :data:`MEDIAN_NOT_SHUFFLED`.
    """
    if not pools:
        raise ValueError("no unlinkable pool to bound")
    if any(int(n) < 2 for _, _, n in pools.values()):
        return None
    groups = [(float(e0), int(k), int(n)) for e0, k, n in pools.values()]
    return dataclasses.replace(
        ShuffleBound.of_groups(groups, delta),
        assumptions=ASSUMPTIONS + MEDIAN_NOT_SHUFFLED,
        pools=tuple(pools),
        peers_outside=peers_outside,
    )


@lru_cache(maxsize=256)
def report_pool_bound(epsilon0: float, reports_per_peer: int, group: int) -> ShuffleBound | None:
    """The shuffle bound of a protocol report pool, or None when a group holds fewer than 2 reports.

    Each report peer sends ``reports_per_peer`` (k_h) reports of ε₀ = ε/k_h,
    each shuffled among the ``group`` reports of its (partition, subset)
    (:func:`unlinkable_pools_bound` with the report pool alone; δ by
    :func:`default_delta` of the group). The median pool is outside it
    (:data:`MEDIAN_NOT_SHUFFLED`). The aggregator's status and model document,
    the peer's dashboard and ``anonml peer ledger`` compute the figure here, and
    the library's ``privacy_.shuffle`` through the same
    :func:`unlinkable_pools_bound`, so they agree.
    """
    return unlinkable_pools_bound({"report": (float(epsilon0), int(reports_per_peer), int(group))})
