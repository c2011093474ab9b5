"""Data-movement kernels: each C++ kernel (host build, ASan and UBSan) equals kiln.program.kernels'
numpy bit for bit on the same one-call program (kernel_programs)."""

from __future__ import annotations

import numpy as np
import pytest

from kernel_programs import In, X, run_kernel

CASES = {
    "view_copy": ("aten::view_copy", "out", [In(X), [2, 168]], (2, 168)),
}


@pytest.mark.parametrize("case", CASES)
def test_kernel_equals_kiln_kernels_bit_for_bit(runtime_host, tmp_path, case):
    got, expected = run_kernel(runtime_host, tmp_path, CASES[case])
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()
