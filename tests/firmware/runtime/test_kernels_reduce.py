"""Reduction, cumulative sum and softmax kernels: each C++ kernel (host build, ASan and UBSan)
equals kiln.program.kernels' numpy bit for bit on the same one-call program (tests/firmware/runtime/helpers.py),
and the numpy kernel agrees with PyTorch's eager op: exactly for amax/amin/argmax/argmin,
any/all (bytes, so NaN and the sign of zero too), within float32 rounding for sums (the bound in
within_rounding)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kiln.program import kernels
from kiln.program.kernels import by_name
from tests.firmware.runtime.helpers import SPECIAL, In, X, kernel_error, kernel_names, rng_array, run_kernel

ODD = rng_array((3, 5, 1, 7), 20)
FLAT = rng_array((11,), 21)
# Ties (the first index wins), signed zeros that compare equal, NaNs (the first one wins).
TIES = np.array(
    [[1.0, 3.0, 3.0, 0.0], [-0.0, 0.0, -0.0, -1.0], [np.nan, 2.0, np.nan, 5.0], [-np.inf, -np.inf, 7.0, np.inf]],
    np.float32,
)
INT8 = np.random.default_rng(22).integers(-128, 128, (4, 6), dtype=np.int8)
INT64 = np.array([[5, -(2**62), 2**62, 2**62], [2**63 - 1, 1, -3, 0]], np.int64)
INT16 = np.random.default_rng(24).integers(-(2**15), 2**15, (3, 5, 4), dtype=np.int16)
INT32 = np.array([[-(2**31), 7, 2**31 - 1], [3, 3, -1]], np.int32)
# Rows all false, all true and mixed along each dim; a wider random mask.
MASK = np.array([[[0, 0, 0], [1, 1, 1]], [[1, 0, 1], [0, 0, 1]]], bool)
WIDE_MASK = np.random.default_rng(23).random((3, 4, 5, 2)) < 0.3

CASES = {
    "sum": ("aten::sum", "IntList_out", [In(X), [-1], True, None], (2, 4, 7, 1)),
    "sum_two_dims": ("aten::sum", "IntList_out", [In(X), [1, 3], False, None], (2, 7)),
    "sum_negative_dims_keepdim": ("aten::sum", "IntList_out", [In(ODD), [-1, 0], True, None], (1, 5, 1, 1)),
    "sum_all_none": ("aten::sum", "IntList_out", [In(X), None, False, None], ()),
    "sum_all_empty_list_keepdim": ("aten::sum", "IntList_out", [In(ODD), [], True, 6], (1, 1, 1, 1)),
    "sum_size_one_dim": ("aten::sum", "IntList_out", [In(ODD), [2], False, None], (3, 5, 7)),
    "sum_int8": ("aten::sum", "IntList_out", [In(INT8), [1], False, None], (4,), np.int64),
    "sum_int16_all": ("aten::sum", "IntList_out", [In(INT16), None, False, 4], (), np.int64),
    "sum_int32_keepdim": ("aten::sum", "IntList_out", [In(INT32), [0], True, None], (1, 3), np.int64),
    "sum_int64_wraps": ("aten::sum", "IntList_out", [In(INT64), [1], False, None], (2,), np.int64),
    "sum_bool": ("aten::sum", "IntList_out", [In(WIDE_MASK), [0, 2], True, None], (1, 4, 1, 2), np.int64),
    "mean": ("aten::mean", "out", [In(X), [2, 3], True, None], (2, 4, 1, 1)),
    "mean_channels": ("aten::mean", "out", [In(X), [1], False, None], (2, 7, 6)),
    "mean_three_dims": ("aten::mean", "out", [In(ODD), [-4, -1, 1], True, None], (1, 1, 1, 1)),
    "mean_all": ("aten::mean", "out", [In(ODD), None, False, None], ()),
    "mean_1d": ("aten::mean", "out", [In(FLAT), [0], True, None], (1,)),
    "amax": ("aten::amax", "out", [In(X), [1, 3], False], (2, 7)),
    "amax_all_keepdim": ("aten::amax", "out", [In(ODD), [], True], (1, 1, 1, 1)),
    "amax_special": ("aten::amax", "out", [In(SPECIAL), [-1], False], (2,)),
    "amax_ties": ("aten::amax", "out", [In(TIES), [1], True], (4, 1)),
    "amax_int8": ("aten::amax", "out", [In(INT8), [1], False], (4,), np.int8),
    "amax_int16_keepdim": ("aten::amax", "out", [In(INT16), [0, 2], True], (1, 5, 1), np.int16),
    "amax_int32": ("aten::amax", "out", [In(INT32), [], False], (), np.int32),
    "amax_bool": ("aten::amax", "out", [In(MASK), [-1], False], (2, 2), np.bool_),
    "amin_int64": ("aten::amin", "out", [In(INT64), [0], False], (4,), np.int64),
    "amin_int32": ("aten::amin", "out", [In(INT32), [1], True], (2, 1), np.int32),
    "amin_bool": ("aten::amin", "out", [In(MASK), [0, 2], False], (2,), np.bool_),
    "amin": ("aten::amin", "out", [In(ODD), [0, 2], False], (5, 7)),
    "amin_ties": ("aten::amin", "out", [In(TIES), [-1], False], (4,)),
    "amin_columns": ("aten::amin", "out", [In(TIES), [0], False], (4,)),
    "argmax_all": ("aten::argmax", "out", [In(X), None, False], (), np.int64),
    "argmax_all_keepdim": ("aten::argmax", "out", [In(ODD), None, True], (1, 1, 1, 1), np.int64),
    "argmax_dim": ("aten::argmax", "out", [In(X), 1, False], (2, 7, 6), np.int64),
    "argmax_negative_dim_keepdim": ("aten::argmax", "out", [In(ODD), -1, True], (3, 5, 1, 1), np.int64),
    "argmax_ties": ("aten::argmax", "out", [In(TIES), 1, False], (4,), np.int64),
    "argmax_columns": ("aten::argmax", "out", [In(TIES), 0, False], (4,), np.int64),
    "argmax_int8": ("aten::argmax", "out", [In(INT8), -1, False], (4,), np.int64),
    "argmin_ties": ("aten::argmin", "out", [In(TIES), -1, True], (4, 1), np.int64),
    "argmin_dim": ("aten::argmin", "out", [In(ODD), 1, False], (3, 1, 7), np.int64),
    "argmin_special_all": ("aten::argmin", "out", [In(SPECIAL), None, False], (), np.int64),
    "argmin_int64": ("aten::argmin", "out", [In(INT64), 0, False], (4,), np.int64),
    "any_last": ("aten::any", "dims_out", [In(MASK), [-1], False], (2, 2), np.bool_),
    "any_two_dims_keepdim": ("aten::any", "dims_out", [In(WIDE_MASK), [0, 2], True], (1, 4, 1, 2), np.bool_),
    "any_every_dim": ("aten::any", "dims_out", [In(MASK), [0, 1, 2], False], (), np.bool_),
    "all_first": ("aten::all", "dims_out", [In(MASK), [0], False], (2, 3), np.bool_),
    "all_last_keepdim": ("aten::all", "dims_out", [In(MASK), [2], True], (2, 2, 1), np.bool_),
    "all_wide": ("aten::all", "dims_out", [In(~WIDE_MASK), [1, 3], False], (3, 5), np.bool_),
    "cumsum": ("aten::cumsum", "out", [In(X), 2, None], X.shape),
    "cumsum_last": ("aten::cumsum", "out", [In(ODD), -1, 6], ODD.shape),
    "cumsum_special": ("aten::cumsum", "out", [In(SPECIAL), 1, None], SPECIAL.shape),
    "cumsum_int8": ("aten::cumsum", "out", [In(INT8), 0, None], INT8.shape, np.int64),
    "cumsum_int64_wraps": ("aten::cumsum", "out", [In(INT64), -1, 4], INT64.shape, np.int64),
    "cumsum_bool": ("aten::cumsum", "out", [In(MASK), 1, None], MASK.shape, np.int64),
    "softmax": ("aten::_softmax", "out", [In(X), 1, False], X.shape),
    "softmax_first_dim": ("aten::_softmax", "out", [In(ODD), 0, False], ODD.shape),
    "softmax_1d": ("aten::_softmax", "out", [In(FLAT), -1, False], FLAT.shape),
    "log_softmax": ("aten::_log_softmax", "out", [In(X), -1, False], X.shape),
    "log_softmax_middle": ("aten::_log_softmax", "out", [In(ODD), -3, False], ODD.shape),
}


@pytest.mark.parametrize("case", CASES)
def test_kernel_equals_kiln_kernels_bit_for_bit(runtime_host, tmp_path, case):
    got, expected = run_kernel(runtime_host, tmp_path, CASES[case])
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()


def _t(x):
    return torch.from_numpy(np.ascontiguousarray(x))


def _dims(dim):
    return [] if dim is None else dim


# PyTorch's eager op for each kernel, on the case's arguments.
EAGER = {
    "aten::sum": lambda x, dim, keepdim, dtype: torch.sum(x, _dims(dim), keepdim),
    "aten::mean": lambda x, dim, keepdim, dtype: torch.mean(x, _dims(dim), keepdim),
    "aten::amax": lambda x, dim, keepdim: torch.amax(x, dim, keepdim),
    "aten::amin": lambda x, dim, keepdim: torch.amin(x, dim, keepdim),
    "aten::argmax": lambda x, dim, keepdim: torch.argmax(x, dim, keepdim),
    "aten::argmin": lambda x, dim, keepdim: torch.argmin(x, dim, keepdim),
    "aten::any": lambda x, dim, keepdim: torch.ops.aten.any.dims(x, dim, keepdim),
    "aten::all": lambda x, dim, keepdim: torch.ops.aten.all.dims(x, dim, keepdim),
    "aten::cumsum": lambda x, dim, dtype: torch.cumsum(x, dim),
    "aten::_softmax": lambda x, dim, half: torch.softmax(x, dim),
    "aten::_log_softmax": lambda x, dim, half: torch.log_softmax(x, dim),
}
EXACT = {"aten::amax", "aten::amin", "aten::argmax", "aten::argmin", "aten::any", "aten::all"}
SUMS = {"aten::sum", "aten::mean", "aten::cumsum"}


def within_rounding(got, expected, magnitude, terms):
    """|got - expected| <= 2 (terms + 2) 2^-24 magnitude: a float32 sum of `terms` values
    summed one at a time is within (terms - 1) 2^-24 sum|x| of the exact sum, as is PyTorch's
    (in any order), and a mean's division rounds once or twice more; `magnitude` is the same
    op on |x| in float64."""
    bound = 2 * (terms + 2) * 2.0**-24 * magnitude
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert np.all(np.abs(got.astype(np.float64) - expected) <= bound), np.max(np.abs(got - expected) - bound)


def _arrays(args):
    return [a.array if isinstance(a, In) else a for a in args]


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][0] in EXACT])
def test_extremes_equal_pytorch_exactly(case):
    name, overload, args, *_ = CASES[case]
    args = _arrays(args)
    got = by_name()[(name, overload)].run(*args)
    expected = EAGER[name](_t(args[0]), *args[1:]).numpy()
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert np.ascontiguousarray(got).tobytes() == expected.tobytes()


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][0] in SUMS])
def test_sums_equal_pytorch_within_rounding(case):
    name, overload, args, *_ = CASES[case]
    args = _arrays(args)
    x = args[0]
    got = np.asarray(by_name()[(name, overload)].run(*args))
    expected = EAGER[name](_t(x), *args[1:]).numpy()
    if x.dtype != np.float32:  # integer cumsum: exact, wrapping as PyTorch's
        assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes()
        return
    if not np.isfinite(x).all():  # inf and NaN propagate the same way in any order
        assert np.array_equal(got, expected, equal_nan=True)
        return
    magnitude = EAGER[name](_t(np.abs(x).astype(np.float64)), *args[1:]).numpy()
    within_rounding(
        got, expected, magnitude, terms=x.size // max(expected.size, 1) if name != "aten::cumsum" else x.shape[args[1]]
    )


@pytest.mark.parametrize("case", [c for c in CASES if "softmax" in CASES[c][0]])
def test_softmax_equals_pytorch_within_rounding(case):
    """exp and log are correctly rounded here; the sum of n exps (each <= 1, so their sum is
    at most n) and the division or subtraction add (n + 2) roundings: within 2 (n + 2) 2^-24
    times n relative to the result's scale."""
    name, overload, args, *_ = CASES[case]
    args = _arrays(args)
    x, dim = args[0], args[1]
    got = by_name()[(name, overload)].run(*args)
    expected = EAGER[name](_t(x), dim, False).numpy()
    n = x.shape[dim]
    scale = np.maximum(np.abs(expected), 1.0) if "log" in name else expected
    assert np.all(np.abs(got - expected) <= 2 * (n + 2) * 2.0**-24 * n * scale + 2.0**-30)


