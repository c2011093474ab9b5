"""Conversions between float32 and integers: quantize, dequantize (per tensor and per channel)."""

from __future__ import annotations

import numpy as np
import torch

from kiln.program.kernels.core import Kernel, np_dtype
from kiln.vocabulary import DEQUANTIZE, QUANTIZE

aten = torch.ops.aten


def quantize_array(x, scale, zero_point, qmin, qmax, dtype):
    inverse = np.float32(1.0) / np.float32(scale)
    q = np.rint(x.astype(np.float32) * inverse) + np.float32(zero_point)  # rint: round half to even
    return np.clip(q, qmin, qmax).astype(np_dtype(dtype))


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


KERNELS: dict[object, Kernel] = {
    **{
        t: Kernel(
            "cortex_m::quantize_per_tensor",
            "out",
            ("input", "scale", "zero_point", "quant_min", "quant_max", "dtype"),
            quantize_array,
        )
        for t in QUANTIZE
    },
    **{
        t: Kernel(
            "cortex_m::dequantize_per_tensor",
            "out",
            ("input", "scale", "zero_point", "quant_min", "quant_max", "dtype"),
            _dequantize,
        )
        for t in DEQUANTIZE
    },
}


# Kernels kiln's compiler never calls but ExecuTorch's Arm flow does (its CPU-only
# programs dequantize their weights per channel at run time).
FOREIGN_KERNELS = (
    Kernel(
        "quantized_decomposed::dequantize_per_channel",
        "out",
        ("input", "scales", "zero_points", "axis", "quant_min", "quant_max", "dtype", "out_dtype"),
        _dequantize_per_channel,
    ),
)
