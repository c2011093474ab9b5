"""Softmax and log_softmax along one dim."""

from __future__ import annotations

import math

import numpy as np
import tosa_serializer as ts

from kiln.families import FUSED_EXPS
from kiln.graph import Op, Value
from kiln.lower.lowerer import Lowerer, attr, layout_axis, lowering
from kiln.lower.reduce import reduce_last_axis
from kiln.vocabulary import LOG_SOFTMAX_OPS, SOFTMAX_OPS

# ---- softmax and log_softmax: exp in up to Q20, normalisation in 32 bits ------------------------
# With x int8, d = x - max(x) along the dim is an integer in [-255, 0], so d + 127 is an int8
# that indexes three 8-bit TABLEs exactly: bits 14-20, 7-13 and 0-6 of E = exp(scale * d) in
# Q(b), b = exp_bits(row length) (Vela runs a 16-bit TABLE on Ethos-U55 as three LUT passes,
# about 2,200 cycles each on ethos-u55-128; an 8-bit one as one). The row sum S of those is
# exact in int32 (b keeps it below 2^31). CLZ normalises it: S << (clz(S) - 1) = m * 2^31 with
# m in [0.5, 1). Softmax multiplies e by 1/m from three Newton-Raphson steps (relative error
# about 2^-29) shifted by the row's clz, the MUL itself shifting by b, so the reciprocal keeps
# at least 29 - log2(row length) bits; log_softmax subtracts ln m (an interpolated 16-bit table,
# about 2^-20) and the row's octaves of ln 2 from scale * d. Each result is requantized once:
# within half a step and about 2^-20 of the exact value, so it equals PT2E's reference (float
# softmax of the dequantized input) but where that lies within about 2^-20 of a rounding midpoint.
EXP_BITS = 20  # at most Q20: 1.0 = 64 << 14, so the high 7 bits fit int8
EXP_TABLE_BITS = 7  # the bits of E each int8 table holds
EXP_INDEX_OFFSET = 127  # the table index is d + 127
RECIPROCAL_BITS = 29  # 1/m in (1, 2] in Q29
NEWTON_STEPS = 3  # from 1/17 relative error: 2^-8.2, 2^-16.3, below Q29's resolution
LN_BITS = 15  # ln m table entries in Q15 (ln 0.5 = -22713)
LOG_FRACTION_BITS = 16  # log_softmax's int32 fixed point, where it fits

# ---- softmax of int16 x: one interpolated 16-bit exp TABLE --------------------------------------
# d = x - max(x) is in [-65534, 0]. t = (d + offset) 2^k, saturated to int16, reads a 16-bit TABLE
# (513 entries, linear interpolation between them, result in 2^-7 of an entry): k is the largest
# power of two that still maps EXP16_SPAN of scale * d into t's 65536 values, so t is exact and the
# table's entries sit at known exponents; what t cuts off lies below exp(-EXP16_SPAN) = 2^-16.
# Entries are exp scaled so the largest is 32767 (a common factor: the row's normalisation cancels
# it), less half linear interpolation's largest excess in their segment. Then as at 8 bits, with e
# at most 2^15 and the reciprocal shifted to keep EXP16_KEPT_BITS for the MUL's own shift.
# Interpolating exp over segments of up to 2 * EXP16_SPAN / 512 in scale * d leaves up to about
# 4 16-bit steps of a probability near 1 (kiln's bound for 16-bit softmax).
EXP16_SPAN = 16 * math.log(2)
EXP16_KEPT_BITS = 14  # e >= 2^14 for the row's largest value: the reciprocal keeps that many bits more
TABLE16_STEP = 128  # t between two entries of a 16-bit TABLE


def exp_bits(length: int) -> int:
    """The fraction bits of a softmax's exps over rows of `length`: EXP_BITS where the row sum of
    exps of at most 1.0 fits int32 (length < 2^(31 - b))."""
    return min(EXP_BITS, 31 - length.bit_length())


