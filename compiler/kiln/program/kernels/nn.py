"""Convolution, linear algebra, pooling and resizing over float32 tensors (NCHW for the
spatial ops); the C++ kernels are firmware/runtime/kernels/conv.cpp, linalg.cpp, pool.cpp and
upsample.cpp. Each function's docstring states its float32 order of evaluation."""

from __future__ import annotations

import numpy as np
import torch

from kiln.errors import HostError
from kiln.program.kernels.core import Derived, Fixed, Kernel
from kiln.program.kernels.reduce import float_operands

aten = torch.ops.aten


def pair(v) -> list[int]:
    """An int[2] argument as its two ints: an int or a 1-item list stands for both."""
    v = [v] if isinstance(v, int) else list(v)
    return v * 2 if len(v) == 1 else v


def _spatial(fn):
    """`fn` over NCHW applied to CHW too (an unbatched input is a batch of one)."""

    def run(x, *args):
        if x.ndim == 3:
            return run(x[None], *args)[0]
        if x.ndim != 4 or 0 in x.shape[2:]:
            raise HostError(f"expected a 3-D or 4-D input with non-empty planes, got {x.shape}")
        return fn(x, *args)

    return run


def _window_average(x, rows, cols, divisor):
    """Mean of each output's window: (start, end) arrays per output row and column, ends
    exclusive and within the input. Each output starts at +0.0 and adds its window's values
    row by row, left to right, in float32, then divides once by `divisor` (per output). The
    loop visits the largest window's offsets; an offset beyond an output's own window adds
    +0.0, which leaves an accumulator that started at +0.0 unchanged, bit for bit."""
    n, c, h, w = x.shape
    (hs, he), (ws, we) = rows, cols
    acc = np.zeros((n, c, len(hs), len(ws)), np.float32)
    for di in range(int(np.max(he - hs, initial=0))):
        r = hs + di
        inside_r = r < he
        r = np.minimum(r, h - 1)
        for dj in range(int(np.max(we - ws, initial=0))):
            col = ws + dj
            inside = inside_r[:, None] & (col < we)[None, :]
            values = x[:, :, r][:, :, :, np.minimum(col, w - 1)]
            acc += np.where(inside, values, np.float32(0))
    return (acc / divisor.astype(np.float32)).astype(np.float32)


def pool_size(size, kernel, stride, pad, ceil_mode):
    """PyTorch's pooling output size: floor (ceil) division, and with ceil_mode no window
    may start beyond the input and its left padding."""
    span = size + 2 * pad - kernel + (stride - 1 if ceil_mode else 0)
    out = span // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


@_spatial
def _avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    """PyTorch's avg_pool2d: window i covers [i*s - p, i*s - p + k) clipped to the padded
    input, then to the input; the divisor is divisor_override if given, else the padded
    window's size when count_include_pad, else the clipped window's."""
    (kh, kw), (ph, pw) = pair(kernel_size), pair(padding)
    sh, sw = pair(stride) if stride else (kh, kw)
    h, w = x.shape[2:]
    if 2 * ph > kh or 2 * pw > kw or divisor_override == 0 or abs(divisor_override or 0) > 2**32:
        raise HostError(
            f"avg_pool2d: padding {padding} over half the kernel {kernel_size}, or divisor {divisor_override}"
        )
    bounds = []
    for size, k, s, p in ((h, kh, sh, ph), (w, kw, sw, pw)):
        count = pool_size(size, k, s, p, ceil_mode)
        if count < 1:
            raise HostError(f"avg_pool2d: kernel {kernel_size} does not fit the input {h}x{w}")
        start = np.arange(count) * s - p
        end = np.minimum(start + k, size + p)
        bounds.append((start, end, np.maximum(start, 0), np.minimum(end, size)))
    (rs, re, rs_in, re_in), (cs, ce, cs_in, ce_in) = bounds
    if divisor_override is not None:
        divisor = np.full((len(rs), len(cs)), divisor_override)
    elif count_include_pad:
        divisor = np.outer(re - rs, ce - cs)
    else:
        divisor = np.outer(re_in - rs_in, ce_in - cs_in)
    return _window_average(x, (rs_in, re_in), (cs_in, ce_in), divisor)


