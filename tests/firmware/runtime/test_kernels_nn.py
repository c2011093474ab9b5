"""Convolution, matrix product, pooling and resizing kernels: each C++ kernel (host build, ASan
and UBSan) equals kiln.program.kernels' numpy bit for bit on the same one-call program
(tests/firmware/runtime/helpers.py), and the numpy kernel agrees with PyTorch's eager op within float32
rounding (the bound in within_rounding)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kiln.errors import HostError
from kiln.program import kernels
from kiln.program.kernels import by_name
from tests.firmware.runtime.helpers import Doubles, In, X, kernel_error, kernel_names, rng_array, run_kernel

ODD = rng_array((1, 3, 5, 9), 30)
CHW = rng_array((3, 8, 5), 31)
SMALL = rng_array((2, 6, 3, 4), 32)
W_T = rng_array((6, 2, 3, 2), 33)  # transposed: (C_in, C_out / groups, kh, kw)

CASES = {
    "avg_pool2d": ("aten::avg_pool2d", "out", [In(X), [3, 3], [2, 2], [1, 1], False, True, None], (2, 4, 4, 3)),
    "avg_pool2d_global": ("aten::avg_pool2d", "out", [In(X), [7, 6], [], [0, 0], False, True, None], (2, 4, 1, 1)),
    "avg_pool2d_exclude_pad": (
        "aten::avg_pool2d",
        "out",
        [In(X), [3, 3], [2, 2], [1, 1], False, False, None],
        (2, 4, 4, 3),
    ),
    # ceil_mode where it changes nothing: 4 windows either way along H (7 + 2 - 3 = 6) and W
    "avg_pool2d_ceil": ("aten::avg_pool2d", "out", [In(X), [3, 2], [2, 2], [1, 1], True, True, None], (2, 4, 4, 4)),
    # H: ceil gives 4 windows, the 4th would start at row 5 = size (inside the padding): dropped,
    # so 3; W: 6 by ceil, the 6th would start at column 9 = size: dropped, so 5
    "avg_pool2d_ceil_last_window_in_padding": (
        "aten::avg_pool2d",
        "out",
        [In(ODD), [2, 2], [2, 2], [1, 1], True, False, None],
        (1, 3, 3, 5),
    ),
    # H: (5 - 2) / 2 -> 2 windows by floor, 3 by ceil; the 3rd covers row 4 and one row past
    # the input (divisor 1 even with count_include_pad: no padding there)
    "avg_pool2d_ceil_partial_window": (
        "aten::avg_pool2d",
        "out",
        [In(ODD), [2, 4], [2, 3], [0, 0], True, True, None],
        (1, 3, 3, 3),
    ),
    "avg_pool2d_divisor": ("aten::avg_pool2d", "out", [In(X), [2, 3], [1, 2], [1, 1], True, False, 5], (2, 4, 8, 4)),
    "avg_pool2d_chw": ("aten::avg_pool2d", "out", [In(CHW), [3, 3], [3, 3], [1, 0], False, True, None], (3, 3, 1)),
    "adaptive_avg_pool2d_global": ("aten::_adaptive_avg_pool2d", "out", [In(X), [1, 1]], (2, 4, 1, 1)),
    "adaptive_avg_pool2d_overlapping": ("aten::_adaptive_avg_pool2d", "out", [In(X), [3, 4]], (2, 4, 3, 4)),
    "adaptive_avg_pool2d_larger": ("aten::_adaptive_avg_pool2d", "out", [In(ODD), [7, 11]], (1, 3, 7, 11)),
    "adaptive_avg_pool2d_chw": ("aten::_adaptive_avg_pool2d", "out", [In(CHW), [5, 2]], (3, 5, 2)),
    "conv_groups": (
        "aten::convolution",
        "out",
        [In(X), rng_array((6, 2, 3, 3), 4), rng_array((6,), 5), [2, 2], [1, 1], [1, 1], False, [0, 0], 2],
        (2, 6, 4, 3),
    ),
    "conv_dilated_no_bias": (
        "aten::convolution",
        "out",
        [In(X), rng_array((3, 4, 2, 3), 6), None, [1, 1], [2, 1], [2, 2], False, [0, 0], 1],
        (2, 3, 9, 4),
    ),
    "conv_transposed": (
        "aten::convolution",
        "out",
        [In(SMALL), W_T[:, :, :, :], rng_array((2,), 34), [2, 2], [1, 1], [1, 1], True, [1, 1], 1],
        (2, 2, 6, 7),
    ),
    "conv_transposed_groups": (
        "aten::convolution",
        "out",
        [In(SMALL), W_T, rng_array((6,), 35), [2, 1], [0, 1], [1, 2], True, [1, 0], 3],
        (2, 6, 8, 4),
    ),
    "conv_transposed_groups_no_bias": (
        "aten::convolution",
        "out",
        [In(SMALL), W_T, None, [3, 2], [2, 0], [2, 1], True, [2, 1], 2],
        (2, 4, 9, 9),
    ),
    "conv_transposed_depthwise": (
        "aten::convolution",
        "out",
        [In(SMALL), rng_array((6, 1, 4, 4), 36), None, [2, 2], [1, 1], [1, 1], True, [0, 0], 6],
        (2, 6, 6, 8),
    ),
    "linear": ("aten::linear", "out", [In(rng_array((3, 17), 7)), rng_array((5, 17), 8), rng_array((5,), 9)], (3, 5)),
    "linear_no_bias": ("aten::linear", "out", [In(rng_array((2, 2, 9), 7)), rng_array((4, 9), 8), None], (2, 2, 4)),
    "matmul_broadcast": (
        "aten::matmul",
        "out",
        [In(rng_array((2, 1, 3, 5), 40)), In(rng_array((4, 5, 2), 41))],
        (2, 4, 3, 2),
    ),
    "matmul_dot": ("aten::matmul", "out", [In(rng_array((7,), 42)), In(rng_array((7,), 43))], ()),
    "matmul_vector_matrix_batch": ("aten::matmul", "out", [In(rng_array((5,), 44)), rng_array((3, 5, 2), 45)], (3, 2)),
    "matmul_matrix_vector": ("aten::matmul", "out", [In(rng_array((2, 3, 4), 46)), In(rng_array((4,), 47))], (2, 3)),
    "matmul_constant_weight": ("aten::matmul", "out", [In(rng_array((2, 3, 6), 48)), rng_array((6, 5), 49)], (2, 3, 5)),
    "mm": ("aten::mm", "out", [In(rng_array((3, 9), 50)), In(rng_array((9, 4), 51))], (3, 4)),
    "bmm": ("aten::bmm", "out", [In(rng_array((3, 2, 5), 52)), In(rng_array((3, 5, 7), 53))], (3, 2, 7)),
    "upsample": ("aten::upsample_bilinear2d", "vec_out", [In(X), [11, 13], False, None], (2, 4, 11, 13)),
    "upsample_corners": ("aten::upsample_bilinear2d", "vec_out", [In(X), [14, 5], True, None], (2, 4, 14, 5)),
    "upsample_scales": (
        "aten::upsample_bilinear2d",
        "vec_out",
        [In(X), None, False, Doubles((2.0, 1.5))],
        (2, 4, 14, 9),
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_kernel_equals_kiln_kernels_bit_for_bit(runtime_host, tmp_path, case):
    got, expected = run_kernel(runtime_host, tmp_path, CASES[case])
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()


def _t(x):
    return None if x is None else torch.from_numpy(np.ascontiguousarray(x)).double()


def _convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        return F.conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation)
    return F.conv2d(x, w, b, stride, padding, dilation, groups)


# PyTorch's eager op for each kernel on the case's arguments (tensors as float64, so the
# reference is the exact result to float64's precision), and the number of float32
# roundings per output of kiln's kernel.
EAGER = {
    "aten::avg_pool2d": (
        lambda x, k, s, p, ceil, inc, div: F.avg_pool2d(x, k, s or None, p, ceil, inc, div),
        lambda args: args[1][0] * args[1][1],
    ),
    "aten::_adaptive_avg_pool2d": (
        F.adaptive_avg_pool2d,
        lambda args: (-(-args[0].shape[-2] // args[1][0]) + 1) * (-(-args[0].shape[-1] // args[1][1]) + 1),
    ),
    "aten::convolution": (
        _convolution,
        lambda args: (args[0].shape[1] // args[8]) * args[1].shape[2] * args[1].shape[3] + 1,
    ),
    "aten::linear": (F.linear, lambda args: args[0].shape[-1] + 1),
    "aten::matmul": (torch.matmul, lambda args: args[0].shape[-1]),
    "aten::mm": (torch.mm, lambda args: args[0].shape[-1]),
    "aten::bmm": (torch.bmm, lambda args: args[0].shape[-1]),
}


def within_rounding(got, exact, magnitude, terms):
    """|got - exact| <= (terms + 2) 2^-24 magnitude: a float32 sum of `terms` products
    (or values), each rounded, accumulated one at a time, is within terms 2^-24 of the exact
    sum of their magnitudes (first-order bound), and a division rounds once more;
    `magnitude` is the same op on |x| and |w| in float64."""
    assert got.shape == exact.shape
    assert np.all(np.abs(got.astype(np.float64) - exact) <= (terms + 2) * 2.0**-24 * magnitude)


def _arrays(args):
    return [a.array if isinstance(a, In) else a for a in args]


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][0] in EAGER])
def test_kernel_equals_pytorch_within_rounding(case):
    name, overload, args, out_shape, *_ = CASES[case]
    args = _arrays(args)
    op, terms = EAGER[name]
    got = by_name()[(name, overload)].run(*args)
    assert got.dtype == np.float32 and got.shape == tuple(out_shape)
    tensors = [_t(a) if isinstance(a, np.ndarray) else a for a in args]
    exact = op(*tensors).numpy()
    magnitude = op(*[t.abs() if isinstance(t, torch.Tensor) else t for t in tensors]).numpy()
    within_rounding(got, exact, magnitude, terms(args))


@pytest.mark.parametrize("case", ["conv_transposed_groups", "avg_pool2d_ceil", "matmul_broadcast"])
def test_kernel_equals_pytorch_float32_within_rounding(case):
    """Against PyTorch's float32 op too: both within the bound of the exact result."""
    name, overload, args, *_ = CASES[case]
    args = _arrays(args)
    op, terms = EAGER[name]
    got = by_name()[(name, overload)].run(*args)
    tensors = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
    expected = op(*tensors).numpy()
    magnitude = op(*[t.abs().double() if isinstance(t, torch.Tensor) else t for t in tensors]).numpy()
    within_rounding(got, expected.astype(np.float64), 2 * magnitude, terms(args))


