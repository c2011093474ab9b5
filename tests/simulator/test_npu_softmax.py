"""Softmax's two 8-bit exp tables, CLZ, Newton-Raphson reciprocal and shifts, and
log_softmax's 16-bit ln table (kiln.lower.softmax), as Vela compiles them: placed whole
on the NPU, and run on kiln's NPU model bit for bit as tosa_reference_model runs the TOSA
graph, for short rows and long ones (row sums up to 2^24), attention's rows of several heads,
on each NPU family, with the tables reading one difference or one each (FUSED_EXPS); and 16-bit
softmax's interpolated exp table."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kiln import families
from kiln.compile import compile_model
from kiln.spec import CompileSpec
from tests.simulator import helpers

CASES = {  # name: (shape, dim, log)
    "rows": ((8, 10), -1, False),
    "channels": ((1, 6, 5, 4), 1, False),
    "long_rows": ((3, 1500), -1, False),
    "log_rows": ((8, 10), -1, True),
    "heads": ((1, 2, 12, 12), -1, False),
}


@pytest.mark.parametrize("flipped", [frozenset(), frozenset({families.FUSED_EXPS.name})])
@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u65-256", "ethos-u85-256"])
@pytest.mark.parametrize("name", list(CASES))
def test_softmax_on_the_npu_model_equals_tosa_reference(name, target, flipped):
    shape, dim, log = CASES[name]
    fn = torch.log_softmax if log else torch.softmax
    module = type("M", (torch.nn.Module,), {"forward": lambda self, x: fn(x, dim)})()
    diffs, result = helpers.module_on_the_model(module, shape, name, target, spread=3.0, flipped=flipped)
    assert diffs == [0] and result.counters["block_ops"] > 0, (diffs, result)


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u65-256", "ethos-u85-256"])
@pytest.mark.parametrize("name", ["heads", "channels"])
def test_16_bit_softmax_on_the_npu_model_equals_tosa_reference(name, target):
    """16-bit softmax (one interpolated exp TABLE) placed whole on every family, bit for bit."""
    shape, dim, _ = CASES[name]
    module = type("M", (torch.nn.Module,), {"forward": lambda self, x: torch.softmax(x, dim)})()
    diffs, result = helpers.module_on_the_model(module, shape, name, target, bits=16, spread=3.0)
    assert diffs == [0] and result.counters["block_ops"] > 0, (diffs, result)


def test_vit_tiny_at_16_bits_on_ethos_u55_runs_bit_exact():
    """vit_tiny with --activation-bits 16 on ethos-u55-128 (its 16-bit matmuls on the CPU): every
    partition, 16-bit softmax and rsqrt among their ops, on kiln's NPU model as tosa_reference_model."""
    result = compile_model("vit_tiny", CompileSpec("ethos-u55-128", activation_bits=16), log=lambda line: None)
    assert any(op.op_type == "aten.softmax" for p in result.partitioning.partitions for op in p.ops)
    rng = np.random.default_rng(0)
    for tosa, vela, part in zip(result.tosa, result.vela, result.partitioning.partitions):
        inputs = [rng.integers(-32767, 32768, size=v.shape, dtype=np.dtype(v.dtype)) for v in part.inputs]
        diffs, _ = helpers.compare(tosa, vela, inputs, "ethos-u55-128")
        assert diffs == [0] * len(diffs), part.index
