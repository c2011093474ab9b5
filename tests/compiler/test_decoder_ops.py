"""The ops a language model's decode step needs besides its caches' updates
(tests/compiler/test_lowering_scatter.py), each in a small model in the pure form, on ethos-u85-256
at 8 and 16 bits: the attention mask arange(T) <= position (a select's condition and SDPA's bool
attn_mask), the rotary rows cos.index_select(0, position), the next token logits.argmax(-1) over a
byte vocabulary (256) and SmolLM2's (49152), and the last prompt position's hidden state
hidden.index_select(1, length - 1). Each is checked against the PT2E reference on run-host, and
its partition on kiln's U85 model against tosa_reference_model on Vela's stream."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from kiln import boards
from kiln import compile as kc
from kiln.frontend.export import LoadedModel
from kiln.lower import tosa as tosa_lowering
from kiln.lower import vela
from kiln.reference import run_host as host
from kiln.simulator.npu.config import config_for
from kiln.simulator.npu.standalone import run_compiled
from kiln.spec import CompileSpec
from tests.compiler.helpers import partition_feeds, run_tosa

T, D = 16, 8
TARGET = "ethos-u85-256"


class MaskedSoftmax(nn.Module):
    """Scores masked by where(arange(T) <= position, scores, -inf), then a softmax."""

    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.arange(T))

    def forward(self, scores, position):
        return torch.where(self.steps <= position, scores, float("-inf")).softmax(-1)


class MaskedAttention(nn.Module):
    """SDPA with the bool attn_mask arange(T) <= position."""

    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.arange(T))

    def forward(self, q, k, v, position):
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=(self.steps <= position)[None, :])


class Rotary(nn.Module):
    """x times the rotary table's row at the position (a gather of a constant table)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cos", torch.cos(torch.arange(T)[:, None] * torch.linspace(0.1, 1.0, D)[None]))

    def forward(self, x, position):
        return x * self.cos.index_select(0, position)


class NextToken(nn.Module):
    def forward(self, logits):
        return logits.argmax(-1)


class LastPosition(nn.Module):
    """The hidden state at position length - 1 (int64 arithmetic on an input, then a gather), projected."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(D, D)

    def forward(self, hidden, length):
        return self.proj(hidden.index_select(1, length - 1))


def _cases(seed: int, position: int) -> dict:
    """name -> (module class, inputs, the ops allowed on the CPU besides quantize and dequantize)."""
    g = torch.Generator().manual_seed(seed)
    at = torch.tensor([position])
    return {
        "masked_softmax": (MaskedSoftmax, (torch.randn(1, 2, 1, T, generator=g), at), {"aten.le"}),
        "masked_attention": (
            MaskedAttention,
            (
                torch.randn(1, 2, 1, D, generator=g),
                torch.randn(1, 2, T, D, generator=g),
                torch.randn(1, 2, T, D, generator=g),
                at,
            ),
            {"aten.le"},
        ),
        "rotary": (Rotary, (torch.randn(1, 1, D, generator=g), at), {"kiln.checked_index"}),
        "argmax_256": (NextToken, (torch.randn(1, 256, generator=g),), {"aten._to_copy"}),
        "argmax_49152": (NextToken, (torch.randn(1, 49152, generator=g),), {"aten._to_copy"}),
        "last_position": (
            LastPosition,
            (torch.randn(1, 6, D, generator=g), at + 1),
            {"aten.sub", "kiln.checked_index"},
        ),
    }


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("name", list(_cases(0, 0)))
def test_a_decoder_op_runs_on_the_npu_as_pt2e_and_tosa_reference_model(name, bits):
    """The op on the NPU (the CPU keeps only the listed ops: an index's check, int64 arithmetic on an
    input, the mask's int64 comparison where no gather checks the position, argmax's widening to
    int64); run-host equals PT2E at three positions (at 16 bits within an output step); kiln's U85
    model runs the partition to tosa_reference_model's bytes."""
    module, inputs, allowed = _cases(0, 3)[name]
    torch.manual_seed(0)
    result = kc.compile_model(
        LoadedModel(name, module().eval(), inputs), CompileSpec(TARGET, activation_bits=bits), log=lambda line: None
    )
    cpu = {p.op.op_type for p in result.partitioning.placements if p.partition is None}
    assert {op for op in cpu if not op.startswith("quantized_decomposed")} == allowed
    (partition,) = result.partitioning.partitions
    out = result.graph.outputs[0]
    step = out.producer.inputs[0].qparams.scale if out.dtype == "float32" else 0  # of the integers it dequantizes
    for position in (0, 2, 5):
        inputs = _cases(position + 1, position)[name][1]
        got = host.run(result.pte, [t.numpy() for t in inputs])[0]
        want = result.quantized_module(*inputs)
        want = (want if isinstance(want, torch.Tensor) else want[0]).numpy()
        off = np.abs(got.astype(np.float64) - want.astype(np.float64)) / (step or 1)
        assert np.max(np.rint(off)) <= (1 if bits == 16 else 0), position
    tosa = tosa_lowering.lower(partition, boards.target(TARGET).npu)
    feeds = partition_feeds(partition, np.random.default_rng(5))
    raw, run = run_compiled(
        vela.compile_tosa(tosa, name, TARGET, "Ethos_U85_SYS_DRAM_Mid", "Sram_Only"), feeds, config_for(TARGET)
    )
    assert run.fault is None, run.fault
    assert [bytes(r) for r in raw] == [np.ascontiguousarray(w).tobytes() for w in run_tosa(tosa, feeds)]
