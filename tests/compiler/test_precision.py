"""Mixed precision: CompileSpec.int16 (`kiln compile --int16`, `--int16-module`) puts chosen parts
of an 8-bit model at 16 bits; the report's int16 names each 16-bit value and why; the program
runs within a stated bound of the PT2E reference of the same mixed quantization."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from kiln import compile as kc
from kiln.errors import UsageError
from kiln.frontend import export as frontend
from kiln.reference import run_host as host
from kiln.spec import CompileSpec, Int16Regions, in_module
from tests.compiler.random_models import steps_off_pt2e

TOKENS, DIM, HEADS = 8, 16, 2


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)

    def forward(self, x):
        q, k, v = self.qkv(x).reshape(1, TOKENS, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4).unbind(0)
        weights = ((q @ k.transpose(-2, -1)) * (DIM // HEADS) ** -0.5).softmax(-1)
        return self.proj((weights @ v).transpose(1, 2).reshape(1, TOKENS, DIM))


class Block(nn.Module):
    """A pre-norm transformer block (LayerNorm, attention by matmul and softmax, GELU MLP)."""

    def __init__(self):
        super().__init__()
        self.norm1, self.attn, self.norm2 = nn.LayerNorm(DIM), Attention(), nn.LayerNorm(DIM)
        self.fc1, self.fc2 = nn.Linear(DIM, 2 * DIM), nn.Linear(2 * DIM, DIM)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


def block() -> frontend.LoadedModel:
    torch.manual_seed(0)
    return frontend.LoadedModel("block", Block().eval(), (torch.randn(1, TOKENS, DIM),))


@pytest.fixture(scope="module")
def mixed():
    """The block on ethos-u85-256 with attention and norms at 16 bits."""
    spec = CompileSpec("ethos-u85-256", int16=Int16Regions(policies=("attention", "norms")))
    return kc.compile_model(block(), spec, log=lambda line: None)


def sixteen(result) -> dict[str, str]:
    return {e["node"]: e["why"] for e in result.report["int16"]}


def test_attention_and_norms_are_16_bit_for_their_policy_and_the_rest_8_bit(mixed):
    why = sixteen(mixed)
    ops = {op.name: op for op in mixed.graph.ops}
    # the block's own ops, named by hand: scores, their scale, softmax, weighted sum; the norms' steps
    for node in ("matmul", "mul", "softmax", "matmul_1"):
        assert why[node] == "policy 'attention'", node
    norm_steps = [name for name, op in ops.items() if op.origin[1] == "aten.layer_norm"]
    assert len(norm_steps) == 2 * 9  # mean, sub, mul, mean, add, rsqrt, mul; weight, bias: per norm
    assert all(why[name] == "policy 'norms'" for name in norm_steps)
    for node in ("linear", "linear_1", "linear_2", "linear_3", "gelu", "add", "add_1"):
        assert ops[node].output.dtype == "int8", node
    conversions = [name for name, w in why.items() if w.startswith("requantizes")]
    assert conversions and all(ops[name].inputs[0].dtype == "int8" for name in conversions)


def test_conversions_between_widths_run_on_the_npu(mixed):
    """Where an 8-bit value meets a 16-bit reader, and back: one requantization, on the NPU; with
    the 16-bit softmax and rsqrt there too, the block is one delegate on ethos-u85-256 (the input,
    read by the 8-bit residual add and the 16-bit norm, is quantized to both widths on the CPU)."""
    placed = {o["node"]: o for o in mixed.report["ops"]}
    cpu = [op for op in mixed.graph.ops if placed[op.name]["where"] == "cpu"]
    assert sorted((op.op_type, op.output.dtype) for op in cpu) == [
        ("quantized_decomposed.dequantize_per_tensor", "float32"),
        ("quantized_decomposed.quantize_per_tensor", "int16"),
        ("quantized_decomposed.quantize_per_tensor", "int8"),
    ]
    assert len(mixed.report["delegates"]) == 1
    widths = [(op.inputs[0].dtype, op.output.dtype) for op in mixed.graph.ops if op.origin[1] == "requantize"]
    assert ("int8", "int16") in widths and ("int16", "int8") in widths
    for op in mixed.graph.ops:
        if op.origin[1] == "requantize":
            assert placed[op.name]["where"] == "npu", op.name


def test_mixed_program_is_within_a_step_of_pt2e(mixed):
    got = host.run(mixed.pte, [x.numpy() for x in mixed.inputs])
    worst, _ = steps_off_pt2e(mixed, mixed.inputs, got)
    assert worst <= 1


def test_a_module_pattern_chooses_the_ops_inside_the_modules_it_matches():
    spec = CompileSpec("ethos-u85-256", int16=Int16Regions(modules=("norm*",)))
    result = kc.compile_model(block(), spec, log=lambda line: None)
    why = sixteen(result)
    chosen = {name for name, w in why.items() if not w.startswith(("requantizes", "quantizes"))}
    norms = {op.name for op in result.graph.ops if op.module in ("norm1", "norm2") and op.origin[1] != "requantize"}
    assert chosen == norms and len(norms) == 18
    assert set(why[name] for name in chosen) == {"module pattern 'norm*'"}
    got = host.run(result.pte, [x.numpy() for x in result.inputs])
    assert steps_off_pt2e(result, result.inputs, got)[0] <= 1


def test_the_whole_model_at_16_bits_says_so():
    result = kc.compile_model(block(), CompileSpec("ethos-u85-256", activation_bits=16), log=lambda line: None)
    assert result.report["int16"] and {e["why"] for e in result.report["int16"]} == {"--activation-bits 16"}


def test_an_8_bit_compile_lists_no_16_bit_values():
    result = kc.compile_model(block(), CompileSpec("ethos-u85-256"), log=lambda line: None)
    assert result.report["int16"] == []


@pytest.mark.parametrize(
    ("path", "pattern", "inside"),
    [
        ("blocks.0.attn.qkv", "blocks.0.attn", True),
        ("blocks.0.attn", "blocks.*.attn", True),
        ("blocks.0.attention", "blocks.*.attn", False),
        ("blocks.10.norm1", "blocks.1", False),
        ("norm", "norm*", True),
        ("", "norm", False),
    ],
)
def test_in_module(path, pattern, inside):
    assert in_module(path, pattern) is inside


def test_unknown_policies_and_16_bits_everywhere_are_refused():
    with pytest.raises(UsageError, match="unknown 16-bit policy 'softmax'"):
        Int16Regions(policies=("softmax",))
    with pytest.raises(UsageError, match="--activation-bits 16 makes every activation 16-bit"):
        CompileSpec("ethos-u85-256", activation_bits=16, int16=Int16Regions(("norms",))).resolved()
    with pytest.raises(UsageError, match="needs quantization"):
        CompileSpec("ethos-u85-256", quantize=False, int16=Int16Regions(("norms",))).resolved()


def test_mixed_program_runs_on_the_cpu_alone_as_pt2e(mixed):
    """--no-delegate: every op on the CPU, conversions as PT2E's dequantize and quantize: exact."""
    spec = CompileSpec("ethos-u85-256", delegate=False, int16=Int16Regions(policies=("attention", "norms")))
    result = kc.compile_model(block(), spec, log=lambda line: None)
    got = host.run(result.pte, [x.numpy() for x in result.inputs])
    want = result.quantized_module(*result.inputs).detach().numpy()
    np.testing.assert_array_equal(got[0], want)
