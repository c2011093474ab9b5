"""Unary functions as 8-bit TABLEs and minimum/maximum on the NPU: the lowered TOSA on
tosa_reference_model against the PT2E reference, Vela places the graph on ethos-u55-128, and
kiln's NPU model runs Vela's stream to tosa_reference_model's bytes; a whole compile puts every
one of them on the NPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from kiln import boards, vocabulary
from kiln import compile as kiln_compile
from kiln.frontend.export import LoadedModel
from kiln.graph import QParams
from kiln.lower import tosa as tosa_lowering
from kiln.lower import vela
from kiln.program.kernels import KERNELS
from kiln.simulator.npu.config import config_for
from kiln.simulator.npu.standalone import run_compiled
from kiln.spec import CompileSpec
from kiln.vocabulary import Quantized
from tests.compiler.helpers import Lambda, compare_steps, lower_module, quantize_input, run_tosa, seeded

F = nn.functional
aten = torch.ops.aten

# One op each, named by the aten overload it exports to; POSITIVE ones see inputs above 0.05
# (their functions are NaN or infinite below 0).
UNARY = {
    "gelu": (aten.gelu.default, lambda x: F.gelu(x)),
    "gelu_tanh": (aten.gelu.default, lambda x: F.gelu(x, approximate="tanh")),
    "silu": (aten.silu.default, F.silu),
    "elu": (aten.elu.default, lambda x: F.elu(x, 0.7)),
    "selu": (aten.selu.default, F.selu),
    "celu": (aten.celu.default, lambda x: F.celu(x, 1.3)),
    "softplus": (aten.softplus.default, lambda x: F.softplus(x, 2.0, 3.0)),
    "mish": (aten.mish.default, F.mish),
    "sqrt": (aten.sqrt.default, torch.sqrt),
    "rsqrt": (aten.rsqrt.default, torch.rsqrt),
    "sin": (aten.sin.default, lambda x: torch.sin(3 * x)),
    "cos": (aten.cos.default, torch.cos),
    "erf": (aten.erf.default, torch.erf),
    "abs": (aten.abs.default, torch.abs),
    "neg": (aten.neg.default, torch.neg),
    "floor": (aten.floor.default, lambda x: torch.floor(4 * x)),
    "ceil": (aten.ceil.default, lambda x: torch.ceil(4 * x)),
    "round": (aten.round.default, lambda x: torch.round(4 * x)),
    "trunc": (aten.trunc.default, lambda x: torch.trunc(4 * x)),
    "sign": (aten.sign.default, torch.sign),
    "pow": (aten.pow.Tensor_Scalar, lambda x: x**1.5),
    "square": (aten.pow.Tensor_Scalar, lambda x: x**2),
    "hardswish": (aten.hardswish.default, F.hardswish),
    "hardsigmoid": (aten.hardsigmoid.default, F.hardsigmoid),
    "leaky_relu": (aten.leaky_relu.default, lambda x: F.leaky_relu(x, 0.2)),
    "sigmoid": (aten.sigmoid.default, torch.sigmoid),
    "tanh": (aten.tanh.default, torch.tanh),
    "exp": (aten.exp.default, torch.exp),
    "log": (aten.log.default, torch.log),
    "reciprocal": (aten.reciprocal.default, torch.reciprocal),
}
POSITIVE = {"sqrt", "rsqrt", "pow", "log", "reciprocal"}
SHAPE = (1, 4, 6, 5)


def _inputs(name, seed):
    (x,) = seeded(seed, SHAPE)
    return (x.abs() + 0.05,) if name in POSITIVE else (x * 2,)


def _unary_case(name):
    return Lambda(lambda m, x: UNARY[name][1](x)), _inputs(name, 2), [_inputs(name, 2), _inputs(name, 3)]


BINARY = {
    "minimum": lambda m, a, b: torch.minimum(a, b),
    "maximum": lambda m, a, b: torch.maximum(a, b),
    # (the slice reads `a`: compare_steps feeds the partition's inputs in the model's order)
    "maximum_broadcast": lambda m, a, b: torch.maximum(a[:, :, :1], b),
    "minimum_rank2": lambda m, a, b: torch.minimum(a.flatten(1), b.flatten(1)),
    "minimum_after_mul": lambda m, a, b: torch.minimum(torch.relu(a * 3), b),
}


def _binary_case(name):
    a, b = seeded(4, SHAPE, SHAPE)
    return Lambda(BINARY[name]), (a, b * 0.5), [(a, b * 0.5), seeded(5, SHAPE, SHAPE)]


def test_every_unary_table_op_has_a_case_a_range_and_a_cpu_kernel():
    """The tables are exactly the quantizer's unary functions (each annotated with its own
    range), each has a case here, and each has a CPU kernel for when it stays off the NPU."""
    assert {target for target, _ in UNARY.values()} == vocabulary.TABLE_OPS == vocabulary.annotated(Quantized.OWN_RANGE)
    assert all(op in KERNELS for op in vocabulary.TABLE_OPS)


@pytest.mark.parametrize("name", list(UNARY) + list(BINARY))
def test_lowered_op_equals_pt2e_and_runs_on_the_npu_model(name):
    """A table is quantize(f(dequantize(q))) with PyTorch's own f, PT2E's reference arithmetic:
    exact. minimum/maximum of one shared range (the quantizer's) compare integers as the
    reals: exact."""
    module, inputs, calibration = _unary_case(name) if name in UNARY else _binary_case(name)
    diffs, tosa = compare_steps(module, inputs, calibration)
    for d in diffs:
        assert d.max() == 0, f"{name}: up to {d.max()} steps off"
    _, g, _ = lower_module(module, inputs, calibration)
    feeds = [quantize_input(x, v.qparams) for x, v in zip(inputs, g.inputs)]
    result = vela.compile_tosa(tosa, name, "ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram")
    assert result.cmd_data[:4] == b"COP1"
    raw, run = run_compiled(result, feeds, config_for("ethos-u55-128"))
    assert run.fault is None, run.fault
    for got, want in zip(raw, run_tosa(tosa, feeds)):
        assert got == np.ascontiguousarray(want).tobytes()


@pytest.mark.parametrize("target", [aten.minimum.default, aten.maximum.default])
def test_operands_of_other_ranges_are_requantized_first(target):
    """Both operands given ranges other than the output's (the quantizer shares one, so the
    graph is edited): within one step of min/max of the dequantized operands, quantized by hand."""
    fn = torch.minimum if target is aten.minimum.default else torch.maximum
    inputs = seeded(8, SHAPE, SHAPE)
    _, g, parts = lower_module(Lambda(lambda m, a, b: fn(a, b)), inputs)
    a, b = g.inputs
    out = g.outputs[0].qparams
    a.qparams = QParams(out.scale * 0.75, out.zero_point - 9)
    b.qparams = QParams(out.scale * 2.5, 4)
    feeds = [quantize_input(x, v.qparams) for x, v in zip(inputs, (a, b))]
    (got,) = run_tosa(tosa_lowering.lower(parts.partitions[0], boards.target("ethos-u55-128").npu), feeds)
    real = [(q.astype(np.float64) - v.qparams.zero_point) * v.qparams.scale for q, v in zip(feeds, (a, b))]
    best = np.minimum(*real) if target is aten.minimum.default else np.maximum(*real)
    want = np.clip(np.round(best / out.scale) + out.zero_point, -128, 127)
    assert np.abs(got.astype(np.int64) - want).max() <= 1


class AllElementwise(nn.Module):
    """Every unary table function and minimum/maximum in one model, each on its own copy."""

    def forward(self, x, positive):
        outs = [fn(positive if name in POSITIVE else x) for name, (_, fn) in UNARY.items()]
        y = torch.minimum(outs[0], outs[1])
        return torch.cat([torch.maximum(y, outs[2])] + outs[3:], 1)


def test_kiln_compile_places_every_op_on_the_u55():
    """kiln compile for ethos-u55-128 (Vela included): every op on the NPU, none refused."""
    result = kiln_compile.compile_model(
        LoadedModel("elementwise", AllElementwise().eval(), _inputs("gelu", 7) + _inputs("sqrt", 7)),
        CompileSpec(target="ethos-u55-128", io="int8"),
        log=lambda *_: None,
    )
    cpu = [(p.op.name, p.reason) for p in result.partitioning.placements if p.partition is None]
    assert not cpu, cpu
    on_npu = {p.op.target for p in result.partitioning.placements}
    assert set(vocabulary.TABLE_OPS) | {aten.minimum.default, aten.maximum.default} <= on_npu


def _count(tosa: bytes, kind: str) -> int:
    """How many ops of TOSA kind `kind` (e.g. "TRANSPOSE") the graph holds."""
    from tosa.Op import Op
    from tosa.TosaGraph import TosaGraph

    block = TosaGraph.GetRootAs(tosa, 0).Regions(0).Blocks(0)
    return sum(block.Operators(i).Op() == getattr(Op, kind) for i in range(block.OperatorsLength()))


def _transposes(tosa: bytes) -> int:
    return _count(tosa, "TRANSPOSE")


@pytest.mark.parametrize("name, kind", [("neg", "NEGATE"), ("abs", "ABS")])
def test_neg_and_abs_need_no_table(name, kind):
    """The quantizer gives -x the range of x mirrored, so the same scale: NEGATE, exact; abs is ABS
    between RESCALEs (the case above checks the values); neither loads a table."""
    module, inputs, calibration = _unary_case(name)
    (diff,), tosa = compare_steps(module, inputs, calibration)
    assert diff.max() <= (0 if name == "neg" else 1)
    assert (_count(tosa, kind), _count(tosa, "TABLE")) == (1, 0)


@pytest.mark.parametrize("fn", [lambda x, y: x + y, lambda x, y: torch.maximum(x, y) * y])
def test_elementwise_ops_on_nchw_inputs_add_no_transposes(fn):
    """An elementwise op keeps its operands' layout: on the program's NCHW inputs it runs in that
    order (no TRANSPOSE to NHWC and back), within one step of PT2E."""
    inputs = seeded(4, (1, 8, 6, 5), (1, 8, 6, 5))
    diffs, tosa = compare_steps(
        Lambda(lambda m, x, y: fn(x, y)), inputs, [inputs, seeded(5, (1, 8, 6, 5), (1, 8, 6, 5))]
    )
    assert all(d.max() <= 1 for d in diffs), [d.max() for d in diffs]
    assert _transposes(tosa) == 0
