"""Integer CPU kernels with ExecuTorch's cortex_m operator names and CMSIS-NN's arithmetic.

A quantized op kiln keeps on the CPU runs as one of these where its arguments allow (the
program builder chooses, kiln.program.integer_ops), in place of dequantize, float kernel,
quantize. Each computes the integers CMSIS-NN's int8 function computes (ExecuTorch 1.5.1's
Cortex-M runtime calls CMSIS-NN for these operators), so one schema serves both, with two
differences where CMSIS-NN rounds away from what PT2E's float computes: a requantization rounds
once (requantize), where CMSIS-NN rounds the high multiply and then the shift, and an average's
halves go to even (quantized_avg_pool2d). Each changes an output by at most one step from
CMSIS-NN's, and brings a model's integers to PT2E's (docs/cpu-targets.md has the figures):

    cortex_m::quantized_linear            arm_fully_connected_s8 (per-channel multipliers too)
    cortex_m::quantized_conv2d            arm_convolve_wrapper_s8, weight OHWI
    cortex_m::quantized_depthwise_conv2d  arm_depthwise_conv_wrapper_s8, weight IHWO [1, kh, kw, C_out]
    cortex_m::quantized_add               arm_elementwise_add_s8
    cortex_m::quantized_avg_pool2d        arm_avgpool_s8 (windows clipped to the input)
    cortex_m::softmax                     arm_softmax_s8 (along a dim, output scale 1/256, zero point -128)
    cortex_m::pad                         a constant pad of an int8 tensor
    cortex_m::quantized_mul               arm_elementwise_mul_s8 (numpy broadcasting)
    cortex_m::quantized_div               ExecuTorch's: a float32 quotient, rescaled (no CMSIS-NN function)
    cortex_m::quantized_batch_matmul      arm_batch_matmul_s8 (rhs transposed: [.., N, K])
    cortex_m::quantized_transpose_conv2d  arm_transpose_conv_s8, weight OHWI, one group
    cortex_m::quantized_cat               kiln's: a concatenation requantizing each input (no CMSIS-NN function)
    cortex_m::quantized_batch_matmul_s16  kiln's: arm_batch_matmul_s16 (int16, zero points 0, int64 sums)
    cortex_m::quantized_linear_s16        kiln's: arm_fully_connected_s16 (int8 weights, int64 bias and sums)
    cortex_m::quantized_linear_per_channel  kiln's: quantized_linear, its multipliers and shifts Int tensors
    cortex_m::quantized_add_s16           kiln's: arm_elementwise_add_s16 (zero points 0, operands << 15)
    cortex_m::softmax_s16                 kiln's: arm_softmax_s16 (last dim, its two 513-entry tables as tensors)

and those that select or look up values (kiln.program.kernels.integer_select): quantized_max_pool2d,
minimum, maximum, transpose, quantized_activation (a 256-entry table). kiln's int16 convolutions,
mul and pools and its mean are kiln.program.kernels.integer_s16's.

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
from kiln.program.kernels import integer_select as select
from kiln.program.kernels.core import Kernel
from kiln.program.kernels.nn import pair, pool_size

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
ADD_LEFT_SHIFT = 20  # quantized_add's operands are (q - zero_point) << 20 before their multipliers
ADD_LEFT_SHIFT_S16 = 15  # quantized_add_s16's, q << 15


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
    """x * 2^shift * multiplier / 2^31 rounded once, halves up: (x << max(shift, 0)) wrapping to
    int32 (as arm_nn_requantize's), times the multiplier exactly (|product| < 2^62), divided by
    2^(31 + max(-shift, 0)) with the rounding, the result wrapping to int32. arm_nn_requantize
    rounds twice (the high multiply, then DIV_POW2), which puts about one output in 2^(-shift)
    a step from the exact quotient PT2E's float rounds."""
    x, m, s = np.asarray(x, np.int64), np.asarray(multiplier, np.int64), np.asarray(shift, np.int64)
    shifted = wrap32(x << np.maximum(s, 0))
    exponent = 31 + np.maximum(-s, 0)
    return wrap32((shifted * m + (np.int64(1) << (exponent - 1))) >> exponent)


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


def quantized_linear_s16(x, weights, bias, multipliers, shifts, act_max, act_min):
    """kiln's int16 linear, arm_fully_connected_s16: int16 input and output of zero point 0, int8
    weights [out, in] (symmetric), an optional int64 bias (within 2^40); y[.., o] = requantize_s64(sum_i x w[o, i]
    + bias[o]) clamped to [act_min, act_max] (int16 values), the sum exact in int64. One multiplier
    and shift (each shift at most 14), or one per output feature."""
    _check_int8(weights)
    out_features, in_features = weights.shape
    if x.dtype != np.int16 or x.shape[-1] != in_features or in_features > S16_MAX_INNER:
        raise HostError(f"quantized_linear_s16: input {x.dtype} {x.shape} against weights {weights.shape}")
    if bias is not None and (bias.dtype != np.int64 or bias.size != out_features or np.abs(bias).max() > 2**40):
        raise HostError(f"quantized_linear_s16: a bias of {bias.dtype} {bias.shape}")
    if not -(2**15) <= act_min <= act_max < 2**15:
        raise HostError(f"quantized_linear_s16: activation range {act_min} {act_max}")
    m, s = _channel_params(multipliers, shifts, out_features, (-1,))
    if np.any(s > 14):
        raise HostError(f"quantized_linear_s16: shifts {s} beyond 14")
    acc = x.reshape(-1, in_features).astype(np.int64) @ weights.astype(np.int64).T
    if bias is not None:
        acc = acc + bias.reshape(1, -1)
    out = np.stack([requantize_s64(acc[:, o], int(m[o]), int(s[o])) for o in range(out_features)], axis=-1)
    return np.clip(out, act_min, act_max).astype(np.int16).reshape(*x.shape[:-1], out_features)


def _conv(x, weight_oihw, bias, stride, padding, dilation, groups, input_offset):
    """int32-wrapped sums of (x + input_offset) * w over each window (padding contributes 0) plus bias."""
    return wrap32(conv_sums(x, weight_oihw, bias, stride, padding, dilation, groups, input_offset))


def conv_sums(x, weight_oihw, bias, stride, padding, dilation, groups, input_offset):
    """The exact int64 sums of (x + input_offset) * w over each window (padding contributes 0) plus bias."""
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
    return acc


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


def _add_sum(a, a_zp, a_mult, a_shift, b, b_zp, b_mult, b_shift, out_mult, out_shift, left_shift: int):
    """requantize(requantize((a - a_zp) << left_shift, a_mult, a_shift) + requantize((b - b_zp) << ..),
    out_mult, out_shift): the sum of two operands of one shape on the output's scale."""
    if a.shape != b.shape:
        raise HostError(f"quantized_add: operands {a.shape} and {b.shape} differ")
    left = requantize((a.astype(np.int64) - a_zp) << left_shift, a_mult, a_shift)
    right = requantize((b.astype(np.int64) - b_zp) << left_shift, b_mult, b_shift)
    return requantize(wrap32(left + right), out_mult, out_shift)


def quantized_add(a, a_zp, a_mult, a_shift, b, b_zp, b_mult, b_shift, out_zp, out_mult, out_shift, low, high):
    """_add_sum with << 20, plus out_zp, clamped (arm_elementwise_add_s8)."""
    _check_int8(a, b)
    total = _add_sum(a, a_zp, a_mult, a_shift, b, b_zp, b_mult, b_shift, out_mult, out_shift, ADD_LEFT_SHIFT)
    return _finish(total, out_zp, low, high)


def quantized_add_s16(a, a_mult, a_shift, b, b_mult, b_shift, out_mult, out_shift, low, high):
    """kiln's int16 add, arm_elementwise_add_s16: zero points 0, _add_sum with << 15, clamped to
    [low, high] (int16 values)."""
    if a.dtype != np.int16 or b.dtype != np.int16 or not -(2**15) <= low <= high < 2**15:
        raise HostError(f"quantized_add_s16: operands of {a.dtype} and {b.dtype}, range {low} {high}")
    total = _add_sum(a, 0, a_mult, a_shift, b, 0, b_mult, b_shift, out_mult, out_shift, ADD_LEFT_SHIFT_S16)
    return np.clip(total, low, high).astype(np.int16)


def pool_windows(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool):
    """Each output's window [start, end) clipped to the input (PyTorch's count_include_pad=False)."""
    count = pool_size(size, kernel, stride, pad, ceil_mode)
    start = np.arange(count) * stride - pad
    return np.maximum(start, 0), np.minimum(start + kernel, size)


def window_sums(x, kernel_size, stride, padding, ceil_mode):
    """Each window's (clipped to the input) exact int64 sum and its count, of an NCHW tensor."""
    (kh, kw), (sh, sw), (ph, pw) = pair(kernel_size), pair(stride), pair(padding)
    if x.ndim != 4 or min(kh, kw, sh, sw) < 1 or min(ph, pw) < 0 or 2 * ph > kh or 2 * pw > kw:
        raise HostError(f"average pool: input {x.shape}, kernel {kernel_size}, padding {padding}")
    (rs, re), (cs, ce) = (
        pool_windows(x.shape[2], kh, sh, ph, ceil_mode),
        pool_windows(x.shape[3], kw, sw, pw, ceil_mode),
    )
    if len(rs) < 1 or len(cs) < 1 or np.any(re <= rs) or np.any(ce <= cs):
        raise HostError(f"average pool: kernel {kernel_size} does not fit the input {x.shape}")
    table = np.zeros((*x.shape[:2], x.shape[2] + 1, x.shape[3] + 1), np.int64)  # summed-area table
    table[:, :, 1:, 1:] = x.astype(np.int64).cumsum(2).cumsum(3)
    sums = (
        table[:, :, re][:, :, :, ce]
        - table[:, :, rs][:, :, :, ce]
        - table[:, :, re][:, :, :, cs]
        + table[:, :, rs][:, :, :, cs]
    )
    return sums, np.outer(re - rs, ce - cs)


def average_half_even(total, count):
    """total / count (count > 0) rounded to the nearest integer, halves to even."""
    quotient = total // count  # floor
    twice_rest = 2 * (total - quotient * count)  # in [0, 2 count)
    return quotient + ((twice_rest > count) | ((twice_rest == count) & (quotient % 2 == 1)))


def quantized_avg_pool2d(x, kernel_size, stride, padding, ceil_mode, zero_point, multiplier, shift, scratch):
    """Each window's (clipped to the input) average of its values less zero_point, rounded halves
    to even, plus zero_point: PT2E's float average quantized (torch.round); arm_avgpool_s8 rounds
    the average of the raw values halves away from zero. Input and output share their
    quantization: multiplier and shift are ExecuTorch's and unused."""
    _check_int8(x)
    if not -128 <= zero_point <= 127:
        raise HostError(f"quantized_avg_pool2d: zero point {zero_point} is no int8")
    sums, count = window_sums(x, kernel_size, stride, padding, ceil_mode)
    averages = average_half_even(sums - int(zero_point) * count, count) + int(zero_point)
    return np.clip(averages, -128, 127).astype(np.int8)


SOFTMAX_ACCUM_BITS = 12
SOFTMAX_ZERO_POINT = -128  # the output zero point arm_softmax_s8 writes (scale 1/256)


def softmax(x, dim, input_zp, output_zp, multiplier, shift, diff_min):
    """arm_softmax_s8 along `dim` (the firmware's: the last, or C of a channels-last tensor, whose
    elements lie next to each other): with d = q - max(row) >= diff_min, e = EXP_ON_NEG(MUL_SAT(d << shift,
    multiplier)); sum = sum of DIV_POW2(e, 12) (int32, wrapping); out = DIV_POW2(MUL_SAT(ONE_OVER1((sum << clz(sum))
    - 2^31), e), 35 - clz(sum)) - 128, clamped; -128 where d < diff_min."""
    _check_int8(x)
    if x.ndim == 0 or not -x.ndim <= dim < x.ndim or output_zp != SOFTMAX_ZERO_POINT or not 0 <= shift <= 30:
        raise HostError(f"softmax: dim {dim} of {x.shape}, output zero point {output_zp}, shift {shift}")
    if dim % x.ndim != x.ndim - 1:
        return np.moveaxis(
            softmax(np.moveaxis(x, dim, -1), -1, input_zp, output_zp, multiplier, shift, diff_min), -1, dim
        )
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


S16_LUT_SIZE = 513  # arm_softmax_s16's tables: 512 intervals and the end point
S16_EXP_RANGE = 10.0  # its exponential's table covers [-10, 0], its input differences [-65535, 0]
S16_SOFTMAX_MAX_ROW = 1 << 16  # rows whose int32 sum of int16 exponentials cannot wrap


def s16_table(fn, low: float, high: float) -> np.ndarray:
    """TFLite's gen_lut: fn on [low, high] at 513 points in Q15, each less half the error its
    interpolation would make at the interval's midpoint, clamped to int16."""
    step = (high - low) / (S16_LUT_SIZE - 1)
    points = low + step * np.arange(S16_LUT_SIZE)
    sample = np.round(fn(points) * 32768.0)
    interpolated = np.round((sample[1:] + sample[:-1]) / 2.0)
    error = interpolated - np.round(fn(points[:-1] + step / 2) * 32768.0)
    table = np.append(sample[:-1] - np.round(error / 2.0), sample[-1])
    return np.clip(table, -32768, 32767).astype(np.int16)


def softmax_s16_tables() -> tuple[np.ndarray, np.ndarray]:
    """arm_softmax_s16's exp_lut (exp on [-10, 0]) and one_by_one_lut (1 / (1 + x) on [0, 1])."""
    return s16_table(np.exp, -S16_EXP_RANGE, 0.0), s16_table(lambda x: 1.0 / (1.0 + x), 0.0, 1.0)


def _wrap16(x):
    return ((np.asarray(x, np.int64) + 2**15) & 0xFFFF) - 2**15


def _interpolate(table, v):
    """The s16 table's value at v in [-32768, 32767]: entry 256 + v / 128 and the slope to the
    next over the remainder, rounded; each step wraps to int16 as CMSIS-NN's int16_t variables."""
    index, offset = 256 + (v >> 7), v & 0x7F
    base, slope = table[index].astype(np.int64), _wrap16(table[index + 1].astype(np.int64) - table[index])
    return _wrap16(base + _wrap16((slope * offset + 64) >> 7))


def softmax_s16(x, dim, multiplier, shift, exp_lut, one_by_one_lut):
    """kiln's int16 softmax along the last dim, arm_softmax_s16: each difference from the row's max
    requantized to [-65535, 0] (10 / 65535 a step), its exponential from exp_lut, the row's sum
    normalized and its reciprocal from one_by_one_lut; output scale 1/32768, zero point 0."""
    if x.dtype != np.int16 or exp_lut.dtype != np.int16 or one_by_one_lut.dtype != np.int16:
        raise HostError(f"softmax_s16: an input of {x.dtype} or tables not int16")
    if x.ndim == 0 or dim not in (-1, x.ndim - 1) or not 0 < x.shape[-1] <= S16_SOFTMAX_MAX_ROW:
        raise HostError(f"softmax_s16: dim {dim} of {x.shape}")
    if exp_lut.shape != (S16_LUT_SIZE,) or one_by_one_lut.shape != (S16_LUT_SIZE,) or not -31 <= shift <= 15:
        raise HostError(f"softmax_s16: tables {exp_lut.shape} {one_by_one_lut.shape}, shift {shift}")
    q = x.astype(np.int64)
    scaled = requantize(q - q.max(axis=-1, keepdims=True), multiplier, shift)
    exps = _interpolate(exp_lut, np.clip(scaled + 32767, -32768, 32767))
    total = exps.sum(axis=-1, keepdims=True)  # a softmax table's: positive (the max's is 32767), below 2^31
    if total.size and not 2 <= total.min():
        raise HostError(f"softmax_s16: exp_lut's exponentials of a row sum to {int(total.min())}, below 2")
    headroom = 32 - np.frexp(total.astype(np.float64))[1]  # count of leading zeros, exact
    shifted = wrap32((total << (headroom - 1)) + (1 << 13)) >> 14
    reciprocal = _interpolate(one_by_one_lut, _wrap16(shifted - 98304))
    return _wrap16(((exps * reciprocal) >> (30 - headroom)) + 1 >> 1).astype(np.int16)


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


def quantized_mul(a, a_zp, b, b_zp, out_zp, out_mult, out_shift):
    """requantize((a - a_zp)(b - b_zp), out_mult, out_shift) + out_zp, clamped to int8
    (arm_elementwise_mul_s8); operands broadcast as numpy's."""
    _check_int8(a, b)
    product = (a.astype(np.int64) - a_zp) * (b.astype(np.int64) - b_zp)
    return _finish(requantize(wrap32(product), out_mult, out_shift), out_zp, -128, 127)


def quantized_div(a, a_zp, b, b_zp, out_zp, out_scale):
    """round((a - a_zp) / (b - b_zp) * out_scale) + out_zp in float32 (the quotient 0 where the
    divisor is 0; round half to even), clamped to the operands' type, int8 or int16, both of one
    shape: ExecuTorch 1.5.1's quantized_div, whose out_scale is the input scales' ratio over the
    output scale (a Double, used as float32)."""
    if a.dtype != b.dtype or a.dtype not in (np.int8, np.int16) or a.shape != b.shape:
        raise HostError(
            f"expected two int8 or int16 tensors of one shape, got {a.dtype} {a.shape}, {b.dtype} {b.shape}"
        )
    info = np.iinfo(a.dtype)
    if not all(info.min <= zp <= info.max for zp in (a_zp, b_zp, out_zp)):
        raise HostError(f"zero points {a_zp}, {b_zp}, {out_zp} outside {a.dtype}'s range")
    scale = np.float32(out_scale)
    if not np.isfinite(scale):
        raise HostError(f"output scale {out_scale} is not a finite float32")
    x = (a.astype(np.int32) - a_zp).astype(np.float32)
    y = (b.astype(np.int32) - b_zp).astype(np.float32)
    quotient = np.divide(x, y, out=np.zeros_like(x), where=y != 0)
    return np.clip(np.rint(quotient * scale) + np.float32(out_zp), info.min, info.max).astype(a.dtype)


def quantized_batch_matmul(lhs, lhs_offset, rhs_transposed, rhs_offset, out_zp, out_mult, out_shift, scratch):
    """out[.., m, n] = requantize(sum_k (lhs[.., m, k] + lhs_offset)(rhs_transposed[.., n, k] + rhs_offset))
    + out_zp, clamped to int8 (arm_batch_matmul_s8; the offsets are negated zero points). ExecuTorch
    passes [B, M, K] and [B, N, K]; kiln any number of leading dims, equal in both (none: one matrix)."""
    _check_int8(lhs, rhs_transposed)
    if lhs.ndim < 2 or lhs.shape[:-2] != rhs_transposed.shape[:-2] or lhs.shape[-1] != rhs_transposed.shape[-1]:
        raise HostError(f"quantized_batch_matmul: operands {lhs.shape} and {rhs_transposed.shape}")
    left = lhs.astype(np.int64) + lhs_offset
    right = rhs_transposed.astype(np.int64) + rhs_offset
    acc = wrap32(np.einsum("...mk,...nk->...mn", left, right))
    return _finish(requantize(acc, out_mult, out_shift), out_zp, -128, 127)


def reduce_multiplier(multiplier: int) -> int:
    """CMSIS-NN's REDUCE_MULTIPLIER: a Q31 multiplier as the Q15 its s16 kernels multiply by."""
    return (multiplier + (1 << 15)) >> 16 if multiplier < 0x7FFF0000 else 0x7FFF


def requantize_s64(x, multiplier: int, shift: int):
    """arm_nn_requantize_s64 (with REDUCE_MULTIPLIER): x * reduced >> (14 - shift), wrapped to
    int32, then halved rounding up; x within 2^47, shift at most 14."""
    high = wrap32((np.asarray(x, np.int64) * reduce_multiplier(multiplier)) >> (14 - shift))
    return wrap32(high + 1) >> 1


S16_MAX_INNER = 1 << 16  # inner sizes whose int64 sums of int16 products stay within 2^47


def quantized_batch_matmul_s16(lhs, rhs_transposed, out_mult, out_shift, low, high, scratch):
    """kiln's int16 form of quantized_batch_matmul, CMSIS-NN's arm_batch_matmul_s16: zero points
    0, out[.., m, n] = requantize_s64(sum_k lhs[.., m, k] rhs_transposed[.., n, k]) clamped to
    [low, high] (int16 values), the sum exact in int64."""
    if lhs.dtype != np.int16 or rhs_transposed.dtype != np.int16:
        raise HostError(f"quantized_batch_matmul_s16: operands of {lhs.dtype} and {rhs_transposed.dtype}")
    if lhs.ndim < 2 or lhs.shape[:-2] != rhs_transposed.shape[:-2] or lhs.shape[-1] != rhs_transposed.shape[-1]:
        raise HostError(f"quantized_batch_matmul_s16: operands {lhs.shape} and {rhs_transposed.shape}")
    if lhs.shape[-1] > S16_MAX_INNER or not -31 <= out_shift <= 14 or not -(2**15) <= low <= high < 2**15:
        raise HostError(
            f"quantized_batch_matmul_s16: inner size {lhs.shape[-1]}, shift {out_shift}, range {low} {high}"
        )
    acc = np.einsum("...mk,...nk->...mn", lhs.astype(np.int64), rhs_transposed.astype(np.int64))
    return np.clip(requantize_s64(acc, out_mult, out_shift), low, high).astype(np.int16)


def quantized_cat(tensors, dim, zero_points, multipliers, shifts, out_zp):
    """kiln's: the int8 tensors joined along dim, each value q of tensor i written as
    requantize(q - zero_points[i], multipliers[i], shifts[i]) + out_zp, clamped to int8 (its
    scale over the output's as a multiplier and shift; one of 2^30 and shift 1 copies q - zp)."""
    _check_int8(*tensors)
    if not tensors or not len(tensors) == len(zero_points) == len(multipliers) == len(shifts):
        raise HostError(f"quantized_cat: {len(tensors)} tensors, {len(zero_points)} zero points")
    if any(not -31 <= s <= 31 for s in shifts):
        raise HostError(f"quantized_cat: shifts {shifts} beyond 31")
    parts = [
        _finish(requantize(t.astype(np.int64) - zp, m, s), out_zp, -128, 127)
        for t, zp, m, s in zip(tensors, zero_points, multipliers, shifts)
    ]
    return np.concatenate(parts, axis=dim)


def quantized_transpose_conv2d(x, weight, bias, stride, padding, output_padding, dilation, *requantization):
    """NCHW int8 input, OHWI int8 weight (PyTorch's [C_in, C_out, kh, kw] permuted (1, 2, 3, 0);
    one group): input pixel (y, x) adds (x + input_offset) w to output (y s - p + i d, x s - p + j d);
    each output's sum plus bias wraps to int32 and is requantized per channel (arm_transpose_conv_s8).
    requantization: input_offset, output_offset, multipliers, shifts, low, high and the two scratch
    tensors ExecuTorch plans (not read)."""
    input_offset, output_offset, multipliers, shifts, low, high, _, _ = requantization
    _check_int8(x, weight)
    if x.ndim != 4 or weight.ndim != 4 or weight.shape[3] != x.shape[1]:
        raise HostError(f"quantized_transpose_conv2d: input {x.shape}, weight {weight.shape}")
    n, _, h, w = x.shape
    cout, kh, kw, _ = weight.shape
    (sh, sw), (ph, pw), (oph, opw), (dh, dw) = pair(stride), pair(padding), pair(output_padding), pair(dilation)
    if min(sh, sw, dh, dw) < 1 or min(ph, pw, oph, opw) < 0 or oph >= max(sh, dh) or opw >= max(sw, dw):
        raise HostError(f"quantized_transpose_conv2d: stride {stride}, padding {padding}, output {output_padding}")
    oh, ow = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1, (w - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    if oh < 1 or ow < 1:
        raise HostError(f"quantized_transpose_conv2d: input {h}x{w} gives output {oh}x{ow}")
    # Every input pixel's contributions on an unpadded canvas, then the output's window of it.
    canvas = np.zeros(
        (n, cout, max((h - 1) * sh + dh * (kh - 1) + 1, ph + oh), max((w - 1) * sw + dw * (kw - 1) + 1, pw + ow)),
        np.int64,
    )
    shifted, wt = x.astype(np.int64) + input_offset, weight.astype(np.int64)
    for i in range(kh):
        for j in range(kw):
            rows, cols = slice(i * dh, i * dh + sh * (h - 1) + 1, sh), slice(j * dw, j * dw + sw * (w - 1) + 1, sw)
            canvas[:, :, rows, cols] += np.einsum("nchw,oc->nohw", shifted, wt[:, i, j, :])
    acc = canvas[:, :, ph : ph + oh, pw : pw + ow]
    if bias is not None:
        acc = acc + bias.astype(np.int64).reshape(1, cout, 1, 1)
    return _requantize_channels(wrap32(acc), multipliers, shifts, output_offset, low, high)


_LINEAR_ARGS = (
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
)
_CONV_ARGS = ("input", "weight", "bias", "stride", "padding", "dilation")
_REQUANTIZE_ARGS = ("requantize_multipliers", "requantize_shifts", "activation_min", "activation_max", "scratch")

# Operators by (name, overload): kiln.program.integer_ops builds their calls from graph ops.
INTEGER_KERNELS = {
    k.name: k
    for k in (
        Kernel(
            "cortex_m::quantized_linear",
            "out",
            _LINEAR_ARGS,
            quantized_linear,
        ),
        Kernel(
            "cortex_m::quantized_linear_per_channel",
            "out",
            _LINEAR_ARGS,
            quantized_linear,
        ),
        Kernel(
            "cortex_m::quantized_linear_s16",
            "out",
            (
                "input",
                "weights",
                "bias",
                "requantize_multipliers",
                "requantize_shifts",
                "activation_max",
                "activation_min",
            ),
            quantized_linear_s16,
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
            "cortex_m::quantized_add_s16",
            "out",
            (
                "self",
                "self_multiplier",
                "self_shift",
                "other",
                "other_multiplier",
                "other_shift",
                "output_multiplier",
                "output_shift",
                "activation_min",
                "activation_max",
            ),
            quantized_add_s16,
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
        Kernel(
            "cortex_m::softmax_s16",
            "out",
            ("input", "dim", "input_multiplier", "input_shift", "exp_lut", "one_by_one_lut"),
            softmax_s16,
        ),
        Kernel(
            "cortex_m::quantized_mul",
            "out",
            (
                "self",
                "self_zero_point",
                "other",
                "other_zero_point",
                "output_zero_point",
                "output_multiplier",
                "output_shift",
            ),
            quantized_mul,
        ),
        Kernel(
            "cortex_m::quantized_div",
            "out",
            ("self", "self_zero_point", "other", "other_zero_point", "output_zero_point", "output_scale"),
            quantized_div,
        ),
        Kernel(
            "cortex_m::quantized_batch_matmul",
            "out",
            (
                "lhs",
                "lhs_zero_point",
                "rhs_transposed",
                "rhs_zero_point",
                "output_zero_point",
                "output_multiplier",
                "output_shift",
                "scratch",
            ),
            quantized_batch_matmul,
        ),
        Kernel(
            "cortex_m::quantized_batch_matmul_s16",
            "out",
            (
                "lhs",
                "rhs_transposed",
                "output_multiplier",
                "output_shift",
                "activation_min",
                "activation_max",
                "scratch",
            ),
            quantized_batch_matmul_s16,
        ),
        Kernel(
            "cortex_m::quantized_cat",
            "out",
            ("tensors", "dim", "zero_points", "multipliers", "shifts", "output_zero_point"),
            quantized_cat,
        ),
        Kernel(
            "cortex_m::quantized_transpose_conv2d",
            "out",
            (
                *_CONV_ARGS[:5],
                "output_padding",
                "dilation",
                "input_offset",
                "output_offset",
                *_REQUANTIZE_ARGS,
                "output_scratch",
            ),
            quantized_transpose_conv2d,
        ),
        Kernel(
            "cortex_m::quantized_max_pool2d",
            "out",
            (
                "input",
                "kernel_size",
                "stride",
                "padding",
                "dilation",
                "ceil_mode",
                "input_zero_point",
                "output_zero_point",
                "activation_min",
                "activation_max",
            ),
            select.quantized_max_pool2d,
        ),
        Kernel("cortex_m::minimum", "out", ("self", "other"), select.minimum),
        Kernel("cortex_m::maximum", "out", ("self", "other"), select.maximum),
        Kernel("cortex_m::transpose", "out", ("input", "perm"), select.transpose),
        Kernel("cortex_m::quantized_activation", "out", ("input", "lut"), select.quantized_activation),
    )
}
