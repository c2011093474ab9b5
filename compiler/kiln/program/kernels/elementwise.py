"""Elementwise kernels: activations, transcendental functions, broadcasting arithmetic,
comparisons, where and logical ops.

Math is float32 in the order each function's comment gives, the order PyTorch's CPU kernels
use, so that the firmware's C++ (firmware/runtime/kernels/elementwise.cpp, unary.cpp) computes
the same bits. A transcendental part (exp, expm1, log1p, tanh, erf, sin, cos, pow) is
evaluated in float64 on float32 inputs and rounded once (f64 below; transcendental.h in C++).
add, sub, mul, div with a rounding mode, minimum, maximum, where and the comparisons also take
int8, int16, int32 and int64 tensors (add, sub, mul wrap in two's complement, as PyTorch's do);
add, mul, minimum, maximum, sign, where and the comparisons take bool tensors as PyTorch computes
with bools (0 and 1, a nonzero result true: add is or, mul and minimum are and, maximum is or;
PyTorch refuses sub of bools); comparisons write bool; logical_not/and/or read and write bool
(an operand of another dtype is converted to bool first, x != 0: kiln.program.promotion, as
operands of two dtypes are). Binary operands broadcast as numpy's; a number operand takes the
tensor operand's dtype (an int only for int tensors, none for bools).
`accepts` refuses dtypes and arguments a kernel does not cover, so such ops stay a
ProgramError naming the node instead of a wrong result.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from kiln.errors import HostError
from kiln.graph import Value
from kiln.program.kernels.core import Derived, Fixed, Kernel, exp32, in_float64, log32, tanh32

aten = torch.ops.aten

F32 = np.float32
INT_DTYPES = ("int8", "int16", "int32", "int64")
WITH_BOOL = ("float32", *INT_DTYPES, "bool")

# float32 constants, written as their exact bits (elementwise.cpp uses the same hex literals).
SQRT1_2 = F32(float.fromhex("0x1.6a09e6p-1"))  # float(M_SQRT1_2)
GELU_BETA = F32(float.fromhex("0x1.988454p-1"))  # float(M_SQRT2 * M_2_SQRTPI * 0.5), sqrt(2/pi)
GELU_KAPPA = F32(float.fromhex("0x1.6e4e26p-5"))  # float(0.044715)
SELU_ALPHA = 1.6732632423543772848170429916717  # PyTorch's selu constants, rounded to float32 by elu
SELU_SCALE = 1.0507009873554804934193349852946

expm1_32 = in_float64(np.expm1)
sin32, cos32 = in_float64(np.sin), in_float64(np.cos)
_erf64 = np.frompyfunc(math.erf, 1, 1)  # the C library's erf, as the firmware's std::erf
erf32 = in_float64(lambda x: _erf64(x).astype(np.float64))
softplus_core32 = in_float64(lambda t: np.log1p(np.exp(t)))  # log1p(exp(t)), rounded once
mish_core32 = in_float64(lambda x: np.tanh(np.log1p(np.exp(x))))  # tanh(softplus(x)), rounded once


def compute_dtype(v) -> str:
    """The dtype a kernel sees for graph value `v`: float32 for quantized values (the program
    dequantizes them before a CPU kernel runs)."""
    return "float32" if v.qparams is not None else v.dtype


def _dtypes(op) -> set[str]:
    return {compute_dtype(v) for v in op.inputs}


def _all(*dtypes):
    """accepts: every tensor operand and the output have one of `dtypes`, all the same one."""

    def accepts(op) -> bool:
        seen = _dtypes(op) | {compute_dtype(op.output)}
        return len(seen) == 1 and seen <= set(dtypes)

    return accepts


floats_only = _all("float32")


def _numbers_fit(op, names) -> bool:
    """Number operands (not tensors) of an op on integer tensors must be ints; on bool tensors
    there are none."""
    dtype = compute_dtype(op.output)
    if dtype == "bool":
        return all(isinstance(op.arg(n), Value) for n in names)
    if dtype not in INT_DTYPES:
        return True
    return not any(isinstance(op.arg(n), float) for n in names)


def operand(x, dtype):
    """A binary operand as an array: a number takes the tensor operand's `dtype` (ints wrap)."""
    if isinstance(x, np.ndarray):
        return x
    if np.dtype(dtype).kind == "f":
        return F32(float(x))
    if isinstance(x, float) or np.dtype(dtype) == np.bool_:
        raise HostError(f"a number {x!r} with a {np.dtype(dtype)} tensor is not supported")
    return np.array(int(x), np.int64).astype(dtype)


