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


def _np_dtype(code: int) -> type:
    from kiln import pte, pte_writer

    return pte_writer.NUMPY_DTYPES[pte.ScalarType(code)]


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
                                 lambda x: (np.float32(1) / (np.float32(1) + np.exp(-x))).astype(np.float32)),
    aten.tanh.default: Kernel("aten::tanh", "out", ("self",), lambda x: np.tanh(x).astype(np.float32)),
    aten.add.Tensor: Kernel("aten::add", "out", ("self", "other", "alpha"), _binary(np.add),
                            lambda op: op.arg("alpha") in (None, 1)),
    aten.mul.Tensor: Kernel("aten::mul", "out", ("self", "other"), _binary(np.multiply)),
}


def by_name() -> dict[tuple[str, str], Kernel]:
    """Kernels by (operator name, overload), as a .pte names them."""
    return {(k.name, k.overload): k for k in KERNELS.values()}
