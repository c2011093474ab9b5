"""Elementwise lowerings: add, sub, mul (and int32 products), clamps, the unary functions of one
TABLE, minimum and maximum, comparisons, logical ops and where."""

from __future__ import annotations

import numpy as np
import torch
import tosa_serializer as ts

from kiln.errors import LoweringError
from kiln.graph import QRANGE, Op, QParams, Value, clamp_range
from kiln.lower.lowerer import Lowerer, attr, channels_last, lowering, op_attr, quantize_real
from kiln.lower.softmax import int32_binary, int32_scalar, table_of
from kiln.partition import tables
from kiln.partition.rescale import product_factor
from kiln.vocabulary import COMPARISON_OPS, TABLE_OPS, Kind, of_kind

aten = torch.ops.aten


def scalar_constant(c: float, dtype: str) -> Value:
    """Scalar operand `c` as a constant of one element (it broadcasts to any shape) whose
    integer is -1, 0 or 1 and whose scale is |c|: its real value is c itself, so the op
    computes with the exact scalar, as PT2E's reference does, whatever the other range."""
    lo, hi = QRANGE[dtype]
    return Value(
        f"scalar_{c:g}", (), dtype, QParams(abs(c) or 1.0, 0, None, lo, hi), data=np.array(int(np.sign(c)), dtype)
    )


def _two_operands(op: Op) -> list[Value]:
    """The operands of a binary elementwise op, a scalar as a constant (scalar_constant)."""
    a, b = op.arg("self"), op.arg("other")
    return [v if isinstance(v, Value) else scalar_constant(float(v), op.output.dtype) for v in (a, b)]


@lowering(aten.add.Tensor, aten.sub.Tensor)
def _add_sub(lw: Lowerer, op: Op):
    """Both operands (a constant one as a TOSA constant) widened to int32 in units of
    2 * (the larger scale) / 2^shift, added or subtracted, requantized (one rounding).

    A scalar operand c is a one-element tensor of scale |c| (scalar_constant), which Vela 5.2.0
    folds with both RESCALEs into one elementwise ADD (its operand scales then are 2^(shift-1)
    for the larger and less for the other), where c is exact and the tensor operand is rounded
    to half a unit of 2|c| / 2^shift if |c| is the larger scale. Where that rounding could
    reach 1/32 of an output step (an int16 operand far finer than c: x - 133 with x's step
    0.01 came 2 steps off; x near 133 minus 133, 17), c is instead an int32 constant in the
    units of the tensor alone, rounded to 2^-shift of its step, which Vela runs as int32
    arithmetic in passes of their own (x + 1.5 on [1, 6, 16], ethos-u55-128: 504 cycles
    against 144)."""
    if op.arg("alpha") not in (None, 1):
        raise LoweringError(f"node {op.name}: alpha != 1 is not supported")
    out = op.output
    shift = 20 if out.dtype == "int8" else 15
    operands = [op.arg("self"), op.arg("other")]
    tensors = [v for v in operands if isinstance(v, Value)]
    top = 2 * max(v.qparams.scale for v in tensors)
    scalars = [float(c) for c in operands if not isinstance(c, Value)]
    units = round(scalars[0] / top * (1 << shift)) if scalars else 0
    if scalars:
        constant = scalar_constant(scalars[0], out.dtype).qparams.scale
        loss = constant / ((1 << shift) * out.qparams.scale)  # the tensor's rounding, in output steps
        if constant <= tensors[0].qparams.scale or loss <= 1 / 32 or abs(units) >= 1 << 31:
            tensors = _two_operands(op)
            top = 2 * max(v.qparams.scale for v in tensors)
            scalars = []
    names, shape, nhwc = _broadcast_operands(lw, tensors, out)
    wide = lw.widen(names, shape, tensors, [v.qparams.scale / top * (1 << shift) for v in tensors])
    if scalars:
        constant = lw.const(np.full([1] * len(shape[0]), units), "int32", "scalar")
        wide = [wide[0], constant] if isinstance(operands[0], Value) else [constant, wide[0]]
    acc_shape = Lowerer.shape_of(out, nhwc)
    acc = lw.inter(acc_shape, "int32")
    kind = "Add" if op.target is aten.add.Tensor else "Sub"
    lw.emit(kind.upper(), wide, [acc], attr(kind))
    result = lw.rescale(
        acc, acc_shape, "int32", out.dtype, top / ((1 << shift) * out.qparams.scale), 0, out.qparams.zero_point
    )
    lw.result(out, result, nhwc)


