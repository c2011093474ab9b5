"""Strided slices (kiln.lower.movement._slice_op with a step above 1: SLICE, PAD, RESHAPE to
groups, SLICE of each group's first) as Vela compiles them, run on kiln's NPU model bit for
bit as tosa_reference_model runs the TOSA graph; each case read by an add, whose widening
RESCALE is where Vela lost a folded slice's offset before (Lowerer.sliced); in both groupings
of the rows (the choice FLAT_STRIDED_SLICES), on each NPU family."""

from __future__ import annotations

import pytest
import torch

from kiln import families
from tests.simulator import helpers

CASES = {  # name: (shape, function)
    "rows": ((1, 6, 8), lambda x: x[:, ::2] + x[:, 1::2]),
    "padded_hw": ((1, 3, 8, 7), lambda x: x[:, :, 1::3, ::2] + x[:, :, :3, :4]),
    "last_step2": ((1, 6, 16), lambda x: x[..., ::2] * 2),
}


@pytest.mark.parametrize("flipped", [frozenset(), frozenset({families.FLAT_STRIDED_SLICES.name})])
@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u65-256", "ethos-u85-256"])
@pytest.mark.parametrize("name", list(CASES))
def test_strided_slice_on_the_npu_model_equals_tosa_reference(name, target, flipped):
    shape, fn = CASES[name]
    module = type("M", (torch.nn.Module,), {"forward": lambda self, x: fn(x)})()
    diffs, _ = helpers.module_on_the_model(module, shape, name, target, flipped=flipped)
    assert diffs == [0], diffs