def softmax_exp_tables(scale: float, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(high, middle, low) int8 tables: at the position of d + 127 (d in [-255, 0]), E = exp(scale * d)
    in Q(bits) as (high << 14) + (middle << 7) + low."""
    d = np.arange(256, dtype=np.float64) - 255
    e = np.round(np.exp(scale * d) * 2.0**bits).astype(np.int64)
    mask = (1 << EXP_TABLE_BITS) - 1
    return tuple((e >> (k * EXP_TABLE_BITS) & mask).astype(np.int8) for k in (2, 1, 0))


def exp16_index(scale: float) -> tuple[int, int]:
    """(k, offset): a 16-bit softmax's table index is t = (d + offset) 2^k (see above)."""
    span = min(EXP16_SPAN / scale, 65534.0)
    k = max(0, math.floor(math.log2(65535 / span)))
    return k, 32767 >> k


def softmax_exp16_table(scale: float) -> np.ndarray:
    """Entry j of the 16-bit TABLE read at t = 128 j - 32768: exp(scale * d) at d = t / 2^k - offset,
    times (1 - h^2 / 16) for segments of h in scale * d (the interpolation's excess is at most
    h^2 / 8 of the value), scaled so the largest entry is 32767."""
    k, offset = exp16_index(scale)
    t = np.arange(513, dtype=np.float64) * TABLE16_STEP - 32768
    h = scale * TABLE16_STEP / 2**k
    e = np.exp(scale * (t / 2**k - offset)) * (1 - h * h / 16)
    return np.round(e * 32767 / e.max()).astype(np.int16)


def ln_table() -> np.ndarray:
    """Entry j of a 16-bit TABLE read at t = (m - 0.75) * 2^17, i.e. m = 0.5 + j / 1024: ln m in Q15."""
    return np.round(np.log(0.5 + np.arange(513, dtype=np.float64) / 1024) * 2.0**LN_BITS).astype(np.int16)


def int32_binary(lw: Lowerer, kind: str, a: str, b: str, shape, shift: int | None = None) -> str:
    """The int32 result of elementwise `kind` of `a` and `b` (a MUL by 2^-shift)."""
    result = lw.inter(shape, "int32")
    if kind == "MUL":
        lw.emit(kind, [a, b, lw.const(np.array([shift]), "int8", "shift")], [result], attr("Mul"))
    elif kind == "ARITHMETIC_RIGHT_SHIFT":
        lw.emit(kind, [a, b], [result], attr("ArithmeticRightShift", True))
    else:
        lw.emit(kind, [a, b], [result], attr("".join(w.capitalize() for w in kind.split("_"))))
    return result


def table_of(lw: Lowerer, values: str, entries: np.ndarray, shape, dtype: str) -> str:
    result = lw.inter(shape, dtype)
    lw.emit("TABLE", [values, lw.const(entries, entries.dtype.name, "table")], [result], attr("Table"))
    return result


def int32_scalar(lw: Lowerer, rank: int, value: int) -> str:
    """An int32 constant of one element that broadcasts to any shape of `rank`."""
    return lw.const(np.full([1] * rank, value), "int32", "scalar")


@lowering(*SOFTMAX_OPS, *LOG_SOFTMAX_OPS)
def _softmax(lw: Lowerer, op: Op):
    """Softmax or log_softmax of int8 `x`, or softmax of int16 `x`, along `dim` (support rules:
    those types, at most 65535 values)."""
    x, out = op.inputs[0], op.output
    name, axis, is_nhwc = layout_axis(lw, x, op.arg("dim"))
    shape = Lowerer.shape_of(x, is_nhwc)
    row = list(shape)
    row[axis] = 1
    if x.dtype == "int16":
        d, e, kept = None, _exps16(lw, x, name, shape, row, axis), EXP16_KEPT_BITS
    else:
        kept = exp_bits(shape[axis])
        d, e = _exps(lw, x, name, shape, row, axis, kept)
    total = lw.inter(row, "int32")
    lw.emit("REDUCE_SUM", [e], [total], attr("ReduceSum", axis))
    clz = lw.inter(row, "int32")
    lw.emit("CLZ", [total], [clz], attr("Clz"))
    normalised = int32_binary(
        lw, "LOGICAL_LEFT_SHIFT", total, int32_binary(lw, "SUB", clz, int32_scalar(lw, len(row), 1), row), row
    )  # m * 2^31
    if op.target in LOG_SOFTMAX_OPS:
        result, unit = _log_softmax(lw, x, d, shape, row, normalised, clz, kept)
    else:
        inverse = _reciprocal(lw, normalised, clz, row, kept)
        product = int32_binary(lw, "MUL", e, inverse, shape, kept)  # Vela folds no RESCALE into a shifting MUL
        result, unit = int32_binary(lw, "MUL", product, lw.int32_one(len(shape)), shape, 0), 2.0**-30
    lw.result(
        out, lw.rescale(result, shape, "int32", out.dtype, unit / out.qparams.scale, 0, out.qparams.zero_point), is_nhwc
    )


def _exps(lw: Lowerer, x: Value, name: str, shape, row, axis: int, bits: int) -> tuple[str, str]:
    """(d, e): d = x - max(x) along `axis` and e = exp(scale d) in Q(bits) (at most 2^bits), both int32."""
    if axis == len(shape) - 1:  # as amax's: kwt on ethos-u85-256 162,229 -> 128,647 NPU cycles
        top = lw.reshape(reduce_last_axis(lw, name, shape, "REDUCE_MAX", x.dtype)[0], row, x.dtype)
    else:
        top = lw.inter(row, x.dtype)
        lw.emit("REDUCE_MAX", [name], [top], attr("ReduceMax", axis, ts.NanPropagationMode.PROPAGATE))

    def difference() -> str:  # TOSA subtracts int32 only
        return int32_binary(
            lw,
            "SUB",
            lw.rescale(name, shape, x.dtype, "int32", 1.0),
            lw.rescale(top, row, x.dtype, "int32", 1.0),
            shape,
        )

    def index(d: str) -> str:
        return lw.rescale(d, shape, "int32", "int8", 1.0, 0, EXP_INDEX_OFFSET)

    fused = lw.choose(FUSED_EXPS)
    d = difference()
    first = index(d)
    e = None
    for k, entries in zip((2, 1, 0), softmax_exp_tables(x.qparams.scale, bits)):
        part = table_of(lw, index(difference()) if fused and e is not None else first, entries, shape, "int8")
        part = lw.rescale(part, shape, "int8", "int32", float(1 << (k * EXP_TABLE_BITS)))
        e = part if e is None else int32_binary(lw, "ADD", e, part, shape)
    return d, e


def _exps16(lw: Lowerer, x: Value, name: str, shape, row, axis: int) -> str:
    """e: exp(scale (x - max(x))) times 32767 / exp of the table's top (at most 2^15) as int32, from
    int16 `x`: max, (x - (max - offset)) 2^k saturated to int16, the exp TABLE, its 2^-7 units dropped."""
    top = lw.inter(row, x.dtype)
    lw.emit("REDUCE_MAX", [name], [top], attr("ReduceMax", axis, ts.NanPropagationMode.PROPAGATE))
    k, offset = exp16_index(x.qparams.scale)
    base = int32_binary(lw, "SUB", lw.rescale(top, row, x.dtype, "int32", 1.0), int32_scalar(lw, len(row), offset), row)
    d = int32_binary(lw, "SUB", lw.rescale(name, shape, x.dtype, "int32", 1.0), base, shape)
    t = lw.rescale(d, shape, "int32", "int16", float(2**k))
    interpolated = table_of(lw, t, softmax_exp16_table(x.qparams.scale), shape, "int32")
    return lw.rescale(interpolated, shape, "int32", "int32", 2.0**-7)


def _log_softmax(lw: Lowerer, x: Value, d: str, shape, row, normalised: str, clz: str, bits: int) -> tuple[str, float]:
    """(scale d - ln(sum), its unit): with the exps in Q(bits), ln(sum in reals) = ln m + (32 - bits - clz)
    ln 2, in 2^-f units."""
    rank = len(row)
    f = min(LOG_FRACTION_BITS, 30 - math.ceil(math.log2(x.qparams.scale * 255 + 32 * math.log(2) + 1)))
    t = lw.rescale(
        int32_binary(lw, "SUB", normalised, int32_scalar(lw, rank, 3 << 29), row), row, "int32", "int16", 2.0**-14
    )
    ln_m = lw.rescale(table_of(lw, t, ln_table(), row, "int32"), row, "int32", "int32", 2.0 ** (f - LN_BITS - 7))
    octaves = int32_binary(lw, "SUB", int32_scalar(lw, rank, 32 - bits), clz, row)
    ln_sum = int32_binary(
        lw,
        "ADD",
        ln_m,
        int32_binary(lw, "MUL", octaves, int32_scalar(lw, rank, round(math.log(2) * 2**f)), row, 0),
        row,
    )
    shifted = lw.rescale(d, shape, "int32", "int32", x.qparams.scale * 2.0**f)  # scale d in 2^-f
    return int32_binary(lw, "SUB", shifted, ln_sum, shape), 2.0**-f


def _reciprocal(lw: Lowerer, normalised: str, clz: str, row, kept: int) -> str:
    """1/m in Q29, shifted right by 31 - clz - `kept`: e times it, shifted right by `kept` (a MUL's
    own shift, its product in 64 bits), is e / sum * 2^30. e of the row's largest value is at least
    2^kept (8 bits: kept is the exps' fraction bits; 16 bits: EXP16_KEPT_BITS), so the shift is
    never negative and the shifted reciprocal keeps at least 29 - log2(row length) bits.

    x0 = 48/17 - 32/17 m (error at most 1/17), then x += x (1 - m x) NEWTON_STEPS times.
    e / sum = e (1/m) 2^(clz - 32)."""
    rank = len(row)
    one = 1 << RECIPROCAL_BITS
    slope = int32_binary(lw, "MUL", normalised, int32_scalar(lw, rank, round(32 / 17 * one)), row, 31)
    inverse = int32_binary(lw, "SUB", int32_scalar(lw, rank, round(48 / 17 * one)), slope, row)
    for _ in range(NEWTON_STEPS):
        error = int32_binary(
            lw, "SUB", int32_scalar(lw, rank, one), int32_binary(lw, "MUL", normalised, inverse, row, 31), row
        )
        inverse = int32_binary(lw, "ADD", inverse, int32_binary(lw, "MUL", inverse, error, row, RECIPROCAL_BITS), row)
    shift = int32_binary(lw, "SUB", int32_scalar(lw, rank, 31 - kept), clz, row)
    return int32_binary(lw, "ARITHMETIC_RIGHT_SHIFT", inverse, shift, row)
