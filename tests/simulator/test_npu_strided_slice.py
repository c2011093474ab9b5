"""Strided slices (kiln.lower.tosa._slice_op with a step above 1: SLICE, PAD, RESHAPE to
groups, SLICE of each group's first) as Vela compiles them, run on kiln's NPU model bit for
bit as tosa_reference_model runs the TOSA graph; each case read by an add, whose widening
RESCALE is where Vela lost a folded slice's offset before (Lowerer.sliced)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kiln.lower import tosa as tosa_lowering
from kiln.lower.vela import compile_tosa
from lowering_helpers import lower_module

import npu_harness

CASES = {  # name: (shape, function)
    "rows": ((1, 6, 8), lambda x: x[:, ::2] + x[:, 1::2]),
    "padded_hw": ((1, 3, 8, 7), lambda x: x[:, :, 1::3, ::2] + x[:, :, :3, :4]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_strided_slice_on_the_npu_model_equals_tosa_reference(name):
    shape, fn = CASES[name]
    module = type("M", (torch.nn.Module,), {"forward": lambda self, x: fn(x)})()
    g = torch.Generator().manual_seed(5)
    calibration = [(torch.randn(*shape, generator=g),) for _ in range(2)]
    _, _, parts = lower_module(module, calibration[0], calibration, "ethos-u55-128")
    (part,) = parts.partitions
    tosa = tosa_lowering.lower(part)
    vela = compile_tosa(tosa, name, "ethos-u55-128", npu_harness.system_config("ethos-u55-128"), "Shared_Sram")
    inputs = [np.random.default_rng(4).integers(-128, 128, shape, dtype=np.int8)]
    diffs, result = npu_harness.compare(tosa, vela, inputs, "ethos-u55-128")
    assert diffs == [0], diffs
