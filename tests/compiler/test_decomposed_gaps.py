"""Ops the coverage benchmark found ExecuTorch puts on the Ethos-U NPU and kiln did not, now
decomposed (kiln.frontend.decompose) into ops kiln lowers: x.t() and mT, logsigmoid (one
softplus table with beta -1), adaptive max pools and adaptive average pools to windows of
unequal size (one pool, or slices and amax/mean per output row), division by a runtime tensor
(mul by reciprocal) and cumsum (linear with the constant weights tril(ones)). Each compiles for
ethos-u55-128 with everything but the quantize/dequantize edges on the NPU, run-host stays
within one step of the PT2E reference and that within two steps of eager PyTorch; on the
float path (--no-quantize) run-host equals eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from kiln import compile as kc
from kiln.frontend.export import LoadedModel
from kiln.reference import run_host
from kiln.spec import CompileSpec
from tests.compiler import operator_cases_more as more
from tests.compiler.helpers import call_targets, normalised, steps_off
from tests.compiler.operator_cases import Fn, _seeded

EDGES = {"quantized_decomposed.quantize_per_tensor", "quantized_decomposed.dequantize_per_tensor"}


def _x(*shape, scale=1.0):
    return lambda: (_seeded(*shape) * scale,)


CASES = {
    "t": more.CASES["transpose_2d"],
    "mT": (lambda: Fn(lambda s, x: x.mT * 2), _x(2, 6, 8)),
    "logsigmoid": (lambda: nn.LogSigmoid(), _x(1, 6, 16, scale=8)),
    "adaptive_max_pool2d_global": more.CASES["adaptive_max_pool2d_1"],
    "adaptive_max_pool2d_one_pool": (lambda: nn.AdaptiveMaxPool2d(3), _x(1, 8, 10, 10)),
    "adaptive_max_pool2d_separable": (lambda: nn.AdaptiveMaxPool2d((3, 4)), _x(1, 8, 5, 9)),
    "adaptive_avg_pool2d_one_pool": more.CASES["adaptive_avg_pool2d_nondiv"],
    "adaptive_avg_pool2d_separable": (lambda: nn.AdaptiveAvgPool2d(3), _x(1, 8, 13, 13)),
    "div_by_tensor": more.CASES["div_by_tensor"],
    "div_broadcast": more.CASES["div_broadcast"],
    "cumsum_channels": more.CASES["cumsum_channels"],
    "cumsum_last_dim": more.CASES["cumsum_2d"],
}


def _output_scale(module: torch.fx.GraphModule) -> float:
    (output,) = [n for n in module.graph.nodes if n.op == "output"]
    (node,) = output.args[0]
    assert node.target == torch.ops.quantized_decomposed.dequantize_per_tensor.default
    return float(node.args[1])


@pytest.mark.parametrize("name", CASES)
def test_compiles_onto_the_npu_within_a_step_of_pt2e(name):
    make, inputs = CASES[name]
    module, xs = make().eval(), inputs()
    result = kc.compile_model(LoadedModel(name, module, xs), CompileSpec("ethos-u55-128"), log=lambda line: None)
    cpu = {o["op"] for o in result.report["ops"] if o["where"] == "cpu"}
    assert cpu <= EDGES, cpu
    with torch.no_grad():
        want, eager = result.quantized_module(*xs), module(*xs)
    (got,) = run_host.run(result.pte, [x.numpy() for x in xs])
    scale = _output_scale(result.quantized_module)
    assert got.shape == tuple(eager.shape)
    assert steps_off(got, want, scale).max() <= 1
    assert steps_off(want.numpy(), eager, scale).max() <= 2


def test_what_stays_as_it_was():
    """Integer division and integer or long cumsum are kept; an adaptive max pool's indices are refused."""
    from kiln.errors import ModelError

    aten = torch.ops.aten
    x = (torch.randn(2, 6, 8),)
    assert aten.div.Tensor in call_targets(normalised(Fn(lambda s, a: torch.div(a.long(), (a > 0).long() + 1)), x))
    assert aten.cumsum.default in call_targets(normalised(Fn(lambda s, a: torch.cumsum(a.long(), 2)), x))
    assert aten.cumsum.default in call_targets(normalised(Fn(lambda s, a: torch.cumsum(a, 1)), (torch.randn(2, 300),)))
    with pytest.raises(ModelError, match="adaptive max pool's values, not its indices"):
        normalised(Fn(lambda s, a: F.adaptive_max_pool2d(a, 3, return_indices=True)[1] * 2), (torch.randn(1, 2, 7, 7),))


@pytest.mark.parametrize("name", CASES)
def test_float_program_equals_eager(name):
    """--no-quantize: the decomposed ops' float CPU kernels compute what eager PyTorch does."""
    make, inputs = CASES[name]
    module, xs = make().eval(), inputs()
    result = kc.compile_model(
        LoadedModel(name, module, xs), CompileSpec("ethos-u55-128", quantize=False), log=lambda line: None
    )
    (got,) = run_host.run(result.pte, [x.numpy() for x in xs])
    want = module(*xs).detach().numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(want).max())))


def test_integer_floor_division_and_remainder_equal_eager():
    """// and % of integer tensors and numbers (Python's rounding down, either sign of divisor)
    become div(rounding_mode='floor') and x - q * y, whose CPU kernels equal eager PyTorch;
    before, neither had a kernel and the compile stopped."""
    module = Fn(lambda s, i, j: (i // 4, i % 7, torch.remainder(i, j), torch.floor_divide(i, j), i % -3))
    g = torch.Generator().manual_seed(0)
    i = torch.randint(-100, 100, (3, 5), generator=g)
    j = torch.randint(1, 9, (3, 5), generator=g) * torch.where(torch.rand(3, 5, generator=g) > 0.5, 1, -1)
    result = kc.compile_model(
        LoadedModel("intdiv", module.eval(), (i, j)), CompileSpec("ethos-u55-128"), log=lambda line: None
    )
    for got, want in zip(run_host.run(result.pte, [i.numpy(), j.numpy()]), module(i, j)):
        assert got.dtype == np.int64 and np.array_equal(got, want.numpy())
