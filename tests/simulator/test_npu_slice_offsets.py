"""Slices on the NPU: every delegate of small kiln-compiled models with slices feeding
arithmetic runs on kiln's NPU model (Vela's command stream) bit for bit as on
tosa_reference_model (kiln.lower.tosa's Lowerer.sliced says why a slice read by a widening
RESCALE goes through a copy)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import npu_harness
from kiln.compile import compile_model
from kiln.frontend.export import LoadedModel
from kiln.spec import CompileSpec


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


CASES = {
    "select_plus_select": (lambda x: x[:, 2] + x[:, 0], (1, 6, 16)),
    "select_plus_select_4d": (lambda x: x[:, 2] + x[:, 0], (1, 4, 4, 4)),
    "slices_kept_dims_add": (lambda x: x[:, 2:3] + x[:, 0:1], (1, 6, 16)),
    "select_relu_add": (lambda x: torch.relu(x[:, 2]) + x[:, 0], (1, 6, 16)),
    "select_mul": (lambda x: x[:, 2] * x[:, 0], (1, 6, 16)),
    "unbind_sub": (lambda x: torch.unbind(x, 1)[1] - torch.unbind(x, 1)[3], (1, 6, 16)),
    # attention: q and k selected from one qkv tensor, then q @ k.T
    "select_matmul": (lambda x: torch.matmul(x[0], x[1]), (3, 2, 4, 4)),
    "qkv_attention_scores": (lambda x: (lambda y: torch.matmul(y[0], y[1].transpose(-1, -2)))(
        x.reshape(1, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)), (1, 5, 24)),
}


@pytest.mark.parametrize("name", CASES)
def test_slices_feeding_arithmetic_are_bit_exact_u55_128(name):
    fn, shape = CASES[name]
    torch.manual_seed(0)
    x = torch.randn(*shape)
    result = compile_model(LoadedModel(name, Fn(fn).eval(), (x,)), CompileSpec("ethos-u55-128"),
                           log=lambda *args, **kwargs: None)
    on_npu = {p.op.op_type for p in result.partitioning.placements if p.partition is not None}
    assert on_npu & {"aten.slice", "aten.select"}, on_npu
    diffs = []
    for tosa, vela, part in zip(result.tosa, result.vela, result.partitioning.partitions):
        rng = np.random.default_rng(0)
        arrays = [rng.integers(-128, 128, size=tuple(v.shape), dtype=np.int8) for v in part.inputs]
        diffs += npu_harness.compare(tosa, vela, arrays, "ethos-u55-128")[0]
    assert diffs == [0] * len(diffs) and diffs