@lowering(aten.mul.Tensor)
def _mul(lw: Lowerer, op: Op):
    a, b = op.arg("self"), op.arg("other")
    out = op.output
    if out.dtype == "int32":
        _mul_int32(
            lw,
            [
                v if isinstance(v, Value) else Value(f"scalar_{v}", (), "int32", data=np.array(v, np.int32))
                for v in (a, b)
            ],
            out,
        )
        return
    if not isinstance(b, Value) and float(b) > 0:  # x * c, c > 0: a requantization
        name, is_nhwc = lw.bound(a, any_layout=True)
        scale = product_factor(a, b, out)
        result = lw.rescale(
            name,
            Lowerer.shape_of(out, is_nhwc),
            a.dtype,
            out.dtype,
            scale,
            a.qparams.zero_point,
            out.qparams.zero_point,
        )
        lw.result(out, result, is_nhwc)
        return
    a, b = _two_operands(op)  # x * c, c <= 0: a MUL by the constant -1 or 0 of scale |c|
    names, shapes, nhwc = _broadcast_operands(lw, [a, b], out)
    wide = lw.widen(names, shapes, [a, b], [1.0, 1.0])
    acc_shape = Lowerer.shape_of(out, nhwc)
    acc = lw.inter(acc_shape, "int32")
    lw.emit("MUL", wide + [lw.const(np.array([0]), "int8", "shift")], [acc], attr("Mul"))
    result = lw.rescale(
        acc,
        acc_shape,
        "int32",
        out.dtype,
        product_factor(a, b, out),
        0,
        out.qparams.zero_point,
    )
    lw.result(out, result, nhwc)


def _mul_int32(lw: Lowerer, operands: list[Value], out: Value):
    """a * b of int32 tensors modulo 2^32, as PyTorch computes it (the NPU's MUL saturates
    instead, and TOSA leaves int32 overflow unpredictable), in int32 steps none of which
    overflows: a = ah 2^16 + al with al in [0, 2^16), b = bh 2^16 + bl with bl in [-2^15, 2^15)
    (bh up to 2^15), so p = al bl, x = ah bl and y = al bh each fit int32, and
    a b = p + 2^16 (x + y) modulo 2^32 = 2^16 h + (p mod 2^16), where h = (p >> 16) + x + (y mod
    2^16) taken into [-2^15, 2^15): 28 elementwise ops on two tensors, fewer on constants
    (their limbs are computed here). Shifts are arithmetic right (floor) and left shifts of
    values whose result fits."""
    names, shapes, nhwc = _broadcast_operands(lw, operands, out)
    shape = dict(zip(names, map(tuple, shapes)))  # TOSA name -> its shape, for the broadcasts

    def const(value) -> str:
        data = np.array(value, np.int32)
        data = data.reshape((1,) * len(shapes[0])) if data.ndim == 0 else data
        name = lw.const(data, "int32", "int")
        shape[name] = data.shape
        return name

    def emit(kind: str, x: str, y: str, *attribute) -> str:
        shape_out = np.broadcast_shapes(shape[x], shape[y])
        result = lw.inter(list(shape_out), "int32")
        shape[result] = shape_out
        extra = [lw.const(np.array([0]), "int8", "shift")] if kind == "MUL" else []
        lw.emit(kind, [x, y, *extra], [result], op_attr(kind, *attribute))
        return result

    shr = lambda x, n: emit("ARITHMETIC_RIGHT_SHIFT", x, const(n), False)  # noqa: E731 (floor)
    shl = lambda x, n: emit("LOGICAL_LEFT_SHIFT", x, const(n))  # noqa: E731
    add, sub, mul = (lambda x, y, k=k: emit(k, x, y) for k in ("ADD", "SUB", "MUL"))
    low = lambda x, high: sub(x, shl(high, 16))  # noqa: E731 (x - high 2^16)

    def limbs(v: Value, name: str, signed_low: bool) -> tuple[str, str]:
        if v.is_constant:
            rank = len(shapes[0])
            data = v.data.astype(np.int64).reshape((1,) * (rank - v.data.ndim) + v.data.shape)
            data = data.transpose(channels_last(rank)) if nhwc else data  # as _broadcast_operands lays it out
            high = data >> 16
            if signed_low:
                high += (data - (high << 16)) >= 2**15
            return const(high), const(data - (high << 16))
        high = shr(name, 16)
        low_part = low(name, high)  # [0, 2^16)
        if not signed_low:
            return high, low_part
        carry = shr(add(low_part, const(2**15)), 16)  # 1 where the low limb is 2^15 or more
        return add(high, carry), sub(low_part, shl(carry, 16))

    (ah, al), (bh, bl) = limbs(operands[0], names[0], False), limbs(operands[1], names[1], True)
    p, x, y = mul(al, bl), mul(ah, bl), mul(al, bh)
    p_high = shr(p, 16)
    s = add(add(p_high, x), low(y, shr(y, 16)))
    h = sub(s, shl(shr(add(s, const(2**15)), 16), 16))
    lw.result(out, add(shl(h, 16), low(p, p_high)), nhwc)


