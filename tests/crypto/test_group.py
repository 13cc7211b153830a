"""edwards25519 group wrapper: validation of every received point and scalar, hashing."""

from __future__ import annotations

import nacl.bindings as b
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from anonml.crypto.exceptions import (
    CryptoError,
    CryptoTypeError,
    InvalidEncoding,
    InvalidPoint,
    InvalidScalar,
)
from anonml.crypto.group import (
    SUITE_ID,
    Element,
    L,
    Scalar,
    expand_message_xmd,
    hash_to_group,
    hash_to_scalar,
    montgomery_mul,
    random_scalar,
)
from tests.crypto import edwards_ref as ed
from tests.crypto.helpers import decoded_or_refused

RFC9380_DST = b"QUUX-V01-CS02-with-expander-SHA512-256"


@pytest.mark.parametrize(
    ("msg", "length", "expected"),
    [
        # RFC 9380 Appendix K.3, expand_message_xmd(SHA-512), published test vectors.
        (b"", 0x20, "6b9a7312411d92f921c6f68ca0b6380730a1a4d982c507211a90964c394179ba"),
        (b"abc", 0x20, "0da749f12fbe5483eb066a5f595055679b976e93abe9be6f0f6318bce7aca8dc"),
        (
            b"abc",
            0x80,
            "7f1dddd13c08b543f2e2037b14cefb255b44c83cc397c1786d975653e36a6b11"
            "bdd7732d8b38adb4a0edc26a0cef4bb45217135456e58fbca1703cd6032cb134"
            "7ee720b87972d63fbf232587043ed2901bce7f22610c0419751c065922b48843"
            "1851041310ad659e4b23520e1772ab29dcdeb2002222a363f0c2b1c972b3efe1",
        ),
    ],
)
def test_expand_message_xmd_matches_rfc9380_vectors(msg: bytes, length: int, expected: str) -> None:
    assert expand_message_xmd(msg, RFC9380_DST, length).hex() == expected


def test_expand_message_xmd_rejects_impossible_lengths() -> None:
    for n in (0, 255 * 64 + 1, 70000):
        with pytest.raises(CryptoError):
            expand_message_xmd(b"x", b"dst", n)
    with pytest.raises(InvalidEncoding):
        expand_message_xmd(b"x", b"", 32)


def test_long_dst_is_hashed_as_rfc9380_5_3_3() -> None:
    import hashlib

    long_dst = b"D" * 300
    short = hashlib.sha512(b"H2C-OVERSIZE-DST-" + long_dst).digest()
    assert expand_message_xmd(b"m", long_dst, 64) == expand_message_xmd(b"m", short, 64)


def test_hash_to_group_is_sum_of_two_elligator_maps_in_the_subgroup() -> None:
    dst = b"HashToGroup-test-" + SUITE_ID
    uniform = expand_message_xmd(b"input", dst, 64)
    expected = b.crypto_core_ed25519_add(
        b.crypto_core_ed25519_from_uniform(uniform[:32]),
        b.crypto_core_ed25519_from_uniform(uniform[32:]),
    )
    element = hash_to_group(b"input", dst)
    assert bytes(element) == expected
    # Independent check with the reference arithmetic: L·P is the identity.
    pt = ed.decode(bytes(element))
    assert pt is not None and ed.mul(L, pt) == ed.IDENTITY
    assert hash_to_group(b"input", dst) == element
    assert hash_to_group(b"input2", dst) != element
    assert hash_to_group(b"input", dst + b"x") != element


def test_hash_to_scalar_reduces_64_bytes_mod_l() -> None:
    dst = b"HashToScalar-test"
    wide = expand_message_xmd(b"m", dst, 64)
    assert int.from_bytes(bytes(hash_to_scalar(b"m", dst)), "little") == int.from_bytes(wide, "little") % L


def test_random_scalar_is_canonical_nonzero_and_seeded() -> None:
    values = [random_scalar(np.random.default_rng(7)) for _ in range(2)]
    assert values[0] == values[1]  # same seed, same scalar
    for k in (random_scalar(np.random.default_rng(i)) for i in range(50)):
        assert 0 < int.from_bytes(bytes(k), "little") < L


