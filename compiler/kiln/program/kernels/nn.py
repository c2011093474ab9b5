"""Convolution, linear, pooling and resizing over float32 NCHW tensors."""

from __future__ import annotations

import numpy as np
import torch

from kiln.program.kernels.core import Fixed, Kernel

aten = torch.ops.aten


def _mean_hw(x, dim, keepdim, dtype):
    """Mean over H and W, summed position by position (row-major) in float32."""
    n, c, h, w = x.shape
    acc = np.zeros((n, c), np.float32)
    for i in range(h):
        for j in range(w):
            acc += x[:, :, i, j]
    out = acc / np.float32(h * w)
    return out.reshape(n, c, 1, 1) if keepdim else out


def _avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    kh, kw = kernel_size
    sh, sw = stride or kernel_size
    ph, pw = padding
    n, c, h, w = x.shape
    padded = np.zeros((n, c, h + 2 * ph, w + 2 * pw), np.float32)
    padded[:, :, ph : ph + h, pw : pw + w] = x
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    out = np.zeros((n, c, oh, ow), np.float32)
    for i in range(kh):  # the window summed row by row, left to right, in float32
        for j in range(kw):
            out += padded[:, :, i : i + sh * oh : sh, j : j + sw * ow : sw]
    return (out / np.float32(kh * kw)).astype(np.float32)


def _conv2d(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """Float convolution; each output starts at its bias and adds the products in
    (input channel, kernel row, kernel column) order, in float32."""
    n, c, h, w = x.shape
    cout, cin_g, kh, kw = weight.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    padded = np.zeros((n, c, h + 2 * ph, w + 2 * pw), np.float32)
    padded[:, :, ph : ph + h, pw : pw + w] = x
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, cout, oh, ow), np.float32)
    if bias is not None:
        out += bias.astype(np.float32).reshape(1, cout, 1, 1)
    cout_g = cout // groups
    for g in range(groups):
        outs = slice(g * cout_g, (g + 1) * cout_g)
        for ci in range(cin_g):
            for i in range(kh):
                for j in range(kw):
                    window = padded[:, g * cin_g + ci, i * dh : i * dh + sh * oh : sh, j * dw : j * dw + sw * ow : sw]
                    out[:, outs] += window[:, None] * weight[outs, ci, i, j].reshape(1, -1, 1, 1)
    return out


def _linear(x, weight, bias):
    """Float linear; each output starts at its bias and adds products in input order."""
    out = np.zeros(x.shape[:-1] + (weight.shape[0],), np.float32)
    if bias is not None:
        out += bias.astype(np.float32)
    for k in range(x.shape[-1]):
        out += x[..., k : k + 1] * weight[:, k]
    return out


def _source_index(out_size: int, in_size: int, scale, align_corners: bool):
    """(i0, i1, lambda0, lambda1) per output index as PyTorch's bilinear computes them, in
    float32: align_corners maps the corner samples onto each other; otherwise the ratio
    is 1/scale_factor when one is given, else in/out, with half-pixel centres."""
    if align_corners:
        ratio = np.float32((in_size - 1) / (out_size - 1)) if out_size > 1 else np.float32(0)
        src = np.arange(out_size, dtype=np.float32) * ratio
    else:
        ratio = np.float32(1.0 / scale) if scale else np.float32(in_size / out_size)
        src = (np.arange(out_size, dtype=np.float32) + np.float32(0.5)) * ratio - np.float32(0.5)
        src = np.maximum(src, np.float32(0))
    i0 = np.minimum(src.astype(np.int64), in_size - 1)
    i1 = np.minimum(i0 + 1, in_size - 1)
    lambda1 = (src - i0.astype(np.float32)).astype(np.float32)
    return i0, i1, (np.float32(1) - lambda1).astype(np.float32), lambda1


def _upsample_bilinear(x, output_size, align_corners, scale_factors):
    n, c, h, w = x.shape
    if output_size:
        oh, ow = output_size
        sy = sx = None
    else:
        sy, sx = scale_factors
        oh, ow = int(h * sy), int(w * sx)
    y0, y1, ly0, ly1 = _source_index(oh, h, sy, align_corners)
    x0, x1, lx0, lx1 = _source_index(ow, w, sx, align_corners)
    top = x[:, :, y0][:, :, :, x0] * lx0 + x[:, :, y0][:, :, :, x1] * lx1
    bottom = x[:, :, y1][:, :, :, x0] * lx0 + x[:, :, y1][:, :, :, x1] * lx1
    return (ly0[:, None] * top + ly1[:, None] * bottom).astype(np.float32)


KERNELS: dict[object, Kernel] = {
    aten.avg_pool2d.default: Kernel(
        "aten::avg_pool2d", "out",
        ("self", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"),
        _avg_pool2d,
        lambda op: (not op.arg("ceil_mode") and op.arg("divisor_override") is None
                    and (op.arg("count_include_pad") or tuple(op.arg("padding")) in ((0,), (0, 0))))),
    aten.conv2d.default: Kernel(
        "aten::convolution", "out",
        ("input", "weight", "bias", "stride", "padding", "dilation", Fixed(False), Fixed([0, 0]), "groups"), _conv2d),
    aten.linear.default: Kernel("aten::linear", "out", ("input", "weight", "bias"), _linear),
    aten.adaptive_avg_pool2d.default: Kernel(
        "aten::mean", "out", ("self", Fixed([2, 3]), Fixed(True), Fixed(None)), _mean_hw,
        lambda op: tuple(op.output.shape[2:]) == (1, 1)),
    aten.upsample_bilinear2d.vec: Kernel(
        "aten::upsample_bilinear2d", "vec_out", ("input", "output_size", "align_corners", "scale_factors"),
        _upsample_bilinear),
}
