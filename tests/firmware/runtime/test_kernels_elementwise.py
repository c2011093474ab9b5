"""Elementwise kernels: each C++ kernel (host build, ASan and UBSan) equals kiln.program.kernels'
numpy bit for bit on the same one-call program (tests/firmware/runtime/helpers.py); and the numpy kernels
against PyTorch's own eager ops, exactly where PyTorch's CPU kernels are exact and within
the ULP bounds stated below where a transcendental function is involved."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kiln.errors import HostError
from kiln.graph import Op, QParams, Value
from kiln.program import kernels
from kiln.program.kernels import elementwise as ew
from tests.eager_bounds import EAGER, assert_within
from tests.firmware.runtime.helpers import (
    SPECIAL,
    In,
    X,
    kernel_error,
    kernel_names,
    rng_array,
    run_kernel,
    run_tool,
    single_kernel,
)

aten = torch.ops.aten
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1

# Halves (round to even), integers, near-integers, and the special values.
STEPS = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -3.0, 3.0, 2.9999998, -0.49999997, 1e8, -7.25], np.float32)
WIDE = rng_array((3, 5, 8), 21, scale=10.0)
I32 = np.array([[I32_MIN, I32_MAX, -7, 7], [0, -1, 123456789, -98765]], np.int32)
I32_B = np.array([[-1, 1, 2, -2], [3, -1, 65536, -3]], np.int32)
I32_B_EAGER = np.array([[2, 1, 2, -2], [3, -1, 65536, -3]], np.int32)  # PyTorch traps (SIGFPE) on MIN / -1
I64 = np.array([[I64_MIN, I64_MAX, -7, 7], [0, -1, 2**40 + 3, -(2**35)]], np.int64)
I64_B = np.array([-1, 3, -2, 2**31], np.int64)
I8 = np.array([[-128, 127, -7, 7], [0, -1, 100, -100]], np.int8)
I8_B = np.array([[-1, 1, 2, -2], [3, -1, 100, -3]], np.int8)
I8_B_EAGER = np.array([[2, 1, 2, -2], [3, -1, 100, -3]], np.int8)  # as I32_B_EAGER: no MIN / -1
I16 = np.array([[-(2**15), 2**15 - 1, -7, 7], [0, -1, 300, -3000]], np.int16)
I16_B = np.array([-1, 3, -2, 256], np.int16)
NAN_ROW = np.array([[np.nan, 1.0, -0.0, np.inf]], np.float32)
BOOLS_A = np.array([[True, False, True, False]])
BOOLS_B = np.array([[True], [False]])


def unary_case(name, x, *args, overload="out"):
    return (f"aten::{name}", overload, [In(x), *args], x.shape)


def integer_case(name, x, *args):
    """A function of integer tensor x into its type."""
    return (f"aten::{name}", "out", [In(x), *args], x.shape, x.dtype.type)


def out_shape(*xs):
    return np.broadcast_shapes(*(np.shape(x) for x in xs))


def binary_case(name, a, b, *args, overload="out", dtype=None):
    shape = out_shape(a, b)
    out = dtype or next(np.asarray(x).dtype for x in (a, b) if isinstance(x, np.ndarray))
    return (
        f"aten::{name}",
        overload,
        [In(a) if isinstance(a, np.ndarray) else a, In(b) if isinstance(b, np.ndarray) else b, *args],
        shape,
        out,
    )


CASES = {
    "relu": ("aten::relu", "out", [In(SPECIAL)], (2, 4)),
    "relu_random": ("aten::relu", "out", [In(X)], X.shape),
    "hardtanh": ("aten::hardtanh", "out", [In(SPECIAL), -1.0, 2.5], (2, 4)),
    "clamp_min_only": unary_case("clamp", SPECIAL, -1.0, None),
    "clamp_max_only": unary_case("clamp", X, None, 0.5),
    "clamp_int_bounds": unary_case("clamp", X, -1, 1),
    "add_broadcast": (
        "aten::add",
        "out",
        [In(rng_array((1, 3, 1, 4), 10)), In(rng_array((2, 1, 5, 4), 11)), 1],
        (2, 3, 5, 4),
    ),
    "sub_scalar": ("aten::sub", "out", [In(X), 0.3, None], X.shape),
    "mul_broadcast": ("aten::mul", "out", [In(rng_array((4, 1), 12)), In(rng_array((3,), 13))], (4, 3)),
    "add_int32_wraps": binary_case("add", I32, I32_B[:1], 1),
    "add_int64_scalar": binary_case("add", I64, 2**62, None),
    "sub_int32_wraps": binary_case("sub", I32, I32_B, None),
    "mul_int32_wraps": binary_case("mul", I32, I32_B),
    "mul_int64_wraps": binary_case("mul", I64, I64_B),
    "mul_int32_scalar_wraps": binary_case("mul", I32, 3),
    "add_int8_wraps": binary_case("add", I8, I8_B, 1),
    "sub_int16_wraps": binary_case("sub", I16, I16_B, None),
    "mul_int8_wraps": binary_case("mul", I8, I8_B),
    "mul_int16_wraps": binary_case("mul", I16, I16_B),
    "mul_int16_scalar_wraps": binary_case("mul", I16, 300),
    "reciprocal": ("aten::reciprocal", "out", [In(X)], X.shape),
    # exp/log/tanh in float64 rounded once to float32 on both sides (kiln.program.kernels)
    "exp": ("aten::exp", "out", [In(X)], X.shape),
    "log": ("aten::log", "out", [In(np.abs(X) + np.float32(0.01))], X.shape),
    "tanh": ("aten::tanh", "out", [In(X)], X.shape),
    "sigmoid": ("aten::sigmoid", "out", [In(X)], X.shape),
    "hardsigmoid": unary_case("hardsigmoid", np.concatenate([SPECIAL.ravel(), STEPS])),
    "hardswish": unary_case("hardswish", np.concatenate([SPECIAL.ravel(), STEPS, X.ravel()])),
    "leaky_relu": unary_case("leaky_relu", SPECIAL, 0.1),
    "leaky_relu_random": unary_case("leaky_relu", X, 0.01),
    "gelu": unary_case("gelu", np.concatenate([SPECIAL.ravel(), WIDE.ravel()]), "none"),
    "gelu_tanh": unary_case("gelu", np.concatenate([SPECIAL.ravel(), WIDE.ravel()]), "tanh"),
    "silu": unary_case("silu", np.concatenate([SPECIAL.ravel(), WIDE.ravel()])),
    "elu": unary_case("elu", np.concatenate([SPECIAL.ravel(), X.ravel()]), 1.0, 1, 1),
    "elu_coefficients": unary_case("elu", WIDE, 0.5, 2.0, 1.5),
    "softplus": unary_case("softplus", np.concatenate([SPECIAL.ravel(), WIDE.ravel()]), 1, 20),
    "softplus_beta": unary_case("softplus", WIDE, 2.0, 5.0),
    "mish": unary_case("mish", np.concatenate([SPECIAL.ravel(), WIDE.ravel()])),
    "sqrt": unary_case("sqrt", np.concatenate([SPECIAL.ravel(), np.abs(WIDE.ravel())])),
    "rsqrt": unary_case("rsqrt", np.concatenate([SPECIAL.ravel(), np.abs(WIDE.ravel())])),
    "sin": unary_case("sin", np.concatenate([SPECIAL.ravel(), WIDE.ravel()])),
    "cos": unary_case("cos", np.concatenate([SPECIAL.ravel(), WIDE.ravel()])),
    "erf": unary_case("erf", np.concatenate([SPECIAL.ravel(), X.ravel()])),
    "abs": unary_case("abs", SPECIAL),
    "neg": unary_case("neg", SPECIAL),
    "floor": unary_case("floor", np.concatenate([SPECIAL.ravel(), STEPS])),
    "ceil": unary_case("ceil", np.concatenate([SPECIAL.ravel(), STEPS])),
    "round": unary_case("round", np.concatenate([SPECIAL.ravel(), STEPS])),
    "trunc": unary_case("trunc", np.concatenate([SPECIAL.ravel(), STEPS])),
    "sign": unary_case("sign", SPECIAL),
    "pow": unary_case("pow", np.concatenate([SPECIAL.ravel(), WIDE.ravel()]), 2.5, overload="Tensor_Scalar_out"),
    "pow_square_int": unary_case(
        "pow", np.concatenate([SPECIAL.ravel(), WIDE.ravel()]), 2, overload="Tensor_Scalar_out"
    ),
    "pow_cube": unary_case("pow", WIDE, 3.0, overload="Tensor_Scalar_out"),
    "pow_inverse_square": unary_case("pow", WIDE, -2.0, overload="Tensor_Scalar_out"),
    "pow_sqrt": unary_case("pow", SPECIAL, 0.5, overload="Tensor_Scalar_out"),
    "pow_rsqrt": unary_case("pow", SPECIAL, -0.5, overload="Tensor_Scalar_out"),
    "pow_reciprocal": unary_case("pow", SPECIAL, -1, overload="Tensor_Scalar_out"),
    "pow_zero": unary_case("pow", SPECIAL, 0, overload="Tensor_Scalar_out"),
    "pow_one": unary_case("pow", SPECIAL, 1.0, overload="Tensor_Scalar_out"),
    "div": binary_case("div", SPECIAL, SPECIAL[::-1].copy()),
    "div_broadcast_scalar": binary_case("div", WIDE, 0.3),
    "div_floor": binary_case("div", WIDE, rng_array((5, 1), 22), "floor", overload="out_mode"),
    "div_floor_special": binary_case(
        "div", SPECIAL, np.array([2.0, -2.0, 0.0, -0.0], np.float32), "floor", overload="out_mode"
    ),
    "div_trunc": binary_case("div", WIDE, rng_array((8,), 23), "trunc", overload="out_mode"),
    "div_true_mode": binary_case("div", WIDE, rng_array((8,), 23), None, overload="out_mode"),
    "div_floor_int32": binary_case("div", I32, I32_B, "floor", overload="out_mode"),
    "div_trunc_int32": binary_case("div", I32, I32_B, "trunc", overload="out_mode"),
    "div_floor_int64_scalar": binary_case("div", I64, -3, "floor", overload="out_mode"),
    "div_floor_int8": binary_case("div", I8, I8_B, "floor", overload="out_mode"),
    "div_trunc_int16": binary_case("div", I16, I16_B, "trunc", overload="out_mode"),
    "minimum": binary_case("minimum", SPECIAL, SPECIAL[::-1].copy()),
    "minimum_broadcast": binary_case("minimum", WIDE, rng_array((5, 1), 24, 10.0)),
    "maximum": binary_case("maximum", SPECIAL, NAN_ROW),
    "maximum_int32": binary_case("maximum", I32, I32_B[1]),
    "minimum_int64": binary_case("minimum", I64, I64_B),
    "minimum_int8": binary_case("minimum", I8, I8_B),
    "maximum_int16": binary_case("maximum", I16, I16_B),
    "ge_int8": binary_case("ge", I8, I8_B, overload="Tensor_out", dtype=np.bool_),
    "ne_int16_scalar": binary_case("ne", I16, -7, overload="Scalar_out", dtype=np.bool_),
    **{f"{op}_tensor": binary_case(op, SPECIAL, NAN_ROW, overload="Tensor_out", dtype=np.bool_) for op in ew.COMPARE},
    **{f"{op}_scalar": binary_case(op, SPECIAL, 1.5, overload="Scalar_out", dtype=np.bool_) for op in ew.COMPARE},
    "lt_int32_broadcast": binary_case("lt", I32, I32_B[:, :1].copy(), overload="Tensor_out", dtype=np.bool_),
    "eq_int64_scalar": binary_case("eq", I64, -7, overload="Scalar_out", dtype=np.bool_),
    "ge_float_int_scalar": binary_case("ge", WIDE, 1, overload="Scalar_out", dtype=np.bool_),
    "where": (
        "aten::where",
        "self_out",
        [In(np.array([[True], [False], [True]])), In(WIDE[0, :3, :1].copy()), In(np.array(-1.5, np.float32))],
        (3, 1),
    ),
    "where_broadcast": (
        "aten::where",
        "self_out",
        [In(BOOLS_A), In(SPECIAL), np.zeros((3, 1, 1), np.float32)],
        (3, 2, 4),
    ),
    "where_int64": ("aten::where", "self_out", [In(BOOLS_B), In(I64), In(I64_B)], (2, 4), np.int64),
    "where_int8": ("aten::where", "self_out", [In(BOOLS_B), In(I8), In(I8_B)], (2, 4), np.int8),
    "where_int16": ("aten::where", "self_out", [In(BOOLS_A), In(I16), In(I16_B)], (2, 4), np.int16),
    "where_bool": ("aten::where", "self_out", [In(BOOLS_B), In(BOOLS_A), np.array(True)], (2, 4), np.bool_),
    "logical_not": ("aten::logical_not", "out", [In(BOOLS_A)], (1, 4), np.bool_),
    "logical_and": binary_case("logical_and", BOOLS_A, BOOLS_B),
    "logical_or": binary_case("logical_or", BOOLS_A, BOOLS_B),
    # bools as PyTorch computes with them: add is or, mul and minimum are and, maximum is or
    "add_bool": binary_case("add", BOOLS_A, BOOLS_B, 1),
    "mul_bool": binary_case("mul", BOOLS_A, BOOLS_B),
    "minimum_bool": binary_case("minimum", BOOLS_A, BOOLS_B),
    "maximum_bool": binary_case("maximum", BOOLS_B, BOOLS_A),
    "sign_bool": ("aten::sign", "out", [In(BOOLS_A)], (1, 4), np.bool_),
    **{f"{op}_bool": binary_case(op, BOOLS_A, BOOLS_B, overload="Tensor_out", dtype=np.bool_) for op in ew.COMPARE},
    "relu_int8": integer_case("relu", I8),
    "relu_int64": integer_case("relu", I64),
    "hardtanh_int16": integer_case("hardtanh", I16, -3, 300),
    "hardtanh_int8_float_bounds": integer_case("hardtanh", I8, 0.0, 6.0),  # relu6's decomposition
    "clamp_int32_max_only": integer_case("clamp", I32, None, 123),
    "clamp_int64_crossed": integer_case("clamp", I64, 5, -5),  # lo > hi gives hi
    "abs_int8_min": integer_case("abs", I8),  # abs(-128) wraps to -128
    "neg_int16_wraps": integer_case("neg", I16),
    "sign_int32": integer_case("sign", I32),
    "floor_int64": integer_case("floor", I64),
    "ceil_int8": integer_case("ceil", I8),
    "round_int16": integer_case("round", I16),
    "trunc_int32": integer_case("trunc", I32),
}


INTEGER_EAGER = {
    "relu": torch.relu,
    "hardtanh": torch.nn.functional.hardtanh,
    "clamp": torch.clamp,
    **{name: getattr(torch, name) for name in ("abs", "neg", "sign", "floor", "ceil", "round", "trunc")},
}


INTEGER_CASES = [
    c for c, case in CASES.items() if case[0][6:] in INTEGER_EAGER and len(case) == 5 and np.dtype(case[4]).kind == "i"
]


@pytest.mark.parametrize("case", INTEGER_CASES)
def test_integer_functions_equal_eager_pytorch(case):
    """The integer cases above (wrapping at the type's limits) against PyTorch's eager op."""
    name, overload, args, *_ = CASES[case]
    x, *rest = [a.array if isinstance(a, In) else a for a in args]
    got = kernels.by_name()[(name, overload)].run(x, *rest)
    want = INTEGER_EAGER[name[6:]](torch.from_numpy(x), *rest).numpy()
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_integer_clamp_bounds_outside_the_type_are_refused(runtime_host, tmp_path):
    """A bound the integer type cannot hold, or one that is not a whole number, is refused by
    both kernels (the C++ one with unsupported arguments at the bound)."""
    for bounds, position in (((-3, 300), 2), ((0.5, 6), 1)):
        program = ("aten::hardtanh", "out", [In(I8), *bounds], I8.shape, np.int8)
        assert (
            kernel_error(runtime_host, tmp_path, program)
            == f"error 0x302 kernel: unsupported arguments (a={position}, b=0)"
        )
        plain = Value("v", (2, 4), "int8", None)  # not quantized: the integers themselves
        assert not ew.KERNELS[aten.hardtanh.default].accepts(
            Op("node", aten.hardtanh.default, (plain, *bounds), {}, [plain])
        )
    fits = Value("v", (2, 4), "int8", None)
    assert ew.KERNELS[aten.hardtanh.default].accepts(Op("node", aten.hardtanh.default, (fits, -3, 6.0), {}, [fits]))


@pytest.mark.parametrize("case", CASES)
def test_kernel_equals_kiln_kernels_bit_for_bit(runtime_host, tmp_path, case):
    got, expected = run_kernel(runtime_host, tmp_path, CASES[case])
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()


def test_sub_of_bools_is_refused_on_both_sides(runtime_host, tmp_path):
    """PyTorch refuses to subtract bools; so do both kernels (the C++ one as a bad argument: self's
    type, 0x100 + ScalarType Bool)."""
    program = ("aten::sub", "out", [In(BOOLS_B), In(BOOLS_A), None], (2, 4), np.bool_)
    assert kernel_error(runtime_host, tmp_path, program) == "error 0x300 kernel: bad argument (a=0, b=267)"
    bools = Value("v", (2, 4), "bool", None)
    assert not ew.KERNELS[aten.sub.Tensor].accepts(Op("node", aten.sub.Tensor, (bools, bools), {}, [bools]))


def test_integer_division_by_zero_is_an_error_on_both_sides(runtime_host, tmp_path):
    b = np.array([[1, 0, 2, 3], [1, 1, 1, 1]], np.int32)
    data, arrays = single_kernel("aten::div", "out_mode", [In(I32), In(b), "floor"], I32.shape, np.int32)
    path = tmp_path / "div0.pte"
    path.write_bytes(data)
    for n, a in enumerate(arrays):
        a.tofile(tmp_path / f"in{n}.bin")
    done = run_tool(runtime_host, "run", path, tmp_path, tmp_path / "in0.bin", tmp_path / "in1.bin")
    assert done.returncode == 1 and "unsupported arguments (a=1, b=1)" in done.stdout, done.stdout + done.stderr
    with pytest.raises(HostError, match="division by zero"):
        ew._div_mode(I32, b, "floor")


# --- numpy kernels against PyTorch's eager ops ------------------------------------------------


# Inputs for the comparisons with PyTorch: the special values, steps, and 40,000 normal
# samples at four scales (PyTorch's vectorised and scalar loops both run on these lengths).
SAMPLES = np.concatenate(
    [SPECIAL.ravel(), STEPS, np.float32([1e-39, -1e-39, 88.7, -88.7, -20, 20])]
    + [rng_array((10_000,), 30 + i, scale=s) for i, s in enumerate((0.01, 1.0, 4.0, 30.0))]
)
FINITE = SAMPLES[np.isfinite(SAMPLES)]


def run_numpy(target, *args, x=SAMPLES):
    kernel = ew.KERNELS[target]
    return np.asarray(kernel.run(x.copy(), *args), np.float32)


@pytest.mark.parametrize("name", EAGER)
def test_numpy_kernel_matches_eager_pytorch(name):
    target, args, eager, bound = EAGER[name]
    # PyTorch's float32 erf gives NaN at +-inf (1 + erf(inf) is 2 mathematically): gelu and
    # erf are compared on finite inputs
    x = FINITE if name.startswith("gelu") or name == "erf" else SAMPLES
    with np.errstate(all="ignore"):
        got = run_numpy(target, *args, x=x)
    want = eager(torch.from_numpy(x.copy())).numpy()
    assert_within(bound, x, got, want, name)


def _binary_eager(name, a, b, *args, **kwargs):
    target = {
        "add": aten.add.Tensor,
        "sub": aten.sub.Tensor,
        "mul": aten.mul.Tensor,
        "div": aten.div.Tensor_mode,
        "minimum": aten.minimum.default,
        "maximum": aten.maximum.default,
    }[name]
    got = ew.KERNELS[target].run(a, b, *args)
    torch_args = [torch.from_numpy(x) if isinstance(x, np.ndarray) else x for x in (a, b)]
    want = getattr(torch, name)(*torch_args, **kwargs).numpy()
    return got, want


@pytest.mark.parametrize(
    "name, a, b, args, kwargs",
    [
        ("add", I32, I32_B, (1,), {}),
        ("sub", I32, I32_B, (1,), {}),
        ("mul", I32, I32_B, (), {}),
        ("add", I64, I64_B, (1,), {}),
        ("mul", I64, I64_B, (), {}),
        ("mul", I32, 3, (), {}),
        ("div", WIDE, rng_array((5, 1), 22), ("floor",), {"rounding_mode": "floor"}),
        ("div", SAMPLES, SAMPLES[::-1].copy(), ("floor",), {"rounding_mode": "floor"}),
        ("div", SAMPLES, SAMPLES[::-1].copy(), ("trunc",), {"rounding_mode": "trunc"}),
        ("div", SAMPLES, SAMPLES[::-1].copy(), (None,), {}),
        ("div", I32, I32_B_EAGER, ("floor",), {"rounding_mode": "floor"}),
        ("div", I32, I32_B_EAGER, ("trunc",), {"rounding_mode": "trunc"}),
        ("div", I64[:, 2:], I64_B[1:3], ("floor",), {"rounding_mode": "floor"}),
        ("minimum", SAMPLES, SAMPLES[::-1].copy(), (), {}),
        ("maximum", SAMPLES, SAMPLES[::-1].copy(), (), {}),
        ("minimum", I64, I64_B, (), {}),
        ("add", I8, I8_B, (1,), {}),
        ("sub", I16, I16_B, (1,), {}),
        ("mul", I8, I8_B, (), {}),
        ("mul", I16, 300, (), {}),
        ("div", I8, I8_B_EAGER, ("floor",), {"rounding_mode": "floor"}),
        ("div", I16, I16_B, ("trunc",), {"rounding_mode": "trunc"}),
        ("maximum", I8, I8_B, (), {}),
        ("minimum", I16, I16_B, (), {}),
        ("maximum", WIDE, rng_array((8,), 25, 10.0), (), {}),
        ("add", BOOLS_A, BOOLS_B, (1,), {}),
        ("mul", BOOLS_A, BOOLS_B, (), {}),
        ("minimum", BOOLS_A, BOOLS_B, (), {}),
        ("maximum", BOOLS_B, BOOLS_A, (), {}),
    ],
)
def test_binary_numpy_kernel_equals_eager_pytorch(name, a, b, args, kwargs):
    """Exact (values; the sign of a zero only where PyTorch's own loops agree on it)."""
    with np.errstate(all="ignore"):
        got, want = _binary_eager(name, a, b, *args, **kwargs)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", list(ew.COMPARE))
def test_comparisons_equal_eager_pytorch(op):
    for a, b in (
        (SPECIAL, NAN_ROW),
        (SAMPLES, SAMPLES[::-1].copy()),
        (SAMPLES, 1.5),
        (I32, I32_B),
        (I64, -7),
        (I8, I8_B),
        (I16, 300),
        (WIDE, 1),
        (BOOLS_A, BOOLS_B),
    ):
        overload = "Scalar" if np.isscalar(b) else "Tensor"
        got = ew.KERNELS[getattr(getattr(aten, op), overload)].run(a, b)
        want = getattr(torch, op)(torch.from_numpy(a), torch.from_numpy(b) if isinstance(b, np.ndarray) else b)
        np.testing.assert_array_equal(got, want.numpy())


def test_where_and_logical_ops_equal_eager_pytorch():
    cond = torch.from_numpy(BOOLS_A)
    got = ew.KERNELS[aten.where.self].run(BOOLS_A, SPECIAL, np.zeros((3, 1, 1), np.float32))
    np.testing.assert_array_equal(got, torch.where(cond, torch.from_numpy(SPECIAL), torch.zeros(3, 1, 1)).numpy())
    for op in ("logical_and", "logical_or"):
        got = ew.KERNELS[getattr(aten, op).default].run(BOOLS_A, BOOLS_B)
        np.testing.assert_array_equal(got, getattr(torch, op)(cond, torch.from_numpy(BOOLS_B)).numpy())
    np.testing.assert_array_equal(ew.KERNELS[aten.logical_not.default].run(BOOLS_A), ~BOOLS_A)


def test_sign_of_bools_equals_eager_pytorch():
    got = ew.KERNELS[aten.sign.default].run(BOOLS_B)
    want = torch.sign(torch.from_numpy(BOOLS_B)).numpy()
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_float_number_with_an_integer_tensor_is_refused():
    with pytest.raises(HostError, match="number 0.5 with a int32 tensor"):
        ew.KERNELS[aten.mul.Tensor].run(I32, 0.5)


def _value(dtype, quantized=False):
    return Value("v", (2, 4), dtype, QParams(0.1) if quantized else None)


def _op(target, args, out_dtype, kwargs=None):
    """A graph op; an int8 output is a quantized one (the program runs the float kernel)."""
    return Op("node", target, tuple(args), kwargs or {}, [_value(out_dtype, out_dtype == "int8")])


@pytest.mark.parametrize(
    "target, args, out_dtype, kwargs, accepted",
    [
        (aten.add.Tensor, (_value("int32"), _value("int32")), "int32", {}, True),
        (aten.add.Tensor, (_value("int32"), 2), "int32", {}, True),
        # operands of two dtypes: the builder converts them first (kiln.program.promotion)
        (aten.add.Tensor, (_value("int32"), 0.5), "float32", {}, False),
        (aten.add.Tensor, (_value("bool"), _value("bool")), "bool", {}, True),
        (aten.add.Tensor, (_value("bool"), True), "bool", {}, False),  # no number with bools
        (aten.sub.Tensor, (_value("bool"), _value("bool")), "bool", {}, False),  # PyTorch refuses it
        (aten.maximum.default, (_value("bool"), _value("bool")), "bool", {}, True),
        (aten.sign.default, (_value("bool"),), "bool", {}, True),
        (aten.eq.Tensor, (_value("bool"), _value("bool")), "bool", {}, True),
        (aten.eq.Scalar, (_value("bool"), 1), "bool", {}, False),  # PyTorch compares them as int64
        (aten.logical_and.default, (_value("int16"), _value("int16")), "bool", {}, False),  # converted to bool first
        (aten.add.Tensor, (_value("float32"), _value("float32")), "float32", {"alpha": 2}, False),
        (aten.mul.Tensor, (_value("int32"), _value("int64")), "int64", {}, False),
        (aten.mul.Tensor, (_value("int8", True), _value("int8", True)), "int8", {}, True),  # dequantized first
        (aten.gelu.default, (_value("int32"),), "int32", {}, False),
        (aten.div.Tensor, (_value("int32"), _value("int32")), "float32", {}, False),
        (aten.div.Tensor_mode, (_value("int64"), _value("int64")), "int64", {"rounding_mode": "floor"}, True),
        (aten.div.Tensor_mode, (_value("int64"), _value("int64")), "float32", {"rounding_mode": None}, False),
        (aten.eq.Scalar, (_value("int64"), 3), "bool", {}, True),
        (aten.eq.Scalar, (_value("int64"), 2.5), "bool", {}, False),
        (aten.lt.Tensor, (_value("float32"), _value("int32")), "bool", {}, False),
        (aten.where.self, (_value("bool"), _value("int8", True), _value("int8", True)), "int8", {}, True),
        (aten.where.self, (_value("float32"), _value("float32"), _value("float32")), "float32", {}, False),
        (aten.logical_and.default, (_value("bool"), _value("float32")), "bool", {}, False),
    ],
)
def test_accepts_only_what_the_kernel_covers(target, args, out_dtype, kwargs, accepted):
    assert ew.KERNELS[target].accepts(_op(target, args, out_dtype, kwargs)) is accepted


def test_every_elementwise_kernel_has_a_case():
    """Each kernel of kiln.program.kernels.elementwise is a case here (test_runtime_host checks that
    every family has its test_kernels_<family>.py and the host build has every kernel)."""
    assert {(case[0], case[1]) for case in CASES.values()} == kernel_names(kernels.elementwise)
