"""Every reduction and elementwise op of kiln's vocabulary on the integer and bool dtypes PyTorch
takes it on: a float program (--no-quantize, so every op runs on the CPU) compiles, and `kiln
run-host` computes what eager PyTorch does, bit for bit and in its dtype. The cases are
enumerated from kiln.vocabulary's rows (a new row of these kinds needs a call here); a dtype
eager PyTorch refuses is no case. MISSING lists the cases kiln has no CPU kernel for yet: each
is expected to stop the compile, and one that starts to pass fails here until it is taken off."""

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
INTS = ("int8", "int16", "int32", "int64")
# (op, dtype) kiln has no CPU kernel for yet, by class.
MISSING: set[tuple[str, str]] = {
    ("aten.sign.default", "bool"),
    ("aten.clamp.default", "bool"),
    # float-valued functions of integers and bools (PyTorch computes them in float32)
    *(
        (f"aten.{op}.default", d)
        for op in ("sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "erf")
        for d in (*INTS, "bool")
    ),
    *(("aten.div.Tensor", d) for d in (*INTS, "bool")),
    # arithmetic and comparisons of bools
    *((f"aten.{op}", "bool") for op in ("add.Tensor", "mul.Tensor", "minimum.default", "maximum.default")),
    ("aten.pow.Tensor_Scalar", "bool"),
    *(
        (f"aten.{op}.{overload}", "bool")
        for op in ("eq", "ne", "lt", "le", "gt", "ge")
        for overload in ("Tensor", "Scalar")
    ),
    ("aten.where.self", "bool"),  # the call's x > y of bools
    # logical ops of integers (kiln's kernels read bools)
    *((f"aten.logical_{op}.default", d) for op in ("and", "or", "not") for d in INTS),
}


class Call(torch.nn.Module):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def forward(self, x, y):
        return CALLS[self.op](x, y)


def test_every_reduction_and_elementwise_op_has_a_call():
    assert set(CALLS) == set(vocabulary.of_kind(*REDUCTIONS, *ELEMENTWISE))


@pytest.mark.parametrize("op, dtype", CASES, ids=[f"{op}-{str(d)[6:]}" for op, d in CASES])
def test_integer_op_on_the_cpu_equals_eager(op, dtype):
    x, y = _inputs(dtype)
    want = CALLS[op](x, y).numpy()
    loaded = LoadedModel("op", Call(op).eval(), (x, y))
    spec = CompileSpec("ethos-u55-128", quantize=False)
    if (str(op), str(dtype)[6:]) in MISSING:
        with pytest.raises(ProgramError, match="no CPU kernel"):
            kc.compile_model(loaded, spec, log=lambda line: None)
        return
    result = kc.compile_model(loaded, spec, log=lambda line: None)
    (got,) = host.run(result.pte, [x.numpy(), y.numpy()])
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want, equal_nan=True)
