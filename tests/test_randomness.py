"""anonml.randomness: one rule for turning a seed, random_state or rng into a Generator."""

from __future__ import annotations

import numpy as np
import pytest

from anonml.randomness import generator_from, resolve_rng


def test_an_int_seed_is_numpys_own_stream():
    # Seeded calls must reproduce what np.random.default_rng(seed) gave before the helper existed.
    for seed in (0, 7, 2**32 - 1, np.int64(12)):
        expected = np.random.default_rng(int(seed)).integers(0, 2**62, size=8)
        assert np.array_equal(generator_from(seed).integers(0, 2**62, size=8), expected)


def test_a_generator_passes_through_and_none_is_fresh_entropy():
    gen = np.random.default_rng(3)
    assert generator_from(gen) is gen and resolve_rng(gen) is gen
    a, b = generator_from(None), resolve_rng(None)
    # Two OS-seeded streams agree on a 62-bit draw with probability 2^-62.
    assert a.integers(0, 2**62) != b.integers(0, 2**62)


def test_a_legacy_random_state_gives_a_reproducible_generator():
    one = generator_from(np.random.RandomState(5)).integers(0, 2**62, size=4)
    two = generator_from(np.random.RandomState(5)).integers(0, 2**62, size=4)
    other = generator_from(np.random.RandomState(6)).integers(0, 2**62, size=4)
    assert np.array_equal(one, two) and not np.array_equal(one, other)


@pytest.mark.parametrize("bad", [1.5, "3", True, [1, 2]])
def test_anything_else_is_refused_naming_the_parameter(bad):
    with pytest.raises(TypeError, match="^seed must be None, an int"):
        generator_from(bad, name="seed")


def test_resolve_rng_refuses_an_int_seed():
    with pytest.raises(TypeError, match="^rng must be a numpy.random.Generator or None, got int"):
        resolve_rng(42)  # type: ignore[arg-type]
