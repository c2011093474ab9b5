"""Sort and topk kernels, ops with two outputs: each C++ kernel (host build, ASan and UBSan)
equals kiln.program.kernels' numpy bit for bit on the same one-call program (tests/firmware/runtime/helpers.py),
values and indices; the numpy kernel equals PyTorch's stable sort exactly (ties, signed zeros,
NaN and infinities included), and PyTorch's topk exactly where no two values tie (PyTorch
leaves the order of equal values, -0.0 and 0.0 among them, to its algorithm; kiln takes the
lowest index first)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kiln import compile as kc
from kiln.frontend.export import LoadedModel
from kiln.program import kernels
from kiln.program.kernels import by_name
from kiln.reference import run_host as host
from kiln.spec import CompileSpec
from tests.compiler.operator_cases import Fn
from tests.firmware.runtime.helpers import (
    SPECIAL,
    In,
    Outs,
    X,
    kernel_error,
    kernel_names,
    rng_array,
    run_kernel,
    run_tool,
)

ODD = rng_array((3, 5, 1, 7), 30)
# Ties (index order kept), signed zeros that compare equal, NaNs (greatest), infinities.
TIES = np.array(
    [
        [1.0, 3.0, 3.0, 0.0, np.nan, 3.0, -0.0, 0.0, np.nan, np.inf, -np.inf, 1.0],
        [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        [-1.0, np.nan, 5.0, 5.0, -1.0, 0.0, -0.0, -0.0, 0.0, np.nan, -np.inf, -np.inf],
    ],
    np.float32,
)
SMALL_INTS = np.random.default_rng(31).integers(0, 4, (4, 3, 9)).astype(np.float32)  # many ties
INT32 = np.random.default_rng(32).integers(-3, 3, (5, 8), dtype=np.int32)
INT64 = np.array([[5, -(2**63), 2**63 - 1, 5, 0, -1], [3, 3, -3, -3, 3, 2**62]], np.int64)


def _sort(x, dim, descending):
    shape = x.shape
    return ("aten::sort", "values", [In(x), dim, descending], Outs(((shape, x.dtype), (shape, np.int64))))


def _topk(x, k, dim, largest, sorted_=True):
    shape = list(x.shape)
    shape[dim] = k
    return (
        "aten::topk",
        "values",
        [In(x), k, dim, largest, sorted_],
        Outs(((tuple(shape), x.dtype), (tuple(shape), np.int64))),
    )


CASES = {
    "sort": _sort(X, -1, False),
    "sort_descending": _sort(X, 1, True),
    "sort_first_dim": _sort(ODD, 0, False),
    "sort_size_one_dim": _sort(ODD, 2, True),
    "sort_ties": _sort(TIES, -1, False),
    "sort_ties_descending": _sort(TIES, 1, True),
    "sort_ties_columns": _sort(TIES, 0, True),
    "sort_special": _sort(SPECIAL, -1, True),
    "sort_many_ties": _sort(SMALL_INTS, 2, True),
    "sort_many_ties_middle": _sort(SMALL_INTS, -2, False),
    "sort_int32": _sort(INT32, 1, True),
    "sort_int64": _sort(INT64, -1, False),
    "sort_int64_descending": _sort(INT64, 0, True),
    "topk": _topk(X, 3, -1, True),
    "topk_smallest": _topk(X, 2, 1, False),
    "topk_all": _topk(ODD, 3, 0, True),
    "topk_one": _topk(ODD, 1, -1, True),
    "topk_ties": _topk(TIES, 5, 1, True),
    "topk_ties_smallest": _topk(TIES, 7, -1, False),
    "topk_many_ties": _topk(SMALL_INTS, 4, 2, True),
    "topk_unsorted": _topk(X, 4, 3, True, False),
    "topk_int64": _topk(INT64, 2, 1, False),
    "topk_zero": _topk(X, 0, 2, True),
}


@pytest.mark.parametrize("case", CASES)
def test_kernel_equals_kiln_kernels_bit_for_bit(runtime_host, tmp_path, case):
    got, expected = run_kernel(runtime_host, tmp_path, CASES[case])
    assert len(got) == len(expected) == 2
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.tobytes() == np.ascontiguousarray(e).tobytes()


def _run(case):
    name, overload, args, *_ = CASES[case]
    return by_name()[(name, overload)].run(*[a.array if isinstance(a, In) else a for a in args])


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith("sort")])
def test_sort_equals_pytorch_stable_sort_exactly(case):
    _, _, (x, dim, descending), _ = CASES[case]
    values, indices = _run(case)
    expected = torch.sort(torch.from_numpy(x.array), dim=dim, descending=descending, stable=True)
    assert values.dtype == x.array.dtype and indices.dtype == np.int64
    assert np.ascontiguousarray(values).tobytes() == expected.values.numpy().tobytes()
    assert np.array_equal(indices, expected.indices.numpy())


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith("topk")])
def test_topk_equals_pytorch(case):
    """Values exactly; indices exactly without ties, else pointing at the same values with the
    lowest indices first among equal ones (the stable sort's first k)."""
    _, _, (x, k, dim, largest, _), _ = CASES[case]
    values, indices = _run(case)
    t = torch.from_numpy(x.array)
    expected = torch.topk(t, k, dim=dim, largest=largest, sorted=True)
    assert np.array_equal(values, expected.values.numpy(), equal_nan=True)  # -0.0 and 0.0 tie
    assert np.take_along_axis(x.array, indices, dim).tobytes() == np.ascontiguousarray(values).tobytes()
    stable = torch.sort(t, dim=dim, descending=largest, stable=True).indices.narrow(dim, 0, k)
    assert np.array_equal(indices, stable.numpy())
    if len(np.unique(x.array)) == x.array.size:  # no ties: PyTorch's order is the only one
        assert np.ascontiguousarray(values).tobytes() == expected.values.numpy().tobytes()
        assert np.array_equal(indices, expected.indices.numpy())


def test_sort_refuses_what_pytorch_refuses():
    from kiln.errors import HostError

    kernels = by_name()
    with pytest.raises(HostError, match="out of range"):
        kernels[("aten::sort", "values")].run(X, 4, False)
    with pytest.raises(HostError, match="k = 7 is out of range"):
        kernels[("aten::topk", "values")].run(X, 7, -1, True, True)


UNSUPPORTED, SHAPE = "error 0x302 kernel: unsupported arguments", "error 0x301 kernel: shape mismatch"
REFUSED = {
    "sort_dim_out_of_range": (
        (*_sort(X, 4, False)[:2], [In(X), 4, False], _sort(X, 4, False)[3]),
        f"{UNSUPPORTED} (a=1, b=4)",
    ),
    "topk_k_too_large": (
        _topk(X, 3, 1, True)[:2] + ([In(X), 5, 1, True, True], _topk(X, 3, 1, True)[3]),
        f"{UNSUPPORTED} (a=1, b=5)",
    ),
    "topk_wrong_out_shape": (
        _topk(X, 3, 1, True)[:2] + ([In(X), 2, 1, True, True], _topk(X, 3, 1, True)[3]),
        f"{SHAPE} (a=5, b=1)",
    ),
    "sort_float_indices": (
        ("aten::sort", "values", [In(X), 1, False], Outs(((X.shape, np.float32),) * 2)),
        "error 0x300 kernel: bad argument (a=4, b=262)",
    ),  # 0x100 + kFloat
    "sort_int8": (_sort(X.astype(np.int8), 1, False), f"{UNSUPPORTED} (a=0, b=1)"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_kernel_refuses_bad_arguments(runtime_host, tmp_path, case):
    program, expected = REFUSED[case]
    assert kernel_error(runtime_host, tmp_path, program) == expected


# --- Whole programs: kiln compiles sort and topk, both outputs read, and the runtime runs them ------
def _both_outputs(x):
    s, t = torch.sort(x, dim=1, descending=True), torch.topk(torch.tanh(x), 3, dim=-1, largest=False)
    return s.values * 2, s.indices, t.values + t.indices.float()


@pytest.mark.parametrize("quantize", [False, True])
def test_compiled_program_with_sort_and_topk_equals_run_host_bit_for_bit(runtime_host, tmp_path, quantize):
    """CPU programs (quantized, no delegate; and float): the KernelCalls of ops with two outputs
    run on the C++ runtime as on `kiln run-host`, and run-host matches eager on the float path
    (the sort exactly; tanh within float32 rounding)."""
    module, x = Fn(lambda s, x: _both_outputs(x)).eval(), rng_array((2, 5, 9), 33)
    result = kc.compile_model(
        LoadedModel("sort_topk", module, (torch.from_numpy(x),)),
        CompileSpec("ethos-u55-128", quantize=quantize, delegate=False),
        log=lambda line: None,
    )
    ops = [op for op in result.graph.ops if op.op_type in ("aten.sort", "aten.topk")]
    assert [len(op.outputs) for op in ops] == [2, 2]
    path = tmp_path / "sort.pte"
    path.write_bytes(result.pte)
    x.tofile(tmp_path / "in0.bin")
    done = run_tool(runtime_host, "run", path, tmp_path, tmp_path / "in0.bin")
    assert done.returncode == 0, done.stdout + done.stderr
    expected = host.run(result.pte, [x])
    assert len(expected) == 3
    for n, e in enumerate(expected):
        assert (tmp_path / f"output_{n}.bin").read_bytes() == np.ascontiguousarray(e).tobytes()
    if not quantize:
        want = [w.numpy() for w in _both_outputs(torch.from_numpy(x))]
        assert [e.dtype for e in expected] == [w.dtype for w in want]
        assert np.array_equal(expected[0], want[0]) and np.array_equal(expected[1], want[1])
        np.testing.assert_allclose(expected[2], want[2], rtol=1e-6)


def test_every_sort_kernel_has_a_case():
    """Each kernel of kiln.program.kernels.sort is a case here (test_runtime_host checks that
    every family has its test_kernels_<family>.py and the host build has every kernel)."""
    assert {(case[0], case[1]) for case in CASES.values()} == kernel_names(kernels.sort)
