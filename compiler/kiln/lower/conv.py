"""Lowerings of the MAC ops: conv2d (plain, depthwise, grouped, strided beyond 3), linear,
conv_transpose2d and matrix products."""

from __future__ import annotations

import numpy as np
import torch

from kiln.graph import Op, Value, pair
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
    slice_of,
)
from kiln.lower.reduce import reduce_axes
from kiln.partition.rescale import product_factor
from kiln.partition.support import STRIDE_MAX, moving_stride
from kiln.vocabulary import GATHERS

aten = torch.ops.aten


def _spatial(lw: Lowerer, op: Op, x: Value, kernel, stride, dilation, padding, out_hw):
    """x as NHWC, cropped as needed, and TOSA's pad [top, bottom, left, right]."""
    n, c, h, w = x.shape
    ph = conv_geometry(h, kernel[0], stride[0], dilation[0], padding[0], out_hw[0])
    pw = conv_geometry(w, kernel[1], stride[1], dilation[1], padding[1], out_hw[1])
    return cropped(lw, lw.nhwc(x), [n, h, w, c], x.dtype, ph[2], pw[2]), [ph[0], ph[1], pw[0], pw[1]]


def _mac_rescale(lw: Lowerer, op: Op, acc: str, shape, x: Value, weight: Value, is_nhwc: bool):
    out = op.output
    scale = product_factor(x, weight, out)
    name = lw.rescale(acc, shape, ACCUMULATOR[x.dtype], out.dtype, scale, 0, out.qparams.zero_point)
    lw.result(out, name, is_nhwc)