def _dtype_of(*xs):
    return next(x.dtype for x in xs if isinstance(x, np.ndarray))


def broadcasting(fn):
    """A kernel of two operands (tensors or numbers) of one dtype; extra schema arguments pass."""

    def run(a, b, *rest):
        dtype = _dtype_of(a, b)
        with np.errstate(all="ignore"):  # integers wrap, floats give inf/NaN, as in C++
            return np.asarray(fn(operand(a, dtype), operand(b, dtype), *rest))

    return run


def unary(fn):
    def run(x, *rest):
        with np.errstate(all="ignore"):
            return np.asarray(fn(x, *rest)).astype(x.dtype)

    return run


def where_nan(x, y):
    """y where x is not NaN, else x (NaN passes through comparisons that drop it)."""
    return np.where(np.isnan(x), x, y)


def _minimum(a, b):  # NaN if either is; else b when b < a, else a (a on ties, so min(-0, 0) is -0)
    if a.dtype.kind != "f":
        return np.where(b < a, b, a)
    return np.where(np.isnan(a) | np.isnan(b), F32(np.nan), np.where(b < a, b, a))


def _maximum(a, b):  # NaN if either is; else b when b > a, else a
    if a.dtype.kind != "f":
        return np.where(b > a, b, a)
    return np.where(np.isnan(a) | np.isnan(b), F32(np.nan), np.where(b > a, b, a))


def _clamp(x, lo, hi):
    """max(x, lo) then min(., hi), NaN passing; a None bound is no bound. lo > hi gives hi.
    Integers: the bounds in x's dtype (integer_bounds_fit)."""
    if x.dtype.kind != "f":
        if lo is not None:
            x = np.maximum(x, x.dtype.type(int(lo)))
        return x if hi is None else np.minimum(x, x.dtype.type(int(hi)))
    if lo is not None:
        x = np.where((x > F32(lo)) | np.isnan(x), x, F32(lo))
    if hi is not None:
        x = np.where((x < F32(hi)) | np.isnan(x), x, F32(hi))
    return x


def _hardsigmoid(x):  # clamp(x + 3, 0, 6) / 6
    return _clamp(x + F32(3), 0, 6) / F32(6)


def _hardswish(x):  # x * clamp(x + 3, 0, 6) / 6: the product first
    return x * _clamp(x + F32(3), 0, 6) / F32(6)


def _leaky_relu(x, slope):  # x > 0 ? x : x * slope
    return np.where(x > 0, x, x * F32(slope))


def _gelu(x, approximate):
    if approximate == "none":  # x * 0.5 * (1 + erf(x * sqrt(1/2)))
        return x * F32(0.5) * (F32(1) + erf32(x * SQRT1_2))
    if approximate == "tanh":  # 0.5 * x * (1 + tanh(beta * (x + kappa * x^3))), x^3 = (x * x) * x
        inner = GELU_BETA * (x + GELU_KAPPA * (x * x * x))
        return F32(0.5) * x * (F32(1) + tanh32(inner))
    raise HostError(f"gelu: approximate={approximate!r} is not 'none' or 'tanh'")


def _silu(x):  # x / (1 + exp(-x))
    return x / (F32(1) + exp32(-x))


def _elu(x, alpha, scale, input_scale):
    """x <= 0 ? expm1(x * input_scale) * (alpha * scale) : x * scale, every coefficient float32
    and alpha * scale a float32 product. NaN takes the second branch (x * scale)."""
    negcoef = F32(alpha) * F32(scale)
    return np.where(x <= 0, expm1_32(x * F32(input_scale)) * negcoef, x * F32(scale))


