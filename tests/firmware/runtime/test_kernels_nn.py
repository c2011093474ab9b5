"""Convolution, linear, pooling and resizing kernels: each C++ kernel (host build, ASan and UBSan) equals kiln.program.kernels'
numpy bit for bit on the same one-call program (kernel_programs)."""

from __future__ import annotations

import numpy as np
import pytest

from kernel_programs import Doubles, In, X, rng_array, run_kernel

CASES = {
    "avg_pool2d": ("aten::avg_pool2d", "out", [In(X), [3, 3], [2, 2], [1, 1], False, True, None],
                   (2, 4, 4, 3)),
    "avg_pool2d_global": ("aten::avg_pool2d", "out", [In(X), [7, 6], [], [0, 0], False, True, None],
                          (2, 4, 1, 1)),
    "conv_groups": ("aten::convolution", "out",
                    [In(X), rng_array((6, 2, 3, 3), 4), rng_array((6,), 5), [2, 2], [1, 1], [1, 1], False,
                     [0, 0], 2], (2, 6, 4, 3)),
    "conv_dilated_no_bias": ("aten::convolution", "out",
                             [In(X), rng_array((3, 4, 2, 3), 6), None, [1, 1], [2, 1], [2, 2], False,
                              [0, 0], 1], (2, 3, 9, 4)),
    "linear": ("aten::linear", "out", [In(rng_array((3, 17), 7)), rng_array((5, 17), 8),
                                       rng_array((5,), 9)], (3, 5)),
    "linear_no_bias": ("aten::linear", "out", [In(rng_array((2, 2, 9), 7)), rng_array((4, 9), 8), None],
                       (2, 2, 4)),
    "mean": ("aten::mean", "out", [In(X), [2, 3], True, None], (2, 4, 1, 1)),
    "upsample": ("aten::upsample_bilinear2d", "vec_out", [In(X), [11, 13], False, None], (2, 4, 11, 13)),
    "upsample_corners": ("aten::upsample_bilinear2d", "vec_out", [In(X), [14, 5], True, None], (2, 4, 14, 5)),
    "upsample_scales": ("aten::upsample_bilinear2d", "vec_out", [In(X), None, False, Doubles((2.0, 1.5))],
                        (2, 4, 14, 9)),
}


@pytest.mark.parametrize("case", CASES)
def test_kernel_equals_kiln_kernels_bit_for_bit(runtime_host, tmp_path, case):
    got, expected = run_kernel(runtime_host, tmp_path, CASES[case])
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()
