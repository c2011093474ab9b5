"""A global mean whose input feeds other ops too (a squeeze-excitation block), as Vela compiles
kiln's lowering (kiln.lower.pool._global_mean): one AVG_POOL2D of the whole map where the
output's step is no finer than the input's (an adaptive pool's, which shares its input's
quantization), else a depthwise convolution of ones; each on kiln's NPU model bit for bit as
tosa_reference_model runs the TOSA graph (test_lowering's mean_hw_shared and
adaptive_pool_shared check the graph against PT2E)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.simulator import helpers


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, pool: bool):
        super().__init__()
        self.pool = pool
        torch.manual_seed(0)
        self.reduce, self.expand = nn.Conv2d(c, c // 2, 1), nn.Conv2d(c // 2, c, 1)

    def forward(self, x):
        y = torch.relu(x)
        squeezed = nn.functional.adaptive_avg_pool2d(y, 1) if self.pool else y.mean((2, 3), keepdim=True)
        gate = torch.sigmoid(self.expand(torch.relu(self.reduce(squeezed))))
        return y * gate


@pytest.mark.parametrize(
    "pool, shape, bits, target",
    [
        (True, (1, 16, 12, 12), 8, "ethos-u55-128"),
        (True, (1, 8, 7, 24), 8, "ethos-u65-256"),
        (False, (1, 16, 12, 12), 8, "ethos-u55-128"),
        (False, (1, 8, 6, 6), 16, "ethos-u55-128"),
    ],
)
def test_squeeze_excite_mean_on_the_npu_model_equals_tosa_reference(pool, shape, bits, target):
    diffs, result = helpers.module_on_the_model(SqueezeExcite(shape[1], pool), shape, f"se_{bits}", target, bits=bits)
    assert diffs == [0] and result.counters["block_ops"] > 0, (diffs, result)