@lowering(aten.conv2d.default)
def _conv(lw: Lowerer, op: Op):
    x, weight, bias = op.arg("input"), op.arg("weight"), op.arg("bias")
    stride, dilation, groups = moving_stride(op), pair(op.arg("dilation")), int(op.arg("groups"))
    if max(stride) > STRIDE_MAX:
        _strided_conv(lw, op, stride)
        return
    n, cin, h, w = x.shape
    cout, cin_g, kh, kw = weight.shape
    oh, ow = op.output.shape[2:]
    name, pad = _spatial(lw, op, x, (kh, kw), stride, dilation, pair(op.arg("padding")), (oh, ow))
    acc_shape = [n, oh, ow, cout]
    acc_type = ACCUMULATOR[x.dtype]
    zero_points = [lw.zp(x.qparams.zero_point, x.dtype), lw.zp(0, "int8")]
    if groups == 1:
        acc = lw.inter(acc_shape, acc_type)
        w_ohwi = weight.data.transpose(0, 2, 3, 1)
        attribute = attr("Conv2d", pad, list(stride), list(dilation), False, DT[acc_type])
        lw.emit(
            "CONV2D",
            [name, lw.const(w_ohwi, "int8", "weight"), biases(lw, bias, cout, acc_type), *zero_points],
            [acc],
            attribute,
        )
    elif groups == cin and cin_g == 1:
        acc = lw.inter(acc_shape, acc_type)
        w_hwcm = weight.data.reshape(cin, cout // cin, kh, kw).transpose(2, 3, 0, 1)
        attribute = attr("DepthwiseConv2d", pad, list(stride), list(dilation), False, DT[acc_type])
        lw.emit(
            "DEPTHWISE_CONV2D",
            [name, lw.const(w_hwcm, "int8", "weight"), biases(lw, bias, cout, acc_type), *zero_points],
            [acc],
            attribute,
        )
    else:
        _grouped_conv(lw, op, name, pad, zero_points)
        return
    _mac_rescale(lw, op, acc, acc_shape, x, weight, True)


def _grouped_conv(lw: Lowerer, op: Op, name: str, pad, zero_points):
    """TOSA has no grouped convolution: slice the NHWC input `name`, convolve and
    requantize each group, concatenate."""
    x, weight, bias, out = op.arg("input"), op.arg("weight"), op.arg("bias"), op.output
    stride, dilation, groups = moving_stride(op), pair(op.arg("dilation")), int(op.arg("groups"))
    n, cin = x.shape[:2]
    cout = weight.shape[0]
    oh, ow = out.shape[2:]
    acc_type = ACCUMULATOR[x.dtype]
    scales = np.broadcast_to(product_factor(x, weight, out), (cout,))
    bias_data = bias.data if bias is not None else np.zeros(cout, np.int32)
    cin_g, cout_g = cin // groups, cout // groups
    in_shape = lw.tensors[name].shape
    attribute = attr("Conv2d", pad, list(stride), list(dilation), False, DT[acc_type])
    pieces = []
    for g in range(groups):
        channels = slice(g * cout_g, (g + 1) * cout_g)
        piece = slice_of(lw, name, [0, 0, 0, g * cin_g], [n, in_shape[1], in_shape[2], cin_g], x.dtype)
        part = lw.inter([n, oh, ow, cout_g], acc_type)
        lw.emit(
            "CONV2D",
            [
                piece,
                lw.const(weight.data[channels].transpose(0, 2, 3, 1), "int8", "weight"),
                lw.const(bias_data[channels], acc_type, "bias"),
                *zero_points,
            ],
            [part],
            attribute,
        )
        pieces.append(
            lw.rescale(part, [n, oh, ow, cout_g], acc_type, out.dtype, scales[channels], 0, out.qparams.zero_point)
        )
    result = lw.inter([n, oh, ow, cout], out.dtype)
    lw.emit("CONCAT", pieces, [result], attr("Concat", 3))
    lw.result(out, result, True)


# ---- strides beyond the NPU's 1..3: space to depth -----------------------------------------------------------
# Along an axis of stride s > 3, with x' the input padded and cut to s * (out - 1 + t) entries and
# X'[i][r] = x'[s*i + r] its phases (r < s) moved into channels, a window of extent E (the dilated
# kernel's) at stride s is one of t = ceil(E / s) taps at stride 1:
#     out[i] = sum_{u<E} x'[s*i + u] w[u] = sum_{q<t} sum_{r<s} X'[i + q][r] w[q*s + r],  w zero past E.
# The weights are the op's int8 weights rearranged (and zero-filled), with its bias and scales, so the
# integers are the strided convolution's. A pool whose windows do not overlap reduces each window
# (kiln.lower.pool._strided_pool).
def _space_to_depth(lw: Lowerer, name: str, shape, dtype: str, factors) -> tuple[str, list[int]]:
    """NHWC `name` [1, H, W, C], H and W multiples of factors (fh, fw), as [1, H/fh, W/fw, fh*fw*C]
    whose channel (rh, rw, c) at (i, j) is x[fh*i + rh, fw*j + rw, c]. W's phases join the channels
    by a free reshape; H's take a transpose of [H/fh, fh, W/fw, fw*C] to [H/fh, W/fw, fh, fw*C]
    (N and H swapped with W: Vela runs it as one NPU operation)."""
    _, h, w, c = shape
    fh, fw = factors
    out = [1, h // fh, w // fw, fh * fw * c]
    if fh > 1:
        rows = [h // fh, fh, w // fw, fw * c]
        name = lw.to_layout(lw.reshape(name, rows, dtype), rows, dtype, (0, 2, 1, 3))
    return lw.reshape(name, out, dtype), out


def _strided_conv(lw: Lowerer, op: Op, stride):
    """A plain or depthwise convolution with a stride beyond 3 (see above). Axes of stride 1..3 keep
    it, their kernel, dilation and TOSA padding; the others are padded by a PAD of the input's zero
    point (which the convolution's input zero point makes 0) and folded into channels. A depthwise
    convolution stays depthwise over the phase channels, its phases then summed by an int32
    REDUCE_SUM (the bias in phase 0 only)."""
    x, weight, bias, out = op.arg("input"), op.arg("weight"), op.arg("bias"), op.output
    dilation, padding = pair(op.arg("dilation")), pair(op.arg("padding"))
    n, cin, h, w = x.shape
    cout, cin_g = weight.shape[:2]
    oh, ow = out.shape[2:]
    data = np.asarray(weight.data)
    axes = []  # per axis: (factor, kernel, stride, dilation) of the TOSA convolution
    tosa_pad, pads, crops = [], [], []
    for axis, (size, k, s, d, p, o) in enumerate(zip((h, w), weight.shape[2:], stride, dilation, padding, (oh, ow))):
        if s <= STRIDE_MAX:
            before, after, crop = conv_geometry(size, k, s, d, p, o)
            axes.append((1, k, s, d))
            tosa_pad += [before, after]
            pads += [0, 0]
            crops.append(crop)
            continue
        extent = (k - 1) * d + 1
        taps = -(-extent // s)
        after = s * (o - 1 + taps) - size - p
        axes.append((s, taps, 1, 1))
        tosa_pad += [0, 0]
        pads += [p, max(0, after)]
        crops.append(max(0, -after))
        dense = np.zeros(data.shape[: 2 + axis] + (taps * s,) + data.shape[3 + axis :], data.dtype)
        index = [slice(None)] * 4
        index[2 + axis] = slice(0, extent, d)
        dense[tuple(index)] = data
        data = dense
    name, shape = pad_crop(lw, lw.nhwc(x), [n, h, w, cin], x.dtype, pads, crops, x.qparams.zero_point)
    (fh, th, sh, dh), (fw, tw, sw, dw) = axes
    native_stride, native_dilation = [sh, sw], [dh, dw]
    name, shape = _space_to_depth(lw, name, shape, x.dtype, (fh, fw))
    phased = data.reshape(cout, cin_g, th, fh, tw, fw)  # [o][c][q_h][r_h][q_w][r_w]
    acc_type = ACCUMULATOR[x.dtype]
    zero_points = [lw.zp(x.qparams.zero_point, x.dtype), lw.zp(0, "int8")]
    acc_shape = [n, oh, ow, cout]
    if int(op.arg("groups")) == 1:
        w_ohwi = phased.transpose(0, 2, 4, 3, 5, 1).reshape(cout, th, tw, fh * fw * cin)
        acc = lw.inter(acc_shape, acc_type)
        attribute = attr("Conv2d", tosa_pad, native_stride, native_dilation, False, DT[acc_type])
        lw.emit(
            "CONV2D",
            [name, lw.const(w_ohwi, "int8", "weight"), biases(lw, bias, cout, acc_type), *zero_points],
            [acc],
            attribute,
        )
    else:  # depthwise (the support rule): output channel o = c*M + m reads input channel c
        phases = fh * fw
        w_hwcm = phased.reshape(cin, cout // cin, th, fh, tw, fw).transpose(2, 4, 3, 5, 0, 1)
        w_hwcm = w_hwcm.reshape(th, tw, phases * cin, cout // cin)
        bias_data = np.zeros(phases * cout, np.int64)
        if bias is not None:
            bias_data[:cout] = bias.data
        per_phase = lw.inter([n, oh, ow, phases * cout], acc_type)
        attribute = attr("DepthwiseConv2d", tosa_pad, native_stride, native_dilation, False, DT[acc_type])
        lw.emit(
            "DEPTHWISE_CONV2D",
            [name, lw.const(w_hwcm, "int8", "weight"), lw.const(bias_data, acc_type, "bias"), *zero_points],
            [per_phase],
            attribute,
        )
        grouped = lw.reshape(per_phase, [oh * ow, phases, cout], acc_type)
        summed, _ = reduce_axes(lw, grouped, [oh * ow, phases, cout], [1], "REDUCE_SUM", acc_type)
        acc = lw.reshape(summed, acc_shape, acc_type)
    _mac_rescale(lw, op, acc, acc_shape, x, weight, True)


def _tied_table(lw: Lowerer, op: Op) -> bool:
    """Whether linear `op` is one row times a tied embedding table without a bias: its weight holds
    the integers, at one scale, of the constant table a gather of the partition reads (the
    quantizer's tied_weight_spec)."""
    x, weight = op.arg("input"), op.arg("weight")
    if op.arg("bias") is not None or int(np.prod(x.shape[:-1])) != 1 or weight.qparams.axis is not None:
        return False
    if x.dtype != weight.dtype:  # MATMUL multiplies operands of one type
        return False
    tables = (g.inputs[0] for g in lw.partition.ops if g.target in GATHERS and g.inputs[0].is_constant)
    return any(t.name == weight.name and np.array_equal(t.data, weight.data) for t in tables)


def _tied_head(lw: Lowerer, op: Op):
    """A linear of one row by a tied table [V, K] as MATMUL(table [1, V, K], x [1, K, 1]): the
    table is the GATHER's constant (Lowerer.table), stored once, where a CONV2D would hold a second
    copy as Vela's encoded weights. The integer products are the same."""
    x, weight, out = op.arg("input"), op.arg("weight"), op.output
    vocab, k = weight.shape
    acc_type = ACCUMULATOR[x.dtype]
    acc = lw.inter([1, vocab, 1], acc_type)
    lw.emit(
        "MATMUL",
        [
            lw.table(weight, [1, vocab, k]),
            lw.reshape(lw.torch_order(x), [1, k, 1], x.dtype),
            lw.zp(0, weight.dtype),
            lw.zp(x.qparams.zero_point, x.dtype),
        ],
        [acc],
        attr("MatMul"),
    )
    scale = product_factor(x, weight, out)
    res = lw.rescale(acc, [1, vocab, 1], acc_type, out.dtype, scale, 0, out.qparams.zero_point)
    flat = Value(out.name, (1, vocab, 1), out.dtype, out.qparams, producer=op)
    lw.result(flat, res)
    lw.bind(out, lw.reshape(lw.names[id(flat)][0], out.shape, out.dtype), False)


@lowering(aten.linear.default)
def _linear(lw: Lowerer, op: Op):
    if _tied_table(lw, op):
        _tied_head(lw, op)
        return
    x, weight = op.arg("input"), op.arg("weight")
    out = op.output
    k = x.shape[-1]
    rows = int(np.prod(x.shape[:-1]))
    cout = weight.shape[0]
    name = lw.reshape(lw.torch_order(x), [rows, 1, 1, k], x.dtype)
    acc_type = ACCUMULATOR[x.dtype]
    acc = lw.inter([rows, 1, 1, cout], acc_type)
    attribute = attr("Conv2d", [0, 0, 0, 0], [1, 1], [1, 1], False, DT[acc_type])
    lw.emit(
        "CONV2D",
        [
            name,
            lw.const(weight.data.reshape(cout, 1, 1, k), "int8", "weight"),
            biases(lw, op.arg("bias"), cout, acc_type),
            lw.zp(x.qparams.zero_point, x.dtype),
            lw.zp(0, "int8"),
        ],
        [acc],
        attribute,
    )
    scale = product_factor(x, weight, out)
    res = lw.rescale(acc, [rows, 1, 1, cout], acc_type, out.dtype, scale, 0, out.qparams.zero_point)
    flat = Value(out.name, (rows, 1, 1, cout), out.dtype, out.qparams, producer=op)
    lw.result(flat, res)
    lw.bind(out, lw.reshape(lw.names[id(flat)][0], out.shape, out.dtype), False)


@lowering(aten.conv_transpose2d.input)
def _conv_transpose(lw: Lowerer, op: Op):
    x, weight, out = op.arg("input"), op.arg("weight"), op.output
    stride, padding = pair(op.arg("stride")), pair(op.arg("padding"))
    output_padding = pair(op.arg("output_padding"))
    cin, cout, kh, kw = weight.shape
    w_ohwi = weight.data.transpose(1, 2, 3, 0)
    out_pad = [-padding[0], -padding[0] + output_padding[0], -padding[1], -padding[1] + output_padding[1]]
    n, oh, ow = out.shape[0], out.shape[2], out.shape[3]
    acc_type = ACCUMULATOR[x.dtype]
    acc = lw.inter([n, oh, ow, cout], acc_type)
    attribute = attr("TransposeConv2d", out_pad, list(stride), False, DT[acc_type])
    lw.emit(
        "TRANSPOSE_CONV2D",
        [
            lw.nhwc(x),
            lw.const(w_ohwi, "int8", "weight"),
            biases(lw, op.arg("bias"), cout, acc_type),
            lw.zp(x.qparams.zero_point, x.dtype),
            lw.zp(0, "int8"),
        ],
        [acc],
        attribute,
    )
    _mac_rescale(lw, op, acc, [n, oh, ow, cout], x, weight, True)


@lowering(aten.matmul.default, aten.bmm.default, aten.mm.default)
def _matmul(lw: Lowerer, op: Op):
    """MATMUL of [batch, m, k] and [batch, k, n], requantized once. A constant operand (x @ W,
    W a parameter) is a TOSA constant, repeated over the batch it broadcasts to; a constant
    right operand shared by the whole batch multiplies all batch * m rows in one MATMUL."""
    a, b = op.inputs[0], op.inputs[1]
    out = op.output
    batch = int(np.prod(out.shape[:-2], dtype=np.int64)) if len(out.shape) > 2 else 1
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    if b.is_constant and not a.is_constant and int(np.prod(b.shape[:-2], dtype=np.int64)) == 1:
        batch, m = 1, batch * m

    def operand(v: Value, shape) -> str:
        if v.is_constant:
            data = np.broadcast_to(v.data, (*out.shape[:-2], *v.shape[-2:])) if shape[0] > 1 else v.data
            return lw.const(data.reshape(shape), v.dtype)
        return lw.reshape(lw.torch_order(v), shape, v.dtype)

    an, bn = operand(a, [batch, m, k]), operand(b, [batch, k, n])
    acc_type = ACCUMULATOR[a.dtype]
    acc = lw.inter([batch, m, n], acc_type)
    lw.emit(
        "MATMUL",
        [an, bn, lw.zp(a.qparams.zero_point, a.dtype), lw.zp(b.qparams.zero_point, b.dtype)],
        [acc],
        attr("MatMul"),
    )
    res = lw.rescale(
        acc,
        [batch, m, n],
        acc_type,
        out.dtype,
        product_factor(a, b, out),
        0,
        out.qparams.zero_point,
    )
    flat = Value(out.name, (batch, m, n), out.dtype, out.qparams, producer=op)
    lw.result(flat, res)
    lw.bind(out, lw.reshape(lw.names[id(flat)][0], out.shape, out.dtype), False)
