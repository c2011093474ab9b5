"""The requantization parameters that round once (kiln.program.kernels.integer.requantize_multiplier)
against exact rational arithmetic."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from kiln.program.kernels import integer as I


@pytest.mark.parametrize("ratio", [0.75, 0.3, 0.0123, 1.23456e-3, 2.0**-11 * 1.1])
def test_requantize_multiplier_rounds_once(ratio):
    """requantize with requantize_multiplier's parameters is within half a step (and the
    multiplier's 2^-32 relative error) of x times the ratio, exactly; with quantize_multiplier's,
    a ratio below 1/2 rounds twice, and some x land a step further."""
    x = np.arange(-(2**20), 2**20, 101, dtype=np.int64)
    exact = [Fraction(int(v)) * Fraction(ratio) for v in x]

    def worst(multiplier, shift):
        got = I.requantize(x, multiplier, shift)
        return max(abs(Fraction(int(g)) - e) for g, e in zip(got, exact))

    multiplier, shift = I.requantize_multiplier(ratio)
    assert shift == 0 and 2**20 <= multiplier < 2**31
    assert worst(multiplier, shift) <= Fraction(1, 2) + Fraction(2**20, 2**32)
    if ratio < 0.5:
        assert worst(*I.quantize_multiplier(ratio)) > Fraction(1, 2) + Fraction(2**20, 2**32)


def test_requantize_multiplier_below_its_range_is_quantize_multipliers():
    for ratio in (2.0**-11 * 0.999, 1.0e-6, 1.0, 3.5):
        assert I.requantize_multiplier(ratio) == I.quantize_multiplier(ratio)
