"""Reduction and softmax kernels: each C++ kernel (host build, ASan and UBSan) equals kiln.program.kernels'
numpy bit for bit on the same one-call program (kernel_programs)."""

from __future__ import annotations

import numpy as np
import pytest

from kernel_programs import In, X, run_kernel

CASES = {
    "amax": ("aten::amax", "out", [In(X), [1, 3], False], (2, 7)),
    "sum": ("aten::sum", "IntList_out", [In(X), [-1], True, None], (2, 4, 7, 1)),
    "softmax": ("aten::_softmax", "out", [In(X), 1, False], X.shape),
    "log_softmax": ("aten::_log_softmax", "out", [In(X), -1, False], X.shape),
}


@pytest.mark.parametrize("case", CASES)
def test_kernel_equals_kiln_kernels_bit_for_bit(runtime_host, tmp_path, case):
    got, expected = run_kernel(runtime_host, tmp_path, CASES[case])
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()
