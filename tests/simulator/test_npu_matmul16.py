"""16-bit matmul where the NPU has no 16-bit MATMUL (Ethos-U55, U65): a's halves tiled, multiplied
elementwise by b and summed (kiln.lower.conv._summed_products16), as Vela compiles it, on kiln's NPU
model bit for bit as tosa_reference_model, over the whole int16 range."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kiln import boards
from kiln.lower import tosa as tosa_lowering
from kiln.lower.vela import compile_tosa
from tests.compiler.helpers import lower_module
from tests.simulator import helpers


class Product(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u65-256"])
def test_16_bit_matmul_on_the_npu_model_equals_tosa_reference(target):
    shapes = ((1, 2, 12, 8), (1, 2, 8, 12))
    g = torch.Generator().manual_seed(7)
    calibration = [tuple(torch.randn(*s, generator=g) * 2 for s in shapes) for _ in range(2)]
    _, _, parts = lower_module(Product(), calibration[0], calibration, target, bits=16)
    (part,) = parts.partitions
    tosa = tosa_lowering.lower(part, boards.target(target).npu)
    vela = compile_tosa(tosa, "matmul16", target, helpers.system_config(target), "Shared_Sram")
    rng = np.random.default_rng(7)
    inputs = [rng.integers(-32767, 32768, s, dtype=np.int16) for s in shapes]
    diffs, result = helpers.compare(tosa, vela, inputs, target)
    assert diffs == [0] and result.counters["block_ops"] > 0, diffs
