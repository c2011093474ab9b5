"""Integer cortex_m kernels: each C++ kernel (host build, ASan and UBSan) equals
kiln.program.kernels.integer's numpy bit for bit on the same one-call program
(tests/firmware/runtime/helpers.py), on the cases tests/compiler/test_cortex_m_kernels.py holds
against ExecuTorch's implementation and the PT2E reference; and refuses arguments outside
what it computes with an error, not a fault."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.program import kernels
from tests.compiler.test_cortex_m_kernels import CASES as OP_CASES
from tests.compiler.test_cortex_m_kernels import q8
from tests.firmware.runtime.helpers import In, Tensors, kernel_error, kernel_names, run_kernel


def _planned(a):
    return Tensors(In(t) for t in a) if isinstance(a, list) else In(a)


def program_case(name, cases=OP_CASES):
    """A case of test_cortex_m_kernels (or of `cases`) as a one-call program: activations planned
    inputs, weights and the rest constants, the output shape numpy's."""
    case = cases[name]
    args = [_planned(a) if i in case.planned else a for i, a in enumerate(case.args)]
    expected = kernels.INTEGER_KERNELS[f"cortex_m::{case.op}"].run(*case.args)
    return (f"cortex_m::{case.op}", "out", args, expected.shape, expected.dtype)


# Every case as a one-call program, as the other test_kernels_* modules' CASES (tests/fuzz's seeds,
# named by case: "cortex_m_" keeps these apart from the float kernels' cases of the same name).
CASES = {f"cortex_m_{name}": program_case(name) for name in OP_CASES}


@pytest.mark.parametrize("name", CASES)
def test_kernel_equals_kiln_kernels_bit_for_bit(runtime_host, tmp_path, name):
    got, expected = run_kernel(runtime_host, tmp_path, CASES[name])
    assert got.dtype == expected.dtype and got.tobytes() == np.ascontiguousarray(expected).tobytes()


def _with(name, position, value, out_shape=None, cases=OP_CASES):
    op, overload, args, shape, dtype = program_case(name, cases)
    args = list(args)
    args[position] = value
    return (op, overload, args, out_shape or shape, dtype)


UNSUPPORTED, MISMATCH, BAD = "unsupported arguments", "shape mismatch", "bad argument"
REFUSED = {  # the case, and the error: its kind and the argument it names
    "shift_beyond_31": (_with("add", 3, 32), UNSUPPORTED, 3),
    "operands_of_two_shapes": (_with("add", 4, In(q8((1, 8, 5, 4)))), MISMATCH, 4),
    "activation_range_inverted": (_with("add_odd", 11, 101), UNSUPPORTED, 12),
    "softmax_output_zero_point": (_with("softmax", 3, 0), UNSUPPORTED, 3),
    "softmax_not_last_dim": (_with("softmax", 1, 0), UNSUPPORTED, 1),
    "pad_negative": (_with("pad", 1, [0, 0, -1, 0]), UNSUPPORTED, 1),
    "conv_shifts_of_too_few_channels": (_with("conv", 9, np.zeros(3, np.int32)), MISMATCH, 9),
    "conv_int8_bias": (_with("conv", 2, np.zeros(8, np.int8)), BAD, 2),
    "conv_wrong_out_shape": (_with("conv", 0, In(q8((1, 3, 10, 9))), (1, 8, 9, 9)), MISMATCH, 13),
    "linear_multipliers_of_two_lengths": (_with("linear_per_channel", 8, [0]), MISMATCH, 7),
    "depthwise_multiplier_mismatch": (_with("depthwise", 6, 2), MISMATCH, 1),
    "avg_pool_padding_over_half": (_with("avg_pool", 3, [2, 0]), UNSUPPORTED, 3),
    "max_pool_zero_points_differ": (_with("max_pool", 7, 5), UNSUPPORTED, 7),
    "activation_table_of_255": (_with("sigmoid", 1, np.zeros(255, np.int8)), MISMATCH, 1),
    "bmm_inner_sizes_differ": (_with("bmm", 2, In(q8((2, 5, 18)))), MISMATCH, 2),
    "cat_shift_beyond_31": (_with("cat_requantized", 4, [1, 2, 32]), UNSUPPORTED, 4),
    "transpose_conv_output_padding_of_the_stride": (_with("transpose_conv", 5, [2, 2]), UNSUPPORTED, 5),
    "minimum_of_int16": (_with("minimum", 1, In(np.zeros((3, 17), np.int16))), BAD, 1),
    "mul_shift_beyond_31": (_with("mul", 6, -32), UNSUPPORTED, 6),
    "div_operands_of_two_shapes": (_with("div", 2, In(q8((1, 8, 5, 4)))), MISMATCH, 2),
    "div_zero_point_outside_int8": (_with("div", 1, 128), UNSUPPORTED, 1),
    "div_infinite_scale": (_with("div", 5, 1.0e300), UNSUPPORTED, 5),
    "bmm_s16_shift_beyond_14": (_with("bmm_s16", 3, 15), UNSUPPORTED, 3),
    "bmm_s16_of_int8": (_with("bmm_s16", 0, In(q8((2, 5, 19)))), BAD, 0),
    "softmax_s16_table_of_512": (_with("softmax_s16", 4, np.zeros(512, np.int16)), MISMATCH, 4),
    "softmax_s16_shift_beyond_15": (_with("softmax_s16", 3, 16), UNSUPPORTED, 3),
    "linear_s16_shift_beyond_14": (_with("linear_s16_per_tensor", 4, [15]), UNSUPPORTED, 4),
    "linear_s16_bias_beyond_2_40": (_with("linear_s16", 2, np.full(19, 2**41, np.int64)), UNSUPPORTED, 2),
}


@pytest.mark.parametrize("name", REFUSED)
def test_kernel_refuses_arguments_it_does_not_compute(runtime_host, tmp_path, name):
    case, kind, position = REFUSED[name]
    assert f"kernel: {kind} (a={position}," in kernel_error(runtime_host, tmp_path, case)


def test_every_integer_kernel_has_a_case():
    """Each kernel of kiln.program.kernels.integer is a case here (test_runtime_host checks
    the host build has every kernel)."""
    assert {case[:2] for case in CASES.values()} == kernel_names(kernels.integer)
