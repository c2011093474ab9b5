"""The CPU kernels a kiln program may call, with ExecuTorch's operator names.

Each kernel names the operator as it appears in the .pte's operator table and
defines its semantics in numpy, float32 throughout and in a fixed evaluation
order, so that `kiln run-host` and the firmware's C++ kernels compute the same
bits. Arguments follow the operator's schema; out-variant kernels take the
output tensor last (the program lists it once more as the returned value).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from kiln.graph import DEQUANTIZE, QUANTIZE
from kiln.pte.schema import NUMPY_DTYPES, ScalarType

aten = torch.ops.aten


@dataclass(frozen=True)
class Kernel:
    name: str  # "cortex_m::quantize_per_tensor"
    overload: str  # "out"
    # The operator's arguments before the out tensor: the name of the graph op's argument,
    # or Fixed(value) where the kernel's schema has an argument the graph op lacks.
    schema_args: tuple
    run: Callable  # (*args) -> np.ndarray, args as the schema lists them
    accepts: Callable = lambda op: True  # (graph Op) -> whether `run` covers this call's arguments


@dataclass(frozen=True)
class Fixed:
    value: object


@dataclass(frozen=True)
class Derived:
    """An argument the kernel's schema has, computed from the graph op."""

    of: Callable  # (graph Op) -> value


def _mean_hw(x, dim, keepdim, dtype):
    """Mean over H and W, summed position by position (row-major) in float32."""
    n, c, h, w = x.shape
    acc = np.zeros((n, c), np.float32)
    for i in range(h):
        for j in range(w):
            acc += x[:, :, i, j]
    out = acc / np.float32(h * w)
    return out.reshape(n, c, 1, 1) if keepdim else out


def _quantize(x, scale, zero_point, qmin, qmax, dtype):
    inverse = np.float32(1.0) / np.float32(scale)
    q = np.rint(x.astype(np.float32) * inverse) + np.float32(zero_point)  # rint: round half to even
    return np.clip(q, qmin, qmax).astype(_np_dtype(dtype))


def _dequantize(q, scale, zero_point, qmin, qmax, dtype, out_dtype=None):
    return ((q.astype(np.int32) - np.int32(zero_point)).astype(np.float32) * np.float32(scale)).astype(np.float32)


def _dequantize_per_channel(q, scales, zero_points, axis, qmin, qmax, dtype, out_dtype=None):
    """float32(q - zero_points[c]) * scales[c] along `axis` (no zero points: 0), as PyTorch's
    quantized_decomposed.dequantize_per_channel computes it: the difference in int64 when the
    zero points are int64, else in int32 (wrapping)."""
    shape = [1] * q.ndim
    shape[axis] = q.shape[axis]
    wide = np.int64 if zero_points is not None and zero_points.dtype == np.int64 else np.int32
    zp = np.zeros(shape, wide) if zero_points is None else zero_points.astype(wide).reshape(shape)
    return ((q.astype(wide) - zp).astype(np.float32) * scales.astype(np.float32).reshape(shape)).astype(np.float32)


def _np_dtype(code: int) -> type:
    return NUMPY_DTYPES[ScalarType(code)]


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


def _in_float64(fn):
    """float32 `fn` (exp, log, tanh) evaluated in float64 and rounded once, so the result is
    the correctly rounded one for all but vanishingly rare inputs on any C library (the
    firmware's kernels do the same; numpy's float32 versions are approximations)."""
    return lambda x: fn(np.asarray(x, np.float64)).astype(np.float32)


_exp32, _log32, _tanh32 = _in_float64(np.exp), _in_float64(np.log), _in_float64(np.tanh)


def _softmax(x, dim, log):
    """Softmax along `dim`: the max subtracted, exp, the sum taken in index order."""
    shifted = (x - np.max(x, axis=dim, keepdims=True)).astype(np.float32)
    exps = _exp32(shifted)
    total = _sum_in_order(exps, [dim], True)
    return (shifted - _log32(total) if log else exps / total).astype(np.float32)


def _sum_in_order(x, dims, keepdim):
    """Sum over `dims` (one) in index order, in float32."""
    (dim,) = dims
    dim %= x.ndim
    acc = np.zeros_like(np.take(x, [0], axis=dim), dtype=np.float32)
    for i in range(x.shape[dim]):
        acc += np.take(x, [i], axis=dim)
    return acc if keepdim else np.squeeze(acc, axis=dim)


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


