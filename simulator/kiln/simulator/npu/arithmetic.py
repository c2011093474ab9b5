"""Fixed-point arithmetic of the NPU's output stage, exact on numpy int64 arrays.

Contract: inputs are integer arrays (int64 or smaller); results are int64 arrays. Where
a product could leave the int64 range, the computation runs on Python integers (object
arrays), so every function here is exact for any 64-bit input.
"""

from __future__ import annotations

import functools

import numpy as np

from kiln.simulator.npu.registers import ROUND_FLOOR, ROUND_TFL, ROUND_TRUNCATE

_SAFE = 1 << 62


def _fits(x: np.ndarray, multiplier: np.ndarray) -> bool:
    """Whether |x * multiplier| + rounding stays inside int64."""
    if x.size == 0 or multiplier.size == 0:
        return True
    return int(np.max(np.abs(x))) * int(np.max(np.abs(multiplier))) < _SAFE


def rescale(x: np.ndarray, multiplier, shift, rounding: int, bound: int | None = None) -> np.ndarray:
    """(x * multiplier) >> shift with the NPU's rounding; multiplier and shift are scalars
    or arrays broadcasting against x (per channel: the last axis). `bound`: a bound of |x|
    known beforehand (from x's type), None: worked out from x.

    NATURAL: add 2^(shift-1), shift (round half up).
    TFL: as NATURAL, plus for shift > 31 a further +-2^30 by the sign of x (double
      rounding of TFLite's SaturatingRoundingDoublingHighMul followed by a rounding shift,
      as TOSA's apply_scale_32 with double_round).
    TRUNCATE: the exact product shifted toward zero.
    FLOOR: the exact product shifted toward minus infinity.
    """
    x = np.asarray(x, np.int64)
    scalar = isinstance(multiplier, int) and isinstance(shift, int) and 0 <= shift < 63
    if not (scalar and x.size and _products_fit(x, multiplier, bound)):
        scalar = False  # Python ints only where the products surely fit
        multiplier = np.asarray(multiplier, np.int64)
        shift = np.asarray(shift, np.int64)
        if not _fits(x, multiplier):
            return _rescale_object(x, multiplier, shift, rounding)
    product = x * multiplier
    if rounding == ROUND_FLOOR:
        return product >> shift
    if rounding == ROUND_TRUNCATE:
        magnitude = np.abs(product) >> shift
        return np.where(product < 0, -magnitude, magnitude)
    if scalar:  # product is a new array: rounded in place
        if shift > 0:
            product += 1 << (shift - 1)
        if rounding == ROUND_TFL and shift > 31:
            product += np.where(x >= 0, 1 << 30, -(1 << 30))
        product >>= shift
        return product
    half = np.where(shift > 0, np.left_shift(np.int64(1), np.maximum(shift - 1, 0)), 0)
    if rounding == ROUND_TFL:
        half = half + np.where(shift > 31, np.where(x >= 0, 1 << 30, -(1 << 30)), 0)
    return (product + half) >> shift


def _products_fit(x: np.ndarray, multiplier: int, bound: int | None) -> bool:
    """Whether |x * multiplier| stays below _SAFE: by `bound` (of |x|) when that tells, else by x."""
    if bound is not None and bound * abs(multiplier) < _SAFE:
        return True
    return _max_abs(x) * abs(multiplier) < _SAFE


def _max_abs(x: np.ndarray) -> int:
    """max(|x|) of a non-empty int64 array, as a Python int (no array of |x| made)."""
    return max(-int(x.min()), int(x.max()))


def _rescale_object(x, multiplier, shift, rounding):
    xb, mb, sb = np.broadcast_arrays(x, multiplier, shift)
    out = np.empty(xb.shape, np.int64)
    flat_out = out.reshape(-1)
    for i, (v, m, s) in enumerate(zip(xb.reshape(-1).tolist(), mb.reshape(-1).tolist(), sb.reshape(-1).tolist())):
        p = v * m
        if rounding == ROUND_FLOOR:
            r = p >> s
        elif rounding == ROUND_TRUNCATE:
            r = abs(p) >> s
            r = -r if p < 0 else r
        else:
            half = (1 << (s - 1)) if s > 0 else 0
            if rounding == ROUND_TFL and s > 31:
                half += (1 << 30) if v >= 0 else -(1 << 30)
            r = (p + half) >> s
        flat_out[i] = max(min(r, (1 << 63) - 1), -(1 << 63))
    return out


def saturate(x: np.ndarray, dtype) -> np.ndarray:
    return clamp(x, *_limits(np.dtype(dtype)))


def clamp(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """np.clip(x, lo, hi): the same values, without np.clip's own checks where x is an integer
    array whose type holds both bounds."""
    x = np.asarray(x)
    if x.dtype.kind in "iu":
        low, high = _limits(x.dtype)
        if low <= lo and hi <= high:
            bounded = np.maximum(x, lo)
            return np.minimum(bounded, hi, out=bounded)
    return np.clip(x, lo, hi)


@functools.cache
def _limits(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def wrap(x: np.ndarray, bits: int) -> np.ndarray:
    """Two's-complement wrap of int64 values to `bits` bits, sign-extended."""
    x = np.asarray(x, np.int64)
    if bits >= 64:
        return x
    mask = (1 << bits) - 1
    x = x & mask
    return np.where(x >= 1 << (bits - 1), x - (1 << bits), x)


def count_leading_zeros32(x: np.ndarray) -> np.ndarray:
    u = np.asarray(x, np.int64) & 0xFFFFFFFF
    result = np.full(u.shape, 32, np.int64)
    nonzero = u != 0
    # floor(log2) computed exactly with integer bit tests
    bits = np.zeros(u.shape, np.int64)
    v = u.copy()
    for step in (16, 8, 4, 2, 1):
        big = v >= (1 << step)
        bits = bits + np.where(big, step, 0)
        v = np.where(big, v >> step, v)
    result[nonzero] = 31 - bits[nonzero]
    return result


def reciprocal(count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(multiplier, shift) with multiplier / 2^shift ~ 1 / count, 2^30 <= multiplier < 2^31:
    k = bit length of (count - 1), multiplier = ((2^30 + 1) << k) // count, shift = 30 + k."""
    count = np.asarray(count, np.int64)
    k = 32 - count_leading_zeros32(count - 1)
    multiplier = (((1 << 30) + 1) << k) // count
    return multiplier, 30 + k