def _broadcast_operands(lw: Lowerer, values: list[Value], out: Value):
    """The operands at the output's rank, with their TOSA shapes and the layout's flag: channels
    last where an operand of that rank is so stored (a convolution's result), else PyTorch's
    order (an elementwise op needs no layout of its own: on the program's NCHW inputs it would
    only add TRANSPOSEs); a constant one (a parameter, a buffer, a scalar) becomes a TOSA
    constant of that shape and layout."""
    rank = len(out.shape)
    tensors = [v for v in values if not v.is_constant]
    # A 4-D slice's op stays NHWC: in PyTorch's order Vela 5.2.0 misreads a strided slice of x
    # beside x[..., :3, :4] (tests/simulator/test_npu_strided_slice.py: 38 steps off).
    sliced = rank == 4 and any(lw.slice_source(lw.names[id(v)][0]) is not None for v in tensors)
    nhwc = rank >= 3 and (sliced or any(len(v.shape) == rank and lw.stored_channels_last(v) for v in tensors))
    names, shapes = [], []
    for v in values:
        shape = (1,) * (rank - len(v.shape)) + tuple(v.shape)
        if v.is_constant:
            data = v.data.reshape(shape)
            name = lw.const(data.transpose(channels_last(rank)) if nhwc else data, v.dtype)
        elif len(v.shape) == rank:
            name = lw.nhwc(v) if nhwc else lw.torch_order(v)
        else:
            name = lw.reshape(lw.torch_order(v), shape, v.dtype)
            if nhwc:
                view = Value(v.name + "_b", shape, v.dtype, v.qparams)
                lw.bind(view, name, False)
                name = lw.nhwc(view)
        names.append(name)
        shapes.append(Lowerer.shape_of(Value("", shape, v.dtype), nhwc))
    return names, shapes, nhwc


@lowering(aten.relu.default, aten.relu6.default, aten.hardtanh.default, aten.clamp.default)
def _clamp(lw: Lowerer, op: Op):
    x = op.inputs[0]
    out = op.output
    name, is_nhwc = lw.bound(x, any_layout=True)
    low, high = clamp_range(op.target, op.arg)
    shape = Lowerer.shape_of(out, is_nhwc)
    if out.qparams != x.qparams:
        name = lw.rescale(
            name,
            shape,
            x.dtype,
            out.dtype,
            x.qparams.scale / out.qparams.scale,
            x.qparams.zero_point,
            out.qparams.zero_point,
        )
    lo, hi = quantize_real(low, out.qparams, out.dtype), quantize_real(high, out.qparams, out.dtype)
    lw.result(out, lw.clamp(name, shape, out.dtype, lo, hi), is_nhwc)


