"""Strides beyond the NPU's 1..3 (kiln.lower.conv._strided_conv, kiln.lower.pool._strided_pool) as Vela compiles
them: space to depth (a PAD, reshapes and a transpose moving the strided axes' phases into
channels, then a stride-1 convolution) and window reductions, placed whole on the NPU and run on
kiln's NPU model bit for bit as tosa_reference_model runs the TOSA graph; and an average pool
so strided as one AVG_POOL2D that Vela decomposes (the choice VELA_STRIDED_POOLS), on each
NPU family."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from kiln import families
from tests.simulator import helpers

F = nn.functional


def conv(*args, **kwargs):
    torch.manual_seed(0)
    return nn.Conv2d(*args, **kwargs)


class Fn(nn.Module):
    def __init__(self, fn, *modules):
        super().__init__()
        self.fn, self.layers = fn, nn.ModuleList(modules)

    def forward(self, x):
        return self.fn(self.layers, x)


CASES = {  # name: (module, input shape)
    # a Vision Transformer's patch embedding: kernel 8, stride 8, a transpose and one 1x1 convolution
    "patch_conv": (Fn(lambda m, x: m[0](x), conv(3, 16, 8, stride=8)), (1, 3, 32, 32)),
    # padding by a PAD, phases summed by an int32 REDUCE_SUM
    "depthwise_stride4_pad1": (Fn(lambda m, x: m[0](x), conv(4, 8, 6, stride=4, padding=1, groups=4)), (1, 4, 17, 16)),
    "avg_pool_stride4": (Fn(lambda m, x: F.avg_pool2d(x, 4)), (1, 4, 16, 12)),
    "max_pool_stride5_floors": (Fn(lambda m, x: F.max_pool2d(x, 5)), (1, 4, 17, 13)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_strided_op_on_the_npu_model_equals_tosa_reference(name):
    module, shape = CASES[name]
    diffs, result = helpers.module_on_the_model(module, shape, name)
    assert diffs == [0] and result.counters["block_ops"] > 0, (diffs, result)


AVG_POOLS = {  # name: (module, input shape)
    "avg_pool_stride4": CASES["avg_pool_stride4"],
    "avg_pool_stride5_pad2": (Fn(lambda m, x: F.avg_pool2d(x, 5, padding=2)), (1, 3, 20, 15)),
    "avg_pool_4x6_uneven": (Fn(lambda m, x: F.avg_pool2d(x, (4, 6))), (1, 5, 17, 13)),
    "adaptive_to_3x2": (Fn(lambda m, x: F.adaptive_avg_pool2d(x, (3, 2))), (1, 6, 15, 10)),
}


@pytest.mark.parametrize("flipped", [frozenset(), frozenset({families.VELA_STRIDED_POOLS.name})])
@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u65-256", "ethos-u85-256"])
@pytest.mark.parametrize("name", list(AVG_POOLS))
def test_strided_average_pool_either_way_equals_tosa_reference(name, target, flipped):
    module, shape = AVG_POOLS[name]
    diffs, result = helpers.module_on_the_model(module, shape, name, target, flipped=flipped)
    assert diffs == [0] and result.counters["block_ops"] > 0, (diffs, result)