def test_avg_pool2d_divisors_are_pytorchs():
    """Windows of ones: each output is its divisor's reciprocal times the count of ones in
    the window, exactly what PyTorch computes for count_include_pad and divisor_override."""
    ones = np.ones((1, 1, 5, 5), np.float32)
    run = by_name()[("aten::avg_pool2d", "out")].run
    for include_pad, divisor in ((True, None), (False, None), (True, 3), (False, 7)):
        got = run(ones, [3, 3], [2, 2], [1, 1], True, include_pad, divisor)
        expected = F.avg_pool2d(torch.from_numpy(ones), 3, 2, 1, True, include_pad, divisor).numpy()
        assert got.tobytes() == expected.tobytes(), (include_pad, divisor)


def test_nn_kernels_refuse_what_pytorch_refuses():
    kernels = by_name()
    with pytest.raises(HostError, match="half the kernel"):
        kernels[("aten::avg_pool2d", "out")].run(X, [2, 2], [2, 2], [2, 2], False, True, None)
    with pytest.raises(HostError, match="divisor 0"):
        kernels[("aten::avg_pool2d", "out")].run(X, [2, 2], [2, 2], [0, 0], False, True, 0)
    with pytest.raises(HostError, match="output_padding"):  # must be below the stride or the dilation
        kernels[("aten::convolution", "out")].run(SMALL, W_T, None, [2, 2], [0, 0], [1, 1], True, [2, 0], 3)
    with pytest.raises(HostError, match="do not match"):
        kernels[("aten::matmul", "out")].run(rng_array((2, 3), 1), rng_array((4, 2), 2))
    with pytest.raises(HostError, match="bmm"):
        kernels[("aten::bmm", "out")].run(rng_array((2, 3, 4), 1), rng_array((1, 4, 2), 2))


