"""Selects taken before the permute they read (kiln.frontend.permutes): the
normalised graph against eager PyTorch, what is left of the permutes, the Vela crash the
5-D form meets on Ethos-U55 and U65, and the attention split placed by Vela there."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tosa_serializer as ts
from torch import nn

from kiln.errors import VelaError
from kiln.lower.vela import compile_tosa
from tests.compiler.helpers import compare_steps, normalised
from tests.compiler.operator_cases import Fn
from tests.simulator import helpers as vp
from tests.simulator.npu_cases import Graph, attr

aten = torch.ops.aten
X = (4, 16, 48)  # windows, tokens, 3 x 2 heads x 8


def _split_by_index(s, x):  # Swin's and timm's window attention
    qkv = x.reshape(4, 16, 3, 2, 8).permute(2, 0, 3, 1, 4)
    return qkv[0] * qkv[1] + qkv[2]


def _unbind(s, x):
    q, k, v = x.reshape(4, 16, 3, 2, 8).permute(2, 0, 3, 1, 4).unbind(0)
    return q @ k.transpose(-2, -1) + v.sum(-1, keepdim=True)


def _selects_of_other_dims(s, x):  # 5 axes moved, selects of the last and middle ones
    y = x.reshape(4, 2, 8, 3, 16).permute(4, 2, 0, 3, 1)
    return y[..., 1], y[:, :, -1, 1] - y[:, :, 0, 2]


CASES = {"split_by_index": _split_by_index, "unbind": _unbind, "selects_of_other_dims": _selects_of_other_dims}


def _permute_ranks(gm) -> list[int]:
    return [len(n.meta["val"].shape) for n in gm.graph.nodes if n.target in (aten.permute.default, aten.transpose.int)]


@pytest.mark.parametrize("name", CASES)
def test_selects_before_the_permute_compute_what_eager_does(name):
    module = Fn(CASES[name]).eval()
    x = torch.randn(X, generator=torch.Generator().manual_seed(0))
    gm = normalised(module, (x,))
    for seed in range(3):
        x = torch.randn(X, generator=torch.Generator().manual_seed(seed + 1))
        for got, want in zip(torch.utils._pytree.tree_leaves(gm(x)), torch.utils._pytree.tree_leaves(module(x))):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert max(_permute_ranks(gm), default=0) <= 4


def _read_whole_too(s, x):
    y = x.reshape(4, 16, 3, 16).permute(2, 0, 1, 3)
    return y[0] + 1, y * 2


def _chunked(s, x):
    return x.reshape(4, 16, 6, 8).transpose(1, 2).chunk(3, dim=1)


def _one_sequence(s, x):  # a ViT's split: a unit batch, 4 axes to move
    qkv = x.reshape(1, 64, 3, 2, 8).permute(2, 0, 3, 1, 4)
    return qkv[0] * qkv[1] + qkv[2]


@pytest.mark.parametrize("fn, rank", [(_read_whole_too, 4), (_chunked, 4), (_one_sequence, 5)])
def test_a_permute_read_other_than_by_selects_or_of_4_axes_stays(fn, rank):
    gm = normalised(Fn(fn), (torch.randn(X),))
    assert _permute_ranks(gm) == [rank]


def _transposed_slice_then_clamp() -> Graph:
    """int8 [4, 16, 3, 2, 8] -> TRANSPOSE (2, 0, 3, 1, 4) -> SLICE of the first of 3 -> RESHAPE
    to 4-D -> CLAMP: q of an attention split the 5-D way, then an elementwise op."""
    g = Graph()
    x = g.input(np.random.default_rng(0).integers(-128, 128, (4, 16, 3, 2, 8)), "int8")
    y = g.op("TRANSPOSE", [x], (3, 4, 2, 16, 8), "int8", attr("Transpose", [2, 0, 3, 1, 4]))

    def shape(values):
        return g.ser.addConst([len(values)], ts.DType.SHAPE, np.array(values, np.int64), name=g.name("shape")).name

    q = g.op("SLICE", [y, shape([0] * 5), shape([1, 4, 2, 16, 8])], (1, 4, 2, 16, 8), "int8", attr("Slice"))
    q = g.op("RESHAPE", [q, shape([4, 2, 16, 8])], (4, 2, 16, 8), "int8", attr("Reshape"))
    as_bytes = lambda v: list(np.array([v], "int8").view(np.uint8))  # noqa: E731
    out = g.op(
        "CLAMP", [q], (4, 2, 16, 8), "int8", attr("Clamp", as_bytes(0), as_bytes(127), ts.NanPropagationMode.PROPAGATE)
    )
    g.output(out, "5-D TRANSPOSE, SLICE, RESHAPE, CLAMP")
    return g


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u65-256"])
def test_vela_crashes_on_a_slice_of_a_5d_transpose_on_ethos_u55_and_u65(target):
    """Why the pass exists (if this fails, a newer Vela takes the 5-D form): Vela 5.2.0 dies by
    a signal on this graph for Ethos-U55 and U65, and compiles it for Ethos-U85."""
    tosa = _transposed_slice_then_clamp().serialize()
    with pytest.raises(VelaError, match="crashed"):
        compile_tosa(tosa, "split", target, vp.system_config(target), vp.memory_mode(target))
    compile_tosa(tosa, "split", "ethos-u85-256", vp.system_config("ethos-u85-256"), "Shared_Sram")


class WindowAttentionScores(nn.Module):
    """q * scale @ k^T of Swin's window attention, q and k split from one qkv linear by index."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.qkv = nn.Linear(16, 48)

    def forward(self, x):
        qkv = self.qkv(x).reshape(4, 16, 3, 2, 8).permute(2, 0, 3, 1, 4)
        return (qkv[0] * 0.35) @ qkv[1].transpose(-2, -1)


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u65-256"])
def test_the_attention_split_runs_on_the_npu_of_ethos_u55_and_u65(target):
    x = torch.randn(4, 16, 16, generator=torch.Generator().manual_seed(1))
    diffs, tosa = compare_steps(WindowAttentionScores(), (x,), target=target)
    assert max(int(d.max()) for d in diffs) <= 1
    compile_tosa(tosa, "scores", target, vp.system_config(target), vp.memory_mode(target))