# Unary functions a TABLE computes (kiln.partition.tables): exactly at 8 bits; at 16 bits where the
# interpolated table stays within a step (a support rule).
@lowering(*TABLE_OPS)
def _table(lw: Lowerer, op: Op):
    """A TABLE; neg of a value whose output shares its scale (min/max observers give -x the
    same range width) is a NEGATE, exact then: -(x - zp_in) + zp_out, saturated, which
    needs no table load (neg_2d on ethos-u65-256: 1,517 NPU cycles by TABLE); abs is
    |x - zp_in| requantized by one RESCALE (one rounding, half up where PT2E rounds half to
    even: within a step), which Vela folds into the ABS: fewer NPU cycles than a TABLE at every
    size measured (ethos-u55-128, [1, 32, 32, 64]: 32,768 against 66,816; [1, 4, 8]: 16
    against 440; ethos-u65-256 and -u85-256 alike)."""
    x, out = op.inputs[0], op.output
    name, is_nhwc = lw.bound(x, any_layout=True)
    shape = Lowerer.shape_of(out, is_nhwc)
    if op.target is aten.abs.default:
        wide = lw.rescale(name, shape, x.dtype, "int32", 1.0, x.qparams.zero_point, 0)
        magnitude = lw.inter(shape, "int32")
        lw.emit("ABS", [wide], [magnitude], attr("Abs"))
        result = lw.rescale(
            magnitude, shape, "int32", out.dtype, x.qparams.scale / out.qparams.scale, 0, out.qparams.zero_point
        )
        lw.result(out, result, is_nhwc)
        return
    if op.target is aten.neg.default and x.qparams.scale == out.qparams.scale and x.dtype == out.dtype:
        result = lw.inter(shape, out.dtype)
        lw.emit(
            "NEGATE",
            [name, lw.zp(x.qparams.zero_point, x.dtype), lw.zp(out.qparams.zero_point, out.dtype)],
            [result],
            attr("Negate"),
        )
        lw.result(out, result, is_nhwc)
        return
    if tables.normalised_rsqrt(op):
        lw.result(out, _rsqrt16(lw, name, shape, x, out), is_nhwc)
        return
    if x.dtype == "int8":
        result = lw.inter(shape, "int8")
        lw.emit("TABLE", [name, lw.const(tables.int8_table(op), "int8", "table")], [result], attr("Table"))
    else:  # int16 in, int32 out (the interpolation in 2^-7 units), back to int16
        wide = lw.inter(shape, "int32")
        lw.emit("TABLE", [name, lw.const(tables.int16_table(op), "int16", "table")], [wide], attr("Table"))
        result = lw.rescale(wide, shape, "int32", out.dtype, 2.0**-tables.INT16_STEP_BITS)
    lw.result(out, result, is_nhwc)


def _rsqrt16(lw: Lowerer, name: str, shape, x: Value, out: Value) -> str:
    """rsqrt of int16 `x` into int16 `out` by normalisation (kiln.partition.tables.rsqrt16_table):
    v = max(x, 1) (a value at or below 0 reads as one step) has clz c in [17, 31]; j = (c - 1) >> 1
    in [8, 15] makes m = v << 2j / 2^31 lie in [0.25, 1), exactly at TABLE index
    t = (v << 2j - 2^30) >> 15; then rsqrt(scale v) = rsqrt(scale) sqrt(2) rsqrt(m) 2^(j - 16),
    the table's result shifted left by j - 8 (exact) and requantized once."""
    rank = len(shape)
    v = lw.rescale(name, shape, x.dtype, "int32", 1.0)
    positive = lw.inter(shape, "int32")
    lw.emit("MAXIMUM", [v, int32_scalar(lw, rank, 1)], [positive], attr("Maximum", ts.NanPropagationMode.PROPAGATE))
    clz = lw.inter(shape, "int32")
    lw.emit("CLZ", [positive], [clz], attr("Clz"))
    j = lw.inter(shape, "int32")  # (c - 1) >> 1, truncating
    halve = [int32_binary(lw, "SUB", clz, int32_scalar(lw, rank, 1), shape), int32_scalar(lw, rank, 1)]
    lw.emit("ARITHMETIC_RIGHT_SHIFT", halve, [j], attr("ArithmeticRightShift", False))
    normalised = int32_binary(lw, "LOGICAL_LEFT_SHIFT", positive, int32_binary(lw, "ADD", j, j, shape), shape)
    index = lw.rescale(
        int32_binary(lw, "SUB", normalised, int32_scalar(lw, rank, 1 << 30), shape), shape, "int32", "int16", 2.0**-15
    )
    entries, unit = tables.rsqrt16_table()
    root = table_of(lw, index, entries, shape, "int32")
    shifted = int32_binary(
        lw, "LOGICAL_LEFT_SHIFT", root, int32_binary(lw, "SUB", j, int32_scalar(lw, rank, 8), shape), shape
    )
    scale = x.qparams.scale**-0.5 * 2**0.5 * unit * 2.0 ** (8 - tables.INT16_STEP_BITS - 16) / out.qparams.scale
    return lw.rescale(shifted, shape, "int32", out.dtype, scale)