def test_scalar_arithmetic_matches_integers() -> None:
    rng = np.random.default_rng(1)
    a, c = random_scalar(rng), random_scalar(rng)
    ia, ic = (int.from_bytes(bytes(s), "little") for s in (a, c))
    assert int.from_bytes(bytes(a + c), "little") == (ia + ic) % L
    assert int.from_bytes(bytes(a - c), "little") == (ia - ic) % L
    assert int.from_bytes(bytes(a * c), "little") == ia * ic % L
    assert int.from_bytes(bytes(a.invert()), "little") == pow(ia, -1, L)
    assert (a - a).is_zero()
    with pytest.raises(InvalidScalar):
        (a - a).invert()


@pytest.mark.parametrize("value", [L, L + 1, 2**256 - 1, 2**255])
def test_scalars_at_or_above_l_are_rejected(value: int) -> None:
    with pytest.raises(InvalidScalar):
        Scalar.from_bytes(value.to_bytes(32, "little"))


def test_zero_scalar_is_rejected_unless_allowed() -> None:
    with pytest.raises(InvalidScalar):
        Scalar.from_bytes(bytes(32))
    assert Scalar.from_bytes(bytes(32), allow_zero=True).is_zero()
    assert int.from_bytes(bytes(Scalar.from_bytes((L - 1).to_bytes(32, "little"))), "little") == L - 1


def test_wrong_types_and_lengths_raise_typed_errors() -> None:
    with pytest.raises(CryptoTypeError):
        Element.from_bytes("00" * 32)  # type: ignore[arg-type]
    with pytest.raises(InvalidEncoding):
        Element.from_bytes(bytes(31))
    with pytest.raises(InvalidEncoding):
        Scalar.from_bytes(bytes(33))


def test_valid_element_round_trips() -> None:
    P = Element.base_mul(random_scalar(np.random.default_rng(3)))
    assert Element.from_bytes(bytes(P)) == P
    assert Element.from_bytes(bytes(Element.generator())) == Element.generator()


def test_identity_is_rejected() -> None:
    with pytest.raises(InvalidPoint):
        Element.from_bytes(ed.encode(ed.IDENTITY))


@pytest.mark.parametrize("index", range(8))
def test_each_of_the_eight_small_order_points_is_rejected(index: int) -> None:
    point = ed.small_order_points()[index]
    assert ed.on_curve(point) and ed.mul(8, point) == ed.IDENTITY
    with pytest.raises(InvalidPoint):
        Element.from_bytes(ed.encode(point))


def test_small_order_point_list_is_the_known_torsion_subgroup() -> None:
    encodings = {ed.encode(p) for p in ed.small_order_points()}
    assert len(encodings) == 8
    assert ed.encode((0, ed.P - 1)) in encodings  # (0, -1), order 2
    assert ed.encode(ed.IDENTITY) in encodings


def test_p_plus_order_two_point_is_rejected_cve_2025_69277() -> None:
    """P + (0, -1) passes libsodium's old subgroup check; 1.6.2 (and we) must reject it."""
    for seed in range(5):
        P = hash_to_group(seed.to_bytes(2, "big"), b"cve-test")
        pt = ed.decode(bytes(P))
        assert pt is not None
        bad = ed.encode(ed.add(pt, (0, ed.P - 1)))
        assert bad == b.crypto_core_ed25519_add(bytes(P), ed.encode((0, ed.P - 1)))
        assert ed.on_curve(ed.decode(bad))  # on the curve, just not in the subgroup
        with pytest.raises(InvalidPoint):
            Element.from_bytes(bad)


def test_p_plus_any_torsion_point_is_rejected() -> None:
    pt = ed.decode(bytes(hash_to_group(b"torsion", b"test")))
    for t in ed.small_order_points()[1:]:
        with pytest.raises(InvalidPoint):
            Element.from_bytes(ed.encode(ed.add(pt, t)))


def test_non_canonical_encodings_are_rejected() -> None:
    bad = []
    for y in range(19):  # y + p < 2^255 still fits: the non-canonical range
        for sign in (0, 1):
            bad.append(((y + ed.P) | (sign << 255)).to_bytes(32, "little"))
    bad.append(ed.encode(ed.IDENTITY)[:31] + b"\x80")  # "negative zero" x for (0, 1)
    bad.append(((ed.P - 1) | (1 << 255)).to_bytes(32, "little"))  # same for (0, -1)
    for enc in bad:
        assert ed.decode(enc) is None or ed.decode(enc) in ed.small_order_points()
        with pytest.raises(InvalidPoint):
            Element.from_bytes(enc)


