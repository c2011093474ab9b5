"""Quantize and dequantize kernels: each C++ kernel (host build, ASan and UBSan) equals kiln.program.kernels'
numpy bit for bit on the same one-call program (tests/firmware/runtime/helpers.py)."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.program import kernels
from kiln.program.kernels import by_name
from tests.firmware.runtime.helpers import In, kernel_names, rng_array, run_kernel

CASES = {
    "quantize": (
        "cortex_m::quantize_per_tensor",
        "out",
        [In(rng_array((3, 50), 2, 40)), 0.37, -3, -128, 127, 1],
        (3, 50),
        np.int8,
    ),
    "quantize_int16": (
        "cortex_m::quantize_per_tensor",
        "out",
        [In(rng_array((64,), 3, 900)), 0.021, 5, -32768, 32767, 2],
        (64,),
        np.int16,
    ),
    "dequantize": (
        "cortex_m::dequantize_per_tensor",
        "out",
        [In(np.arange(-128, 128, dtype=np.int8)), 0.0731, 7, -128, 127, 1],
        (256,),
        np.float32,
    ),
    "dequantize_per_channel": (  # weights as ExecuTorch's Arm flow dequantizes them: int8, axis 0
        "quantized_decomposed::dequantize_per_channel",
        "out",
        [
            In(np.arange(-128, 128, dtype=np.int8).reshape(4, 1, 8, 8)),
            np.array([0.5, 0.013, 2.0e-5, 3.0], np.float32),
            np.array([0, -3, 127, 5], np.int64),
            0,
            -127,
            127,
            1,
            None,
        ],
        (4, 1, 8, 8),
    ),
    "dequantize_per_channel_int32": (  # a bias beyond float32's 24 bits; no zero points; axis 1
        "quantized_decomposed::dequantize_per_channel",
        "out",
        [
            In(np.array([[1, -(2**31) + 1, 2**31 - 1], [16_777_217, -5, 0]], np.int32).reshape(1, 2, 3)),
            np.array([1.5e-4, 7.0], np.float32),
            None,
            1,
            -(2**31) + 1,
            2**31 - 1,
            3,
            6,
        ],
        (1, 2, 3),
    ),
    "dequantize_per_channel_int32_long_zp": (  # int64 zero points: the difference does not wrap
        "quantized_decomposed::dequantize_per_channel",
        "out",
        [
            In(np.array([-(2**31) + 1, 2**31 - 1, 7], np.int32)),
            np.array([1.0, 0.5, 3.0], np.float32),
            np.array([5, -5, 2**31 - 1], np.int64),
            0,
            -(2**31) + 1,
            2**31 - 1,
            3,
            None,
        ],
        (3,),
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_kernel_equals_kiln_kernels_bit_for_bit(runtime_host, tmp_path, case):
    got, expected = run_kernel(runtime_host, tmp_path, CASES[case])
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()


@pytest.mark.parametrize(
    "case", ["dequantize_per_channel", "dequantize_per_channel_int32", "dequantize_per_channel_int32_long_zp"]
)
def test_dequantize_per_channel_equals_pytorch(case):
    """kiln.program.kernels' semantics against PyTorch's own quantized_decomposed operator."""
    import torch
    from torch.ao.quantization.fx import _decomposed  # noqa: F401 (registers quantized_decomposed)

    q, scales, zero_points, axis, qmin, qmax, dtype, out_dtype = CASES[case][2]
    torch_dtype = {1: torch.int8, 3: torch.int32}[dtype]
    expected = torch.ops.quantized_decomposed.dequantize_per_channel(
        torch.from_numpy(q.array),
        torch.from_numpy(scales),
        None if zero_points is None else torch.from_numpy(zero_points),
        axis,
        qmin,
        qmax,
        torch_dtype,
    ).numpy()
    got = by_name()[("quantized_decomposed::dequantize_per_channel", "out")].run(
        q.array, scales, zero_points, axis, qmin, qmax, dtype, out_dtype
    )
    assert got.dtype == np.float32 and got.tobytes() == expected.tobytes()


def test_every_quantize_kernel_has_a_case():
    """Each kernel of kiln.program.kernels.quantize is a case here (test_runtime_host checks that
    every family has its test_kernels_<family>.py and the host build has every kernel)."""
    assert {(case[0], case[1]) for case in CASES.values()} == kernel_names(kernels.quantize)