@lowering(aten.minimum.default, aten.maximum.default)
def _min_max(lw: Lowerer, op: Op):
    """Elementwise MINIMUM/MAXIMUM of two tensors broadcast to the output, in int32 (TOSA's
    integer MINIMUM/MAXIMUM): each input widened without its zero point, in the output's scale,
    compared, then narrowed with the output's zero point. The quantizer gives both inputs the
    output's range, and then the integers compare as the reals do (exact); an input of another
    range is requantized to the output's scale (one rounding) as it is widened."""
    a, b, out = op.arg("self"), op.arg("other"), op.output
    names, shapes, nhwc = _broadcast_operands(lw, [a, b], out)
    wide = lw.widen(names, shapes, [a, b], [v.qparams.scale / out.qparams.scale for v in (a, b)])
    shape = Lowerer.shape_of(out, nhwc)
    acc = lw.inter(shape, "int32")
    kind = "Minimum" if op.target is aten.minimum.default else "Maximum"
    lw.emit(kind.upper(), wide, [acc], attr(kind, ts.NanPropagationMode.PROPAGATE))
    lw.result(out, lw.rescale(acc, shape, "int32", out.dtype, 1.0, 0, out.qparams.zero_point), nhwc)


# ---- comparisons and select (Ethos-U85) ------------------------------------------------------------
# op -> (TOSA comparison, operands swapped, result negated): lt/le are gt/ge of the swapped operands,
# ne the LOGICAL_NOT of eq.
COMPARISONS = {
    "eq": ("EQUAL", False, False),
    "ne": ("EQUAL", False, True),
    "gt": ("GREATER", False, False),
    "ge": ("GREATER_EQUAL", False, False),
    "lt": ("GREATER", True, False),
    "le": ("GREATER_EQUAL", True, False),
}
# An int8 operand minus its zero point (9 bits) times up to 2^20: TOSA's RESCALE takes a value below
# 2^(shift - 1) in magnitude, and 2^20 is multiplier 2^30 with shift 10. Two int16 operands share
# one scale (a support rule), so their multipliers are 1.
COMPARE_BITS = 20


def comparison_multipliers(scale_a: float, scale_b: float) -> tuple[int, int]:
    """Integers (Ma, Mb) with Ma / Mb as close to scale_a / scale_b as 2^COMPARE_BITS allows: the
    larger scale's is 2^COMPARE_BITS (1 and 1 for equal scales). (a - za) * Ma against (b - zb) * Mb
    then orders the real values as PT2E's float32 dequantizations do, up to the float32 rounding of
    the reference."""
    if scale_a == scale_b:
        return 1, 1
    big = max(scale_a, scale_b)
    return tuple(max(1, round(2**COMPARE_BITS * s / big)) for s in (scale_a, scale_b))


def scalar_threshold(op: Op, x: Value, other: float) -> np.ndarray:
    """Which values of int8 or int16 x the comparison with the number `other` holds for, as PT2E's
    reference computes it (x dequantized in float32, then compared): a bool per value of x's type,
    from the least."""
    dtype = getattr(torch, x.dtype)
    info = torch.iinfo(dtype)
    values = torch.arange(info.min, info.max + 1, dtype=torch.int32).to(dtype)
    qp = x.qparams
    real = torch.ops.quantized_decomposed.dequantize_per_tensor(
        values, qp.scale, qp.zero_point, qp.qmin, qp.qmax, dtype
    )
    return op.target(real, other).numpy()