def adaptive_windows(size: int, out: int):
    """PyTorch's adaptive pooling windows: [floor(i*size/out), ceil((i+1)*size/out))."""
    i = np.arange(out)
    return i * size // out, -(-(i + 1) * size // out)


@_spatial
def _adaptive_avg_pool2d(x, output_size):
    oh, ow = pair(output_size)
    if oh < 1 or ow < 1:
        raise HostError(f"adaptive_avg_pool2d: output size {output_size} is not positive")
    rows, cols = adaptive_windows(x.shape[2], oh), adaptive_windows(x.shape[3], ow)
    return _window_average(x, rows, cols, np.outer(rows[1] - rows[0], cols[1] - cols[0]))


def _conv2d(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """Float convolution; each output starts at 0, adds its bias, then the products in
    (input channel, kernel row, kernel column) order, in float32."""
    if transposed:
        return _conv_transpose2d(x, weight, bias, stride, padding, dilation, output_padding, groups)
    n, c, h, w = x.shape
    cout, cin_g, kh, kw = weight.shape
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    if groups < 1 or c != cin_g * groups or cout % groups or min(sh, sw, dh, dw) < 1 or min(ph, pw) < 0:
        raise HostError(
            f"convolution: {c} input channels, weight {weight.shape}, groups {groups}, stride {stride}, "
            f"padding {padding}, dilation {dilation}"
        )
    padded = np.zeros((n, c, h + 2 * ph, w + 2 * pw), np.float32)
    padded[:, :, ph : ph + h, pw : pw + w] = x
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = _start_at_bias((n, cout, oh, ow), bias)
    cout_g = cout // groups
    for g in range(groups):
        outs = slice(g * cout_g, (g + 1) * cout_g)
        for ci in range(cin_g):
            for i in range(kh):
                for j in range(kw):
                    window = padded[:, g * cin_g + ci, i * dh : i * dh + sh * oh : sh, j * dw : j * dw + sw * ow : sw]
                    out[:, outs] += window[:, None] * weight[outs, ci, i, j].reshape(1, -1, 1, 1)
    return out


def _start_at_bias(shape, bias):
    out = np.zeros(shape, np.float32)
    if bias is not None:
        out += bias.astype(np.float32).reshape(1, shape[1], 1, 1)
    return out


def transposed_size(size, kernel, stride, padding, dilation, output_padding) -> int:
    return (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


def _conv_transpose2d(x, weight, bias, stride, padding, dilation, output_padding, groups):
    """Transposed convolution, weight (C_in, C_out / groups, kh, kw): input (iy, ix) of
    channel ci feeds output (iy*s - p + i*d, ix*s - p + j*d) with weight[ci, co, i, j]. Each
    output starts at 0, adds its bias, then the products that reach it in (input channel,
    kernel row, kernel column) order, in float32 (one product per triple at most)."""
    (sh, sw), (ph, pw), (dh, dw), (oph, opw) = pair(stride), pair(padding), pair(dilation), pair(output_padding)
    n, c, h, w = x.shape
    cin, cout_g, kh, kw = weight.shape
    if groups < 1 or c != cin or c % groups or not (oph < max(sh, dh) and opw < max(sw, dw)):
        raise HostError(
            f"conv_transpose2d: {c} input channels, weight {weight.shape}, groups {groups}, "
            f"output_padding {output_padding}"
        )
    oh, ow = transposed_size(h, kh, sh, ph, dh, oph), transposed_size(w, kw, sw, pw, dw, opw)
    if min(h, w, oh, ow) < 1:
        raise HostError(f"conv_transpose2d: input {h}x{w} gives output {oh}x{ow}")
    # Outputs before cropping the padding: full[ph + y] is out[y].
    full = np.zeros(
        (
            n,
            cout_g * groups,
            max(ph + oh, (h - 1) * sh + dh * (kh - 1) + 1),
            max(pw + ow, (w - 1) * sw + dw * (kw - 1) + 1),
        ),
        np.float32,
    )
    full[:, :, ph : ph + oh, pw : pw + ow] = _start_at_bias((n, cout_g * groups, oh, ow), bias)
    cin_g = c // groups
    for g in range(groups):
        outs = slice(g * cout_g, (g + 1) * cout_g)
        for ci in range(g * cin_g, (g + 1) * cin_g):
            for i in range(kh):
                for j in range(kw):
                    rows = slice(i * dh, i * dh + sh * (h - 1) + 1, sh)
                    cols = slice(j * dw, j * dw + sw * (w - 1) + 1, sw)
                    full[:, outs, rows, cols] += x[:, ci, None] * weight[ci, :, i, j].reshape(1, -1, 1, 1)
    return np.ascontiguousarray(full[:, :, ph : ph + oh, pw : pw + ow])


def _matmul(a, b):
    """PyTorch's matmul: 1-D operands become a row (a) or column (b) and lose that dim
    again; batch dims broadcast. Each output starts at 0 and adds a[.., i, k] * b[.., k, j]
    in k order, in float32."""
    if a.ndim == 0 or b.ndim == 0:
        raise HostError("matmul of a 0-d tensor")
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise HostError(f"matmul: shapes {a.shape} and {b.shape} do not match")
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    out = np.zeros(batch + (a2.shape[-2], b2.shape[-1]), np.float32)
    for k in range(a2.shape[-1]):
        out += a2[..., :, k : k + 1] * b2[..., k : k + 1, :]
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]
    return out


def _fixed_rank(rank):
    """mm (rank 2) and bmm (rank 3, the same batch): _matmul without 1-D operands or broadcasting."""

    def run(a, b):
        if a.ndim != rank or b.ndim != rank or a.shape[:-2] != b.shape[:-2]:
            raise HostError(f"{'bmm' if rank == 3 else 'mm'}: shapes {a.shape} and {b.shape}")
        return _matmul(a, b)

    return run


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


def _pairs(*names):
    """Schema arguments: the graph op's int[2] arguments `names` as 2-item lists."""
    return tuple(Derived(lambda op, name=name: pair(op.arg(name))) for name in names)


def _rank(*ranks):
    """accepts: float operands, the first of one of `ranks`."""
    return lambda op: float_operands(op) and len(op.inputs[0].shape) in ranks


KERNELS: dict[object, Kernel] = {
    aten.avg_pool2d.default: Kernel(
        "aten::avg_pool2d",
        "out",
        ("self", *_pairs("kernel_size", "stride", "padding"), "ceil_mode", "count_include_pad", "divisor_override"),
        _avg_pool2d,
        _rank(3, 4),
    ),
    **{
        t: Kernel(
            "aten::_adaptive_avg_pool2d", "out", ("self", *_pairs("output_size")), _adaptive_avg_pool2d, _rank(3, 4)
        )
        for t in (aten.adaptive_avg_pool2d.default, aten._adaptive_avg_pool2d.default)
    },
    aten.conv2d.default: Kernel(
        "aten::convolution",
        "out",
        ("input", "weight", "bias", "stride", "padding", "dilation", Fixed(False), Fixed([0, 0]), "groups"),
        _conv2d,
    ),
    aten.conv_transpose2d.input: Kernel(
        "aten::convolution",
        "out",
        (
            "input",
            "weight",
            "bias",
            *_pairs("stride", "padding", "dilation"),
            Fixed(True),
            *_pairs("output_padding"),
            "groups",
        ),
        _conv2d,
        _rank(4),
    ),
    aten.linear.default: Kernel("aten::linear", "out", ("input", "weight", "bias"), _linear),
    aten.matmul.default: Kernel("aten::matmul", "out", ("self", "other"), _matmul, float_operands),
    aten.mm.default: Kernel("aten::mm", "out", ("self", "mat2"), _fixed_rank(2), float_operands),
    aten.bmm.default: Kernel("aten::bmm", "out", ("self", "mat2"), _fixed_rank(3), float_operands),
    aten.upsample_bilinear2d.vec: Kernel(
        "aten::upsample_bilinear2d",
        "vec_out",
        ("input", "output_size", "align_corners", "scale_factors"),
        _upsample_bilinear,
    ),
}
