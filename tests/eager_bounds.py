"""How closely kiln's float32 CPU kernels (kiln.program.kernels) follow PyTorch's eager ops: the
bound of each (EAGER) and its check (assert_within). tests/firmware/runtime/test_kernels_elementwise.py
holds each kernel to its bound on many samples; other tests hold results computed through those
kernels to the same bounds."""

from __future__ import annotations

import numpy as np
import torch

from kiln.program.kernels import elementwise as ew

F = torch.nn.functional
aten = torch.ops.aten


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in float32 steps (0 for two NaNs; -0 and +0 are 0 apart)."""

    def ordered(x):
        i = np.asarray(x, np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    d = np.abs(ordered(a) - ordered(b))
    return np.where(np.isnan(a) & np.isnan(b), 0, d)


# (aten op, numpy schema arguments, the eager PyTorch function, bound). A bound is "exact"
# (bit for bit, NaNs equal), "value" (equal values: -0 == +0), an int k (within k float32
# steps), or (k, c): within k steps or within c * 2^-24 * |x| (where PyTorch's float32 formula
# cancels, 1 + erf(x) or 1 + tanh(x) near zero, its own rounding of the transcendental term
# leaves only that absolute accuracy).
EAGER = {
    "hardsigmoid": (aten.hardsigmoid.default, (), F.hardsigmoid, "exact"),
    "hardswish": (aten.hardswish.default, (), F.hardswish, "exact"),
    "leaky_relu": (aten.leaky_relu.default, (0.1,), lambda t: F.leaky_relu(t, 0.1), "exact"),
    "relu": (aten.relu.default, (), F.relu, "value"),  # kiln's relu(-0) is +0, PyTorch's -0
    "clamp": (aten.clamp.default, (-0.75, 2.0), lambda t: torch.clamp(t, -0.75, 2.0), "exact"),
    "hardtanh": (aten.hardtanh.default, (-1.0, 1.0), F.hardtanh, "exact"),
    "rsqrt": (aten.rsqrt.default, (), torch.rsqrt, "exact"),
    "reciprocal": (aten.reciprocal.default, (), torch.reciprocal, "exact"),
    "abs": (aten.abs.default, (), torch.abs, "exact"),
    "neg": (aten.neg.default, (), torch.neg, "exact"),
    "floor": (aten.floor.default, (), torch.floor, "exact"),
    "ceil": (aten.ceil.default, (), torch.ceil, "exact"),
    "round": (aten.round.default, (), torch.round, "exact"),
    "trunc": (aten.trunc.default, (), torch.trunc, "exact"),
    "sign": (aten.sign.default, (), torch.sign, "exact"),
    "pow_2": (aten.pow.Tensor_Scalar, (2,), lambda t: t.pow(2), "exact"),
    "pow_3": (aten.pow.Tensor_Scalar, (3.0,), lambda t: t.pow(3.0), "exact"),
    "pow_-2": (aten.pow.Tensor_Scalar, (-2,), lambda t: t.pow(-2), "exact"),
    "pow_-0.5": (aten.pow.Tensor_Scalar, (-0.5,), lambda t: t.pow(-0.5), "exact"),
    "pow_-1": (aten.pow.Tensor_Scalar, (-1,), lambda t: t.pow(-1), "exact"),
    "pow_0": (aten.pow.Tensor_Scalar, (0,), lambda t: t.pow(0), "exact"),
    "pow_1": (aten.pow.Tensor_Scalar, (1,), lambda t: t.pow(1), "exact"),
    # kiln's sqrt is IEEE's (correctly rounded); PyTorch's vectorised float32 sqrt is not always
    "sqrt": (aten.sqrt.default, (), torch.sqrt, 1),
    "pow_0.5": (aten.pow.Tensor_Scalar, (0.5,), lambda t: t.pow(0.5), 1),
    "pow_2.5": (aten.pow.Tensor_Scalar, (2.5,), lambda t: t.pow(2.5), 2),
    "exp": (aten.exp.default, (), torch.exp, 1),
    "log": (aten.log.default, (), torch.log, 1),
    "tanh": (aten.tanh.default, (), torch.tanh, 1),
    "sin": (aten.sin.default, (), torch.sin, 1),
    "cos": (aten.cos.default, (), torch.cos, 1),
    "erf": (aten.erf.default, (), torch.erf, 1),
    "softplus": (aten.softplus.default, (1, 20), F.softplus, 1),
    "softplus_beta": (aten.softplus.default, (2.0, 5.0), lambda t: F.softplus(t, 2.0, 5.0), 1),
    "elu": (aten.elu.default, (1.0, 1, 1), F.elu, 1),
    "elu_coefficients": (aten.elu.default, (0.5, 2.0, 1.5), lambda t: aten.elu(t, 0.5, 2.0, 1.5), 2),
    "selu": (aten.selu.default, (ew.SELU_ALPHA, ew.SELU_SCALE, 1.0), F.selu, 2),
    "celu": (aten.celu.default, (0.7, 1.0, 1 / 0.7), lambda t: F.celu(t, 0.7), 2),
    "sigmoid": (aten.sigmoid.default, (), torch.sigmoid, (4, 0)),
    "silu": (aten.silu.default, (), F.silu, (2, 4)),
    "mish": (aten.mish.default, (), F.mish, (2, 2)),
    "gelu": (aten.gelu.default, ("none",), F.gelu, (1, 8)),
    "gelu_tanh": (aten.gelu.default, ("tanh",), lambda t: F.gelu(t, approximate="tanh"), (1, 3)),
}


def assert_within(bound, x: np.ndarray, got: np.ndarray, want: np.ndarray, name: str) -> None:
    """Asserts kiln's float32 `got` is within `bound` of PyTorch's `want`, both computed from `x`."""
    if bound in ("exact", "value"):
        view = (lambda a: a.view(np.int32)) if bound == "exact" else (lambda a: a)
        np.testing.assert_array_equal(view(got)[~np.isnan(want)], view(want)[~np.isnan(want)])
        assert np.array_equal(np.isnan(got), np.isnan(want))
        return
    steps, spread = (bound, 0) if isinstance(bound, int) else bound
    d = ulps(got, want)
    with np.errstate(invalid="ignore"):  # inf - inf where both are inf: d decides
        loose = np.abs(got.astype(np.float64) - want) <= spread * 2.0**-24 * np.abs(x.astype(np.float64))
    worst = int(np.argmax(np.where(loose, 0, d)))
    assert np.all((d <= steps) | loose), f"{name}: x={x[worst]!r}: {got[worst]!r} vs {want[worst]!r}"