@lowering(*COMPARISON_OPS)
def _compare(lw: Lowerer, op: Op):
    """An int8 or int16 comparison as one TOSA comparison of int32 operands (a support rule keeps it
    to Ethos-U85, where Vela runs it). Two tensors: each minus its zero point times its integer
    multiplier (comparison_multipliers), by an exact RESCALE. A number: x's values for which
    PT2E's reference comparison holds are worked out on the host (scalar_threshold) and the op
    compares x with the bound of that set: exact. A checked int32 index (kiln.graph's
    compare_checked_indices) with an int32 constant or an integer: compared as they are."""
    kind, swapped, negated = COMPARISONS[op.target.__name__.split(".")[0]]
    a, b, out = op.arg("self"), op.arg("other"), op.output
    if a.qparams is None:  # int32 operands, one a checked index (a support rule): compared as they are
        if not isinstance(b, Value):
            b = Value("other", (1,) * len(a.shape), "int32", data=np.full((1,) * len(a.shape), b, np.int32))
        wide, _, nhwc = _broadcast_operands(lw, [a, b], out)
    elif isinstance(b, Value):
        names, shapes, nhwc = _broadcast_operands(lw, [a, b], out)
        multipliers = comparison_multipliers(a.qparams.scale, b.qparams.scale)
        wide = [
            lw.rescale(n, sh, v.dtype, "int32", float(m), v.qparams.zero_point, 0)
            for n, sh, v, m in zip(names, shapes, (a, b), multipliers)
        ]
    else:
        kind, swapped, negated, bound = threshold_test(scalar_threshold(op, a, float(b)), QRANGE[a.dtype][0])
        names, shapes, nhwc = _broadcast_operands(lw, [a], out)
        names.append(lw.const(np.full([1] * len(shapes[0]), bound), a.dtype, "bound"))
        # both widened alike (Vela folds these RESCALEs into the comparison)
        wide = [lw.rescale(n, sh, a.dtype, "int32", 1.0) for n, sh in zip(names, [shapes[0], [1] * len(shapes[0])])]
    shape = Lowerer.shape_of(out, nhwc)
    result = lw.inter(shape, "bool")
    lw.emit(kind, wide[::-1] if swapped else wide, [result], op_attr(kind))
    if negated:
        flipped = lw.inter(shape, "bool")
        lw.emit("LOGICAL_NOT", [result], [flipped], attr("LogicalNot"))
        result = flipped
    lw.result(out, result, nhwc)


def threshold_test(holds: np.ndarray, least: int = -128) -> tuple[str, bool, bool, int]:
    """(TOSA comparison, operands swapped, negated, bound) testing x against the bound for the set
    `holds` of x's values (least, least + 1, ...): x >= bound for an upper run (every value: bound
    `least`), bound >= x for a lower run, x == bound for one value, its negation for all but one,
    and least > x for none."""
    values = np.arange(least, least + len(holds))
    if not holds.any():
        return "GREATER", True, False, least
    if holds[-1] and holds[holds.argmax() :].all():
        return "GREATER_EQUAL", False, False, int(values[holds][0])
    if holds[0] and not holds[holds.argmin() :].any():
        return "GREATER_EQUAL", True, False, int(values[holds][-1])
    if holds.sum() == 1:
        return "EQUAL", False, False, int(values[holds][0])
    if (~holds).sum() == 1:
        return "EQUAL", False, True, int(values[~holds][0])
    raise LoweringError("a comparison with a number that holds for no run of the tensor's values")


@lowering(*of_kind(Kind.LOGICAL))
def _logical(lw: Lowerer, op: Op):
    """LOGICAL_AND / LOGICAL_OR of two bool tensors broadcast to the output, LOGICAL_NOT of one
    (a support rule keeps them to bools)."""
    kind = {
        aten.logical_and.default: "LOGICAL_AND",
        aten.logical_or.default: "LOGICAL_OR",
        aten.logical_not.default: "LOGICAL_NOT",
    }[op.target]
    names, shapes, nhwc = _broadcast_operands(lw, op.inputs, op.output)
    result = lw.inter(Lowerer.shape_of(op.output, nhwc), "bool")
    lw.emit(kind, names, [result], op_attr(kind))
    lw.result(op.output, result, nhwc)


@lowering(aten.where.self)
def _where(lw: Lowerer, op: Op):
    """SELECT between the two operands, each requantized to the output's quantization where it
    differs (one rounding), broadcast to the output."""
    cond, a, b, out = op.arg("condition"), op.arg("self"), op.arg("other"), op.output
    names, shapes, nhwc = _broadcast_operands(lw, [cond, a, b], out)
    for i, v in ((1, a), (2, b)):
        if v.qparams != out.qparams:
            names[i] = lw.rescale(
                names[i],
                shapes[i],
                v.dtype,
                out.dtype,
                v.qparams.scale / out.qparams.scale,
                v.qparams.zero_point,
                out.qparams.zero_point,
            )
    shape = Lowerer.shape_of(out, nhwc)
    result = lw.inter(shape, out.dtype)
    lw.emit("SELECT", names, [result], attr("Select"))
    lw.result(out, result, nhwc)