def test_sign_flipped_valid_point_is_the_negation() -> None:
    P = hash_to_group(b"neg", b"test")
    flipped = bytes(P)[:31] + bytes([bytes(P)[31] ^ 0x80])
    # Flipping the sign bit of a valid element gives -P, still valid: the encoding is canonical.
    neg = Element.from_bytes(flipped)
    assert neg == P * Scalar.from_int(L - 1)
    with pytest.raises(InvalidPoint):
        P + neg  # P + (-P) is the identity


def test_operations_never_yield_the_identity() -> None:
    P = hash_to_group(b"op", b"test")
    with pytest.raises(InvalidPoint):
        P - P
    with pytest.raises(InvalidPoint):
        P * Scalar.from_int(L)  # = 0
    with pytest.raises(InvalidPoint):
        Element.base_mul(Scalar.from_int(0))


@given(st.binary(min_size=32, max_size=32))
def test_random_bytes_either_decode_to_a_subgroup_element_or_raise_invalid_point(data: bytes) -> None:
    element = decoded_or_refused(Element.from_bytes, data, InvalidPoint)
    if element is not None:
        pt = ed.decode(bytes(element))
        assert pt is not None and ed.mul(L, pt) == ed.IDENTITY


@given(st.binary(min_size=0, max_size=40))
def test_random_bytes_as_scalar_raise_only_typed_errors(data: bytes) -> None:
    k = decoded_or_refused(Scalar.from_bytes, data, InvalidEncoding)
    assert k is None or 0 < int.from_bytes(bytes(k), "little") < L


def test_public_constructors_validate_like_from_bytes() -> None:
    """A bad point or scalar never becomes an object, whichever constructor is used."""
    with pytest.raises(InvalidPoint):
        Element(ed.encode((0, ed.P - 1)))
    with pytest.raises(InvalidScalar):
        Scalar(L.to_bytes(32, "little"))
    with pytest.raises(InvalidScalar):
        Scalar(bytes(32))
    P = hash_to_group(b"ctor", b"test")
    assert Element(bytes(P)) == P


def test_to_montgomery_is_the_rfc7748_birational_map() -> None:
    # The base point B maps to u = 9, the curve25519 base point (RFC 7748 §4.1).
    assert int.from_bytes(Element.generator().to_montgomery(), "little") == 9
    # X25519 base multiplication is u([clamp(s)]B): compare with the Edwards side.
    for seed in range(5):
        secret = np.random.default_rng(seed).bytes(32)
        clamped = int.from_bytes(secret, "little") & ~7 & ((1 << 255) - 1) | (1 << 254)
        edwards = Element.base_mul(Scalar.from_int(clamped))
        assert edwards.to_montgomery() == b.crypto_scalarmult_base(secret)


@pytest.mark.parametrize("seed", range(12))
def test_montgomery_mul_equals_the_edwards_product(seed: int) -> None:
    rng = np.random.default_rng(seed)
    P = hash_to_group(rng.bytes(16), b"test")
    k = random_scalar(rng)
    assert montgomery_mul(k, P) == (P * k).to_montgomery()
    assert montgomery_mul(-k, P) == montgomery_mul(k, P)  # u identifies k·P up to sign


