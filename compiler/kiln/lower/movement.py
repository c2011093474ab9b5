"""Data movement: reshapes and views, permutes, cat, slice and select, expand, pad."""

from __future__ import annotations

import numpy as np
import torch

from kiln.families import CHANNELS_LAST_PAD_COPIES, FLAT_STRIDED_SLICES
from kiln.graph import Op, Value
from kiln.lower.lowerer import (
    NCHW_TO_NHWC,
    NHWC_TO_NCHW,
    Lowerer,
    attr,
    lowering,
    quantize_real,
    same_quantization,
    slice_of,
)
from kiln.partition.support import TENSOR_DIM_MAX

aten = torch.ops.aten


@lowering(
    aten.view.default,
    aten.reshape.default,
    aten.flatten.using_ints,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.squeeze.default,
    aten.unsqueeze.default,
    aten.clone.default,
    aten.alias.default,
)
def _reshape(lw: Lowerer, op: Op):
    """A RESHAPE (none for the same shape), then a RESCALE where the output's quantization is not
    the input's (a view written to a program's state, whose range is fixed: kiln.frontend.state)."""
    x, out = op.inputs[0], op.output
    name, is_nhwc = lw.names[id(x)]
    spatial = lambda shape: [d for d in shape[2:] if d != 1]  # noqa: E731
    if x.shape == out.shape:
        pass
    elif (
        is_nhwc and len(out.shape) in (3, 4) and out.shape[:2] == x.shape[:2] and spatial(out.shape) == spatial(x.shape)
    ):
        # only unit spatial dims come or go (a Conv1d's squeeze and unsqueeze): channels last stays, for free
        name = lw.reshape(name, Lowerer.shape_of(out, True), x.dtype)
    else:
        name, is_nhwc = lw.reshape(lw.torch_order(x), out.shape, x.dtype), False
    lw.bind(out, same_quantization(lw, name, Lowerer.shape_of(out, is_nhwc), x, out), is_nhwc)


@lowering(aten.permute.default, aten.transpose.int)
def _permute(lw: Lowerer, op: Op):
    x, out = op.inputs[0], op.output
    rank = len(x.shape)
    if op.target is aten.permute.default:
        perm = [d % rank for d in op.arg("dims")]
    else:
        perm = list(range(rank))
        d0, d1 = op.arg("dim0") % rank, op.arg("dim1") % rank
        perm[d0], perm[d1] = perm[d1], perm[d0]
    name, is_nhwc = lw.bound(x)
    if is_nhwc:  # compose with NHWC -> NCHW so one TRANSPOSE does both
        perm = [NHWC_TO_NCHW[p] for p in perm]
        shape = Lowerer.shape_of(x, True)
    else:
        shape = x.shape
    permuted = lw.to_layout(name, shape, x.dtype, perm)
    lw.bind(out, same_quantization(lw, permuted, out.shape, x, out), False)


@lowering(aten.cat.default)
def _cat(lw: Lowerer, op: Op):
    """One CONCAT of rank-4 values channels last, or in PyTorch's order when no operand is
    stored channels last and the axis is not the last (a stack of 3-D values along dim 1 then
    needs no transposes; along the last dim Vela writes one channel at a time, slower than
    through channels last: stack of [1, 6, 8] along -1 on ethos-u55-128, 996 cycles against
    662); each operand requantized to the output's quantization where it differs."""
    tensors, out = op.arg("tensors"), op.output
    rank = len(out.shape)
    axis = op.arg("dim") % rank
    nhwc = rank == 4 and (axis == 3 or any(lw.stored_channels_last(t) for t in tensors))
    if nhwc:
        names = [lw.nhwc(t) for t in tensors]
        axis = NCHW_TO_NHWC.index(axis)
    else:
        names = [lw.torch_order(t) for t in tensors]
    names = [
        n
        if t.qparams == out.qparams
        else lw.rescale(
            n,
            Lowerer.shape_of(t, nhwc),
            t.dtype,
            out.dtype,
            t.qparams.scale / out.qparams.scale,
            t.qparams.zero_point,
            out.qparams.zero_point,
        )
        for n, t in zip(names, tensors)
    ]
    result = lw.inter(Lowerer.shape_of(out, nhwc), out.dtype)
    lw.emit("CONCAT", names, [result], attr("Concat", axis))
    lw.result(out, result, nhwc)


# ---- slice and select (the movement agent's region) ------------------------------------------------
def slice_range(size: int, start, end) -> tuple[int, int]:
    """(first, count) of PyTorch's slice with step 1: None bounds are the ends, negative ones
    count from the end, both clamped to [0, size] (Python's slice rule)."""
    kept = range(size)[slice(start, end)]
    return kept.start, len(kept)


