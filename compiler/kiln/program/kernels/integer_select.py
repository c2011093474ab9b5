"""Integer cortex_m kernels that select or look up int8 values and compute none: ExecuTorch's
operator names and schemas (executorch/backends/cortex_m/ops/operators.py, 1.5.1).

    cortex_m::quantized_max_pool2d  the max of each window (padding never wins), clamped to the
                                    activation range; input and output of one quantization
    cortex_m::minimum, maximum      elementwise, numpy broadcasting; operands and result of one
                                    quantization
    cortex_m::transpose             a permutation of dims (perm as permute's dims), int8 or int16
    cortex_m::quantized_activation  out[i] = lut[x[i] + 128]: any unary function of one int8,
                                    its 256-entry table built at compile time (kiln.program.integer_ops)

Each equals the float path between a dequantize and a quantize exactly where input and output
share a quantization (max, min and a permutation commute with the monotone quantize), and a
table is the float path itself, entry by entry. kiln.program.kernels.integer lists them with the
arithmetic kernels; firmware/runtime/kernels/quantized_select.cpp computes the same integers.
"""

from __future__ import annotations

import numpy as np

from kiln.errors import HostError
from kiln.program.kernels.movement import _max_pool2d, _permute

LUT_SIZE = 256  # one entry per int8 value, indexed by value + 128


def _check_int8(*arrays):
    for a in arrays:
        if a.dtype != np.int8:
            raise HostError(f"expected an int8 tensor, got {a.dtype}")


def quantized_max_pool2d(
    x, kernel_size, stride, padding, dilation, ceil_mode, input_zero_point, output_zero_point, low, high
):
    """aten::max_pool2d's windows on an NCHW int8 tensor (a window of no input element gives
    -128), clamped to [low, high]; the zero points are ExecuTorch's and must be equal."""
    _check_int8(x)
    if x.ndim != 4 or input_zero_point != output_zero_point or not -128 <= low <= high <= 127:
        raise HostError(f"quantized_max_pool2d: input {x.shape}, zero points {input_zero_point} {output_zero_point}")
    return np.clip(_max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode), low, high).astype(np.int8)


def minimum(a, b):
    _check_int8(a, b)
    return np.minimum(a, b)


def maximum(a, b):
    _check_int8(a, b)
    return np.maximum(a, b)


def transpose(x, perm):
    """int8 or int16 (the second operand of an int16 batch matmul)."""
    if x.dtype not in (np.int8, np.int16):
        raise HostError(f"transpose: a tensor of {x.dtype}, not int8 or int16")
    return _permute(x, perm)


def quantized_activation(x, lut):
    _check_int8(x, lut)
    if lut.shape != (LUT_SIZE,):
        raise HostError(f"quantized_activation: a table of {lut.shape}, not {LUT_SIZE} entries")
    return lut[x.astype(np.int32) + 128]
