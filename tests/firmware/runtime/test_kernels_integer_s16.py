"""kiln's int16 integer kernels and its mean: each C++ kernel (host build, ASan and UBSan) equals
kiln.program.kernels.integer_s16's numpy bit for bit on the same one-call program
(tests/firmware/runtime/helpers.py), on the cases tests/compiler/test_integer_s16_kernels.py holds
against the PT2E reference; and refuses arguments outside what it computes with an error, not a
fault."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.program.kernels import integer_s16
from tests.compiler.test_integer_s16_kernels import CASES as OP_CASES
from tests.compiler.test_integer_s16_kernels import q16
from tests.firmware.runtime.helpers import In, kernel_error, kernel_names, run_kernel
from tests.firmware.runtime.test_kernels_integer import _with as with_argument
from tests.firmware.runtime.test_kernels_integer import program_case

CASES = {f"cortex_m_{name}": program_case(name, OP_CASES) for name in OP_CASES}


@pytest.mark.parametrize("name", CASES)
def test_kernel_equals_kiln_kernels_bit_for_bit(runtime_host, tmp_path, name):
    got, expected = run_kernel(runtime_host, tmp_path, CASES[name])
    assert got.dtype == expected.dtype and got.tobytes() == np.ascontiguousarray(expected).tobytes()


def _with(name, position, value, out_shape=None):
    return with_argument(name, position, value, out_shape, OP_CASES)


UNSUPPORTED, MISMATCH, BAD = "unsupported arguments", "shape mismatch", "bad argument"
REFUSED = {  # the case, and the error: its kind and the argument it names
    "conv_shift_beyond_14": (_with("conv_s16_per_tensor", 7, [15]), UNSUPPORTED, 7),
    "conv_int32_bias": (_with("conv_s16", 2, np.zeros(5, np.int32)), BAD, 2),
    "conv_bias_beyond_2_40": (_with("conv_s16", 2, np.full(5, 2**41, np.int64)), UNSUPPORTED, 2),
    "conv_int8_input": (_with("conv_s16", 0, In(np.zeros((1, 3, 7, 9), np.int8))), BAD, 0),
    "conv_range_inverted": (_with("conv_s16_strided_dilated", 9, -2000), UNSUPPORTED, 9),
    "depthwise_multiplier_of_other_channels": (_with("depthwise_s16_multiplier", 6, 3), MISMATCH, 1),
    "mul_left_shift": (_with("mul_s16", 3, 1), UNSUPPORTED, 3),
    "mul_shapes_that_do_not_broadcast": (_with("mul_s16", 1, In(q16((2, 4, 5)))), MISMATCH, 6),
    "avg_pool_padding_beyond_half": (_with("avg_pool_s16", 3, [2, 2]), UNSUPPORTED, 3),
    "max_pool_range_beyond_int16": (_with("max_pool_s16", 7, 2**15), UNSUPPORTED, 7),
    "mean_not_trailing": (_with("mean_spatial", 1, [1, 3]), UNSUPPORTED, 1),
    "mean_dim_twice": (_with("mean_last", 1, [2, -1]), UNSUPPORTED, 1),
    "mean_shift_beyond_30": (_with("mean_last", 6, 31), UNSUPPORTED, 6),
    "mean_negative_multiplier": (_with("mean_last", 5, -1), UNSUPPORTED, 5),
    "mean_zero_point_beyond_int8": (_with("mean_last", 3, 128), UNSUPPORTED, 3),
    "mean_of_more_than_2_15": (_with("mean_last", 0, In(np.zeros((1, 2**15 + 1), np.int8)), (1,)), UNSUPPORTED, 0),
}


@pytest.mark.parametrize("name", REFUSED)
def test_kernel_refuses_arguments_it_does_not_compute(runtime_host, tmp_path, name):
    case, kind, position = REFUSED[name]
    assert f"kernel: {kind} (a={position}," in kernel_error(runtime_host, tmp_path, case)


def test_every_s16_kernel_has_a_case():
    assert {case[:2] for case in CASES.values()} == kernel_names(integer_s16)
