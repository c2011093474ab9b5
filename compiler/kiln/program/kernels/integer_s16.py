"""kiln's integer kernels of int16 activations (CMSIS-NN's s16 conventions: symmetric, zero
point 0, int8 weights) for the ops kiln.program.kernels.integer's s16 kernels leave, and the mean
(int8 and int16), which no CMSIS-NN function computes:

    cortex_m::quantized_conv2d_s16            arm_convolve_s16: weight OHWI, int64 bias and sums,
                                              requantize_s64 per output channel
    cortex_m::quantized_depthwise_conv2d_s16  arm_depthwise_conv_s16: weight IHWO [1, kh, kw, C_out]
    cortex_m::quantized_mul_s16               arm_elementwise_mul_s16: requantize(a b) with the one
                                              combined multiplier, numpy broadcasting
    cortex_m::quantized_avg_pool2d_s16        arm_avgpool_s16: each window's exact sum, plus or minus
                                              half its count, divided by the count (truncating)
    cortex_m::quantized_max_pool2d_s16        arm_max_pool_s16: each window's max
    cortex_m::quantized_mean                  kiln's: the mean over the trailing dims of an int8 or
                                              int16 tensor, rounded once

each clamped to its activation range (int16 values) but the mean (its dtype's range).
firmware/runtime/kernels/quantized_conv_s16.cpp, quantized_pool_s16.cpp and quantized_mean.cpp
compute the same integers.
"""

from __future__ import annotations

import math

import numpy as np

from kiln.errors import HostError
from kiln.program.kernels import integer
from kiln.program.kernels.core import Kernel
from kiln.program.kernels.integer import (
    S16_MAX_INNER,
    _truncating_div,
    conv_sums,
    requantize,
    requantize_s64,
    window_sums,
    wrap32,
)
from kiln.program.kernels.movement import _max_pool2d

INT16_MIN, INT16_MAX = -(2**15), 2**15 - 1
S16_MAX_BIAS = 1 << 40  # with at most 2^16 products below 2^22, a sum within requantize_s64's 2^47
MEAN_MAX_COUNT = 1 << 15  # values a mean sums: |sum| < 2^31, times a multiplier < 2^31, within int64