def _slice_in_layout(lw: Lowerer, x: Value, dim: int, first: int, count: int) -> tuple[str, bool]:
    """`count` entries of x from `first` along PyTorch dim `dim`, in the layout x is bound in
    (a 4-D value's NHWC stays NHWC); (name, is_nhwc)."""
    name, is_nhwc = lw.bound(x)
    shape = list(Lowerer.shape_of(x, is_nhwc))
    axis = NCHW_TO_NHWC.index(dim) if is_nhwc else dim
    if first == 0 and count == shape[axis]:
        return name, is_nhwc
    begin, size = [0] * len(shape), list(shape)
    begin[axis], size[axis] = first, count
    return slice_of(lw, name, begin, size, x.dtype), is_nhwc


@lowering(aten.slice.Tensor)
def _slice_op(lw: Lowerer, op: Op):
    """A SLICE along one dim, in the input's layout. With a step s above 1, the n kept entries
    are every s-th of n * s consecutive ones (the last group padded with the zero point where
    the input ends first): RESHAPE to rows of s * after in one batch (Vela runs a copy per
    batch; [1, 6, 16] ::2 on ethos-u55-128 1,272 -> 498 NPU cycles), [1, before, n, s * after]
    or [1, 1, before * n, s * after] (the choice kiln.families.FLAT_STRIDED_SLICES), either where it has no
    dim beyond the NPU's; else [before, n, s, after]. SLICE the first `after` of each row, RESHAPE."""
    x, out = op.inputs[0], op.output
    dim = op.arg("dim") % len(x.shape)
    step = op.arg("step") or 1
    kept = range(x.shape[dim])[slice(op.arg("start"), op.arg("end"), step)]
    if step == 1:
        name, is_nhwc = _slice_in_layout(lw, x, dim, kept.start, len(kept))
        lw.result(out, same_quantization(lw, name, Lowerer.shape_of(out, is_nhwc), x, out), is_nhwc)
        return
    n = len(kept)
    taken = min(x.shape[dim] - kept.start, n * step)
    name, is_nhwc = _slice_in_layout(lw, x, dim, kept.start, taken)
    shape = list(Lowerer.shape_of(x, is_nhwc))
    axis = NCHW_TO_NHWC.index(dim) if is_nhwc else dim
    shape[axis] = taken
    if taken < n * step:
        pads = [0] * (2 * len(shape))
        pads[2 * axis + 1] = n * step - taken
        shape[axis] = n * step
        padded = lw.inter(shape, x.dtype)
        lw.emit(
            "PAD",
            [name, lw.shape_const(pads), lw.const(np.array([x.qparams.zero_point]), x.dtype, "pad_value")],
            [padded],
            attr("Pad"),
        )
        name = padded
    before, after = int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis + 1 :], dtype=np.int64))
    forms = [
        ([1, 1, before * n, step * after], [1, 1, before * n, after]),
        ([1, before, n, step * after], [1, before, n, after]),
        ([before, n, step, after], [before, n, 1, after]),
    ]
    fitting = [f for f in forms[:-1] if max(f[0]) <= TENSOR_DIM_MAX]
    if len(fitting) == 2 and before > 1 and not lw.choose(FLAT_STRIDED_SLICES):
        fitting.reverse()
    groups, firsts = (fitting or forms[-1:])[0]
    firsts = slice_of(lw, lw.reshape(name, groups, x.dtype), [0, 0, 0, 0], firsts, x.dtype)
    shape[axis] = n
    name = lw.reshape(firsts, shape, x.dtype)
    lw.result(out, same_quantization(lw, name, Lowerer.shape_of(out, is_nhwc), x, out), is_nhwc)


@lowering(aten.select.int)
def _select_op(lw: Lowerer, op: Op):
    """select(dim, index) = a SLICE of one entry, then a RESHAPE without that dim (in PyTorch's order)."""
    x, out = op.inputs[0], op.output
    dim = op.arg("dim") % len(x.shape)
    index = op.arg("index") % x.shape[dim]
    name, is_nhwc = _slice_in_layout(lw, x, dim, index, 1)
    kept = list(x.shape)
    kept[dim] = 1
    one = Value(out.name + "_kept", tuple(kept), x.dtype, x.qparams)
    lw.bind(one, name, is_nhwc)
    name = lw.reshape(lw.torch_order(one), out.shape, x.dtype)
    lw.result(out, same_quantization(lw, name, out.shape, x, out), False)


def _in_tosa_layout(lw: Lowerer, x: Value) -> tuple[str, bool]:
    """x as expand takes it: NHWC when 4-D, else in PyTorch's order; (name, is_nhwc)."""
    return (lw.nhwc(x), True) if len(x.shape) == 4 else (lw.torch_order(x), False)