def test_reductions_refuse_what_pytorch_refuses():
    from kiln.errors import HostError

    kernels = by_name()
    with pytest.raises(HostError, match="twice"):
        kernels[("aten::sum", "IntList_out")].run(X, [1, -3], False, None)
    with pytest.raises(HostError, match="empty"):
        kernels[("aten::amax", "out")].run(np.zeros((2, 0), np.float32), [1], False)
    with pytest.raises(HostError, match="out of range"):
        kernels[("aten::argmax", "out")].run(X, 4, False)


UNSUPPORTED, SHAPE = "error 0x302 kernel: unsupported arguments", "error 0x301 kernel: shape mismatch"

# Programs the C++ kernels refuse with an error (a = argument position, b = detail), never a
# fault: the detail is the offending dim or size.
REFUSED = {
    "sum_dim_twice": (
        ("aten::sum", "IntList_out", [In(X), [1, -3], False, None], (2, 7, 6)),
        f"{UNSUPPORTED} (a=1, b=1)",
    ),
    "mean_dim_out_of_range": (
        ("aten::mean", "out", [In(X), [4], False, None], (2, 4, 7, 6)),
        f"{UNSUPPORTED} (a=1, b=4)",
    ),
    "mean_dtype_long": (("aten::mean", "out", [In(X), [1], False, 4], (2, 7, 6)), f"{UNSUPPORTED} (a=3, b=4)"),
    "sum_wrong_out_shape": (("aten::sum", "IntList_out", [In(X), [1], True, None], (2, 7, 6)), f"{SHAPE} (a=4, b=3)"),
    "amax_empty_dim": (
        ("aten::amax", "out", [In(np.zeros((2, 0), np.float32)), [1], False], (2,)),
        f"{UNSUPPORTED} (a=1, b=0)",
    ),
    "argmax_dim_out_of_range": (
        ("aten::argmax", "out", [In(X), -5, False], (2, 4, 7), np.int64),
        f"{UNSUPPORTED} (a=1, b={2**32 - 5})",
    ),
    "argmax_float_out": (
        ("aten::argmax", "out", [In(X), 1, False], (2, 7, 6)),
        "error 0x300 kernel: bad argument (a=3, b=262)",
    ),  # 0x100 + kFloat
    "cumsum_int_to_float": (("aten::cumsum", "out", [In(INT8), 0, 6], INT8.shape), f"{UNSUPPORTED} (a=2, b=6)"),
    "sum_int_to_float": (
        ("aten::sum", "IntList_out", [In(INT8), [0], False, 6], (6,), np.int64),
        f"{UNSUPPORTED} (a=3, b=6)",
    ),
    "amax_int8_into_float": (
        ("aten::amax", "out", [In(INT8), [0], False], (6,)),
        "error 0x300 kernel: bad argument (a=3, b=262)",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_kernel_refuses_bad_arguments(runtime_host, tmp_path, case):
    program, expected = REFUSED[case]
    assert kernel_error(runtime_host, tmp_path, program) == expected


def test_every_reduce_kernel_has_a_case():
    """Each kernel of kiln.program.kernels.reduce is a case here (test_runtime_host checks that
    every family has its test_kernels_<family>.py and the host build has every kernel)."""
    assert {(case[0], case[1]) for case in CASES.values()} == kernel_names(kernels.reduce)