def window_averages(x, kernel_size, stride, padding, ceil_mode):
    """Each window's sum divided by its count, halves away from zero (C's truncating division of
    sum +- count/2), as arm_avgpool_s16 computes it (kiln's int8 pool rounds halves to even:
    integer.quantized_avg_pool2d)."""
    sums, count = window_sums(x, kernel_size, stride, padding, ceil_mode)
    return _truncating_div(np.where(sums > 0, sums + count // 2, sums - count // 2), count)


def _check_int16(*arrays):
    for a in arrays:
        if a.dtype != np.int16:
            raise HostError(f"expected an int16 tensor, got {a.dtype}")


def _range(low, high):
    if not INT16_MIN <= low <= high <= INT16_MAX:
        raise HostError(f"activation range {low} {high} is not int16's")
    return low, high


def _requantize_s64_channels(acc, multipliers, shifts):
    """requantize_s64 of each output channel (axis 1) of the int64 sums."""
    m, s = list(multipliers), list(shifts)
    channels = acc.shape[1]
    if len(m) != len(s) or len(m) not in (1, channels) or any(not -31 <= v <= 14 for v in s):
        raise HostError(f"{len(m)} multipliers and {len(s)} shifts (each within [-31, 14]) for {channels} channels")
    if any(not -(2**31) <= v < 2**31 for v in m):
        raise HostError("a multiplier beyond int32")
    out = np.empty(acc.shape, np.int64)
    for c in range(channels):
        j = c if len(m) > 1 else 0
        out[:, c] = requantize_s64(acc[:, c], m[j], s[j])
    return out


def _conv_s16(x, weight_oihw, bias, stride, padding, dilation, groups, multipliers, shifts, low, high):
    _check_int16(x)
    if weight_oihw.dtype != np.int8 or (bias is not None and bias.dtype != np.int64):
        raise HostError(f"int16 convolution: weight of {weight_oihw.dtype}, bias of {getattr(bias, 'dtype', None)}")
    if math.prod(weight_oihw.shape[1:]) > S16_MAX_INNER:
        raise HostError(f"int16 convolution: windows of {math.prod(weight_oihw.shape[1:])} values, beyond 2^16")
    if bias is not None and np.any(np.abs(bias) > S16_MAX_BIAS):
        raise HostError("int16 convolution: a bias beyond 2^40")
    low, high = _range(low, high)
    acc = conv_sums(x, weight_oihw, bias, stride, padding, dilation, groups, 0)
    return np.clip(_requantize_s64_channels(acc, multipliers, shifts), low, high).astype(np.int16)


def quantized_conv2d_s16(x, weight, bias, stride, padding, dilation, multipliers, shifts, low, high):
    """NCHW int16 input, OHWI int8 weight (symmetric), int64 bias or None; groups = C_in / I."""
    if x.ndim != 4 or weight.ndim != 4 or weight.shape[3] < 1 or x.shape[1] % weight.shape[3]:
        raise HostError(f"quantized_conv2d_s16: input {x.shape}, weight {weight.shape}")
    groups = x.shape[1] // weight.shape[3]
    w = weight.transpose(0, 3, 1, 2)
    return _conv_s16(x, w, bias, stride, padding, dilation, groups, multipliers, shifts, low, high)


def quantized_depthwise_conv2d_s16(
    x, weight, bias, stride, padding, dilation, depth_multiplier, multipliers, shifts, low, high
):
    """NCHW int16 input, IHWO int8 weight [1, kh, kw, C_in * depth_multiplier]: output channel o
    reads input channel o / depth_multiplier."""
    if x.ndim != 4 or weight.ndim != 4 or weight.shape[0] != 1 or weight.shape[3] != x.shape[1] * depth_multiplier:
        raise HostError(f"quantized_depthwise_conv2d_s16: input {x.shape}, weight {weight.shape}")
    w = weight.transpose(3, 0, 1, 2)
    return _conv_s16(x, w, bias, stride, padding, dilation, x.shape[1], multipliers, shifts, low, high)


def quantized_mul_s16(a, b, multiplier, shift, low, high):
    """requantize(a b, multiplier, shift) clamped to [low, high]: the product of two int16 values
    (within 2^30) by the operands' scales over the output's, shift at most 0 (no left shift)."""
    _check_int16(a, b)
    if not -31 <= shift <= 0:
        raise HostError(f"quantized_mul_s16: shift {shift} is not within [-31, 0]")
    low, high = _range(low, high)
    product = a.astype(np.int64) * b.astype(np.int64)
    return np.clip(requantize(wrap32(product), multiplier, shift), low, high).astype(np.int16)


def quantized_avg_pool2d_s16(x, kernel_size, stride, padding, ceil_mode, low, high):
    _check_int16(x)
    low, high = _range(low, high)
    return np.clip(window_averages(x, kernel_size, stride, padding, ceil_mode), low, high).astype(np.int16)


def quantized_max_pool2d_s16(x, kernel_size, stride, padding, dilation, ceil_mode, low, high):
    """aten::max_pool2d's windows on an NCHW int16 tensor (a window of no input element gives
    -32768), clamped to [low, high]."""
    _check_int16(x)
    low, high = _range(low, high)
    if x.ndim != 4:
        raise HostError(f"quantized_max_pool2d_s16: input {x.shape}")
    return np.clip(_max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode), low, high).astype(np.int16)


def mean_count(shape, dim) -> int:
    """How many trailing dims of `shape` the mean reduces: `dim` must name exactly those (each once,
    negative counting from the end), at least one, of at most MEAN_MAX_COUNT values in all."""
    rank = len(shape)
    if not dim or any(not -rank <= d < rank for d in dim):
        raise HostError(f"quantized_mean: dims {dim} of a tensor of rank {rank}")
    dims = sorted(d % rank for d in dim)
    if dims != list(range(rank - len(dims), rank)):
        raise HostError(f"quantized_mean: dims {dim} are not the trailing dims of a tensor of rank {rank}")
    count = math.prod(shape[rank - len(dims) :])
    if not 1 <= count <= MEAN_MAX_COUNT:
        raise HostError(f"quantized_mean: {count} values a mean, not 1 to 2^15")
    return len(dims)


def quantized_mean(x, dim, keepdim, input_zero_point, output_zero_point, multiplier, shift):
    """The mean of each run of the trailing dims `dim`: (sum(q) - count input_zero_point) times
    multiplier / 2^(31 - shift), rounded once (halves up), plus output_zero_point, clamped to the
    input's type (int8 or int16, the output's too). multiplier / 2^(31 - shift) is the input scale
    over the output scale times the count; 31 - shift within [1, 62]."""
    if x.dtype not in (np.int8, np.int16):
        raise HostError(f"quantized_mean: a tensor of {x.dtype}")
    info = np.iinfo(x.dtype)
    reduced = mean_count(x.shape, list(dim))
    total = 31 - shift
    zero_points = (input_zero_point, output_zero_point)
    if not 0 <= multiplier < 2**31 or not 1 <= total <= 62 or any(not info.min <= z <= info.max for z in zero_points):
        raise HostError(f"quantized_mean: multiplier {multiplier}, shift {shift}, zero points {zero_points}")
    lead = x.shape[: x.ndim - reduced]
    count = math.prod(x.shape[x.ndim - reduced :])
    sums = x.reshape(*lead, count).astype(np.int64).sum(-1) - count * input_zero_point
    scaled = (sums * multiplier + (1 << (total - 1))) >> total
    out = np.clip(scaled + output_zero_point, info.min, info.max).astype(x.dtype)
    return out.reshape(*lead, *((1,) * reduced)) if keepdim else out


_CONV = ("input", "weight", "bias", "stride", "padding", "dilation")
_MAX_POOL = integer.INTEGER_KERNELS["cortex_m::quantized_max_pool2d"].schema_args  # input .. ceil_mode, then int8's
_REQUANTIZE = ("requantize_multipliers", "requantize_shifts", "activation_min", "activation_max")

KERNELS = {
    k.name: k
    for k in (
        Kernel("cortex_m::quantized_conv2d_s16", "out", (*_CONV, *_REQUANTIZE), quantized_conv2d_s16),
        Kernel(
            "cortex_m::quantized_depthwise_conv2d_s16",
            "out",
            (*_CONV, "depth_multiplier", *_REQUANTIZE),
            quantized_depthwise_conv2d_s16,
        ),
        Kernel(
            "cortex_m::quantized_mul_s16",
            "out",
            ("self", "other", "output_multiplier", "output_shift", "activation_min", "activation_max"),
            quantized_mul_s16,
        ),
        Kernel(
            "cortex_m::quantized_avg_pool2d_s16",
            "out",
            ("input", "kernel_size", "stride", "padding", "ceil_mode", "activation_min", "activation_max"),
            quantized_avg_pool2d_s16,
        ),
        Kernel(
            "cortex_m::quantized_max_pool2d_s16",
            "out",
            (*_MAX_POOL[:6], "activation_min", "activation_max"),
            quantized_max_pool2d_s16,
        ),
        Kernel(
            "cortex_m::quantized_mean",
            "out",
            ("input", "dim", "keepdim", "input_zero_point", "output_zero_point", "multiplier", "shift"),
            quantized_mean,
        ),
    )
}