def _softplus(x, beta, threshold):  # x * beta > threshold ? x : log1p(exp(x * beta)) / beta
    t = x * F32(beta)
    return np.where(t > F32(threshold), x, softplus_core32(t) / F32(beta))


def _mish(x):  # x * tanh(log1p(exp(x)))
    return x * mish_core32(x)


def _rsqrt(x):  # 1 / sqrt(x), two float32 roundings
    return F32(1) / np.sqrt(x)


def _sign(x):  # (x > 0) - (x < 0): NaN and -0 give +0; a bool's is itself
    if x.dtype == np.bool_:
        return x.copy()
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


def _integer_valued(fn):
    """fn of float32; of an integer, the integer itself (floor, ceil, round, trunc)."""
    return lambda x: fn(x) if x.dtype.kind == "f" else x.copy()


def _integer_bounds_fit(*names):
    """accepts, with an integer tensor: each bound argument `names` is None or a whole number
    within the dtype (relu6's decomposition, hardtanh(0.0, 6.0), has float bounds)."""

    def fit(op) -> bool:
        dtype = compute_dtype(op.output)
        if dtype not in INT_DTYPES:
            return True
        info = np.iinfo(dtype)
        bounds = [op.arg(n) for n in names]
        whole = [b is None or (type(b) in (int, float) and float(b).is_integer()) for b in bounds]
        return all(whole) and all(b is None or info.min <= b <= info.max for b in bounds)

    return fit


numbers = _all("float32", *INT_DTYPES)  # float32 or one integer type throughout


def _pow(x, exponent):
    """x ** exponent as PyTorch's CPU kernel for a float32 tensor: 0 -> 1, 1 -> x, 0.5 -> sqrt,
    -0.5 -> 1 / sqrt, -1 -> 1 / x, 2 -> x * x, 3 -> (x * x) * x, -2 -> 1 / (x * x); any other
    exponent as float32, the power evaluated in float64 and rounded once."""
    e = float(exponent)
    special = {
        0.0: lambda: np.ones_like(x),
        1.0: lambda: x.copy(),
        0.5: lambda: np.sqrt(x),
        -0.5: lambda: _rsqrt(x),
        -1.0: lambda: F32(1) / x,
        2.0: lambda: x * x,
        3.0: lambda: x * x * x,
        -2.0: lambda: F32(1) / (x * x),
    }
    if e in special:
        return special[e]()
    return np.power(x.astype(np.float64), np.float64(F32(e))).astype(F32)


def _div_floor_float(a, b):
    """Python's float floor division, as PyTorch's: b == 0 -> a / b; else m = fmod(a, b),
    d = (a - m) / b, minus 1 when m != 0 and m's sign differs from b's; then floor(d), plus 1
    when d - floor(d) > 0.5; d == 0 gives zero with the sign of a / b."""
    m = np.fmod(a, b)
    d = (a - m) / b
    d = np.where((m != 0) & ((b < 0) != (m < 0)), d - F32(1), d)
    fl = np.floor(d)
    fl = np.where(d - fl > F32(0.5), fl + F32(1), fl)
    q = a / b
    fl = np.where(d != 0, fl, np.copysign(F32(0), q))
    return np.where(b == 0, q, fl)


def _div_int(a, b, mode):
    """Integer division rounding toward zero ("trunc") or down ("floor"); x / -1 wraps
    (MIN / -1 is MIN). A zero divisor is an error, as in PyTorch."""
    if np.any(b == 0):
        raise HostError("div: integer division by zero")
    safe = np.where(b == -1, 1, b)
    floor = a // safe
    q = floor + (((a % safe) != 0) & ((a < 0) != (safe < 0))) if mode == "trunc" else floor
    return np.where(b == -1, np.negative(a), q).astype(a.dtype)


