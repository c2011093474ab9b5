"""16-bit unary functions as interpolated TOSA TABLEs (kiln.partition.tables), which Vela runs
on Ethos-U55 as three LUT passes and on Ethos-U85 as a 16-bit LUT activation: on kiln's NPU
model bit for bit as tosa_reference_model; and 16-bit rsqrt, normalised by CLZ and read from a
table of rsqrt over [0.25, 1), on every family."""

from __future__ import annotations

import pytest
import torch

from tests.simulator import helpers

FUNCTIONS = {"gelu": torch.nn.functional.gelu, "sigmoid": torch.sigmoid}


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_16_bit_table_on_the_npu_model_equals_tosa_reference(name, target):
    fn = FUNCTIONS[name]
    module = type("M", (torch.nn.Module,), {"forward": lambda self, x: fn(x)})()
    diffs, _ = helpers.module_on_the_model(module, (1, 4, 8, 8), name, target, bits=16, spread=2.0)
    assert diffs == [0], diffs


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u65-256", "ethos-u85-256"])
def test_16_bit_rsqrt_on_the_npu_model_equals_tosa_reference(target):
    module = type("M", (torch.nn.Module,), {"forward": lambda self, x: torch.rsqrt(x * x + 0.1)})()
    diffs, result = helpers.module_on_the_model(module, (1, 8, 16), "rsqrt16", target, bits=16, spread=2.0)
    assert diffs == [0] and result.counters["block_ops"] > 0, diffs
