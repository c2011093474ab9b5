"""kiln's integer cortex_m kernels (kiln.program.kernels.integer) against two references
independent of them: ExecuTorch 1.5.1's own Python implementation of each operator, run in
.venv-executorch (bit for bit where it computes what kiln does: pad, the selections; within one
step where it requantizes, as CMSIS-NN rounds twice where kiln rounds once, or computes in
float: avg_pool2d, softmax), and the PT2E
reference, the float op between a dequantize and a quantize in PyTorch, within one
quantization step. Cases take odd sizes, channel counts that are no multiple of 16, and
extreme scales and zero points."""

from __future__ import annotations

import math
import pickle
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kiln.program import kernels
from kiln.program.kernels import integer as I
from tests.compiler.test_pte import ET_PYTHON, ROOT, needs_executorch

RNG = np.random.default_rng(32)


def q8(shape, low=-128, high=127):
    return RNG.integers(low, high + 1, shape, dtype=np.int8)


def quantize(real, scale, zp, low=-128, high=127):
    return np.clip(np.rint(real / scale) + zp, low, high)


def dequantized(q, scale, zp):
    return torch.tensor((q.astype(np.float64) - zp) * scale)


def per_channel(scales_in, scales_w, scale_out):
    pairs = [I.quantize_multiplier(scales_in * s / scale_out) for s in scales_w]
    return np.array([m for m, _ in pairs], np.int32), np.array([s for _, s in pairs], np.int32)


class Quantized:
    """One case: ExecuTorch's operator name, its arguments, and the PT2E reference (float op
    on the dequantized operands, quantized to the output's scale and zero point)."""

    def __init__(self, op, args, reference, et_exact=True, et_covers=True, planned=(0,), steps=1):
        self.op, self.args, self.reference, self.et_exact = op, args, reference, et_exact
        self.steps = steps  # how many quantization steps from the PT2E reference its method may be
        self.et_covers = et_covers  # ExecuTorch's Python has the operator and reads the arguments as kiln does
        self.planned = planned  # the positions of its activations (tensors a program plans, not constants)
        # its integers are CMSIS-NN's but where CMSIS-NN rounds twice (a requantization) or halves
        # away from zero (an average)
        self.requantizes = op not in (
            "pad",
            "quantized_max_pool2d",
            "minimum",
            "maximum",
            "transpose",
            "softmax",
            "quantized_activation",
        )


def linear_case(batch, n_in, n_out, s_in, zp_in, s_out, zp_out, per_channel_weights, act=(-128, 127), form="bias"):
    """form "bias": ExecuTorch's IntLists and bias; "kernel_sum": its MVE form, kernel_sum the
    bias plus the input offset times each row's weight sum (as kiln's compiler writes it);
    "tensors": that, as kiln's quantized_linear_per_channel (multipliers and shifts int32 tensors)."""
    x, w = q8((*batch, n_in)), q8((n_out, n_in), -127, 127)
    s_w = RNG.uniform(0.002, 0.03, n_out) if per_channel_weights else np.full(n_out, 0.01)
    bias = RNG.integers(-5000, 5000, n_out).astype(np.int32)
    mults, shifts = per_channel(s_in, s_w, s_out)
    if not per_channel_weights:
        mults, shifts = mults[:1], shifts[:1]
    args = [x, w, bias, None, -zp_in, 0, zp_out, mults.tolist(), shifts.tolist(), act[1], act[0]]
    if form != "bias":
        args[3] = (bias.astype(np.int64) - zp_in * w.astype(np.int64).sum(axis=1)).astype(np.int32)
    if form == "tensors":
        args[7], args[8] = mults.astype(np.int32), shifts.astype(np.int32)

    def reference():
        real = F.linear(
            torch.tensor((x.astype(np.float64) - zp_in) * s_in),
            torch.tensor(w * s_w[:, None]),
            torch.tensor(bias * s_in * s_w),
        )
        return np.clip(quantize(real.numpy(), s_out, zp_out), *act)

    # ExecuTorch's Python reads one multiplier (its AOT pass writes one: per-tensor weights).
    if form == "tensors":
        return Quantized("quantized_linear_per_channel", args, reference, et_covers=False)
    return Quantized("quantized_linear", args, reference, et_covers=not per_channel_weights)


