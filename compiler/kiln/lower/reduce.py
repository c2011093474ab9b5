"""Reductions over any set of dims (sum, mean, amax, amin, any, all) and argmax."""

from __future__ import annotations

import numpy as np
import torch
import tosa_serializer as ts

from kiln.families import MIN_AS_MAX
from kiln.graph import Op, Value
from kiln.lower.lowerer import Lowerer, attr, channels_last, layout_axis, lowering, op_attr, same_quantization
from kiln.partition.support import reduced_dims
from kiln.vocabulary import BOOL_REDUCTIONS, INDEX_OPS

aten = torch.ops.aten


# ---- reductions over any set of dims -------------------------------------------------------------
# TOSA reduces one axis at a time (REDUCE_SUM/MAX/MIN keep it as 1). Vela 5.2.0 places each on
# Ethos-U55/U65/U85 along any axis of rank 1..5 for int8 and int16 (REDUCE_MAX/MIN) and int32
# (REDUCE_SUM), but not an int32 REDUCE_MAX on Ethos-U55 ("Non-passthrough operation (ReduceMax)
# could not run on NPU"): max and min run in the input's own type, which their output shares.
# Its estimates on ethos-u55-128 shape the graph: reducing the last axis costs REDUCE_MAX/MIN
# 3-5x more than reducing another one (1,572 against 531 cycles with the transpose below for
# [1, 4, 6, 10] over its last dim, 1,050,715 against 237,872 for [1, 512, 512]), and reducing a
# long axis in two steps less than in one (21,829 cycles for 4,096 values, 2,802 as 256 x 16),
# while REDUCE_SUM is cheapest along the last axis.
UNORDERED_REDUCTIONS = ("REDUCE_SUM", "REDUCE_ANY", "REDUCE_ALL")  # no NaN mode
MAX_MIN_SPLIT = 16  # a whole max/min over K values: K as (K / b, b), b a divisor of K up to this


def reduce_axes(lw: Lowerer, name: str, shape, axes, kind: str, dtype: str) -> tuple[str, list[int]]:
    """REDUCE_`kind` of `name` (of `shape`) along each of `axes` in turn; (result, its shape)."""
    shape = list(shape)
    for axis in axes:
        shape[axis] = 1
        out = lw.inter(shape, dtype)
        attribute = (
            op_attr(kind, axis)
            if kind in UNORDERED_REDUCTIONS
            else op_attr(kind, axis, ts.NanPropagationMode.PROPAGATE)
        )
        lw.emit(kind, [name], [out], attribute)
        name = out
    return name, list(shape)


