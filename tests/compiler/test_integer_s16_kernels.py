"""kiln's int16 integer kernels and its mean (kiln.program.kernels.integer_s16), each against the PT2E
reference (the float op on the dequantized operands, quantized to the output's scale) within one
quantization step, on odd sizes, strides, dilation, groups, a depthwise multiplier of 2, int16
inputs over their whole range and extreme scales."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kiln.program.kernels import INTEGER_KERNELS
from kiln.program.kernels import integer as I
from tests.compiler.test_cortex_m_kernels import Quantized, dequantized, q8, quantize

RNG = np.random.default_rng(16)
S16 = (-32768, 32767)


def q16(shape, low=-32768, high=32767):
    return RNG.integers(low, high + 1, shape).astype(np.int16)


def conv_s16_case(n, c, h, w, c_out, k, stride, pad, dilation, groups, s_in, s_out, act=S16, per_channel=True):
    x, weight = q16((n, c, h, w)), q8((c_out, c // groups, *k), -127, 127)
    s_w = RNG.uniform(0.001, 0.05, c_out) if per_channel else np.full(c_out, 0.01)
    bias = RNG.integers(-(2**24), 2**24, c_out).astype(np.int64)
    pairs = [I.quantize_multiplier(s_in * s / s_out) for s in s_w]
    mults, shifts = [m for m, _ in pairs], [s for _, s in pairs]
    if not per_channel:
        mults, shifts = mults[:1], shifts[:1]
    if groups == c and groups > 1:
        op, layout, extra = "quantized_depthwise_conv2d_s16", weight.transpose(1, 2, 3, 0), [c_out // c]
    else:
        op, layout, extra = "quantized_conv2d_s16", weight.transpose(0, 2, 3, 1), []
    geometry = [list(stride), list(pad), list(dilation)]
    args = [x, np.ascontiguousarray(layout), bias, *geometry, *extra, mults, shifts, act[0], act[1]]

    def reference():
        real_weight = torch.tensor(weight * s_w[:, None, None, None])
        real = F.conv2d(
            dequantized(x, s_in, 0), real_weight, torch.tensor(bias * s_in * s_w), stride, pad, dilation, groups
        )
        return np.clip(quantize(real.numpy(), s_out, 0, *S16), *act)

    return Quantized(op, args, reference, et_covers=False)


def mul_s16_case(shape_a, shape_b, s_a, s_b, s_out, act=S16):
    a, b = q16(shape_a), q16(shape_b)
    m, s = I.quantize_multiplier(s_a * s_b / s_out)
    args = [a, b, m, s, act[0], act[1]]

    def reference():
        real = dequantized(a, s_a, 0) * dequantized(b, s_b, 0)
        return np.clip(quantize(real.numpy(), s_out, 0, *S16), *act)

    return Quantized("quantized_mul_s16", args, reference, et_covers=False, planned=(0, 1))


def avg_pool_s16_case(shape, k, stride, pad, ceil_mode, scale, act=S16):
    x = q16(shape)
    args = [x, list(k), list(stride), list(pad), ceil_mode, act[0], act[1]]

    def reference():
        real = F.avg_pool2d(dequantized(x, scale, 0), k, stride, pad, ceil_mode, count_include_pad=False)
        return np.clip(quantize(real.numpy(), scale, 0, *S16), *act)

    return Quantized("quantized_avg_pool2d_s16", args, reference, et_covers=False)


def max_pool_s16_case(shape, k, stride, pad, dilation, ceil_mode, act=S16):
    x = q16(shape)
    args = [x, list(k), list(stride), list(pad), list(dilation), ceil_mode, act[0], act[1]]

    def reference():
        real = F.max_pool2d(torch.tensor(x.astype(np.float64)), k, stride, pad, dilation, ceil_mode)
        return np.clip(real.numpy(), *act)

    return Quantized("quantized_max_pool2d_s16", args, reference, et_covers=False)


def mean_case(shape, dims, keepdim, s_in, zp_in, s_out, zp_out, dtype=np.int8):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max + 1, shape).astype(dtype)
    count = int(np.prod([shape[d] for d in dims]))
    m, s = I.quantize_multiplier(s_in / (s_out * count))
    args = [x, list(dims), keepdim, zp_in, zp_out, m, s]

    def reference():
        real = dequantized(x, s_in, zp_in).mean(dim=tuple(dims), keepdim=keepdim)
        return quantize(real.numpy(), s_out, zp_out, info.min, info.max)

    return Quantized("quantized_mean", args, reference, et_covers=False)


CASES = {
    "conv_s16": conv_s16_case(1, 3, 7, 9, 5, (3, 3), (1, 1), (1, 1), (1, 1), 1, 2.0e-4, 3.0e-4),
    "conv_s16_strided_dilated": conv_s16_case(
        2, 6, 11, 8, 4, (3, 2), (2, 1), (2, 0), (2, 3), 2, 1.0e-3, 4.0e-2, (-1000, 32767)
    ),
    "conv_s16_per_tensor": conv_s16_case(
        1, 17, 5, 5, 19, (1, 1), (1, 1), (0, 0), (1, 1), 1, 3.0e-5, 1.0e-4, S16, False
    ),
    "depthwise_s16": conv_s16_case(1, 9, 8, 7, 9, (3, 3), (1, 1), (1, 1), (1, 1), 9, 5.0e-4, 2.0e-4),
    "depthwise_s16_multiplier": conv_s16_case(1, 4, 9, 6, 8, (3, 5), (2, 2), (1, 2), (1, 1), 4, 1.0e-2, 0.5),
    "mul_s16": mul_s16_case((2, 3, 5), (2, 3, 5), 1.0e-3, 2.0e-3, 0.1),
    "mul_s16_broadcast": mul_s16_case((2, 1, 7), (3, 1), 3.0e-4, 5.0e-2, 1.0e-3, (0, 30000)),
    "mul_s16_fine": mul_s16_case((33,), (33,), 1.0e-5, 1.0e-5, 1.0e-6),
    "avg_pool_s16": avg_pool_s16_case((1, 5, 8, 7), (2, 2), (2, 2), (0, 0), False, 1.0e-3),
    "avg_pool_s16_padded_ceil": avg_pool_s16_case((2, 3, 9, 10), (3, 3), (2, 2), (1, 1), True, 2.0e-4, (-100, 32767)),
    "avg_pool_s16_global": avg_pool_s16_case((1, 19, 6, 6), (6, 6), (6, 6), (0, 0), False, 3.0e-5),
    "max_pool_s16": max_pool_s16_case((1, 6, 7, 9), (2, 2), (2, 2), (0, 0), (1, 1), False),
    "max_pool_s16_padded": max_pool_s16_case((2, 3, 9, 8), (3, 3), (2, 2), (1, 1), (2, 1), True, (-500, 2000)),
    "mean_spatial": mean_case((2, 5, 7, 9), (2, 3), True, 0.05, -3, 0.02, 10),
    "mean_last": mean_case((3, 4, 37), (-1,), False, 0.1, 127, 0.1, -128),
    "mean_s16_spatial": mean_case((1, 19, 6, 11), (3, 2), True, 1.0e-4, 0, 2.0e-5, 0, np.int16),
    "mean_s16_last": mean_case((2, 300), (1,), False, 3.0e-3, 0, 3.0e-3, 0, np.int16),
    "mean_all": mean_case((4, 64, 128), (0, 1, 2), False, 1.0, 0, 1.0, 0),
}


@pytest.mark.parametrize("name", CASES)
def test_within_one_step_of_the_pt2e_reference(name):
    case = CASES[name]
    ours, expected = INTEGER_KERNELS[f"cortex_m::{case.op}"].run(*case.args), case.reference()
    assert ours.shape == expected.shape, (ours.shape, expected.shape)
    assert ours.dtype == case.args[0].dtype
    assert np.abs(ours.astype(np.int64) - expected).max() <= case.steps
