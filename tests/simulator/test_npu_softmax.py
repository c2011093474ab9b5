"""Softmax's 16-bit tables, CLZ and shifts (kiln.lower.tosa._softmax) as Vela compiles them:
placed whole on the NPU, and run on kiln's NPU model bit for bit as tosa_reference_model runs
the TOSA graph, for both the short-row and the long-row (shifted product) forms."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kiln.lower.vela import compile_tosa
from lowering_helpers import lower_module
from kiln.lower import tosa as tosa_lowering

import npu_harness

CASES = {  # name: (shape, dim, log)
    "rows": ((8, 10), -1, False),
    "channels": ((1, 6, 5, 4), 1, False),
    "long_rows": ((3, 1500), -1, False),
    "log_rows": ((8, 10), -1, True),
}


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u65-256"])
@pytest.mark.parametrize("name", list(CASES))
def test_softmax_on_the_npu_model_equals_tosa_reference(name, target):
    shape, dim, log = CASES[name]
    fn = torch.log_softmax if log else torch.softmax
    module = type("M", (torch.nn.Module,), {"forward": lambda self, x: fn(x, dim)})()
    g = torch.Generator().manual_seed(7)
    calibration = [(torch.randn(*shape, generator=g) * 3,) for _ in range(2)]
    _, _, parts = lower_module(module, calibration[0], calibration, target)
    (part,) = parts.partitions
    assert not [p for p in parts.placements if p.partition is None and "quantize" not in p.op.op_type]
    tosa = tosa_lowering.lower(part)
    vela = compile_tosa(tosa, name, target, npu_harness.system_config(target), "Shared_Sram")
    rng = np.random.default_rng(3)
    inputs = [rng.integers(-128, 128, shape, dtype=np.int8)]
    diffs, result = npu_harness.compare(tosa, vela, inputs, target)
    assert diffs == [0] and result.counters["block_ops"] > 0, (diffs, result)