def linear_s16_case(batch, n_in, n_out, s_in, s_out, per_channel_weights, act=(-32768, 32767)):
    x, w = RNG.integers(-32768, 32768, (*batch, n_in)).astype(np.int16), q8((n_out, n_in), -127, 127)
    s_w = RNG.uniform(0.002, 0.03, n_out) if per_channel_weights else np.full(n_out, 0.01)
    bias = RNG.integers(-(2**30), 2**30, n_out).astype(np.int64)
    mults, shifts = per_channel(s_in, s_w, s_out)
    if not per_channel_weights:
        mults, shifts = mults[:1], shifts[:1]
    args = [x, w, bias, mults.tolist(), shifts.tolist(), act[1], act[0]]

    def reference():
        real = F.linear(dequantized(x, s_in, 0), torch.tensor(w * s_w[:, None]), torch.tensor(bias * s_in * s_w))
        return np.clip(quantize(real.numpy(), s_out, 0, -32768, 32767), *act)

    return Quantized("quantized_linear_s16", args, reference, et_covers=False)


def conv_case(n, c, h, w, c_out, k, stride, pad, dilation, groups, s_in, zp_in, s_out, zp_out, act=(-128, 127)):
    x, weight = q8((n, c, h, w)), q8((c_out, c // groups, *k), -127, 127)
    s_w = RNG.uniform(0.001, 0.05, c_out)
    bias = RNG.integers(-20000, 20000, c_out).astype(np.int32)
    mults, shifts = per_channel(s_in, s_w, s_out)
    depthwise = groups == c and groups > 1
    if depthwise:
        op, layout = "quantized_depthwise_conv2d", weight.transpose(1, 2, 3, 0)  # IHWO
        extra = [c_out // c]
    else:
        op, layout, extra = "quantized_conv2d", weight.transpose(0, 2, 3, 1), []  # OHWI
    args = [
        x,
        np.ascontiguousarray(layout),
        bias,
        list(stride),
        list(pad),
        list(dilation),
        *extra,
        -zp_in,
        zp_out,
        mults,
        shifts,
        act[0],
        act[1],
        np.zeros(0, np.int8),
    ]

    def reference():
        real_weight = torch.tensor(weight * s_w[:, None, None, None])
        real = F.conv2d(
            dequantized(x, s_in, zp_in), real_weight, torch.tensor(bias * s_in * s_w), stride, pad, dilation, groups
        )
        return np.clip(quantize(real.numpy(), s_out, zp_out), *act)

    return Quantized(op, args, reference)


def add_case(shape, s1, zp1, s2, zp2, s_out, zp_out, act=(-128, 127)):
    a, b = q8(shape), q8(shape)
    twice = 2 * max(s1, s2)
    m1, sh1 = I.quantize_multiplier(s1 / twice)
    m2, sh2 = I.quantize_multiplier(s2 / twice)
    mo, sho = I.quantize_multiplier(twice / (s_out * (1 << I.ADD_LEFT_SHIFT)))
    args = [a, zp1, m1, sh1, b, zp2, m2, sh2, zp_out, mo, sho, act[0], act[1]]

    def reference():
        real = (a.astype(np.float64) - zp1) * s1 + (b.astype(np.float64) - zp2) * s2
        return np.clip(quantize(real, s_out, zp_out), *act)

    return Quantized("quantized_add", args, reference, planned=(0, 4))


def add_s16_case(shape, s1, s2, s_out, act=(-32768, 32767)):
    a = RNG.integers(-32768, 32768, shape).astype(np.int16)
    b = RNG.integers(-32768, 32768, shape).astype(np.int16)
    twice = 2 * max(s1, s2)
    m1, sh1 = I.quantize_multiplier(s1 / twice)
    m2, sh2 = I.quantize_multiplier(s2 / twice)
    mo, sho = I.quantize_multiplier(twice / (s_out * (1 << I.ADD_LEFT_SHIFT_S16)))
    args = [a, m1, sh1, b, m2, sh2, mo, sho, act[0], act[1]]

    def reference():
        real = a.astype(np.float64) * s1 + b.astype(np.float64) * s2
        return np.clip(quantize(real, s_out, 0, -32768, 32767), *act)

    return Quantized("quantized_add_s16", args, reference, et_covers=False, planned=(0, 3))


def avg_pool_case(shape, k, stride, pad, ceil_mode, scale, zp):
    x = q8(shape)
    mult, shift = I.quantize_multiplier(scale)
    args = [x, list(k), list(stride), list(pad), ceil_mode, zp, mult, shift, np.zeros(0, np.int8)]

    def reference():
        real = F.avg_pool2d(
            torch.tensor((x.astype(np.float64) - zp) * scale), k, stride, pad, ceil_mode, count_include_pad=False
        )
        return quantize(real.numpy(), scale, zp)

    return Quantized("quantized_avg_pool2d", args, reference, et_exact=False)


def softmax_params(scale):
    """ExecuTorch's parameters of arm_softmax_s8 for an input scale (its AOT pass's formulas)."""
    mult, shift = I.quantize_multiplier(min(scale * 2**26, 2**31 - 1))
    diff_min = -int(np.floor(31 * 2.0**26 / 2.0**shift))
    return mult, shift, diff_min


def softmax_case(shape, scale, zp):
    x = q8(shape)
    mult, shift, diff_min = softmax_params(scale)
    args = [x, -1, zp, -128, mult, shift, diff_min]

    def reference():
        real = torch.softmax(torch.tensor((x.astype(np.float64) - zp) * scale), -1)
        return quantize(real.numpy(), 1 / 256, -128)

    return Quantized("softmax", args, reference, et_exact=False)


def softmax_s16_case(shape, scale, spread):
    """Values within +-spread: a row's differences stay within the exponential table's 10 (beyond,
    arm_softmax_s16 counts each as exp(-10), an error of its method that grows with the row)."""
    x = RNG.integers(-spread, spread + 1, shape).astype(np.int16)
    mult, shift = I.quantize_multiplier(scale * 65535 / I.S16_EXP_RANGE)
    args = [x, -1, mult, shift, *I.softmax_s16_tables()]

    def reference():
        return quantize(torch.softmax(dequantized(x, scale, 0), -1).numpy(), 1 / 32768, 0, -32768, 32767)

    # Its tables interpolate 1/(1 + x) and exp between 513 points: up to two steps of 1/32768 off.
    return Quantized("softmax_s16", args, reference, et_covers=False, steps=2)


def pad_case(shape, pre, post, value):
    x = q8(shape)
    args = [x, pre, post, value]

    def reference():
        rank = len(shape)
        widths = [w for d in reversed(range(rank)) for w in (pre[4 - rank + d], post[4 - rank + d])]
        return F.pad(torch.tensor(x), widths, value=value).numpy()

    return Quantized("pad", args, reference)


def mul_case(a_shape, b_shape, s1, zp1, s2, zp2, s_out, zp_out):
    a, b = q8(a_shape), q8(b_shape)
    mult, shift = I.quantize_multiplier(s1 * s2 / s_out)
    args = [a, zp1, b, zp2, zp_out, mult, shift]

    def reference():
        return quantize((dequantized(a, s1, zp1) * dequantized(b, s2, zp2)).numpy(), s_out, zp_out)

    return Quantized("quantized_mul", args, reference, et_covers=a_shape == b_shape, planned=(0, 2))


def div_case(shape, s1, zp1, s2, zp2, s_out, zp_out, dtype=np.int8):
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max + 1, shape).astype(dtype)
    b = RNG.integers(info.min, info.max + 1, shape).astype(dtype)
    b[b == zp2] = zp2 + 1  # no zero divisor: PT2E's quotient would be infinite
    b.flat[0] = zp2  # but one, whose quotient the kernel takes as 0
    args = [a, zp1, b, zp2, zp_out, s1 / (s2 * s_out)]

    def reference():
        real = dequantized(a, s1, zp1) / dequantized(b, s2, zp2)
        q = quantize(real.numpy(), s_out, zp_out, info.min, info.max)
        q.flat[0] = np.clip(zp_out, info.min, info.max)  # the kernel's 0 for a zero divisor
        return q

    return Quantized("quantized_div", args, reference, planned=(0, 2))


def bmm_case(batch, m, k, n, s1, zp1, s2, zp2, s_out, zp_out):
    lhs, rhs = q8((*batch, m, k)), q8((*batch, k, n))
    mult, shift = I.quantize_multiplier(s1 * s2 / s_out)
    rhs_t = np.ascontiguousarray(np.swapaxes(rhs, -1, -2))
    args = [lhs, -zp1, rhs_t, -zp2, zp_out, mult, shift, np.zeros(0, np.int8)]

    def reference():
        return quantize(torch.matmul(dequantized(lhs, s1, zp1), dequantized(rhs, s2, zp2)).numpy(), s_out, zp_out)

    return Quantized("quantized_batch_matmul", args, reference, et_covers=len(batch) == 1, planned=(0, 2))


def bmm_s16_case(batch, m, k, n, s1, s2, s_out, act=(-32768, 32767)):
    lhs = RNG.integers(-32768, 32768, (*batch, m, k), dtype=np.int16)
    rhs = RNG.integers(-32768, 32768, (*batch, k, n), dtype=np.int16)
    mult, shift = I.quantize_multiplier(s1 * s2 / s_out)
    rhs_t = np.ascontiguousarray(np.swapaxes(rhs, -1, -2))
    args = [lhs, rhs_t, mult, shift, act[0], act[1], np.zeros(0, np.int8)]

    def reference():
        real = torch.matmul(dequantized(lhs, s1, 0), dequantized(rhs, s2, 0)).numpy()
        return np.clip(quantize(real, s_out, 0, -32768, 32767), *act)

    return Quantized("quantized_batch_matmul_s16", args, reference, et_covers=False, planned=(0, 1))


def cat_case(shapes, dim, qparams, s_out, zp_out):
    tensors = [q8(shape) for shape in shapes]
    pairs = [I.quantize_multiplier(s / s_out) for s, _ in qparams]
    args = [tensors, dim, [zp for _, zp in qparams], [m for m, _ in pairs], [sh for _, sh in pairs], zp_out]

    def reference():
        real = torch.cat([dequantized(t, s, zp) for t, (s, zp) in zip(tensors, qparams)], dim)
        return quantize(real.numpy(), s_out, zp_out)

    return Quantized("quantized_cat", args, reference, et_covers=False)


def transpose_conv_case(
    n, c, h, w, c_out, k, stride, pad, out_pad, dilation, s_in, zp_in, s_out, zp_out, act=(-128, 127)
):
    x, weight = q8((n, c, h, w)), q8((c, c_out, *k), -127, 127)  # PyTorch's [C_in, C_out, kh, kw]
    s_w = RNG.uniform(0.001, 0.05, c_out)
    bias = RNG.integers(-20000, 20000, c_out).astype(np.int32)
    mults, shifts = per_channel(s_in, s_w, s_out)
    ohwi = np.ascontiguousarray(weight.transpose(1, 2, 3, 0))
    geometry = [list(stride), list(pad), list(out_pad), list(dilation)]
    scratch = np.zeros(0, np.int8)
    args = [x, ohwi, bias, *geometry, -zp_in, zp_out, mults, shifts, act[0], act[1], scratch, scratch]

    def reference():
        real_weight, real_bias = torch.tensor(weight * s_w[None, :, None, None]), torch.tensor(bias * s_in * s_w)
        real = F.conv_transpose2d(
            dequantized(x, s_in, zp_in), real_weight, real_bias, stride, pad, out_pad, 1, dilation
        )
        return np.clip(quantize(real.numpy(), s_out, zp_out), *act)

    return Quantized("quantized_transpose_conv2d", args, reference)


def max_pool_case(shape, k, stride, pad, dilation, ceil_mode, scale, zp, act=(-128, 127)):
    x = q8(shape)
    args = [x, list(k), list(stride), list(pad), list(dilation), ceil_mode, zp, zp, act[0], act[1]]

    def reference():
        real = F.max_pool2d(dequantized(x, scale, zp), k, stride, pad, dilation, ceil_mode)
        return np.clip(quantize(real.numpy(), scale, zp), *act)

    return Quantized("quantized_max_pool2d", args, reference, et_covers=dilation == (1, 1) and not ceil_mode)


def extremum_case(op, a_shape, b_shape, scale, zp):
    a, b = q8(a_shape), q8(b_shape)

    def reference():
        return quantize(getattr(torch, op)(dequantized(a, scale, zp), dequantized(b, scale, zp)).numpy(), scale, zp)

    return Quantized(op, [a, b], reference, planned=(0, 1))


def transpose_case(shape, perm, scale, zp):
    x = q8(shape)
    return Quantized(
        "transpose", [x, list(perm)], lambda: quantize(dequantized(x, scale, zp).permute(perm).numpy(), scale, zp)
    )


def table_of(fn, s_in, zp_in, s_out, zp_out):
    """The 256 outputs of fn between a dequantize and a quantize (PyTorch's float32 ops)."""
    q = torch.arange(-128, 128, dtype=torch.int32)
    real = fn((q - zp_in).to(torch.float32) * s_in)
    return torch.clamp(torch.round(real / s_out) + zp_out, -128, 127).to(torch.int8).numpy()


def activation_case(fn, shape, s_in, zp_in, s_out, zp_out):
    x = q8(shape)
    lut = table_of(fn, s_in, zp_in, s_out, zp_out)

    def reference():
        return quantize(fn(dequantized(x, s_in, zp_in)).numpy(), s_out, zp_out)

    return Quantized("quantized_activation", [x, lut], reference)


CASES = {
    "linear": linear_case((1,), 64, 10, 0.05, -3, 0.1, 7, False),
    "linear_odd": linear_case((3, 5), 37, 13, 0.0203, 100, 0.4, -90, False, (-20, 127)),
    "linear_per_channel": linear_case((2,), 21, 19, 0.05, 0, 0.2, 3, True),
    "linear_per_channel_tensors": linear_case((2,), 37, 19, 0.05, -11, 0.2, 3, True, form="tensors"),
    "linear_kernel_sum": linear_case((3,), 64, 8, 0.03, 120, 0.3, -7, False, (-128, 40), form="kernel_sum"),
    "linear_tiny_scales": linear_case((4,), 9, 7, 1.3e-5, -128, 2.0e-6, 127, False),
    "linear_large_scales": linear_case((1,), 250, 3, 7.5, 127, 900.0, -128, False),
    "linear_s16": linear_s16_case((3,), 37, 19, 1.0e-4, 2.0e-2, True),
    "linear_s16_per_tensor": linear_s16_case((2, 5), 64, 10, 3.0e-5, 1.0e-2, False, (-20000, 32767)),
    "linear_s16_fine": linear_s16_case((1,), 9, 7, 1.0e-5, 4.0e-5, True),
    "conv": conv_case(1, 3, 10, 9, 8, (3, 3), (1, 1), (1, 1), (1, 1), 1, 0.02, -10, 0.05, 5),
    "conv_odd_channels": conv_case(2, 5, 7, 11, 19, (3, 2), (2, 1), (1, 0), (1, 1), 1, 0.11, 33, 0.3, -60),
    "conv_stride_dilation": conv_case(1, 17, 9, 9, 6, (3, 3), (2, 2), (2, 1), (2, 2), 1, 0.004, 127, 0.01, -128),
    "conv_grouped": conv_case(1, 6, 8, 8, 9, (3, 3), (1, 1), (1, 1), (1, 1), 3, 0.05, 0, 0.08, 0),
    "conv_relu_range": conv_case(1, 4, 6, 6, 5, (1, 1), (1, 1), (0, 0), (1, 1), 1, 0.03, -128, 0.04, -128, (-128, 40)),
    "conv_extreme_scale": conv_case(1, 2, 5, 5, 3, (5, 5), (1, 1), (2, 2), (1, 1), 1, 2.0e-4, 50, 3.0e-5, 100),
    "depthwise": conv_case(1, 24, 9, 7, 24, (3, 3), (1, 1), (1, 1), (1, 1), 24, 0.02, -5, 0.03, 2),
    "depthwise_multiplier": conv_case(1, 5, 8, 10, 15, (3, 3), (2, 2), (1, 1), (1, 1), 5, 0.1, 10, 0.2, -7),
    "depthwise_wide": conv_case(1, 3, 12, 5, 3, (5, 3), (1, 2), (2, 1), (1, 1), 3, 0.007, 90, 0.004, -110),
    "add": add_case((1, 8, 5, 5), 0.05, -4, 0.07, 9, 0.1, 1),
    "add_odd": add_case((3, 17), 0.013, 127, 0.5, -128, 0.4, -20, (-100, 100)),
    "add_equal_scales": add_case((2, 3, 7), 0.1, 0, 0.1, 0, 0.1, 0),
    "add_extreme": add_case((29,), 1.0e-4, 60, 3.0, -60, 2.5, 127),
    "add_s16": add_s16_case((1, 8, 5, 5), 1.0e-4, 2.0e-4, 3.0e-4),
    "add_s16_odd": add_s16_case((3, 17), 3.0e-5, 1.0e-3, 1.0e-3, (-1000, 30000)),
    "add_s16_equal_scales": add_s16_case((37,), 5.0e-4, 5.0e-4, 5.0e-4),
    "avg_pool": avg_pool_case((1, 8, 6, 6), (2, 2), (2, 2), (0, 0), False, 0.05, -3),
    "avg_pool_global": avg_pool_case((1, 19, 5, 7), (5, 7), (5, 7), (0, 0), False, 0.1, 20),
    "avg_pool_padded_ceil": avg_pool_case((2, 3, 7, 9), (3, 3), (2, 2), (1, 1), True, 0.02, -128),
    "avg_pool_odd": avg_pool_case((1, 5, 9, 4), (3, 2), (1, 2), (1, 1), False, 3.0, 127),
    "softmax": softmax_case((1, 10), 0.1, -3),
    "softmax_rows": softmax_case((3, 4, 37), 0.05, 20),
    "softmax_coarse": softmax_case((5, 12), 1.0, 0),
    "softmax_fine": softmax_case((2, 300), 0.002, -128),
    "softmax_s16": softmax_s16_case((1, 10), 1.0e-3, 4000),
    "softmax_s16_rows": softmax_s16_case((3, 4, 37), 1.2e-4, 32767),
    "softmax_s16_long": softmax_s16_case((2, 300), 3.0e-4, 16000),
    "softmax_s16_coarse": softmax_s16_case((5, 12), 0.05, 100),
    "pad": pad_case((1, 3, 4, 5), [0, 0, 1, 2], [0, 0, 3, 0], -128),
    "pad_rank2": pad_case((5, 7), [0, 0, 2, 1], [0, 0, 0, 4], 17),
    "pad_every_dim": pad_case((2, 2, 3, 2), [1, 2, 0, 1], [0, 1, 1, 1], 0),
    "mul": mul_case((1, 8, 5, 5), (1, 8, 5, 5), 0.05, -4, 0.07, 9, 0.02, 1),
    "mul_broadcast": mul_case((2, 19, 3), (19, 1), 0.013, 127, 0.5, -128, 0.4, -20),
    "mul_extreme": mul_case((37,), (37,), 1.0e-3, 60, 3.0, -60, 2.5e-4, 127),
    "div": div_case((1, 8, 5, 5), 0.05, -4, 0.07, 9, 0.02, 1),
    "div_fine": div_case((3, 17), 0.013, 127, 0.5, -128, 0.004, -20),
    "div_s16": div_case((2, 3, 7), 1.0e-3, 100, 2.0e-3, -300, 5.0e-4, 7, np.int16),
    "bmm": bmm_case((2,), 7, 19, 5, 0.05, -3, 0.04, 11, 0.3, 2),
    "bmm_heads": bmm_case((1, 3), 9, 33, 17, 0.02, 127, 0.03, -128, 0.5, -7),
    "bmm_matrix": bmm_case((), 4, 64, 6, 0.1, 0, 0.1, 0, 2.0, 0),
    "bmm_extreme": bmm_case((1,), 3, 5, 2, 2.0e-4, -128, 3.0e-4, 127, 1.0e-5, -100),
    "bmm_s16": bmm_s16_case((2,), 5, 19, 3, 1.0e-3, 2.0e-3, 0.5),
    "bmm_s16_heads": bmm_s16_case((1, 3), 8, 33, 17, 3.0e-5, 4.0e-5, 2.0e-5, (-30000, 32767)),
    "bmm_s16_fine": bmm_s16_case((), 4, 7, 6, 1.0e-4, 1.0e-4, 1.0e-3),
    "cat": cat_case([(1, 3, 4), (1, 5, 4)], 1, [(0.1, 0), (0.1, 0)], 0.1, 0),
    "cat_requantized": cat_case(
        [(2, 3, 5), (2, 3, 2), (2, 3, 1)], -1, [(0.05, -3), (0.2, 100), (1.0e-3, -128)], 0.1, 4
    ),
    "cat_first_dim": cat_case([(1, 17), (3, 17)], 0, [(0.5, 127), (0.02, 7)], 0.04, -128),
    "transpose_conv": transpose_conv_case(1, 3, 5, 4, 8, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 0.02, -10, 0.05, 5),
    "transpose_conv_odd": transpose_conv_case(
        2, 17, 3, 5, 5, (2, 3), (1, 2), (0, 1), (0, 1), (1, 1), 0.11, 33, 0.9, -60
    ),
    "transpose_conv_dilated": transpose_conv_case(
        1, 4, 4, 4, 3, (3, 2), (2, 1), (2, 0), (0, 0), (2, 3), 0.004, 127, 0.01, -128, (-128, 50)
    ),
    "transpose_conv_extreme": transpose_conv_case(
        1, 2, 3, 3, 2, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 2.0e-4, 50, 3.0e-6, 100
    ),
    "max_pool": max_pool_case((1, 8, 6, 6), (2, 2), (2, 2), (0, 0), (1, 1), False, 0.05, -3),
    "max_pool_padded": max_pool_case((2, 19, 7, 9), (3, 3), (2, 2), (1, 1), (1, 1), False, 0.02, -128, (-100, 90)),
    "max_pool_ceil_dilated": max_pool_case((1, 5, 9, 8), (3, 2), (2, 2), (1, 1), (2, 1), True, 3.0, 127),
    "minimum": extremum_case("minimum", (3, 17), (3, 17), 0.1, -7),
    "maximum_broadcast": extremum_case("maximum", (2, 1, 5), (3, 1), 0.02, 127),
    "transpose": transpose_case((2, 3, 5, 7), (0, 2, 1, 3), 0.1, 0),
    "transpose_last_two": transpose_case((3, 17, 9), (0, 2, 1), 0.5, -128),
    "sigmoid": activation_case(torch.sigmoid, (3, 37), 0.1, -5, 1 / 256, -128),
    "tanh": activation_case(torch.tanh, (2, 17), 0.03, 20, 1 / 128, 0),
    "gelu": activation_case(F.gelu, (5, 7), 0.05, -60, 0.02, -100),
    "hardswish": activation_case(F.hardswish, (33,), 3.0e-2, 127, 1.0e-2, -128),
}


def run(case: Quantized):
    kernel = I.INTEGER_KERNELS[f"cortex_m::{case.op}"]
    return kernel.run(*case.args)


@pytest.fixture(scope="module")
def executorch_results(tmp_path_factory):
    """ExecuTorch's result of every case, from one run of its Python."""
    folder = tmp_path_factory.mktemp("et_cortex_m")
    calls, results = folder / "calls.pickle", folder / "results.pickle"
    covered = {name: c for name, c in CASES.items() if c.et_covers}
    calls.write_bytes(pickle.dumps([(c.op, c.args) for c in covered.values()]))
    done = subprocess.run(
        [str(ET_PYTHON), str(ROOT / "tests" / "tools" / "et_cortex_m.py"), calls, results],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(zip(covered, pickle.loads(results.read_bytes())))


@needs_executorch
@pytest.mark.parametrize("name", [name for name, case in CASES.items() if case.et_covers])
def test_as_executorch_computes(name, executorch_results):
    """Each case ExecuTorch's Python has the operator and arguments for (the others are checked
    against PT2E alone)."""
    case = CASES[name]
    ours, theirs = run(case), executorch_results[name]
    if isinstance(theirs, str):
        pytest.skip(f"ExecuTorch's Python does not compute it: {theirs}")
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, (ours.shape, theirs.shape)
    difference = np.abs(ours.astype(np.int32) - theirs.astype(np.int32))
    assert difference.max() <= (0 if case.et_exact and not case.requantizes else 1), np.argwhere(difference)[:5]


@pytest.mark.parametrize("name", CASES)
def test_within_one_step_of_the_pt2e_reference(name):
    case = CASES[name]
    ours, expected = run(case), case.reference()
    assert ours.shape == expected.shape, (ours.shape, expected.shape)
    assert np.abs(ours.astype(np.int32) - expected).max() <= case.steps


def test_fixed_point_exponential_and_reciprocal():
    """exp(v / 2^26) and 1 / (1 + v / 2^31), both in Q0.31, over their input ranges, within
    CMSIS-NN's polynomial's error (relative 1e-6 where the result is large)."""
    v = -np.arange(0, 2**31, 2**31 // 4099, dtype=np.int64)
    exp = I.exp_on_negative_values(v)
    np.testing.assert_allclose(exp / 2.0**31, np.exp(v / 2.0**26), rtol=1e-6, atol=2e-9)
    u = np.arange(0, 2**31, 2**31 // 4099, dtype=np.int64)
    np.testing.assert_allclose(I.one_over_one_plus_x(u) / 2.0**31, 1 / (1 + u / 2.0**31), rtol=1e-8)


@pytest.mark.parametrize(
    "x, multiplier, shift, expected",
    [
        (100, 2**30, 0, 50),  # x * 0.5
        (101, 2**30, 0, 51),  # 50.5: halves round up
        (-101, 2**30, 0, -50),
        (-11, 2**30, -1, -3),  # -2.75
        (5, 2**30, -1, 1),  # 1.25 (CMSIS-NN: 2.5 -> 3, then 3 / 2 = 1.5 -> 2)
        (-2, 2**30, -1, 0),  # -0.5 rounds up (CMSIS-NN: -1, then -1 / 2 -> -1)
        (-13, 2**30, -2, -2),  # -1.625
        (1000, 1518500250, -3, 88),  # 1000 * 0.7071 / 8 = 88.39
        (-7, 2**30, 2, -14),  # a left shift
        (2**29, 2**30, 3, 2**31 - 2**31),  # 2^29 << 3 wraps to 0 in int32
    ],
)
def test_requantize_by_hand(x, multiplier, shift, expected):
    assert int(I.requantize(x, multiplier, shift)) == expected


def test_requantize_rounds_once():
    """Against exact rational arithmetic (Python's Fraction): floor(x 2^shift m / 2^31 + 1/2) for
    random sums, multipliers and shifts whose left shift stays within int32."""
    from fractions import Fraction

    rng = np.random.default_rng(7)
    shifts = rng.integers(-31, 8, 2000)
    xs = [int(rng.integers(-(2**31), 2**31)) >> max(int(s), 0) for s in shifts]
    ms = rng.integers(2**30, 2**31, 2000)
    got = I.requantize(np.array(xs), ms, shifts)
    for x, m, s, g in zip(xs, ms, shifts, got, strict=True):
        exact = Fraction(x * int(m)) * Fraction(2) ** int(s) / 2**31
        assert int(g) == math.floor(exact + Fraction(1, 2)), (x, m, s)


@pytest.mark.parametrize(
    "x, multiplier, shift, expected",
    [
        (100, 2**30, 0, 50),  # reduced to 2^14: 100 * 2^14 >> 14 = 100, (100 + 1) >> 1 = 50
        (101, 2**30, 0, 51),  # 50.5 rounds up
        (-101, 2**30, 0, -50),  # -50.5 rounds up too
        (3 << 20, 3 * 2**29, -4, 147456),  # 0.75 * 3 * 2^20 / 16
        (-(2**46), 0x7FFFFFFF, 14, 0),  # the multiplier saturates to 2^15 - 1; the result wraps to 0 in int32
    ],
)
def test_requantize_s64_by_hand(x, multiplier, shift, expected):
    assert int(I.requantize_s64(x, multiplier, shift)) == expected


def test_softmax_s16_tables_by_hand():
    """The end points are the functions' in Q15 (exp(0) = 1 clamped to 32767; 1 / (1 + 1) = 0.5),
    and every entry within two of the function (rounded, less half its interpolation's midpoint error)."""
    exp, one_by_one = I.softmax_s16_tables()
    assert (exp[-1], one_by_one[0], one_by_one[-1]) == (32767, 32767, 16384)
    points = np.linspace(-10.0, 0.0, 513)
    assert np.abs(exp[:-1] - np.exp(points[:-1]) * 32768).max() <= 2


def test_quantize_multiplier_by_hand():
    assert I.quantize_multiplier(0.5) == (2**30, 0)
    assert I.quantize_multiplier(0.75) == (3 * 2**29, 0)
    assert I.quantize_multiplier(3.0) == (3 * 2**29, 2)
    assert I.quantize_multiplier(1 - 2**-40) == (2**30, 1)  # the mantissa rounds up to 1


# ExecuTorch 1.5.1's operators only its explicit-layout flow (aot_arm_compiler
# --cortex-m-explicit-layout, experimental) writes: tensors sized N, H, W, C. kiln has none.
EXPLICIT_LAYOUT_ONLY = {
    f"cortex_m::{name}_nhwc"
    for name in (
        "quantized_conv2d",
        "quantized_depthwise_conv2d",
        "quantized_transpose_conv2d",
        "quantized_avg_pool2d",
        "quantized_max_pool2d",
    )
}


@needs_executorch
def test_every_executorch_operator_has_a_kernel_with_its_schema():
    """Each out variant in ExecuTorch's operators.yaml (its Cortex-M runtime's schemas), but those
    of its explicit-layout flow, is a kernel of kiln's runtime with the same arguments in order."""
    (yaml_path,) = (ROOT / ".venv-executorch" / "lib").glob(
        "python3*/site-packages/executorch/backends/cortex_m/ops/operators.yaml"
    )
    schemas = {}
    for line in yaml_path.read_text().splitlines():
        if line.startswith("- func: "):
            name, _, rest = line.removeprefix("- func: ").partition(".out(")
            before_out = rest.split(", *,")[0]
            schemas[name] = [argument.strip().split(" ")[-1] for argument in before_out.split(",")]
    assert EXPLICIT_LAYOUT_ONLY < set(schemas)
    ours = {
        name: list(kernel.schema_args) for (name, overload), kernel in kernels.by_name().items() if overload == "out"
    }
    assert {name: ours.get(name) for name in set(schemas) - EXPLICIT_LAYOUT_ONLY} == {
        name: schemas[name] for name in set(schemas) - EXPLICIT_LAYOUT_ONLY
    }