def reduce_last_axis(lw: Lowerer, name: str, shape, kind: str, dtype: str) -> tuple[str, list[int]]:
    """REDUCE_MAX/MIN of `name` along its last axis, whose other axes are all kept: the M kept
    values of each of the K entries made rows (a transpose of [1, M, K], one NPU op) and reduced
    along that non-last axis; with nothing kept (M = 1), the K values reduced as (K / b, b)."""
    k, m = shape[-1], int(np.prod(shape[:-1], dtype=np.int64))
    if m > 1:
        rows = lw.to_layout(lw.reshape(name, [1, m, k], dtype), [1, m, k], dtype, (0, 2, 1))
        return reduce_axes(lw, rows, [1, k, m], [1], kind, dtype)
    b = next((b for b in range(min(MAX_MIN_SPLIT, k // 2), 1, -1) if k % b == 0), None)
    if b is None:
        return reduce_axes(lw, lw.reshape(name, [k], dtype), [k], [0], kind, dtype)
    return reduce_axes(lw, lw.reshape(name, [k // b, b], dtype), [k // b, b], [0, 1], kind, dtype)


def _bitwise_not(lw: Lowerer, name: str, shape) -> str:
    """~q = -1 - q of int8 `name`: one 8-bit TABLE, an order-reversing bijection of -128..127,
    so min(q) = ~max(~q) exactly. amin is lowered so where Vela 5.2.0 builds REDUCE_MIN as
    pivot - max(pivot - x) (kiln.families.MIN_AS_MAX), and when the result is reshaped onto other
    NHWC axes (NHWC [1, 1, 1, C] to [1, C, 1, 1]) its last SUB broadcasts the max's first
    element to every output (tests/simulator/test_npu_reduce_min.py pins it), while
    REDUCE_MAX so reshaped is right; Vela places TABLE as the lookup of the neighbouring
    operation."""
    out = lw.inter(shape, "int8")
    lw.emit(
        "TABLE", [name, lw.const((-1 - np.arange(-128, 128)).astype(np.int8), "int8", "table")], [out], attr("Table")
    )
    return out


def reduction(lw: Lowerer, op: Op, kind: str):
    """sum, mean, amax, amin, any or all of x over reduced_dims(op), with or without keepdim.

    In x's layout (channels last for a value so bound), each run of adjacent reduced axes and of
    adjacent kept ones is merged by a free RESHAPE (axes of size 1 dropped), then each merged
    reduced axis is reduced in turn. A sum or mean is widened to int32 without the zero point
    first, and one RESCALE after the last REDUCE_SUM requantizes it (x's scale over the
    output's, divided by the count for a mean: one rounding, as PT2E's float mean of the
    dequantized values then quantized). Max and min run in x's type, any and all in bool, each
    merged axis in turn. The result, the input
    with each reduced dim 1, is then reshaped to the output (through PyTorch's order unless it
    keeps its rank and so its layout)."""
    x, out = op.arg("self"), op.output
    name, is_nhwc = lw.bound(x, any_layout=True)
    shape = list(Lowerer.shape_of(x, is_nhwc))
    dims = reduced_dims(op)
    layout = channels_last(len(x.shape))
    axes = {layout.index(d) if is_nhwc else d for d in dims}
    groups: list[list] = []  # [size, reduced] per merged axis
    for axis, size in enumerate(shape):
        if size > 1:
            if groups and groups[-1][1] == (axis in axes):
                groups[-1][0] *= size
            else:
                groups.append([size, axis in axes])
    reduced = [i for i, (_, is_reduced) in enumerate(groups) if is_reduced]
    dtype = x.dtype
    summing = kind == "REDUCE_SUM"
    if reduced:
        if summing:
            name, dtype = lw.rescale(name, shape, x.dtype, "int32", 1.0, x.qparams.zero_point, 0), "int32"
        merged = [size for size, _ in groups]
        if merged != shape:
            name = lw.reshape(name, merged, dtype)
        flipped = kind == "REDUCE_MIN" and lw.family.has(MIN_AS_MAX)  # min(q) = ~max(~q), see _bitwise_not
        if flipped:
            name, kind = _bitwise_not(lw, name, merged), "REDUCE_MAX"
        if summing:
            name, shape = reduce_axes(lw, name, merged, reversed(reduced), kind, dtype)
        elif kind in ("REDUCE_ANY", "REDUCE_ALL"):
            name, shape = reduce_axes(lw, name, merged, reduced, kind, dtype)
        elif reduced[-1] == len(groups) - 1:  # the last axis last, after the others shrank the tensor
            name, shape = reduce_axes(lw, name, merged, reduced[:-1], kind, dtype)
            name, shape = reduce_last_axis(lw, name, shape, kind, dtype)
        else:
            name, shape = reduce_axes(lw, name, merged, reduced, kind, dtype)
        if flipped:
            name = _bitwise_not(lw, name, shape)
    if summing:
        count = int(np.prod([x.shape[d] for d in dims], dtype=np.int64)) if op.target is aten.mean.dim else 1
        scale = x.qparams.scale / (count * out.qparams.scale)
        in_zp = 0 if reduced else x.qparams.zero_point
        name = lw.rescale(name, shape, dtype, out.dtype, scale, in_zp, out.qparams.zero_point)
        dtype = out.dtype
    kept = [1 if d in dims else size for d, size in enumerate(x.shape)]  # torch's keepdim shape
    if is_nhwc:
        kept_nhwc = [kept[p] for p in layout]
        if shape != kept_nhwc:
            name = lw.reshape(name, kept_nhwc, dtype)
        shape = kept_nhwc
        if len(out.shape) == len(x.shape):  # keepdim: the result stays channels last
            lw.result(out, same_quantization(lw, name, shape, x, out) if not summing else name, True)
            return
        view = Value(out.name + "_kept", tuple(kept), dtype, out.qparams if summing else x.qparams)
        lw.bind(view, name, True)
        name = lw.torch_order(view)
        shape = kept
    if list(shape) != list(out.shape):
        name = lw.reshape(name, out.shape, dtype)
    lw.result(out, name if summing else same_quantization(lw, name, out.shape, x, out), False)


@lowering(aten.amax.default, aten.amin.default)
def _amax(lw: Lowerer, op: Op):
    """Max or min over any dims: the output shares the input's qparams (the quantizer's choice)."""
    reduction(lw, op, "REDUCE_MAX" if op.target is aten.amax.default else "REDUCE_MIN")


@lowering(*BOOL_REDUCTIONS)
def _any_all(lw: Lowerer, op: Op):
    """any or all of a bool tensor over any dims (REDUCE_ANY / REDUCE_ALL, Ethos-U85: a support rule)."""
    reduction(lw, op, "REDUCE_ANY" if op.target is aten.any.dims else "REDUCE_ALL")


@lowering(aten.sum.dim_IntList)
def _sum(lw: Lowerer, op: Op):
    """Sum over any dims: widened to int32 without the zero point, summed, requantized (one rounding)."""
    reduction(lw, op, "REDUCE_SUM")


@lowering(*INDEX_OPS)
def _argmax(lw: Lowerer, op: Op):
    """ARGMAX along one dim (a support rule) of x's integers, which order as its real values do:
    int32 indices of the first largest value, as PyTorch's. A 4-D value stored NHWC is read so
    along C; along another dim, in PyTorch's order."""
    x, out = op.arg("self"), op.output
    name, axis, nhwc = layout_axis(lw, x, op.arg("dim"))
    if nhwc and op.arg("dim") % 4 != 1:
        name, axis, nhwc = lw.torch_order(x), op.arg("dim") % 4, False
    shape = list(Lowerer.shape_of(x, nhwc))
    del shape[axis]
    indices = lw.inter(shape, "int32")
    lw.emit("ARGMAX", [name], [indices], attr("ArgMax", axis, ts.NanPropagationMode.PROPAGATE))
    lw.result(out, lw.reshape(indices, out.shape, "int32") if list(out.shape) != shape else indices, False)
