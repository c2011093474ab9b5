"""kiln.simulator.npu.arithmetic.rescale against its definition worked out on Python integers:
(x * multiplier + rounding term) >> shift, for scalar multipliers and shifts (the output stage's
global scales) and per-channel arrays, every rounding, inputs whose products fit int64 and
ones that do not; clamp against numpy's own clip."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.simulator.npu.arithmetic import clamp, rescale
from kiln.simulator.npu.registers import ROUND_FLOOR, ROUND_NATURAL, ROUND_TFL, ROUND_TRUNCATE

ROUNDINGS = (ROUND_TFL, ROUND_TRUNCATE, ROUND_NATURAL, ROUND_FLOOR)


def expected(x: int, multiplier: int, shift: int, rounding: int) -> int:
    product = x * multiplier
    if rounding == ROUND_FLOOR:
        return product >> shift
    if rounding == ROUND_TRUNCATE:
        return -(-product >> shift) if product < 0 else product >> shift
    half = 1 << (shift - 1) if shift > 0 else 0
    if rounding == ROUND_TFL and shift > 31:
        half += 1 << 30 if x >= 0 else -(1 << 30)
    return (product + half) >> shift


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("bits", [16, 40, 62])
def test_scalar_scales_give_the_definition(rounding, bits):
    rng = np.random.default_rng(bits * 10 + rounding)
    for shift in range(63):
        x = rng.integers(-(1 << bits), 1 << bits, size=(2, 3, 5), dtype=np.int64)
        multiplier = int(rng.integers(0, 1 << 31))
        got = rescale(x, multiplier, shift, rounding)
        want = [expected(v, multiplier, shift, rounding) for v in x.reshape(-1).tolist()]
        assert got.dtype == np.int64 and got.shape == x.shape
        assert got.reshape(-1).tolist() == [max(min(w, (1 << 63) - 1), -(1 << 63)) for w in want]


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_per_channel_scales_give_the_definition(rounding):
    rng = np.random.default_rng(rounding)
    x = rng.integers(-(1 << 20), 1 << 20, size=(3, 4, 6), dtype=np.int64)
    multiplier = rng.integers(0, 1 << 31, size=6)
    shift = rng.integers(0, 50, size=6)
    got = rescale(x, multiplier, shift, rounding)
    for index in np.ndindex(x.shape):
        c = index[-1]
        assert got[index] == expected(int(x[index]), int(multiplier[c]), int(shift[c]), rounding)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32])
def test_clamp_equals_numpys_clip(dtype):
    rng = np.random.default_rng(np.dtype(dtype).itemsize)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, size=(3, 7), dtype=dtype, endpoint=True)
    bounds = [(-5, 9), (0, 255), (-(1 << 31), (1 << 31) - 1), (-(1 << 47), (1 << 47) - 1), (3, -3)]
    for lo, hi in bounds + [(info.min, info.max)]:
        try:
            want = np.clip(x, lo, hi)
        except OverflowError:  # numpy refuses bounds the type cannot hold for some types
            with pytest.raises(OverflowError):
                clamp(x, lo, hi)
            continue
        got = clamp(x, lo, hi)
        assert got.dtype == want.dtype and np.array_equal(got, want), (lo, hi)
