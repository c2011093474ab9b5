"""Operands written at an offset inside a larger tensor (CONCAT after the first operand, PAD)
whose producer ends in a RESCALE from int32: Vela's stream on kiln's NPU model vs
tosa_reference_model.

Vela 5.2.0 (regor) turns a RESCALE it cannot fold into its producer (a TRANSPOSE_CONV2D's)
into elementwise MULs and, doing so, drops the offset at which the result belongs: the
MUL writes at offset 0 (unet_tiny's up-convolution concatenated after its skip
connection: 2,023 of 2,048 outputs wrong on the virtual platform). kiln's lowering puts an
identity RESCALE between such an operand and the CONCAT/PAD (Lowerer.placeable), a copy
that writes at the right offset."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import tosa_serializer as ts
from torch import nn

from kiln.compile import compile_model
from kiln.frontend.export import LoadedModel
from kiln.lower.vela import compile_tosa
from kiln.spec import CompileSpec
from tests.simulator import helpers, npu_cases


def _tosa_rescale_then_concat() -> npu_cases.Graph:
    """The smallest TOSA graph Vela places wrongly: int32 -> per-channel RESCALE, CONCAT
    after an int8 operand along channels."""
    rng = np.random.default_rng(0)
    g = npu_cases.Graph()
    skip = g.input(rng.integers(-128, 128, (1, 2, 2, 4)), "int8")
    wide = g.input(rng.integers(-30000, 30000, (1, 2, 2, 4)), "int32")
    narrow = g.rescale(wide, (1, 2, 2, 4), "int32", "int8", [0.004, 0.003, 0.002, 0.005], 0, -33)
    out = g.op("CONCAT", [skip, narrow], (1, 2, 2, 8), "int8", npu_cases.attr("Concat", 3))
    g.output(out, "RESCALE int32 -> int8 at channel offset 4")
    return g


@pytest.mark.parametrize("target, mode", [("ethos-u55-128", "Shared_Sram"), ("ethos-u65-256", "Dedicated_Sram")])
def test_vela_places_a_standalone_rescale_at_offset_zero(target, mode):
    """Documents the Vela behaviour kiln works around (kiln.families.OFFSET_COPIES; if this fails,
    a newer Vela keeps the offset and Lowerer.placeable may go): the stream writes the
    rescaled operand over the first one, so the first four channels hold the skip operand
    (the later copy) and the last four are never written."""
    g = _tosa_rescale_then_concat()
    tosa = g.serialize()
    vela = compile_tosa(tosa, "offset", target, helpers.system_config(target), mode)
    want = helpers.reference(tosa, g.inputs)[0].reshape(-1, 8)
    got, result = helpers.run_on_model(vela, g.inputs, target, [np.int8])
    assert result.fault is None
    got = got[0].reshape(-1, 8)
    assert np.array_equal(got[:, :4], want[:, :4])
    assert not np.array_equal(got[:, 4:], want[:, 4:])


@pytest.mark.parametrize("mode", ["Dedicated_Sram_384KB", "Sram_Only"])
def test_vela_keeps_the_offset_on_ethos_u85(mode):
    """Why kiln.families.OFFSET_COPIES leaves Ethos-U85 out: its stream writes the same graph right."""
    g = _tosa_rescale_then_concat()
    tosa = g.serialize()
    vela = compile_tosa(tosa, "offset", "ethos-u85-256", helpers.system_config("ethos-u85-256"), mode)
    assert helpers.compare(tosa, vela, g.inputs, "ethos-u85-256")[0] == [0]


def test_identity_rescale_between_keeps_the_offset():
    rng = np.random.default_rng(0)
    g = npu_cases.Graph()
    skip = g.input(rng.integers(-128, 128, (1, 2, 2, 4)), "int8")
    wide = g.input(rng.integers(-30000, 30000, (1, 2, 2, 4)), "int32")
    narrow = g.rescale(wide, (1, 2, 2, 4), "int32", "int8", [0.004, 0.003, 0.002, 0.005], 0, -33)
    copy = g.rescale(narrow, (1, 2, 2, 4), "int8", "int8", 1.0)
    out = g.op("CONCAT", [skip, copy], (1, 2, 2, 8), "int8", npu_cases.attr("Concat", 3))
    g.output(out, "RESCALE int32 -> int8, identity RESCALE, CONCAT at channel offset 4")
    tosa = g.serialize()
    vela = compile_tosa(tosa, "offset", "ethos-u55-128", helpers.system_config("ethos-u55-128"), "Shared_Sram")
    diffs, _ = helpers.compare(tosa, vela, g.inputs, "ethos-u55-128")
    assert diffs == [0]


# ---- kiln-lowered models: every delegate bit-exact -------------------------------------------


class UpCat(nn.Module):
    """unet_tiny's up step in small: ConvTranspose2d 2x2 stride 2, concatenated after the skip."""

    def __init__(self, first: bool = False):
        super().__init__()
        self.first = first
        self.down = nn.Conv2d(4, 8, 3, padding=1)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.skip = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x, skip):
        parts = [self.skip(skip), self.up(self.down(x))]
        return torch.cat(parts[::-1] if self.first else parts, dim=1)