UNSUPPORTED, SHAPE = "error 0x302 kernel: unsupported arguments", "error 0x301 kernel: shape mismatch"


# Programs the C++ kernels refuse with an error (a = argument position, b = detail), never a
# fault; groups and sizes are checked before any arithmetic uses them.
def _transposed(stride, output_padding, groups, out_shape):
    """A transposed convolution of SMALL by W_T, no bias, padding 0, dilation 1."""
    return (
        "aten::convolution",
        "out",
        [In(SMALL), W_T, None, stride, [0, 0], [1, 1], True, output_padding, groups],
        out_shape,
    )


REFUSED = {
    "transposed_output_padding_not_below_stride": (
        _transposed([2, 2], [2, 0], 3, (2, 6, 9, 9)),
        f"{UNSUPPORTED} (a=7, b=2)",
    ),
    "transposed_groups_zero": (_transposed([1, 1], [0, 0], 0, (2, 2, 5, 5)), f"{SHAPE} (a=8, b=0)"),
    "transposed_groups_not_dividing": (_transposed([1, 1], [0, 0], 4, (2, 8, 5, 5)), f"{SHAPE} (a=8, b=4)"),
    "transposed_groups_huge": (_transposed([1, 1], [0, 0], 2**62, (2, 8, 5, 5)), f"{SHAPE} (a=8, b=0)"),
    "transposed_stride_zero": (_transposed([0, 1], [0, 0], 3, (2, 6, 5, 5)), f"{UNSUPPORTED} (a=3, b=0)"),
    "transposed_wrong_out_shape": (_transposed([1, 1], [0, 0], 3, (2, 6, 5, 4)), f"{SHAPE} (a=9, b=3)"),
    "avg_pool2d_padding_over_half_kernel": (
        ("aten::avg_pool2d", "out", [In(X), [2, 2], [2, 2], [2, 2], False, True, None], (2, 4, 5, 5)),
        f"{UNSUPPORTED} (a=3, b=0)",
    ),
    "avg_pool2d_divisor_zero": (
        ("aten::avg_pool2d", "out", [In(X), [2, 2], [2, 2], [0, 0], False, True, 0], (2, 4, 3, 3)),
        f"{UNSUPPORTED} (a=6, b=0)",
    ),
    "avg_pool2d_empty_plane": (
        (
            "aten::avg_pool2d",
            "out",
            [In(np.zeros((1, 2, 0, 3), np.float32)), [2, 2], [2, 2], [1, 1], False, True, None],
            (1, 2, 1, 2),
        ),
        f"{UNSUPPORTED} (a=0, b=0)",
    ),
    "adaptive_avg_pool2d_size_zero": (
        ("aten::_adaptive_avg_pool2d", "out", [In(X), [0, 2]], (2, 4, 1, 2)),
        f"{UNSUPPORTED} (a=1, b=0)",
    ),
    "matmul_inner_mismatch": (
        ("aten::matmul", "out", [In(rng_array((2, 3), 1)), In(rng_array((4, 2), 2))], (2, 2)),
        f"{SHAPE} (a=1, b=4)",
    ),
    "matmul_batch_mismatch": (
        ("aten::matmul", "out", [In(rng_array((2, 2, 3), 1)), In(rng_array((3, 3, 2), 2))], (2, 2, 2)),
        f"{SHAPE} (a=1, b=0)",
    ),
    "bmm_batch_mismatch": (
        ("aten::bmm", "out", [In(rng_array((2, 2, 3), 1)), In(rng_array((1, 3, 2), 2))], (2, 2, 2)),
        f"{SHAPE} (a=1, b=0)",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_kernel_refuses_bad_arguments(runtime_host, tmp_path, case):
    program, expected = REFUSED[case]
    assert kernel_error(runtime_host, tmp_path, program) == expected


def test_every_nn_kernel_has_a_case():
    """Each kernel of kiln.program.kernels.nn is a case here (test_runtime_host checks that
    every family has its test_kernels_<family>.py and the host build has every kernel)."""
    assert {(case[0], case[1]) for case in CASES.values()} == kernel_names(kernels.nn)
