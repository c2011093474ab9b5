"""Language models kiln's zoo does not have. `gpt`, written as GPT-2 implementations (nanoGPT) and
ExecuTorch's llama example write theirs: learned position embeddings, LayerNorm, one fused qkv
projection with biases, tanh GELU, attention spelt out (q @ k^T, masked_fill, softmax), the KV cache
written by slice assignment (`cache[:, :, input_pos] = k`, aten.index_put) and the causal mask read
as a row of a [T, T] buffer (`bias[:, :, input_pos, :]`, aten.index). `phi`, as Phi-2 and Gemma
write theirs: partial rotary embeddings (half of each head) from tables indexed by position,
attention and MLP in parallel off one LayerNorm, embeddings scaled by sqrt(width), an untied head
with a bias, logit soft-capping (tanh), einsum attention with an additive mask, and the caches
written with several index tensors (`index_put_((0, arange(heads)[:, None], pos[None, :]), k)` and
`cache[0, :, pos] = v`). Each compiles for the Ethos-U85 with every MAC on the NPU in one delegate,
the CPU keeping only index checks and index arithmetic, and run-host follows the PT2E reference step
by step with the cache carried."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from kiln import compile as kc
from kiln.frontend.export import LoadedModel
from kiln.reference import run_host as host
from kiln.spec import CompileSpec

from .helpers import Float64Arithmetic, steps_off

VOCAB, DIM, HEADS, LAYERS, CONTEXT = 96, 64, 4, 2, 32
ROTARY = DIM // HEADS // 2  # phi's rotated dims of each head
CAP = 30.0  # phi's logit soft-cap
# What the CPU keeps (the report's op types): the index checks before each gather and scatter, the
# program's float edges, argmax's widening, and PyTorch's negative-index rule on the int64 position
# (where(i < 0, i + size, i)): the NPU has no 64-bit integers.
CPU_ONLY = {
    "kiln.checked_index",
    "quantized_decomposed.quantize_per_tensor",
    "quantized_decomposed.dequantize_per_tensor",
    "aten._to_copy",
    "aten.add",
    "aten.lt",
    "aten.where",
    "aten.reshape",  # phi: pos[None, :], an int64 view
    "aten.unsqueeze",
}


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(DIM)
        self.c_attn = nn.Linear(DIM, 3 * DIM)
        self.c_proj = nn.Linear(DIM, DIM)
        self.ln_2 = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(approximate="tanh"), nn.Linear(4 * DIM, DIM))
        self.register_buffer("k_cache", torch.zeros(1, HEADS, CONTEXT, DIM // HEADS))
        self.register_buffer("v_cache", torch.zeros(1, HEADS, CONTEXT, DIM // HEADS))
        self.register_buffer("bias", torch.tril(torch.ones(CONTEXT, CONTEXT)).view(1, 1, CONTEXT, CONTEXT))

    def forward(self, x, input_pos):
        b, s, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(DIM, dim=2)
        q, k, v = (t.view(b, s, HEADS, c // HEADS).transpose(1, 2) for t in (q, k, v))
        self.k_cache[:, :, input_pos] = k
        self.v_cache[:, :, input_pos] = v
        att = (q @ self.k_cache.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, input_pos, :] == 0, float("-inf"))
        y = (F.softmax(att, dim=-1) @ self.v_cache).transpose(1, 2).contiguous().view(b, s, c)
        x = x + self.c_proj(y)
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.wte = nn.Embedding(VOCAB, DIM)
        self.wpe = nn.Embedding(CONTEXT, DIM)
        self.h = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2's

    def decode(self, tokens, input_pos):
        x = self.wte(tokens) + self.wpe(input_pos)
        for block in self.h:
            x = block(x, input_pos)
        logits = self.lm_head(self.ln_f(x))[:, -1, :]
        return logits.argmax(-1), logits

    forward = decode


class PhiLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.dense = nn.Linear(DIM, DIM)
        self.fc1 = nn.Linear(DIM, 4 * DIM)
        self.fc2 = nn.Linear(4 * DIM, DIM)
        self.register_buffer("k_cache", torch.zeros(1, HEADS, CONTEXT, DIM // HEADS))
        self.register_buffer("v_cache", torch.zeros(1, HEADS, CONTEXT, DIM // HEADS))

    @staticmethod
    def rotate(x, cos, sin):
        rotated, kept = x[..., :ROTARY], x[..., ROTARY:]
        first, second = rotated.chunk(2, dim=-1)
        turned = torch.cat((-second, first), dim=-1)
        return torch.cat((rotated * cos + turned * sin, kept), dim=-1)

    def forward(self, x, pos, cos, sin, mask):
        h = self.ln(x)
        b, s, _ = h.shape
        q, k, v = self.qkv(h).view(b, s, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        self.k_cache.index_put_([torch.tensor(0), torch.arange(HEADS)[:, None], pos[None, :]], k[0])
        self.v_cache[0, :, pos] = v[0]
        att = torch.einsum("bhqd,bhkd->bhqk", q, self.k_cache) / math.sqrt(DIM // HEADS) + mask
        y = torch.einsum("bhqk,bhkd->bhqd", att.softmax(-1), self.v_cache)
        y = self.dense(y.transpose(1, 2).reshape(b, s, DIM))
        return x + y + self.fc2(F.gelu(self.fc1(h), approximate="tanh"))


class Phi(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(PhiLayer() for _ in range(LAYERS))
        self.final = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB)
        angles = torch.arange(CONTEXT).float()[:, None] / (10000 ** (torch.arange(0, ROTARY, 2).float() / ROTARY))
        self.register_buffer("cos", torch.cat([angles, angles], -1).cos())
        self.register_buffer("sin", torch.cat([angles, angles], -1).sin())
        self.register_buffer("causal", torch.triu(torch.full((CONTEXT, CONTEXT), -1e4), 1))

    def decode(self, tokens, pos):
        x = self.embed(tokens) * math.sqrt(DIM)
        cos, sin, mask = self.cos[pos], self.sin[pos], self.causal[pos][None, None]
        for layer in self.layers:
            x = layer(x, pos, cos, sin, mask)
        logits = self.head(self.final(x))[:, -1]
        logits = torch.tanh(logits / CAP) * CAP
        return torch.argmax(logits, dim=-1), logits

    forward = decode


def loaded(name: str) -> LoadedModel:
    """A model with a decode method and, to calibrate on, 12 greedy steps of the float model."""
    make = {"gpt": Gpt, "phi": Phi}[name]
    model = make().eval()
    shadow = make().eval()  # the same weights: its cache fills while the calls are recorded
    calls, token = [], torch.tensor([[5]])
    with torch.no_grad():
        for position in range(12):
            calls.append(("decode", (token, torch.tensor([position]))))
            token = shadow.decode(token, torch.tensor([position]))[0].view(1, 1)
    model.kiln_methods = {"decode": calls[0][1]}
    model.kiln_calibration = calls
    model.kiln_constants = {"get_max_seq_len": CONTEXT, "get_vocab_size": VOCAB}
    return LoadedModel(f"{name}_kv", model, calls[0][1])


@pytest.fixture(scope="module", params=["gpt", "phi"])
def compiled(request):
    return kc.compile_model(loaded(request.param), CompileSpec("ethos-u85-256"), log=lambda line: None)


def test_every_mac_runs_on_the_npu_and_the_cpu_keeps_only_index_work(compiled):
    method = compiled.report["methods"]["decode"]
    assert len(method["delegates"]) == 1 and method["macs"]["npu_share"] == 1.0
    cpu = {o["op"] for o in method["ops"] if o["where"] == "cpu"}
    assert cpu <= CPU_ONLY, cpu - CPU_ONLY
    npu = {o["op"] for o in method["ops"] if o["where"] == "npu"}
    assert {"aten.index_copy", "aten.index_select", "aten.embedding", "aten.softmax", "aten.argmax"} <= npu
    assert compiled.report["state"]["bytes"] == LAYERS * 2 * CONTEXT * DIM  # int8 keys and values


def test_run_host_follows_the_pt2e_reference_step_by_step_with_the_cache_carried(compiled):
    """Eight steps at positions 0..7 (the cache rows written at run time, the mask row read at run
    time): run-host's logits within one step of the PT2E reference's in float64, the reference's
    cache carried from step to step as run-host carries the program's state."""
    module = compiled.methods["decode"].quantized_module
    names = [b["name"] for b in compiled.report["state"]["buffers"]]
    reference = [torch.zeros(1, HEADS, CONTEXT, DIM // HEADS) for _ in names]
    state: dict[str, np.ndarray] = {}
    (output,) = [n for n in module.graph.nodes if n.op == "output"]
    logits_dq = output.args[0][1]  # the token is argmax's int64; the logits a dequantized int8 value
    assert logits_dq.target is torch.ops.quantized_decomposed.dequantize_per_tensor.default
    scale = float(logits_dq.args[1])
    generator = torch.Generator().manual_seed(9)
    for position in range(8):
        token = torch.randint(0, VOCAB, (1, 1), generator=generator)
        inputs = (token, torch.tensor([position]))
        with torch.no_grad():
            want = Float64Arithmetic(module).run(*inputs, *reference)
        _, logits = host.run(compiled.pte, [i.numpy() for i in inputs], "decode", state)
        assert steps_off(logits, want[1], scale).max() <= 1, position
        reference = [w.float() for w in want[2:]]
    cache = state[names[0]]  # the first layer's keys
    assert np.count_nonzero(cache[:, :, :8]) > cache[:, :, :8].size // 2 and not cache[:, :, 8:].any()