def _div_mode(a, b, rounding_mode):
    if a.dtype.kind == "f":
        if rounding_mode is None:
            return a / b
        if rounding_mode == "trunc":
            return np.trunc(a / b)
        if rounding_mode == "floor":
            return _div_floor_float(a, b)
    elif rounding_mode in ("trunc", "floor"):
        return _div_int(a, b, rounding_mode)
    raise HostError(f"div: rounding_mode={rounding_mode!r} on {a.dtype} is not supported")


def _alpha_one(op) -> bool:
    return op.arg("alpha") in (None, 1)


def _arithmetic(name, fn, alpha=False, bools=True) -> Kernel:
    """add/sub (self, other, alpha = 1) or mul (self, other): float32, integers (INT_DTYPES) or
    (`bools`) bools."""
    names = ("self", "other", "alpha") if alpha else ("self", "other")
    same = _all(*WITH_BOOL) if bools else numbers

    def accepts(op) -> bool:
        return same(op) and _numbers_fit(op, ("self", "other")) and (not alpha or _alpha_one(op))

    return Kernel(f"aten::{name}", "out", names, broadcasting(lambda a, b, *alpha: fn(a, b)), accepts)


def _comparison(name: str, scalar: bool) -> Kernel:
    """eq/ne/lt/le/gt/ge.Tensor_out or .Scalar_out: float32, integer or bool operands of one
    dtype (a number other must be an int for integer tensors, and there is none for bools), bool out."""

    def accepts(op) -> bool:
        found, other = _dtypes(op), op.arg("other")
        return (
            compute_dtype(op.output) == "bool"
            and len(found) == 1
            and found <= set(WITH_BOOL)
            and (found == {"float32"} or not isinstance(other, float))
            and (found != {"bool"} or isinstance(other, Value))
        )

    return Kernel(
        f"aten::{name}",
        "Scalar_out" if scalar else "Tensor_out",
        ("self", "other"),
        broadcasting(COMPARE[name]),
        accepts,
    )


COMPARE = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


def _where(cond, a, b):
    return np.where(cond.astype(bool), a, b)


def _where_accepts(op) -> bool:
    cond, a, b = (op.arg(n) for n in ("condition", "self", "other"))
    return (
        compute_dtype(cond) == "bool"
        and compute_dtype(a) == compute_dtype(b) == compute_dtype(op.output)
        and compute_dtype(a) in WITH_BOOL
    )


def _bools(op) -> bool:
    return _dtypes(op) == {"bool"} and compute_dtype(op.output) == "bool"


def _celu_input_scale(op) -> float:
    return 1.0 / float(op.arg("alpha"))


def _float_unary(name, fn, *args) -> Kernel:
    return Kernel(f"aten::{name}", "out", ("self", *args), unary(fn), floats_only)


def _numeric_unary(name, fn) -> Kernel:
    """A function of float32 or of one integer type, into the same type."""
    return Kernel(f"aten::{name}", "out", ("self",), unary(fn), numbers)


_ELU = ("alpha", "scale", "input_scale")

