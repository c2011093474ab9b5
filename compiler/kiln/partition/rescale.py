"""What TOSA RESCALE can represent: the one place both the support rules and the lowering ask.

A requantization by a real factor is a RESCALE by multiplier * 2**-shift, the multiplier of
`bits` bits (32, or 16 where the input is a 48-bit accumulator) and the shift at least
SHIFT_MIN: a factor of 2**(bits - 3) or more has no such pair. The factor of an op whose
result is a product (mul, convolutions, linear, matmul) is its operands' scales multiplied,
over the output's scale (product_factor), which calibration can make arbitrarily large.
"""

from __future__ import annotations

import math

import numpy as np

from kiln.graph import Value

SHIFT_MIN = 2  # TOSA RESCALE's shift is in 2..62
SHIFT_MAX = 62
# The accumulator of a MAC op (convolutions, matmul) per activation type (weights are int8).
ACCUMULATOR = {"int8": "int32", "int16": "int48"}


def multiplier_bits(in_dtype: str) -> int:
    """The width of RESCALE's multiplier for input dtype `in_dtype`: TOSA's 48-bit inputs take 16."""
    return 16 if in_dtype == "int48" else 32


def multiplier_and_shift(scale: float, bits: int = 32) -> tuple[int, int]:
    """(multiplier, shift) with multiplier * 2**-shift ~= scale, multiplier in
    [2**(bits-2), 2**(bits-1)) and shift at most SHIFT_MAX; the shift is below SHIFT_MIN
    where `scale` is too large for RESCALE (see fits)."""
    if scale <= 0:
        return 0, SHIFT_MIN
    mantissa, exponent = math.frexp(scale)  # scale = mantissa * 2**exponent, mantissa in [0.5, 1)
    multiplier = round(mantissa * (1 << (bits - 1)))
    shift = bits - 1 - exponent
    if multiplier == 1 << (bits - 1):
        multiplier //= 2
        shift -= 1
    if shift > SHIFT_MAX:
        multiplier >>= shift - SHIFT_MAX
        shift = SHIFT_MAX
    return multiplier, shift


def fits(scale, bits: int = 32) -> bool:
    """Whether RESCALE can multiply by `scale` (a float or per-channel array) with `bits`-bit multipliers."""
    return all(multiplier_and_shift(float(s), bits)[1] >= SHIFT_MIN for s in np.atleast_1d(scale))


def scale_of(operand) -> np.ndarray | float:
    """A quantized operand's scale (per channel: an array), or a Python scalar's magnitude."""
    if isinstance(operand, Value):
        return np.asarray(operand.qparams.scale, np.float64)
    return abs(float(operand))


def product_factor(a, b, out: Value):
    """The requantization factor of a product of `a` and `b` (Values or a Python scalar) into `out`."""
    return scale_of(a) * scale_of(b) / out.qparams.scale