def test_montgomery_mul_falls_back_when_no_clamping_proof_scalar_exists() -> None:
    from anonml.crypto.group import _x25519_scalar

    c = 2**252 + 12345  # in [2^252, L): X25519 clamping would clear its top bits
    assert c < L and L - c < c
    k = Scalar.from_int(8 * c)
    assert _x25519_scalar(k) is None
    P = hash_to_group(b"fallback", b"test")
    assert montgomery_mul(k, P) == (P * k).to_montgomery()
    # Both branches of the sign choice (c >= L/2 and c < L/2) give clamping-proof scalars.
    for c in (L // 2 + 7, L // 4):
        s = _x25519_scalar(Scalar.from_int(8 * c))
        assert s is not None and int.from_bytes(s, "little") >> 254 == 1
        assert int.from_bytes(s, "little") % 8 == 0


def _reference_x25519_scalar(k: int) -> bytes | None:
    """The clamping-proof scalar by plain integer arithmetic (what the libsodium version must equal)."""
    c = k * pow(8, -1, L) % L
    c = max(c, L - c)
    return None if c >= 1 << 252 else (8 * c).to_bytes(32, "little")


def test_the_clamping_proof_scalar_matches_integer_arithmetic_at_the_sign_boundary() -> None:
    """The sign is picked from the parity of 2·c1 mod L, without integers: check it where it flips."""
    from anonml.crypto.group import _x25519_scalar

    rng = np.random.default_rng(41)
    cs = [(L - 1) // 2, (L + 1) // 2, (L + 3) // 2, 1, L - 1, 2**251, 2**252 - 1, 2**252]
    cs += [int.from_bytes(rng.bytes(32), "little") % L for _ in range(300)]
    for c in cs:
        if c == 0:
            continue
        k = 8 * c % L
        assert _x25519_scalar(Scalar.from_int(k)) == _reference_x25519_scalar(k), c


def _rejected_encodings() -> list[bytes]:
    """Every kind of encoding :meth:`Element.from_bytes` must refuse."""
    pt = ed.decode(bytes(hash_to_group(b"reject", b"test")))
    bad = [ed.encode(p) for p in ed.small_order_points()]  # identity and small order
    bad += [ed.encode(ed.add(pt, t)) for t in ed.small_order_points()[1:]]  # torsion, incl. CVE-2025-69277
    bad += [((y + ed.P) | (sign << 255)).to_bytes(32, "little") for y in range(19) for sign in (0, 1)]
    bad += [bytes(32), b"\xff" * 32]
    return bad


def test_from_bytes_times_rejects_exactly_what_from_bytes_rejects() -> None:
    k = random_scalar(np.random.default_rng(40))
    for enc in _rejected_encodings():
        with pytest.raises(InvalidPoint):
            Element.from_bytes(enc)
        with pytest.raises(InvalidPoint, match="blinded element 3"):
            Element.from_bytes_times(enc, k, name="blinded element 3")
    with pytest.raises(InvalidScalar):
        Element.from_bytes_times(bytes(Element.generator()), Scalar.from_int(0))


@given(st.binary(min_size=32, max_size=32))
def test_from_bytes_times_validates_and_multiplies_like_two_calls(data: bytes) -> None:
    k = Scalar.from_int(0x1234567890ABCDEF)
    try:
        expected = Element.from_bytes(data)
    except InvalidPoint:
        with pytest.raises(InvalidPoint):
            Element.from_bytes_times(data, k)
        return
    P, kP = Element.from_bytes_times(data, k)
    assert P == expected and kP == expected * k


def test_random_ladder_scalar_acts_as_its_scalar_on_u() -> None:
    from anonml.crypto.group import ladder_u, random_ladder_scalar

    rng = np.random.default_rng(41)
    P = hash_to_group(b"ladder", b"test")
    for _ in range(40):
        r, a = random_ladder_scalar(rng)
        value = int.from_bytes(a, "little")
        assert value % 8 == 0 and value >> 254 == 1  # X25519 clamping leaves it as it is
        r_int = int.from_bytes(bytes(r), "little")
        assert (value - r_int) % L == 0 or (value + r_int) % L == 0  # a = ±r mod L
        assert ladder_u(a, P) == (P * r).to_montgomery()


def test_random_ladder_scalar_is_uniform_in_its_top_bits_and_sign() -> None:
    """r = ±8c: both signs appear, and the top bit of r is set about half the time, as for a uniform
    scalar below L (≈ 2^252): 4,000 draws, tolerance 4 standard errors (sd = sqrt(n/4) ≈ 32)."""
    from anonml.crypto.group import random_ladder_scalar

    rng = np.random.default_rng(42)
    n, top, negated = 4000, 0, 0
    for _ in range(n):
        r, a = random_ladder_scalar(rng)
        value = int.from_bytes(bytes(r), "little")
        top += value >= 1 << 251
        negated += value != int.from_bytes(a, "little") % L
    assert abs(top - n / 2) < 4 * 32
    assert abs(negated - n / 2) < 4 * 32
