"""Every reduction and elementwise op of kiln's vocabulary on the integer and bool dtypes PyTorch
takes it on: a float program (--no-quantize, so every op runs on the CPU) compiles, and `kiln
run-host` computes what eager PyTorch does, in its dtype: bit for bit, except that a float32
result of a transcendental function (sigmoid of an int8 tensor) is held to the bound kiln's
float32 kernel of that function is held to against PyTorch's (tests/eager_bounds.py). The cases
are enumerated from kiln.vocabulary's rows (a new row of these kinds needs a call here); a dtype
eager PyTorch refuses is no case. MISSING lists the cases kiln has no CPU kernel for yet: each is
expected to stop the compile, and one that starts to pass fails here until it is taken off."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

from kiln import compile as kc
from kiln import vocabulary
from kiln.errors import ProgramError
from kiln.frontend.export import LoadedModel
from kiln.reference import run_host as host
from kiln.spec import CompileSpec
from tests.eager_bounds import EAGER, assert_within

aten = torch.ops.aten
K = vocabulary.Kind
REDUCTIONS = (K.SUM, K.MEAN, K.CUMSUM, K.EXTREMUM, K.ARGMAX, K.ARGMIN, K.BOOL_REDUCTION)
ELEMENTWISE = (K.BINARY, K.DIV, K.MINMAX, K.ACTIVATION, K.UNARY, K.COMPARISON, K.LOGICAL, K.WHERE)
DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)


def _of_x(op, x, y):
    return op(x)


def _compared(op, x, y):
    return op(x, y if op._overloadname == "Tensor" else 2)


# How each overload is called on (x, y), two tensors of one dtype, y nonzero.
CALLS = {
    aten.sum.dim_IntList: lambda x, y: aten.sum.dim_IntList(x, [1]),
    aten.mean.dim: lambda x, y: aten.mean.dim(x, [1]),
    aten.cumsum.default: lambda x, y: aten.cumsum.default(x, 1),
    aten.amax.default: lambda x, y: aten.amax.default(x, [1]),
    aten.amin.default: lambda x, y: aten.amin.default(x, [0, 1], True),
    aten.argmax.default: lambda x, y: aten.argmax.default(x, 1),
    aten.argmin.default: lambda x, y: aten.argmin.default(x, 0, True),
    aten.any.dims: lambda x, y: aten.any.dims(x, [1]),
    aten.all.dims: lambda x, y: aten.all.dims(x, [0]),
    aten.add.Tensor: lambda x, y: aten.add.Tensor(x, y),
    aten.sub.Tensor: lambda x, y: aten.sub.Tensor(x, y),
    aten.mul.Tensor: lambda x, y: aten.mul.Tensor(x, y),
    aten.div.Tensor: lambda x, y: aten.div.Tensor(x, y),
    aten.div.Tensor_mode: lambda x, y: aten.div.Tensor_mode(x, y, rounding_mode="floor"),
    aten.minimum.default: lambda x, y: aten.minimum.default(x, y),
    aten.maximum.default: lambda x, y: aten.maximum.default(x, y),
    aten.relu.default: lambda x, y: aten.relu.default(x),
    aten.relu6.default: lambda x, y: aten.relu6.default(x),
    aten.hardtanh.default: lambda x, y: aten.hardtanh.default(x, -3, 3),
    aten.clamp.default: lambda x, y: aten.clamp.default(x, -3, 3),
    aten.pow.Tensor_Scalar: lambda x, y: aten.pow.Tensor_Scalar(x, 2),
    aten.where.self: lambda x, y: aten.where.self(x > y, x, y),
    aten.logical_and.default: lambda x, y: aten.logical_and.default(x, y),
    aten.logical_or.default: lambda x, y: aten.logical_or.default(x, y),
    aten.logical_not.default: lambda x, y: aten.logical_not.default(x),
    **{op: partial(_of_x, op) for op in vocabulary.of_kind(K.UNARY) if op is not aten.pow.Tensor_Scalar},
    **{op: partial(_compared, op) for op in vocabulary.of_kind(K.COMPARISON)},
}


def _inputs(dtype):
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(3, 5, generator=g) > 0.5, torch.rand(3, 5, generator=g) > 0.5
    x = torch.randint(-20, 20, (3, 5), generator=g).to(dtype)
    return x, torch.randint(1, 9, (3, 5), generator=g).to(dtype)


def _eager_takes(op, dtype) -> bool:
    try:
        CALLS[op](*_inputs(dtype))
    except (RuntimeError, TypeError):
        return False
    return True


CASES = [
    (op, dtype)
    for op in sorted(vocabulary.of_kind(*REDUCTIONS, *ELEMENTWISE), key=str)
    for dtype in DTYPES
    if _eager_takes(op, dtype)
]
# (op, dtype) kiln has no CPU kernel for yet, by class: none.
MISSING: set[tuple[str, str]] = set()
# The bound of each float32 function's kernel against PyTorch's (the rest: bit for bit).
BOUNDS = {target: bound for target, args, _, bound in EAGER.values() if not args}


class Call(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, y):
        return self.fn(x, y)


def test_every_reduction_and_elementwise_op_has_a_call():
    assert set(CALLS) == set(vocabulary.of_kind(*REDUCTIONS, *ELEMENTWISE))


@pytest.mark.parametrize("op, dtype", CASES, ids=[f"{op}-{str(d)[6:]}" for op, d in CASES])
def test_integer_op_on_the_cpu_equals_eager(op, dtype):
    x, y = _inputs(dtype)
    want = CALLS[op](x, y).numpy()
    loaded = LoadedModel("op", Call(CALLS[op]).eval(), (x, y))
    spec = CompileSpec("ethos-u55-128", quantize=False)
    if (str(op), str(dtype)[6:]) in MISSING:
        with pytest.raises(ProgramError, match="no CPU kernel"):
            kc.compile_model(loaded, spec, log=lambda line: None)
        return
    result = kc.compile_model(loaded, spec, log=lambda line: None)
    (got,) = host.run(result.pte, [x.numpy(), y.numpy()])
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype == np.float32:
        assert_within(BOUNDS.get(op, "exact"), x.numpy(), got, want, str(op))
    else:
        assert np.array_equal(got, want)


# Operands of two dtypes, which PyTorch converts to one before it computes (kiln.program.promotion).
MIXED = {
    "mul_int8_float32": lambda i, f: i * f,
    "add_int64_float_number": lambda i, f: i.long() + 0.5,
    "lt_int32_float32": lambda i, f: i.int() < f,
    "where_int8_float32": lambda i, f: torch.where(f > 0, i, f),
    "maximum_int16_int64": lambda i, f: torch.maximum(i.short(), i.long() * 3),
    "eq_bool_float_number": lambda i, f: (i > 0) == 1.0,
    "div_int32_by_float32_0d": lambda i, f: i.int() / f[0, 0],
    "pow_int8_float_exponent": lambda i, f: i**2.0,  # the decomposition's mul(x, x) of x as float32
    "logical_and_int16_bool": lambda i, f: torch.logical_and(i.short(), f > 0),
    "logical_or_float32_int8": lambda i, f: torch.logical_or(f.round(), i),
}


@pytest.mark.parametrize("name", MIXED)
def test_operands_of_two_dtypes_are_converted_as_pytorch_promotes_them(name):
    """Each operand whose dtype is not the one PyTorch computes in is converted by an
    aten::_to_copy call of the program; the result equals eager PyTorch's bit for bit."""
    g = torch.Generator().manual_seed(1)
    i, f = torch.randint(-20, 20, (3, 5), generator=g).to(torch.int8), torch.randn(3, 5, generator=g) * 10
    want = MIXED[name](i, f).numpy()
    result = kc.compile_model(
        LoadedModel(name, Call(MIXED[name]).eval(), (i, f)),
        CompileSpec("ethos-u55-128", quantize=False),
        log=lambda line: None,
    )
    assert ("aten::_to_copy", "out") in result.program.operators
    (got,) = host.run(result.pte, [i.numpy(), f.numpy()])
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()
