"""16-bit unary functions as interpolated TOSA TABLEs (kiln.partition.tables), which Vela runs
on Ethos-U55 as three LUT passes: on kiln's NPU model bit for bit as tosa_reference_model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kiln.lower import tosa as tosa_lowering
from kiln.lower.vela import compile_tosa
from lowering_helpers import lower_module

import npu_harness

FUNCTIONS = {"gelu": torch.nn.functional.gelu, "sigmoid": torch.sigmoid}


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_16_bit_table_on_the_npu_model_equals_tosa_reference(name):
    fn = FUNCTIONS[name]
    module = type("M", (torch.nn.Module,), {"forward": lambda self, x: fn(x)})()
    x = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(1)) * 2
    _, _, parts = lower_module(module, (x,), [(x,)], "ethos-u55-128", bits=16)
    (part,) = parts.partitions
    tosa = tosa_lowering.lower(part)
    vela = compile_tosa(tosa, name, "ethos-u55-128", npu_harness.system_config("ethos-u55-128"), "Shared_Sram")
    inputs = [np.random.default_rng(2).integers(-32767, 32768, (1, 4, 8, 8), dtype=np.int16)]
    diffs, _ = npu_harness.compare(tosa, vela, inputs, "ethos-u55-128")
    assert diffs == [0], diffs
