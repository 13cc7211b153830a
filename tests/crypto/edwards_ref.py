"""Slow, independent edwards25519 arithmetic in Python integers, for building bad encodings.

Only the tests use it: to find the eight small-order points, to add the
order-2 point (0, -1) to a valid element (CVE-2025-69277), and to write
non-canonical encodings. Nothing here is fast or constant-time.
"""

from __future__ import annotations

import functools

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = (-121665 * pow(121666, P - 2, P)) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)
IDENTITY = (0, 1)

Point = tuple[int, int]


def inv(a: int) -> int:
    return pow(a, P - 2, P)


def on_curve(pt: Point) -> bool:
    x, y = pt
    return (-x * x + y * y - 1 - D * x * x * y * y) % P == 0


def add(p1: Point, p2: Point) -> Point:
    """Unified addition on -x^2 + y^2 = 1 + d x^2 y^2 (complete for edwards25519)."""
    (x1, y1), (x2, y2) = p1, p2
    t = D * x1 * x2 * y1 * y2 % P
    return ((x1 * y2 + y1 * x2) * inv(1 + t) % P, (y1 * y2 + x1 * x2) * inv(1 - t) % P)


def mul(k: int, pt: Point) -> Point:
    acc, base = IDENTITY, pt
    while k:
        if k & 1:
            acc = add(acc, base)
        base = add(base, base)
        k >>= 1
    return acc


def x_from_y(y: int, sign: int) -> int | None:
    """The x with the given parity solving the curve equation, or None if y is not on it."""
    u, v = (y * y - 1) % P, (D * y * y + 1) % P
    x = u * pow(v, 3, P) * pow(u * pow(v, 7, P), (P - 5) // 8, P) % P
    if (v * x * x - u) % P != 0:
        x = x * SQRT_M1 % P
    if (v * x * x - u) % P != 0:
        return None
    if x == 0 and sign:
        return None
    return x if x % 2 == sign else P - x


def encode(pt: Point) -> bytes:
    x, y = pt
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def decode(data: bytes) -> Point | None:
    """Canonical decoding (y < p); None for anything else."""
    n = int.from_bytes(data, "little")
    y, sign = n & ((1 << 255) - 1), n >> 255
    if y >= P:
        return None
    x = x_from_y(y, sign)
    return None if x is None else (x, y)


@functools.cache
def small_order_points() -> tuple[Point, ...]:
    """The 8 points of the torsion subgroup E[8], from [L]·Q of a point Q of full order."""
    y = 2
    while True:
        x = x_from_y(y, 0)
        if x is not None:
            t = mul(L, (x, y))
            if mul(4, t) != IDENTITY:  # t has order exactly 8: it generates E[8]
                pts = [mul(i, t) for i in range(8)]
                assert len(set(pts)) == 8 and all(mul(8, q) == IDENTITY for q in pts)
                return tuple(pts)
        y += 1