KERNELS: dict[object, Kernel] = {
    aten.relu.default: Kernel("aten::relu", "out", ("self",), lambda x: np.maximum(x, np.zeros((), x.dtype)), numbers),
    aten.hardtanh.default: Kernel(
        "aten::hardtanh",
        "out",
        ("self", "min_val", "max_val"),
        lambda x, lo, hi: np.clip(x, np.float32(lo), np.float32(hi)) if x.dtype.kind == "f" else _clamp(x, lo, hi),
        lambda op: numbers(op) and _integer_bounds_fit("min_val", "max_val")(op),
    ),
    aten.clamp.default: Kernel(
        "aten::clamp",
        "out",
        ("self", "min", "max"),
        unary(_clamp),
        lambda op: numbers(op) and _integer_bounds_fit("min", "max")(op),
    ),
    aten.sigmoid.default: _float_unary("sigmoid", lambda x: F32(1) / (F32(1) + exp32(-x))),
    aten.tanh.default: _float_unary("tanh", tanh32),
    aten.exp.default: _float_unary("exp", exp32),
    aten.log.default: _float_unary("log", log32),
    aten.reciprocal.default: _float_unary("reciprocal", lambda x: F32(1) / x),
    aten.hardsigmoid.default: _float_unary("hardsigmoid", _hardsigmoid),
    aten.hardswish.default: _float_unary("hardswish", _hardswish),
    aten.leaky_relu.default: _float_unary("leaky_relu", _leaky_relu, "negative_slope"),
    aten.gelu.default: _float_unary("gelu", _gelu, "approximate"),
    aten.silu.default: _float_unary("silu", _silu),
    aten.elu.default: _float_unary("elu", _elu, *_ELU),
    aten.selu.default: _float_unary("elu", _elu, Fixed(SELU_ALPHA), Fixed(SELU_SCALE), Fixed(1.0)),
    aten.celu.default: _float_unary("elu", _elu, "alpha", Fixed(1.0), Derived(_celu_input_scale)),
    aten.softplus.default: _float_unary("softplus", _softplus, "beta", "threshold"),
    aten.mish.default: _float_unary("mish", _mish),
    aten.sqrt.default: _float_unary("sqrt", np.sqrt),
    aten.rsqrt.default: _float_unary("rsqrt", _rsqrt),
    aten.sin.default: _float_unary("sin", sin32),
    aten.cos.default: _float_unary("cos", cos32),
    aten.erf.default: _float_unary("erf", erf32),
    aten.abs.default: _numeric_unary("abs", np.abs),  # of integers, wrapping: abs(MIN) is MIN
    aten.neg.default: _numeric_unary("neg", np.negative),
    aten.floor.default: _numeric_unary("floor", _integer_valued(np.floor)),
    aten.ceil.default: _numeric_unary("ceil", _integer_valued(np.ceil)),
    aten.round.default: _numeric_unary("round", _integer_valued(np.rint)),  # half to even
    aten.trunc.default: _numeric_unary("trunc", _integer_valued(np.trunc)),
    aten.sign.default: Kernel("aten::sign", "out", ("self",), unary(_sign), _all(*WITH_BOOL)),
    aten.pow.Tensor_Scalar: Kernel("aten::pow", "Tensor_Scalar_out", ("self", "exponent"), unary(_pow), floats_only),
    aten.add.Tensor: _arithmetic("add", np.add, alpha=True),
    aten.sub.Tensor: _arithmetic("sub", np.subtract, alpha=True, bools=False),  # PyTorch refuses bools
    aten.mul.Tensor: _arithmetic("mul", np.multiply),
    aten.div.Tensor: Kernel("aten::div", "out", ("self", "other"), broadcasting(np.divide), floats_only),
    aten.div.Tensor_mode: Kernel(
        "aten::div",
        "out_mode",
        ("self", "other", "rounding_mode"),
        broadcasting(_div_mode),
        lambda op: (
            _all("float32", *INT_DTYPES)(op)
            and _numbers_fit(op, ("other",))
            and (op.arg("rounding_mode") is not None or floats_only(op))
        ),
    ),
    aten.minimum.default: Kernel("aten::minimum", "out", ("self", "other"), broadcasting(_minimum), _all(*WITH_BOOL)),
    aten.maximum.default: Kernel("aten::maximum", "out", ("self", "other"), broadcasting(_maximum), _all(*WITH_BOOL)),
    **{getattr(aten, n).Tensor: _comparison(n, scalar=False) for n in COMPARE},
    **{getattr(aten, n).Scalar: _comparison(n, scalar=True) for n in COMPARE},
    aten.where.self: Kernel("aten::where", "self_out", ("condition", "self", "other"), _where, _where_accepts),
    aten.logical_not.default: Kernel("aten::logical_not", "out", ("self",), lambda x: x == 0, _bools),
    aten.logical_and.default: Kernel(
        "aten::logical_and", "out", ("self", "other"), lambda a, b: (a != 0) & (b != 0), _bools
    ),
    aten.logical_or.default: Kernel(
        "aten::logical_or", "out", ("self", "other"), lambda a, b: (a != 0) | (b != 0), _bools
    ),
}
