"""Gathers (embedding, index_select) of quantized values: one TOSA GATHER on Ethos-U85 by int32
indices that a CPU kernel (kiln.checked_index) checked against the table and narrowed first; on
Ethos-U55 they stay on the CPU with the rule's reason. Checked against the PT2E reference on
run-host, and kiln's U85 model against tosa_reference_model on Vela's stream."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kiln import boards
from kiln import compile as kc
from kiln.errors import HostError, VelaRefusal
from kiln.frontend.export import LoadedModel
from kiln.lower import tosa as tosa_lowering
from kiln.lower import vela
from kiln.reference import run_host as host
from kiln.simulator.npu.config import config_for
from kiln.simulator.npu.standalone import run_compiled
from kiln.spec import CompileSpec
from tests.compiler.helpers import partition_feeds, run_tosa

TOKENS, ROWS = 50, 10


class Gathers(torch.nn.Module):
    """An embedding feeding a linear, index_select by runtime indices along a leading dim, and by
    constant ones along a dim after a size-1 one."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(TOKENS, 16)
        self.proj = torch.nn.Linear(16, 8)

    def forward(self, tokens, rows, x):
        return (
            self.proj(self.embed(tokens) + x),
            torch.index_select(x[0] * 2.0, 0, rows),
            torch.index_select(x * 0.5, 1, torch.tensor([3, 0, 0, 9])),
        )


def _inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randint(0, TOKENS, (1, ROWS), generator=g),
        torch.randint(0, ROWS, (4,), generator=g),
        torch.randn(1, ROWS, 16, generator=g),
    )


@pytest.fixture(scope="module", params=["ethos-u85-256", "ethos-u55-128"])
def compiled(request):
    torch.manual_seed(5)
    model = Gathers().eval()
    return request.param, kc.compile_model(
        LoadedModel("gathers", model, _inputs(0)), CompileSpec(request.param), log=lambda line: None
    )


def test_gathers_run_where_the_rules_say_and_equal_pt2e_on_run_host(compiled):
    target, result = compiled
    cpu = {}
    for p in result.partitioning.placements:
        if p.partition is None:
            cpu.setdefault(p.op.op_type, p.reason)
    assert (
        cpu["kiln.checked_index"] == "checks a gather's indices against its table and narrows them to int32 "
        "(a CPU kernel)"
    )
    if target == "ethos-u85-256":
        assert "aten.embedding" not in cpu and "aten.index_select" not in cpu
    else:
        rule = "Vela 5.2.0 gathers (TOSA GATHER, the DMA's indexed mode) on Ethos-U85, not on Ethos-U55 or U65"
        assert cpu["aten.embedding"] == f"aten.embedding: {rule}"
        assert cpu["aten.index_select"] == f"aten.index_select: {rule}"
    for seed in range(1, 4):
        inputs = _inputs(seed)
        got = host.run(result.pte, [t.numpy() for t in inputs])
        for g, w in zip(got, result.quantized_module(*inputs)):
            assert np.array_equal(g, w.numpy())


def test_an_index_past_the_table_is_an_error_not_a_read(compiled):
    _, result = compiled
    tokens, rows, x = _inputs(9)
    tokens[0, 4] = TOKENS
    with pytest.raises(HostError, match=f"index {TOKENS} is out of range 0..{TOKENS - 1}"):
        host.run(result.pte, [tokens.numpy(), rows.numpy(), x.numpy()])


def test_the_u85_model_runs_vela_s_gathers_to_tosa_reference_model_s_bytes(compiled):
    target, result = compiled
    if target != "ethos-u85-256":
        pytest.skip("Vela gathers on Ethos-U85 only")
    rng = np.random.default_rng(3)
    gathers = [
        op
        for p in result.partitioning.partitions
        for op in p.ops
        if op.op_type in ("aten.embedding", "aten.index_select")
    ]
    assert len(gathers) == 3
    for partition in result.partitioning.partitions:
        tosa = tosa_lowering.lower(partition, boards.target(target).npu)
        feeds = partition_feeds(partition, rng)
        compiled_stream = vela.compile_tosa(tosa, "gathers", target, "Ethos_U85_SYS_DRAM_Mid", "Sram_Only")
        raw, run = run_compiled(compiled_stream, feeds, config_for(target))
        assert run.fault is None, run.fault
        for got, want in zip(raw, run_tosa(tosa, feeds)):
            assert got == np.ascontiguousarray(want).tobytes()
        if any(op in gathers for op in partition.ops):  # kiln.families.DMA_GATHERS: Ethos-U85 only
            with pytest.raises(VelaRefusal, match="Gather"):
                vela.compile_tosa(tosa, "gathers", "ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram")
