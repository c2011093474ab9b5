"""Lowerings of the pools and means: average, max and adaptive average pools (strided beyond 3
too), and mean over H and W (other means are reductions, kiln.lower.reduce)."""

from __future__ import annotations

import numpy as np
import torch
import tosa_serializer as ts

from kiln.errors import LoweringError
from kiln.families import POOLED_MEANS, VELA_STRIDED_POOLS
from kiln.graph import QRANGE, Op, Value, pair
from kiln.lower.lowerer import (
    ACCUMULATOR,
    DT,
    Lowerer,
    attr,
    biases,
    conv_geometry,
    cropped,
    lowering,
    pad_crop,
    same_quantization,
    slice_of,
)
from kiln.lower.reduce import reduce_axes, reduction
from kiln.partition.support import KERNEL_AREA_MAX, KERNEL_HEIGHT_MAX, STRIDE_MAX, moving_stride, reduced_dims

aten = torch.ops.aten


def _pool_args(op: Op, x: Value):
    kernel = pair(op.arg("kernel_size"))
    stride = moving_stride(op)  # 1 along an axis of one window: the stride is irrelevant (and TOSA/Vela limit it)
    padding = pair(op.arg("padding"))
    out_hw = op.output.shape[2:]
    return kernel, stride, padding, out_hw


@lowering(aten.avg_pool2d.default)
def _avg_pool(lw: Lowerer, op: Op):
    x = op.arg("self")
    kernel, stride, padding, out_hw = _pool_args(op, x)
    if op.arg("divisor_override") is not None:
        raise LoweringError(f"node {op.name}: avg_pool2d divisor_override is not supported")
    n, c, h, w = x.shape
    if out_hw == (1, 1) and kernel == (h, w) and padding == (0, 0):
        lw.result(op.output, _global_mean(lw, x, op.output), True)
        return
    if _kiln_strides(lw, stride):
        _strided_pool(lw, op, "REDUCE_SUM", kernel, stride, padding)
        return
    name = lw.nhwc(x)
    if padding != (0, 0) and op.arg("count_include_pad"):
        # PyTorch divides by the whole window, padding included; TOSA by the valid count only.
        padded = [n, h + 2 * padding[0], w + 2 * padding[1], c]
        out = lw.inter(padded, x.dtype)
        lw.emit(
            "PAD",
            [
                name,
                lw.shape_const([0, 0, padding[0], padding[0], padding[1], padding[1], 0, 0]),
                lw.const(np.array([x.qparams.zero_point]), x.dtype, "pad_value"),
            ],
            [out],
            attr("Pad"),
        )
        name, (n, h, w, c), padding = out, padded, (0, 0)
    ph = conv_geometry(h, kernel[0], stride[0], 1, padding[0], out_hw[0])
    pw = conv_geometry(w, kernel[1], stride[1], 1, padding[1], out_hw[1])
    name = cropped(lw, name, [n, h, w, c], x.dtype, ph[2], pw[2])
    lw.result(op.output, _avg_pool_nhwc(lw, name, x, op.output, kernel, stride, [ph[0], ph[1], pw[0], pw[1]]), True)


def _kiln_strides(lw: Lowerer, stride) -> bool:
    """Whether an average pool of `stride` is lowered by _strided_pool: a stride beyond the NPU's
    1..3 where the choice kiln.families.VELA_STRIDED_POOLS leaves it to kiln (else one AVG_POOL2D that Vela
    decomposes itself)."""
    if max(stride) <= STRIDE_MAX:
        return False
    return not lw.choose(VELA_STRIDED_POOLS)


def _avg_pool_nhwc(lw: Lowerer, name: str, x: Value, out: Value, kernel, stride, pad) -> str:
    """AVG_POOL2D of NHWC `name` into `out`'s quantization; returns the NHWC result."""
    n, c = x.shape[:2]
    shape = [n, out.shape[2] if len(out.shape) == 4 else 1, out.shape[3] if len(out.shape) == 4 else 1, c]
    same = out.qparams.scale == x.qparams.scale and out.dtype == x.dtype
    out_zp = out.qparams.zero_point if same else x.qparams.zero_point
    pooled = lw.inter(shape, x.dtype)
    attribute = attr("AvgPool2d", list(kernel), list(stride), pad, ts.DType.INT32)
    lw.emit("AVG_POOL2D", [name, lw.zp(x.qparams.zero_point, x.dtype), lw.zp(out_zp, x.dtype)], [pooled], attribute)
    if same:
        return pooled
    return lw.rescale(
        pooled,
        shape,
        x.dtype,
        out.dtype,
        x.qparams.scale / out.qparams.scale,
        x.qparams.zero_point,
        out.qparams.zero_point,
    )