class UpPad(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 4, 2, stride=2)

    def forward(self, x):
        return F.pad(self.up(x), (1, 2, 2, 1))


class Elementwise(nn.Module):
    """An elementwise result (its RESCALE folded by Vela) concatenated second."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.a, self.b = nn.Conv2d(4, 4, 1), nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = self.b(x)
        second = {
            "add": lambda: x + y,
            "mul": lambda: x * y,
            "max": lambda: torch.maximum(x, y),
            "sum": lambda: y.sum(dim=1, keepdim=True),
        }[self.kind]()
        return torch.cat([self.a(x), second], dim=1)


class MatmulCat(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        return torch.cat([self.linear(x), torch.matmul(x, x.transpose(1, 2))], dim=2)


IMAGE, SMALL = (1, 4, 4, 4), (1, 4, 8, 8)
CASES = {
    "up_cat": (lambda: UpCat(), (IMAGE, SMALL)),
    "up_cat_first": (lambda: UpCat(first=True), (IMAGE, SMALL)),
    "up_pad": (UpPad, (IMAGE,)),
    **{
        f"{kind}_cat": ((lambda kind=kind: Elementwise(kind)), ((1, 4, 6, 6),)) for kind in ("add", "mul", "max", "sum")
    },
    "matmul_cat": (MatmulCat, ((1, 8, 8),)),
}


def _delegate_diffs(name: str, target: str):
    build, shapes = CASES[name]
    torch.manual_seed(0)
    inputs = tuple(torch.randn(shape) for shape in shapes)
    result = compile_model(
        LoadedModel(name, build().eval(), inputs), CompileSpec(target=target), log=lambda *args, **kwargs: None
    )
    assert result.tosa
    diffs = []
    for tosa, vela, part in zip(result.tosa, result.vela, result.partitioning.partitions):
        rng = np.random.default_rng(0)
        arrays = [rng.integers(-128, 128, size=tuple(v.shape), dtype=np.int8) for v in part.inputs]
        diffs += helpers.compare(tosa, vela, arrays, target)[0]
    return diffs


@pytest.mark.parametrize("name", sorted(CASES))
def test_offset_operands_bit_exact_u55_128(name):
    assert _delegate_diffs(name, "ethos-u55-128") == [0]


@pytest.mark.parametrize("target", ["ethos-u55-32", "ethos-u65-256", "ethos-u85-256"])
def test_up_cat_bit_exact_other_targets(target):
    assert _delegate_diffs("up_cat", target) == [0]


def test_up_cat_takes_no_copy_on_ethos_u85():
    """The copy is gone where Vela keeps the offset: the concatenated operand is the
    up-convolution's own RESCALE from int32."""
    build, shapes = CASES["up_cat"]
    torch.manual_seed(0)
    inputs = tuple(torch.randn(shape) for shape in shapes)
    result = compile_model(
        LoadedModel("up_cat", build().eval(), inputs),
        CompileSpec(target="ethos-u85-256"),
        log=lambda *args, **kwargs: None,
    )
    from tosa.Op import Op
    from tosa.TosaGraph import TosaGraph

    block = TosaGraph.GetRootAs(result.tosa[0], 0).Regions(0).Blocks(0)
    types = {block.Tensors(i).Name().decode(): block.Tensors(i).Type() for i in range(block.TensorsLength())}
    ops = [block.Operators(i) for i in range(block.OperatorsLength())]
    producer = {op.Outputs(0).decode(): op for op in ops if op.OutputsLength()}
    cat = next(op for op in ops if op.Op() == Op.CONCAT)
    second = producer[cat.Inputs(1).decode()]
    assert second.Op() == Op.RESCALE and types[second.Inputs(0).decode()] == ts.DType.INT32