@lowering(aten.expand.default)
def _expand_op(lw: Lowerer, op: Op):
    """A RESHAPE to the output's rank (new leading dims of 1), then a TILE repeating each dim of 1."""
    x, out = op.inputs[0], op.output
    if len(x.shape) == len(out.shape):
        name, is_nhwc = _in_tosa_layout(lw, x)
    else:
        ones = (1,) * (len(out.shape) - len(x.shape)) + tuple(x.shape)
        name, is_nhwc = lw.reshape(lw.torch_order(x), ones, x.dtype), False
        x = Value(x.name + "_ranked", ones, x.dtype, x.qparams)
    shape, out_shape = Lowerer.shape_of(x, is_nhwc), Lowerer.shape_of(out, is_nhwc)
    tiled = lw.inter(out_shape, x.dtype)
    lw.emit("TILE", [name, lw.shape_const([o // i for o, i in zip(out_shape, shape)])], [tiled], attr("Tile"))
    lw.result(out, same_quantization(lw, tiled, out_shape, x, out), is_nhwc)


@lowering(aten.constant_pad_nd.default, aten.pad.default)
def _pad(lw: Lowerer, op: Op):
    """Constant padding is one PAD; reflect, replicate and circular padding copy samples of
    the input (the output shares its quantization), so they are SLICEs and CONCATs, one
    dimension at a time: each mode is separable, as PyTorch defines it. A rank-4 input is
    padded in PyTorch's order (no layout changes: [1, 4, 6, 6] padded by [1, 1, 2, 2] on
    ethos-u55-128, 4,212 -> 3,408 NPU cycles) unless it is stored channels last, padded along
    its batch, or padded by copies where the family runs that faster
    (kiln.families.CHANNELS_LAST_PAD_COPIES)."""
    x, out = op.inputs[0], op.output
    pads = list(op.arg("pad"))
    mode = op.arg("mode") if op.target is aten.pad.default else "constant"
    rank = len(x.shape)
    before_after = [[0, 0] for _ in range(rank)]
    for i in range(len(pads) // 2):  # PyTorch lists the last dimension first
        before_after[rank - 1 - i] = [pads[2 * i], pads[2 * i + 1]]
    nhwc = rank == 4 and (
        lw.stored_channels_last(x)
        or before_after[0] != [0, 0]
        or (mode != "constant" and lw.family.has(CHANNELS_LAST_PAD_COPIES))
    )
    if nhwc:
        name = lw.nhwc(x)
        before_after = [before_after[p] for p in NCHW_TO_NHWC]
    else:
        name = lw.torch_order(x)
    shape = list(Lowerer.shape_of(x, nhwc))
    if mode != "constant":
        for dim, (before, after) in enumerate(before_after):
            if before or after:
                name, shape = _pad_by_copies(lw, name, shape, dim, before, after, mode, x.dtype)
        lw.result(out, name, nhwc)
        return
    pad_value = quantize_real(float(op.arg("value") or 0.0), x.qparams, x.dtype)
    result = lw.inter(Lowerer.shape_of(out, nhwc), out.dtype)
    lw.emit(
        "PAD",
        [
            name,
            lw.shape_const([p for pair in before_after for p in pair]),
            lw.const(np.array([pad_value]), x.dtype, "pad_value"),
        ],
        [result],
        attr("Pad"),
    )
    lw.result(out, result, nhwc)


def _pad_by_copies(
    lw: Lowerer, name: str, shape: list[int], dim: int, before: int, after: int, mode: str, dtype: str
) -> tuple[str, list[int]]:
    """`name` (of `shape`) padded along `dim` by `before` and `after` samples copied as
    `mode` says (the support rules keep the pads within what the mode allows):
    reflect: x[before], ..., x[1] | x | x[n-2], ..., x[n-1-after];
    replicate: x[0] repeated | x | x[n-1] repeated; circular: x[n-before:] | x | x[:after]."""
    n = shape[dim]

    def rows(start: int, count: int) -> str:
        begin, size = [0] * len(shape), list(shape)
        begin[dim], size[dim] = start, count
        return slice_of(lw, name, begin, size, dtype)

    if mode == "circular":
        pieces = ([rows(n - before, before)] if before else []) + [name] + ([rows(0, after)] if after else [])
    else:
        first = [before - i for i in range(before)] if mode == "reflect" else [0] * before
        last = [n - 2 - i for i in range(after)] if mode == "reflect" else [n - 1] * after
        pieces = [rows(i, 1) for i in first] + [name] + [rows(i, 1) for i in last]
    padded = list(shape)
    padded[dim] = n + before + after
    result = lw.inter(padded, dtype)
    lw.emit("CONCAT", pieces, [result], attr("Concat", dim))
    return result, padded