@lowering(aten.adaptive_avg_pool2d.default)
def _adaptive_avg_pool(lw: Lowerer, op: Op):
    x = op.arg("self")
    h, w = x.shape[2:]
    oh, ow = op.output.shape[2:]
    if (oh, ow) == (1, 1):
        lw.result(op.output, _global_mean(lw, x, op.output), True)
        return
    kernel = (h // oh, w // ow)  # the support rule requires an exact division
    stride = tuple(1 if o == 1 else k for k, o in zip(kernel, (oh, ow)))
    if _kiln_strides(lw, stride):
        _strided_pool(lw, op, "REDUCE_SUM", kernel, stride, (0, 0))
        return
    lw.result(op.output, _avg_pool_nhwc(lw, lw.nhwc(x), x, op.output, kernel, kernel, [0, 0, 0, 0]), True)


@lowering(aten.mean.dim)
def _mean(lw: Lowerer, op: Op):
    """Mean over any dims: an int32 sum, then one RESCALE by x's scale / (count x the output's);
    over H and W of a 4-D value, _global_mean (the same REDUCE_SUM, of NHWC [N, 1, H*W, C])."""
    x, out = op.arg("self"), op.output
    if len(x.shape) != 4 or reduced_dims(op) != [2, 3]:
        reduction(lw, op, "REDUCE_SUM")
        return
    result = _global_mean(lw, x, out)
    if len(out.shape) == 4:
        lw.result(out, result, True)
    else:
        lw.result(out, lw.reshape(result, out.shape, out.dtype), False)


DEPTHWISE_SUM_HEIGHT_MAX, DEPTHWISE_SUM_AREA_MAX = 64, 64 * 64  # a depthwise kernel's limits on the NPU


def _global_mean(lw: Lowerer, x: Value, out: Value) -> str:
    """The mean over all of H and W as NHWC [N, 1, 1, C], summed exactly in the accumulator
    type and requantized by one RESCALE (one rounding). The sum is a REDUCE_SUM of H and W
    merged (a free reshape in NHWC), or x is read in place: where x feeds other ops too (a
    squeeze-excitation block: Vela would copy x for the reshape), and where the choice
    kiln.families.POOLED_MEANS takes it (which form Vela estimates faster depends on the model
    and the family). In place, an int8 x whose step is no coarser than the output's (an
    adaptive or global average pool, which shares its input's quantization) is read by one
    AVG_POOL2D of the whole map (with a RESCALE to the output's step where they differ: the
    pool's rounding to x's step stays within one of the output's; efficientnet_b0: 324,634 NPU
    cycles on ethos-u55-128, against 366,274 by a depthwise convolution of ones and 384,866 by
    the copy). Otherwise (a mean's finer step, int16) a depthwise convolution of ones within
    the NPU's kernel limits reads it in place, its sum exact in the accumulator."""
    n, c, h, w = x.shape
    scale = x.qparams.scale / (h * w * out.qparams.scale)
    readers = sum(1 for op in lw.partition.ops for v in op.inputs if v is x) + sum(v is x for v in lw.partition.outputs)
    coarse = out.qparams.scale >= x.qparams.scale  # the pool's rounding to x's step is then within one of out's
    pool = x.dtype == "int8" and coarse and h <= KERNEL_HEIGHT_MAX and h * w <= KERNEL_AREA_MAX
    depthwise = h <= DEPTHWISE_SUM_HEIGHT_MAX and h * w <= DEPTHWISE_SUM_AREA_MAX
    in_place = readers > 1 or ((pool or depthwise) and lw.choose(POOLED_MEANS))
    if in_place and pool:
        return _avg_pool_nhwc(lw, lw.nhwc(x), x, out, [h, w], [1, 1], [0, 0, 0, 0])
    if in_place and depthwise:
        acc_type = ACCUMULATOR[x.dtype]
        acc = lw.inter([n, 1, 1, c], acc_type)
        attribute = attr("DepthwiseConv2d", [0, 0, 0, 0], [1, 1], [1, 1], False, DT[acc_type])
        lw.emit(
            "DEPTHWISE_CONV2D",
            [
                lw.nhwc(x),
                lw.const(np.ones((h, w, c, 1)), "int8", "ones"),
                biases(lw, None, c, acc_type),
                lw.zp(x.qparams.zero_point, x.dtype),
                lw.zp(0, "int8"),
            ],
            [acc],
            attribute,
        )
        return lw.rescale(acc, [n, 1, 1, c], acc_type, out.dtype, scale, 0, out.qparams.zero_point)
    flat = lw.reshape(lw.nhwc(x), [n, 1, h * w, c], x.dtype)
    wide = lw.rescale(flat, [n, 1, h * w, c], x.dtype, "int32", 1.0, x.qparams.zero_point, 0)
    acc = lw.inter([n, 1, 1, c], "int32")
    lw.emit("REDUCE_SUM", [wide], [acc], attr("ReduceSum", 2))
    return lw.rescale(acc, [n, 1, 1, c], "int32", out.dtype, scale, 0, out.qparams.zero_point)


@lowering(aten.max_pool2d.default)
def _max_pool(lw: Lowerer, op: Op):
    x = op.arg("self")
    kernel, stride, padding, out_hw = _pool_args(op, x)
    if max(stride) > STRIDE_MAX:
        _strided_pool(lw, op, "REDUCE_MAX", kernel, stride, padding)
        return
    n, c, h, w = x.shape
    name = lw.nhwc(x)
    ph = _max_pool_pad(h, kernel[0], stride[0], padding[0], out_hw[0])
    pw = _max_pool_pad(w, kernel[1], stride[1], padding[1], out_hw[1])
    name = cropped(lw, name, [n, h, w, c], x.dtype, ph[2], pw[2])
    out = lw.inter([n, out_hw[0], out_hw[1], c], x.dtype)
    attribute = attr(
        "MaxPool2d", list(kernel), list(stride), [ph[0], ph[1], pw[0], pw[1]], ts.NanPropagationMode.PROPAGATE
    )
    lw.emit("MAX_POOL2D", [name], [out], attribute)
    lw.result(op.output, out, True)


def _max_pool_pad(size, kernel, stride, pad, out):
    """Like conv_geometry, but ceil_mode may need extra trailing padding, which max ignores."""
    after = (out - 1) * stride + kernel - size - pad
    return pad, max(0, after), max(0, -after)


def _strided_pool(lw: Lowerer, op: Op, kind: str, kernel, stride, padding):
    """A max or average pool with a stride beyond 3 whose windows do not overlap (the support
    rule): x padded and cut so each axis is out * stride (along an axis of one window, out *
    kernel), its rows grouped by window as [OH, SH, OW*SW*C] and then its columns as [OH*OW, SW, C]
    (free reshapes of NHWC), each group SLICEd to the kernel where it is narrower than the stride
    and reduced along that middle axis: REDUCE_MAX in x's type (padding of the type's least value,
    which a window that also holds an input value never takes), or for an average REDUCE_SUM in
    int32 without the zero point (padding of the zero point, count_include_pad) and one RESCALE by
    x's scale / (kh*kw * the output's): one rounding, as PT2E's float average then quantized."""
    x, out = op.arg("self"), op.output
    n, c, h, w = x.shape
    out_hw = out.shape[2:]
    groups, pads, crops = [], [], []
    for size, k, s, p, o in zip((h, w), kernel, stride, padding, out_hw):
        group = k if o == 1 else s
        after = group * o - size - p
        groups.append(group)
        pads += [p, max(0, after)]
        crops.append(max(0, -after))
    average = kind == "REDUCE_SUM"
    value = x.qparams.zero_point if average else QRANGE[x.dtype][0]
    name, _ = pad_crop(lw, lw.nhwc(x), [n, h, w, c], x.dtype, pads, crops, value)
    (oh, ow), (gh, gw), (kh, kw) = out_hw, groups, kernel
    dtype = x.dtype
    rows = [oh, gh, ow * gw * c]
    name = lw.reshape(name, rows, dtype)
    if average:
        name, dtype = lw.rescale(name, rows, x.dtype, "int32", 1.0, x.qparams.zero_point, 0), "int32"
    name = _window_reduce(lw, name, rows, kh, kind, dtype)
    columns = [oh * ow, gw, c]
    name = _window_reduce(lw, lw.reshape(name, columns, dtype), columns, kw, kind, dtype)
    shape = [n, oh, ow, c]
    name = lw.reshape(name, shape, dtype)
    if average:
        scale = x.qparams.scale / (kh * kw * out.qparams.scale)
        name = lw.rescale(name, shape, "int32", out.dtype, scale, 0, out.qparams.zero_point)
    else:
        name = same_quantization(lw, name, shape, x, out)
    lw.result(out, name, True)


def _window_reduce(lw: Lowerer, name: str, shape, kernel: int, kind: str, dtype: str) -> str:
    """Rank-3 `name` [A, G, B] reduced over its first `kernel` entries along G, kept as [A, 1, B]."""
    a, group, b = shape
    if kernel < group:
        name = slice_of(lw, name, [0, 0, 0], [a, kernel, b], dtype)
    if kernel == 1:
        return name
    return reduce_axes(lw, name, [a, kernel, b], [1], kind, dtype)[0]
