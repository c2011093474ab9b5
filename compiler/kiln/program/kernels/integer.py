"""Integer CPU kernels with ExecuTorch's cortex_m operator names and CMSIS-NN's arithmetic.

A quantized op kiln keeps on the CPU runs as one of these where its arguments allow (the
program builder chooses, kiln.program.integer_ops), in place of dequantize, float kernel,
quantize. Each computes the integers CMSIS-NN's int8 function computes (ExecuTorch 1.5.1's
Cortex-M runtime calls CMSIS-NN for these operators), so one schema serves both:

    cortex_m::quantized_linear            arm_fully_connected_s8 (per-channel multipliers too)
    cortex_m::quantized_conv2d            arm_convolve_wrapper_s8, weight OHWI
    cortex_m::quantized_depthwise_conv2d  arm_depthwise_conv_wrapper_s8, weight IHWO [1, kh, kw, C_out]
    cortex_m::quantized_add               arm_elementwise_add_s8
    cortex_m::quantized_avg_pool2d        arm_avgpool_s8 (windows clipped to the input)
    cortex_m::softmax                     arm_softmax_s8 (last dim, output scale 1/256, zero point -128)
    cortex_m::pad                         a constant pad of an int8 tensor

Arrays are in the order of their sizes (NCHW for the spatial operators) whatever their tensors'
dim order (ExecuTorch holds activations channels-last: run-host lays them out at its edges,
kiln.pte.dim_order, and gives pad its pads in the order of the dims). Integer arithmetic is int32
with two's-complement wrap where CMSIS-NN's C leaves overflow to the machine: accumulators,
and a requantize's left shift. The scratch argument ExecuTorch plans is taken and not read.
firmware/runtime/kernels/quantized*.cpp compute the same integers.
"""

from __future__ import annotations

import math

import numpy as np

from kiln.errors import HostError
from kiln.program.kernels.core import Kernel
from kiln.program.kernels.nn import pair, pool_size

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
ADD_LEFT_SHIFT = 20  # quantized_add's operands are (q - zero_point) << 20 before their multipliers


def quantize_multiplier(real: float) -> tuple[int, int]:
    """(multiplier, shift) with real = multiplier * 2^shift / 2^31, the multiplier a Q31 in
    [2^30, 2^31) (0 for 0): frexp's mantissa rounded to 31 bits (TFLite's QuantizeMultiplier)."""
    if real == 0.0:
        return 0, 0
    mantissa, shift = math.frexp(real)
    multiplier = round(mantissa * 2**31)
    if multiplier == 2**31:
        multiplier, shift = multiplier // 2, shift + 1
    return multiplier, shift


# --- CMSIS-NN's fixed-point primitives over int64 arrays holding int32 values ---------------


def wrap32(x):
    """int32 two's-complement wrap of int64 values."""
    return ((np.asarray(x, np.int64) + 2**31) & 0xFFFFFFFF) - 2**31


