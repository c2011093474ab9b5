"""Elementwise kernels: each C++ kernel (host build, ASan and UBSan) equals kiln.program.kernels'
numpy bit for bit on the same one-call program (kernel_programs)."""

from __future__ import annotations

import numpy as np
import pytest

from kernel_programs import In, SPECIAL, X, rng_array, run_kernel

CASES = {
    "relu": ("aten::relu", "out", [In(SPECIAL)], (2, 4)),
    "relu_random": ("aten::relu", "out", [In(X)], X.shape),
    "hardtanh": ("aten::hardtanh", "out", [In(SPECIAL), -1.0, 2.5], (2, 4)),
    "add_broadcast": ("aten::add", "out", [In(rng_array((1, 3, 1, 4), 10)), In(rng_array((2, 1, 5, 4), 11)),
                                           1], (2, 3, 5, 4)),
    "sub_scalar": ("aten::sub", "out", [In(X), 0.3, None], X.shape),
    "mul_broadcast": ("aten::mul", "out", [In(rng_array((4, 1), 12)), In(rng_array((3,), 13))], (4, 3)),
    "reciprocal": ("aten::reciprocal", "out", [In(X)], X.shape),
    # exp/log/tanh in float64 rounded once to float32 on both sides (kiln.program.kernels)
    "exp": ("aten::exp", "out", [In(X)], X.shape),
    "log": ("aten::log", "out", [In(np.abs(X) + np.float32(0.01))], X.shape),
    "tanh": ("aten::tanh", "out", [In(X)], X.shape),
    "sigmoid": ("aten::sigmoid", "out", [In(X)], X.shape),
}


@pytest.mark.parametrize("case", CASES)
def test_kernel_equals_kiln_kernels_bit_for_bit(runtime_host, tmp_path, case):
    got, expected = run_kernel(runtime_host, tmp_path, CASES[case])
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()