def _binary(fn):
    return lambda a, b, *rest: fn(np.float32(a) if np.isscalar(a) else a, np.float32(b) if np.isscalar(b) else b)


KERNELS: dict[object, Kernel] = {
    **{t: Kernel("cortex_m::quantize_per_tensor", "out",
                 ("input", "scale", "zero_point", "quant_min", "quant_max", "dtype"), _quantize) for t in QUANTIZE},
    **{t: Kernel("cortex_m::dequantize_per_tensor", "out",
                 ("input", "scale", "zero_point", "quant_min", "quant_max", "dtype"), _dequantize) for t in DEQUANTIZE},
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
    **{t: Kernel("aten::view_copy", "out", ("self", Derived(lambda op: list(op.output.shape))),
                 lambda x, size: np.ascontiguousarray(x).reshape(size))
       for t in (aten.view.default, aten.reshape.default, aten.flatten.using_ints, aten.squeeze.dim,
                 aten.squeeze.dims, aten.unsqueeze.default)},
    aten.adaptive_avg_pool2d.default: Kernel(
        "aten::mean", "out", ("self", Fixed([2, 3]), Fixed(True), Fixed(None)), _mean_hw,
        lambda op: tuple(op.output.shape[2:]) == (1, 1)),
    aten.relu.default: Kernel("aten::relu", "out", ("self",), lambda x: np.maximum(x, np.float32(0))),
    aten.hardtanh.default: Kernel("aten::hardtanh", "out", ("self", "min_val", "max_val"),
                                  lambda x, lo, hi: np.clip(x, np.float32(lo), np.float32(hi))),
    aten.sigmoid.default: Kernel("aten::sigmoid", "out", ("self",),
                                 lambda x: (np.float32(1) / (np.float32(1) + _exp32(-x))).astype(np.float32)),
    aten.tanh.default: Kernel("aten::tanh", "out", ("self",), _tanh32),
    aten.add.Tensor: Kernel("aten::add", "out", ("self", "other", "alpha"), _binary(np.add),
                            lambda op: op.arg("alpha") in (None, 1)),
    aten.mul.Tensor: Kernel("aten::mul", "out", ("self", "other"), _binary(np.multiply)),
    aten.sub.Tensor: Kernel("aten::sub", "out", ("self", "other", "alpha"), _binary(np.subtract),
                            lambda op: op.arg("alpha") in (None, 1)),
    aten.exp.default: Kernel("aten::exp", "out", ("self",), _exp32),
    aten.log.default: Kernel("aten::log", "out", ("self",), _log32),
    aten.reciprocal.default: Kernel("aten::reciprocal", "out", ("self",),
                                    lambda x: (np.float32(1) / x).astype(np.float32)),
    aten.amax.default: Kernel("aten::amax", "out", ("self", "dim", "keepdim"),
                              lambda x, dim, keepdim: np.max(x, axis=tuple(dim), keepdims=bool(keepdim))),
    aten.sum.dim_IntList: Kernel("aten::sum", "IntList_out", ("self", "dim", "keepdim", Fixed(None)),
                                 lambda x, dim, keepdim, dtype: _sum_in_order(x, dim, keepdim),
                                 lambda op: op.arg("dim") is not None and len(op.arg("dim")) == 1),
    **{t: Kernel("aten::_softmax", "out", ("self", "dim", Fixed(False)),
                 lambda x, dim, half: _softmax(x, dim, log=False)) for t in (aten.softmax.int, aten._softmax.default)},
    **{t: Kernel("aten::_log_softmax", "out", ("self", "dim", Fixed(False)),
                 lambda x, dim, half: _softmax(x, dim, log=True))
       for t in (aten.log_softmax.int, aten._log_softmax.default)},
    aten.upsample_bilinear2d.vec: Kernel(
        "aten::upsample_bilinear2d", "vec_out", ("input", "output_size", "align_corners", "scale_factors"),
        _upsample_bilinear),
}


# Kernels kiln's compiler never calls but ExecuTorch's Arm flow does (its CPU-only
# programs dequantize their weights per channel at run time).
FOREIGN_KERNELS = (
    Kernel("quantized_decomposed::dequantize_per_channel", "out",
           ("input", "scales", "zero_points", "axis", "quant_min", "quant_max", "dtype", "out_dtype"),
           _dequantize_per_channel),
)


def by_name() -> dict[tuple[str, str], Kernel]:
    """Kernels by (operator name, overload), as a .pte names them."""
    return {(k.name, k.overload): k for k in (*KERNELS.values(), *FOREIGN_KERNELS)}
