"""Every single-operator case of the frontend issue (tests/compiler/operator_cases.py) compiles on the
float path (--no-quantize: normalised, then float CPU kernels) for ethos-u55-128, and
`kiln run-host` computes what eager PyTorch does. The quantized path of the same cases is
tests/compiler/test_operator_cases.py."""

from __future__ import annotations

import numpy as np
import pytest

from kiln import compile as kc
from kiln.frontend.export import LoadedModel
from kiln.reference import run_host as host
from kiln.spec import CompileSpec
from tests.compiler import operator_cases


@pytest.mark.parametrize("name", operator_cases.CASES)
def test_float_program_equals_eager(name):
    make, inputs = operator_cases.CASES[name]
    module, xs = make().eval(), inputs()
    result = kc.compile_model(
        LoadedModel(name, module, xs), CompileSpec("ethos-u55-128", quantize=False), log=lambda line: None
    )
    assert not result.report["delegates"]  # float programs run on the CPU
    (got,) = host.run(result.pte, [x.numpy() for x in xs])
    want = module(*xs).detach().numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(want).max())))


def test_int32_arithmetic_on_the_cpu_is_one_plain_kernel_call():
    """In a float program an int32 product stays on the CPU as its own kernel (which wraps as
    PyTorch does), not as an integer op through another width."""
    make, inputs = operator_cases.CASES["mul_int32"]
    result = kc.compile_model(
        LoadedModel("mul_int32", make().eval(), inputs()),
        CompileSpec("ethos-u55-128", quantize=False),
        log=lambda line: None,
    )
    assert result.program.operators == [("aten::mul", "out")]
    assert [i.kind for i in result.program.instructions] == ["kernel"]