def _truncating_div(x, d: int):
    return np.where(x < 0, -((-x) // d), x // d)


def doubling_high_mult(a, b):
    """arm_nn_doubling_high_mult (MUL_SAT): round(a * b / 2^31), halves away from zero, with
    INT32_MIN * INT32_MIN saturating to INT32_MAX."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    nudge = np.where((a < 0) ^ (b < 0), 1 - 2**30, 2**30)
    result = _truncating_div(nudge + a * b, 2**31)
    return np.where((a == INT32_MIN) & (b == INT32_MIN), INT32_MAX, result)


def divide_by_power_of_two(x, exponent):
    """arm_nn_divide_by_power_of_two (DIV_POW2): x / 2^exponent rounded, halves away from zero;
    exponents beyond 31 (softmax's bits over unit for a very long row) extend it in int64."""
    x, e = np.asarray(x, np.int64), np.asarray(exponent, np.int64)
    mask = (np.int64(1) << e) - 1
    remainder = x & mask
    result = x >> e
    threshold = (mask >> 1) + (result < 0)
    return result + (remainder > threshold)


def requantize(x, multiplier, shift):
    """arm_nn_requantize: DIV_POW2(MUL_NO_SAT(x * 2^max(shift, 0), multiplier), max(-shift, 0)),
    the left shift and the high multiply's result wrapping to int32."""
    x, m, s = np.asarray(x, np.int64), np.asarray(multiplier, np.int64), np.asarray(shift, np.int64)
    shifted = wrap32(x << np.maximum(s, 0))
    high = wrap32((shifted * m + 2**30) >> 31)
    return divide_by_power_of_two(high, np.maximum(-s, 0))


def mult_by_power_of_two(x, exponent: int):
    """arm_nn_mult_by_power_of_two (MUL_POW2): x * 2^exponent saturated to int32."""
    return np.clip(np.asarray(x, np.int64) << exponent, INT32_MIN, INT32_MAX)


EXP_CONTRACTIONS = (1672461947, 1302514674, 790015084, 290630308, 39332535, 720401, 242)


def exp_on_negative_values(val):
    """arm_nn_exp_on_negative_values: exp(val / 2^26) in Q0.31 for val <= 0 (Q5.26): a Taylor
    polynomial on [-1/4, 0) and one multiply by exp(-2^k / 4) per set bit k of the rest."""
    val = np.asarray(val, np.int64)
    mod_minus_quarter = (val & ((1 << 24) - 1)) - (1 << 24)
    remainder = mod_minus_quarter - val
    x = (mod_minus_quarter << 5) + (1 << 28)
    x2 = doubling_high_mult(x, x)
    cubic = divide_by_power_of_two(doubling_high_mult(x2, x2), 2) + doubling_high_mult(x2, x)
    poly = x + divide_by_power_of_two(doubling_high_mult(cubic, 715827883) + x2, 1)
    result = 1895147668 + doubling_high_mult(1895147668, poly)
    for k, factor in enumerate(EXP_CONTRACTIONS):
        result = np.where(remainder & (1 << (24 + k)), doubling_high_mult(result, factor), result)
    return np.where(val == 0, INT32_MAX, result)


def one_over_one_plus_x(val):
    """arm_nn_one_over_one_plus_x_for_x_in_0_1: 1 / (1 + val / 2^31) in Q0.31, saturating at 1 (three
    Newton steps)."""
    total = np.asarray(val, np.int64) + INT32_MAX
    half = _truncating_div(total + np.where(total >= 0, 1, -1), 2)
    x = 1515870810 + doubling_high_mult(half, -1010580540)
    for _ in range(3):
        x = x + mult_by_power_of_two(doubling_high_mult(x, (1 << 29) - doubling_high_mult(half, x)), 2)
    return mult_by_power_of_two(x, 1)


def _finish(acc, output_offset, low, high):
    return np.clip(acc + output_offset, low, high).astype(np.int8)


def _check_int8(*arrays):
    for a in arrays:
        if a.dtype != np.int8:
            raise HostError(f"expected an int8 tensor, got {a.dtype}")


def _channel_params(multipliers, shifts, channels: int, axis_shape):
    m, s = np.asarray(multipliers, np.int64).reshape(-1), np.asarray(shifts, np.int64).reshape(-1)
    if m.shape != s.shape or m.size not in (1, channels) or np.any(np.abs(s) > 31):
        raise HostError(f"{m.size} multipliers and {s.size} shifts (each within 31) for {channels} channels")
    return np.broadcast_to(m, (channels,)).reshape(axis_shape), np.broadcast_to(s, (channels,)).reshape(axis_shape)


# --- The kernels -----------------------------------------------------------------------------


def quantized_linear(
    x, weights, bias, kernel_sum, input_offset, filter_offset, output_offset, multipliers, shifts, act_max, act_min
):
    """y[.., o] = requantize(sum_i (x + input_offset)(w[o, i] + filter_offset) + bias[o]) + output_offset,
    clamped; with kernel_sum (ExecuTorch's MVE form, bias folded in) the same sum, written
    sum_i x w + filter_offset sum_i x + kernel_sum[o]. The sum wraps to int32. One multiplier
    and shift, or one per output feature."""
    _check_int8(x, weights)
    out_features, in_features = weights.shape
    if x.shape[-1] != in_features:
        raise HostError(f"quantized_linear: input {x.shape} against weights {weights.shape}")
    rows = x.reshape(-1, in_features).astype(np.int64)
    w = weights.astype(np.int64)
    if kernel_sum is not None:
        acc = rows @ w.T + rows.sum(axis=1, keepdims=True) * filter_offset + kernel_sum.astype(np.int64).reshape(1, -1)
    else:
        acc = (rows + input_offset) @ (w + filter_offset).T
        if bias is not None:
            acc = acc + bias.astype(np.int64).reshape(1, -1)
    m, s = _channel_params(multipliers, shifts, out_features, (1, out_features))
    out = _finish(requantize(wrap32(acc), m, s), output_offset, act_min, act_max)
    return out.reshape(*x.shape[:-1], out_features)


def _conv(x, weight_oihw, bias, stride, padding, dilation, groups, input_offset):
    """int32-wrapped sums of (x + input_offset) * w over each window (padding contributes 0) plus bias."""
    n, c, h, w = x.shape
    cout, cin_g, kh, kw = weight_oihw.shape
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    if c != cin_g * groups or cout % groups or min(sh, sw, dh, dw) < 1 or min(ph, pw) < 0:
        raise HostError(f"convolution: input {x.shape}, weight {weight_oihw.shape}, groups {groups}")
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise HostError(f"convolution: input {h}x{w} gives output {oh}x{ow}")
    padded = np.zeros((n, c, h + 2 * ph, w + 2 * pw), np.int64)
    padded[:, :, ph : ph + h, pw : pw + w] = x.astype(np.int64) + input_offset
    acc = np.zeros((n, cout, oh, ow), np.int64)
    if bias is not None:
        acc += bias.astype(np.int64).reshape(1, cout, 1, 1)
    cout_g = cout // groups
    wt = weight_oihw.astype(np.int64)
    for g in range(groups):
        ins, outs = slice(g * cin_g, (g + 1) * cin_g), slice(g * cout_g, (g + 1) * cout_g)
        for i in range(kh):
            for j in range(kw):
                window = padded[
                    :, ins, i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw
                ]
                acc[:, outs] += np.einsum("nchw,oc->nohw", window, wt[outs, :, i, j])
    return wrap32(acc)


def _requantize_channels(acc, multipliers, shifts, output_offset, low, high):
    m, s = _channel_params(multipliers, shifts, acc.shape[1], (1, -1, 1, 1))
    return _finish(requantize(acc, m, s), output_offset, low, high)


def quantized_conv2d(
    x, weight, bias, stride, padding, dilation, input_offset, output_offset, multipliers, shifts, low, high, scratch
):
    """NCHW int8 input, OHWI int8 weight (symmetric), int32 bias; groups = C_in / I."""
    _check_int8(x, weight)
    if x.ndim != 4 or weight.ndim != 4 or weight.shape[3] < 1 or x.shape[1] % weight.shape[3]:
        raise HostError(f"quantized_conv2d: input {x.shape}, weight {weight.shape}")
    acc = _conv(
        x, weight.transpose(0, 3, 1, 2), bias, stride, padding, dilation, x.shape[1] // weight.shape[3], input_offset
    )
    return _requantize_channels(acc, multipliers, shifts, output_offset, low, high)


def quantized_depthwise_conv2d(
    x,
    weight,
    bias,
    stride,
    padding,
    dilation,
    depth_multiplier,
    input_offset,
    output_offset,
    multipliers,
    shifts,
    low,
    high,
    scratch,
):
    """NCHW int8 input, IHWO weight [1, kh, kw, C_in * depth_multiplier]: output channel o reads
    input channel o / depth_multiplier."""
    _check_int8(x, weight)
    if x.ndim != 4 or weight.ndim != 4 or weight.shape[0] != 1 or weight.shape[3] != x.shape[1] * depth_multiplier:
        raise HostError(
            f"quantized_depthwise_conv2d: input {x.shape}, weight {weight.shape}, multiplier {depth_multiplier}"
        )
    acc = _conv(x, weight.transpose(3, 0, 1, 2), bias, stride, padding, dilation, x.shape[1], input_offset)
    return _requantize_channels(acc, multipliers, shifts, output_offset, low, high)


def quantized_add(a, a_zp, a_mult, a_shift, b, b_zp, b_mult, b_shift, out_zp, out_mult, out_shift, low, high):
    """requantize(requantize((a - a_zp) << 20, a_mult, a_shift) + requantize((b - b_zp) << 20, ..),
    out_mult, out_shift) + out_zp, clamped; operands of one shape."""
    _check_int8(a, b)
    if a.shape != b.shape:
        raise HostError(f"quantized_add: operands {a.shape} and {b.shape} differ")
    left = requantize((a.astype(np.int64) - a_zp) << ADD_LEFT_SHIFT, a_mult, a_shift)
    right = requantize((b.astype(np.int64) - b_zp) << ADD_LEFT_SHIFT, b_mult, b_shift)
    return _finish(requantize(wrap32(left + right), out_mult, out_shift), out_zp, low, high)


def pool_windows(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool):
    """Each output's window [start, end) clipped to the input (PyTorch's count_include_pad=False)."""
    count = pool_size(size, kernel, stride, pad, ceil_mode)
    start = np.arange(count) * stride - pad
    return np.maximum(start, 0), np.minimum(start + kernel, size)


def quantized_avg_pool2d(x, kernel_size, stride, padding, ceil_mode, zero_point, multiplier, shift, scratch):
    """The sum of each window's int8 values (clipped to the input) divided by its count, halves
    away from zero (C's truncating division of sum +- count/2); zero_point, multiplier, shift
    are ExecuTorch's and unused (input and output share their quantization)."""
    _check_int8(x)
    (kh, kw), (sh, sw), (ph, pw) = pair(kernel_size), pair(stride), pair(padding)
    if x.ndim != 4 or min(kh, kw, sh, sw) < 1 or min(ph, pw) < 0 or 2 * ph > kh or 2 * pw > kw:
        raise HostError(f"quantized_avg_pool2d: input {x.shape}, kernel {kernel_size}, padding {padding}")
    (rs, re), (cs, ce) = (
        pool_windows(x.shape[2], kh, sh, ph, ceil_mode),
        pool_windows(x.shape[3], kw, sw, pw, ceil_mode),
    )
    if len(rs) < 1 or len(cs) < 1 or np.any(re <= rs) or np.any(ce <= cs):
        raise HostError(f"quantized_avg_pool2d: kernel {kernel_size} does not fit the input {x.shape}")
    # Summed-area table: the window sums in int64, exact.
    table = np.zeros((*x.shape[:2], x.shape[2] + 1, x.shape[3] + 1), np.int64)
    table[:, :, 1:, 1:] = x.astype(np.int64).cumsum(2).cumsum(3)
    sums = (
        table[:, :, re][:, :, :, ce]
        - table[:, :, rs][:, :, :, ce]
        - table[:, :, re][:, :, :, cs]
        + table[:, :, rs][:, :, :, cs]
    )
    count = np.outer(re - rs, ce - cs)
    rounded = np.where(sums > 0, sums + count // 2, sums - count // 2)
    return np.clip(_truncating_div(rounded, count), -128, 127).astype(np.int8)


SOFTMAX_ACCUM_BITS = 12
SOFTMAX_ZERO_POINT = -128  # the output zero point arm_softmax_s8 writes (scale 1/256)


def softmax(x, dim, input_zp, output_zp, multiplier, shift, diff_min):
    """arm_softmax_s8 along the last dim: with d = q - max(row) >= diff_min, e = EXP_ON_NEG(MUL_SAT(d << shift,
    multiplier)); sum = sum of DIV_POW2(e, 12) (int32, wrapping); out = DIV_POW2(MUL_SAT(ONE_OVER1((sum << clz(sum))
    - 2^31), e), 35 - clz(sum)) - 128, clamped; -128 where d < diff_min."""
    _check_int8(x)
    if x.ndim == 0 or dim not in (-1, x.ndim - 1) or output_zp != SOFTMAX_ZERO_POINT or not 0 <= shift <= 30:
        raise HostError(f"softmax: dim {dim} of {x.shape}, output zero point {output_zp}, shift {shift}")
    q = x.astype(np.int64)
    diff = q - q.max(axis=-1, keepdims=True)
    valid = diff >= diff_min
    e = exp_on_negative_values(doubling_high_mult(wrap32(np.where(valid, diff, 0) << shift), multiplier))
    total = wrap32(np.where(valid, divide_by_power_of_two(e, SOFTMAX_ACCUM_BITS), 0).sum(axis=-1, keepdims=True))
    unsigned = total & 0xFFFFFFFF
    headroom = 32 - np.frexp(unsigned.astype(np.float64))[1]  # count of leading zeros (32 for 0), exact
    normalized = np.where(total > 0, (unsigned << headroom) & 0xFFFFFFFF, 0)
    scale = one_over_one_plus_x(wrap32(normalized - 2**31))
    bits_over_unit = SOFTMAX_ACCUM_BITS - headroom + 23
    out = divide_by_power_of_two(doubling_high_mult(scale, e), bits_over_unit) - 128
    return np.where(valid, np.clip(out, -128, 127), -128).astype(np.int8)


def pad(x, pre_pad, post_pad, pad_value):
    """x with pre_pad[d] and post_pad[d] values of pad_value before and after it along each dim,
    the four-item lists right-aligned to x's dims (x has at most 4)."""
    _check_int8(x)
    if not 1 <= x.ndim <= 4 or len(pre_pad) != 4 or len(post_pad) != 4 or min(*pre_pad, *post_pad) < 0:
        raise HostError(f"pad: {x.ndim}-D input, pads {pre_pad} {post_pad}")
    if not -128 <= pad_value <= 127:
        raise HostError(f"pad: value {pad_value} is not an int8")
    widths = list(zip(pre_pad, post_pad))[4 - x.ndim :]
    return np.pad(x, widths, constant_values=np.int8(pad_value))


_CONV_ARGS = ("input", "weight", "bias", "stride", "padding", "dilation")
_REQUANTIZE_ARGS = ("requantize_multipliers", "requantize_shifts", "activation_min", "activation_max", "scratch")

# Operators by (name, overload): kiln.program.integer_ops builds their calls from graph ops.
INTEGER_KERNELS = {
    k.name: k
    for k in (
        Kernel(
            "cortex_m::quantized_linear",
            "out",
            (
                "input",
                "weights",
                "bias",
                "kernel_sum",
                "input_offset",
                "filter_offset",
                "output_offset",
                "requantize_multipliers",
                "requantize_shifts",
                "activation_max",
                "activation_min",
            ),
            quantized_linear,
        ),
        Kernel(
            "cortex_m::quantized_conv2d",
            "out",
            (*_CONV_ARGS, "input_offset", "output_offset", *_REQUANTIZE_ARGS),
            quantized_conv2d,
        ),
        Kernel(
            "cortex_m::quantized_depthwise_conv2d",
            "out",
            (*_CONV_ARGS, "depth_multiplier", "input_offset", "output_offset", *_REQUANTIZE_ARGS),
            quantized_depthwise_conv2d,
        ),
        Kernel(
            "cortex_m::quantized_add",
            "out",
            (
                "self",
                "self_zero_point",
                "self_multiplier",
                "self_shift",
                "other",
                "other_zero_point",
                "other_multiplier",
                "other_shift",
                "output_zero_point",
                "output_multiplier",
                "output_shift",
                "activation_min",
                "activation_max",
            ),
            quantized_add,
        ),
        Kernel(
            "cortex_m::quantized_avg_pool2d",
            "out",
            ("input", "kernel_size", "stride", "padding", "ceil_mode", "zero_point", "multiplier", "shift", "scratch"),
            quantized_avg_pool2d,
        ),
        Kernel(
            "cortex_m::softmax",
            "out",
            ("input", "dim", "input_zero_point", "output_zero_point", "input_multiplier", "input_shift", "diff_min"),
            softmax,
        ),
        Kernel("cortex_m::pad", "out", ("input", "pre_pad", "post_pad", "pad_value"), pad),
    )
}
