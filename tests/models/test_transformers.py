"""The transformer zoo (kiln.models.TRANSFORMERS): each model builds, runs, is deterministic,
exports, has the structure of its published architecture and uses the idioms it was written
to exercise; the two ways of writing attention compute the same attention.

Shapes, norm-layer counts and idioms are worked out by hand from the architectures and the
reduced widths each model file states; parameter counts are published figures of the
full-size networks (built from the same classes on the meta device), never a formula
restating a model file's widths.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from kiln import models
from tests.models.helpers import assert_builds_identically, n_params, outputs, run

NAMES = [
    "deit_tiny",
    "deit_tiny_mha",
    "mobilevit",
    "mobilevit_mha",
    "kwt_sdpa",
    "kwt_mha",
    "conformer",
    "conformer_mha",
    "bert_tiny",
    "bert_tiny_mha",
    "whisper_encoder",
    "whisper_encoder_mha",
    "gpt2_block",
    "gpt2_block_mha",
    "llama_block",
    "swin_tiny",
    "levit_tiny",
]
BY_HAND = {"swin_tiny", "levit_tiny"}  # attention as matmul and softmax, as their reference code writes it
SDPA = [name for name in NAMES if not name.endswith("_mha")]


def base(name: str) -> str:
    return name.removesuffix("_mha").removesuffix("_sdpa")


# Per model (both variants): input shapes and dtypes, output shapes. 10 image classes; 12
# keywords; the Conformer's 16 tokens per frame; BERT's hidden states and pooled class token;
# Whisper's 32 frames halved by the stride-2 convolution; 64 logits per position (GPT-2, Llama).
F32, I64 = torch.float32, torch.int64
INPUTS = {
    "deit_tiny": [((1, 3, 32, 32), F32)],
    "mobilevit": [((1, 3, 32, 32), F32)],
    "kwt": [((1, 49, 10), F32)],
    "conformer": [((1, 32, 20), F32)],
    "bert_tiny": [((1, 16), I64)] * 3,
    "whisper_encoder": [((1, 16, 32), F32)],
    "gpt2_block": [((1, 16), I64)],
    "llama_block": [((1, 16), I64)],
    "swin_tiny": [((1, 3, 32, 32), F32)],
    "levit_tiny": [((1, 3, 64, 64), F32)],
}
OUTPUTS = {
    "deit_tiny": [(1, 10)],
    "mobilevit": [(1, 10)],
    "kwt": [(1, 12)],
    "conformer": [(1, 32, 16)],
    "bert_tiny": [(1, 16, 32), (1, 32)],
    "whisper_encoder": [(1, 16, 32)],
    "gpt2_block": [(1, 16, 64)],
    "llama_block": [(1, 16, 64)],
    "swin_tiny": [(1, 10)],
    "levit_tiny": [(1, 10)],
}

# LayerNorms: deit 2 blocks x 2 + final; mobilevit 2 layers x 2 + the block's; kwt 2 x 2;
# conformer 2 blocks x (2 FFNs + attention + convolution module + final); bert the
# embeddings' + 2 layers x 2; whisper 2 blocks x 2 + ln_post; gpt2 2 x 2 + ln_f; llama none;
# swin the patch embedding's + 3 blocks x 2 + patch merging's + final; levit none.
LAYERNORMS = {
    "deit_tiny": 5,
    "mobilevit": 5,
    "kwt": 4,
    "conformer": 10,
    "bert_tiny": 5,
    "whisper_encoder": 5,
    "gpt2_block": 5,
    "llama_block": 0,
    "swin_tiny": 9,
    "levit_tiny": 0,
}
# BatchNorms: mobilevit stem 1, MobileNetV2 block 3, MobileViT block 3 (local, projection,
# fusion), head 1; conformer one per convolution module; levit 4 in the stem, 2 per attention
# (qkv, projection) and per MLP, 3 in the subsampling attention (kv, q, projection), 2 heads:
# 4 + 2 x 2 + 3 x 2 + 3 + 2.
BATCHNORMS = {"mobilevit": 8, "conformer": 2, "levit_tiny": 19}

# The idioms each model exercises, as torch.export captures them. Every entry but BY_HAND's calls
# the fused attention (MultiheadAttention without weights takes that path too).
IDIOMS = {
    "deit_tiny": {"conv2d.default", "cat.default", "expand.default", "layer_norm.default", "gelu.default"},
    "mobilevit": {"conv2d.default", "batch_norm.default", "silu.default", "cat.default", "adaptive_avg_pool2d.default"},
    "kwt": {"cat.default", "layer_norm.default", "gelu.default", "dropout.default"},
    "conformer": {"glu.default", "conv1d.default", "batch_norm.default", "silu.default", "mul.Tensor"},
    "bert_tiny": {"embedding.default", "arange.default", "to.dtype", "tanh.default", "gelu.default"},
    "whisper_encoder": {"conv1d.default", "gelu.default", "permute.default", "layer_norm.default"},
    "gpt2_block": {"embedding.default", "arange.default", "gelu.default", "layer_norm.default"},
    "llama_block": {
        "embedding.default",
        "pow.Tensor_Scalar",
        "mean.dim",
        "rsqrt.default",
        "slice.Tensor",
        "neg.default",
        "cat.default",
        "expand.default",
        "silu.default",
    },
    # slice assignment (fill_ of slices of new_zeros), the bias table indexed by a buffer
    "swin_tiny": {
        "roll.default",
        "new_zeros.default",
        "fill_.Tensor",
        "masked_fill.Scalar",
        "index.Tensor",
        "softmax.int",
        "cat.default",
        "gelu.default",
    },
    # Linear_BN (flatten, batch_norm, reshape_as); the eval-mode biases are a constant, no index
    "levit_tiny": {
        "hardswish.default",
        "batch_norm.default",
        "reshape_as.default",
        "split_with_sizes.default",
        "slice.Tensor",
        "softmax.int",
        "mean.dim",
    },
}
MHA_IDIOMS = {"bert_tiny_mha": {"bitwise_not.default"}, "gpt2_block_mha": {"triu.default"}}


# ---------------------------------------------------------------- registry


def test_registry_lists_the_transformers_in_order_apart_from_the_others():
    assert list(models.TRANSFORMERS) == NAMES
    assert not set(models.TRANSFORMERS) & (set(models.MODELS) | set(models.ARCHITECTURES))
    for name, entry in models.TRANSFORMERS.items():
        assert isinstance(entry, models.ZooEntry) and entry.name == name and entry.summary
        assert (entry.tolerance_steps, entry.tolerance_fraction) == (2, 1.0)
        assert models.find(name) is entry
        kind = "nn.MultiheadAttention" if name.endswith("_mha") else "F.scaled_dot_product_attention"
        kind = "attention by hand" if name in BY_HAND else kind
        assert kind in entry.summary


def test_kiln_compile_finds_a_transformer_by_name():
    from kiln.frontend.export import load_model

    loaded = load_model("bert_tiny")
    assert loaded.name == "bert_tiny" and [x.dtype for x in loaded.inputs] == [torch.int64] * 3


# ---------------------------------------------------------------- every model


@pytest.mark.parametrize("name", NAMES)
def test_builds_and_runs(name):
    model, inputs = models.load(name)
    assert not any(m.training for m in model.modules()), "not in eval mode"
    assert [(tuple(x.shape), x.dtype) for x in inputs] == INPUTS[base(name)]
    got = outputs(model, inputs)
    assert [tuple(y.shape) for y in got] == OUTPUTS[base(name)]
    for y in got:
        assert torch.isfinite(y).all() and y.min() < y.max()


@pytest.mark.parametrize("name", NAMES)
def test_building_twice_gives_identical_models(name):
    assert_builds_identically(name)


@pytest.mark.parametrize("name", NAMES)
def test_norm_layers_are_not_identity(name):
    model, _ = models.load(name)
    layer_norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    assert len(layer_norms) == LAYERNORMS[base(name)]
    for ln in layer_norms:
        assert not torch.equal(ln.weight, torch.ones_like(ln.weight))
        assert not torch.equal(ln.bias, torch.zeros_like(ln.bias))
    batch_norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    assert len(batch_norms) == BATCHNORMS.get(base(name), 0)
    for bn in batch_norms:
        assert not torch.equal(bn.running_mean, torch.zeros_like(bn.running_mean))


@pytest.mark.parametrize("name", NAMES)
def test_exports_and_uses_its_idioms(name):
    model, inputs = models.load(name)
    program = torch.export.export(model, inputs, strict=False)
    with torch.no_grad():
        for got, want in zip(outputs(program.module(), inputs), outputs(model, inputs), strict=True):
            torch.testing.assert_close(got, want)
    ops = {str(n.target).removeprefix("aten.") for n in program.graph.nodes if n.op == "call_function"}
    fused = set() if name in BY_HAND else {"scaled_dot_product_attention.default"}
    want = IDIOMS[base(name)] | MHA_IDIOMS.get(name, set()) | fused
    assert want <= ops, sorted(want - ops)


def test_model_files_define_aot_arm_compiler_names():
    import importlib

    for module_name in {entry.build.args[0] for entry in models.TRANSFORMERS.values()}:
        module = importlib.import_module(f"kiln.models.{module_name}")
        assert isinstance(module.ModelUnderTest, nn.Module) and not module.ModelUnderTest.training
        assert isinstance(module.ModelInputs, tuple) and callable(module.build)


# ---------------------------------------------------------------- the two ways of writing attention


@pytest.mark.parametrize("masks", [{}, {"causal": True}, {"padding": torch.tensor([[True] * 5 + [False] * 2])}])
def test_sdpa_and_multihead_attention_compute_the_same_attention(masks):
    """nn.MultiheadAttention's projections copied into the SDPA form give the same output, with
    no mask, a causal one and a padding mask (each form passes them in its own convention)."""
    from kiln.models._transformer import SelfAttention

    torch.manual_seed(0)
    mha, sdpa = SelfAttention(12, 3, "mha").eval(), SelfAttention(12, 3, "sdpa").eval()
    with torch.no_grad():
        # both lay the projection's rows out as [q; k; v], each of heads x head width
        sdpa.qkv.weight.copy_(mha.mha.in_proj_weight)
        sdpa.qkv.bias.copy_(mha.mha.in_proj_bias)
        sdpa.out.load_state_dict(mha.mha.out_proj.state_dict())
    x = torch.randn(1, 7, 12)
    with torch.no_grad():
        torch.testing.assert_close(sdpa(x, **masks), mha(x, **masks))


def test_causal_attention_ignores_later_tokens():
    for name in ("gpt2_block", "gpt2_block_mha", "llama_block"):
        model, (ids,) = models.load(name)
        changed = ids.clone()
        changed[0, 10:] = (ids[0, 10:] + 1) % 64
        a, b = run(model, (ids,)), run(model, (changed,))
        torch.testing.assert_close(a[:, :10], b[:, :10])
        assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_bert_padding_tokens_do_not_reach_the_real_ones():
    for name in ("bert_tiny", "bert_tiny_mha"):
        model, (ids, segments, mask) = models.load(name)
        assert mask.tolist() == [[1] * 12 + [0] * 4] and segments.tolist() == [[0] * 7 + [1] * 9]
        changed = ids.clone()
        changed[0, 12:] = (ids[0, 12:] + 1) % 100
        (a, pooled_a), (b, pooled_b) = run(model, (ids, segments, mask)), run(model, (changed, segments, mask))
        torch.testing.assert_close(a[:, :12], b[:, :12])
        torch.testing.assert_close(pooled_a, pooled_b)
        # without the mask, they do
        everything = torch.ones_like(mask)
        c, d = run(model, (ids, segments, everything)), run(model, (changed, segments, everything))
        assert not torch.allclose(c[0][:, :12], d[0][:, :12])


# ---------------------------------------------------------------- structure, by hand


def test_swin_shifted_window_mask_separates_the_rolled_regions():
    """The 8x8 map rolled by 2 in 4x4 windows: the top-left window holds one region, the
    top-right and bottom-left two of 8 tokens each (256 - 2 x 64 pairs apart), the bottom-right
    four of 4 (256 - 4 x 16); the unshifted block has no mask."""
    model, _ = models.load("swin_tiny")
    regular, shifted = model.stage1
    mask = shifted.shifted_window_mask(torch.zeros(1, 8, 8, 16))
    assert mask.shape == (4, 16, 16) and set(mask.unique().tolist()) == {0.0, -100.0}
    assert (mask == -100).sum(dim=(1, 2)).tolist() == [0, 128, 128, 192]
    assert (regular.shift, shifted.shift, model.stage2[0].shift) == (0, 2, 0)


def test_swin_relative_position_index_counts_offsets_from_the_table_centre():
    from kiln.models.swin_tiny import relative_position_index

    index = relative_position_index(4)  # offsets -3..3 per axis: a 7 x 7 table, offset (0, 0) at 3 * 7 + 3
    assert index.shape == (16, 16) and index.min() == 0 and index.max() == 48
    assert index.diagonal().tolist() == [24] * 16
    assert index[0, 15] == 0 and index[15, 0] == 48  # token 0 at (0, 0), token 15 at (3, 3)


def test_levit_attention_biases_index_distance_classes():
    """Stage 1 (4x4 tokens) and the subsampling attention (2x2 queries at stride 2 over 4x4 keys)
    have offsets 0..3 on each axis: 16 classes; stage 2 (2x2) has 4. A query's own position
    (offset (0, 0), the first met) reads class 0; eval mode caches the gathered biases."""
    model, _ = models.load("levit_tiny")
    attention, _, subsample, _, residual, _ = model.blocks
    shapes = [tuple(m.bias.attention_biases.shape) for m in (attention.m, subsample, residual.m)]
    assert shapes == [(2, 16), (4, 16), (3, 4)]
    bias = attention.m.bias
    assert torch.equal(bias.ab, bias.attention_biases[:, bias.attention_bias_idxs])
    assert bias.attention_bias_idxs.diagonal().tolist() == [0] * 16
    assert subsample.bias.attention_bias_idxs[:, [0, 2, 8, 10]].diagonal().tolist() == [0] * 4


def test_mobilevit_unfolds_2x2_patches_and_folds_back():
    from kiln.models.mobilevit import fold, unfold

    x = torch.arange(2 * 3 * 4 * 6.0).reshape(2, 3, 4, 6)
    patches = unfold(x, 2)
    # 2 images x 4 pixels per patch, 2 x 3 patches, 3 channels
    assert tuple(patches.shape) == (8, 6, 3)
    # pixel 0 (top left of every patch) of image 0, channel 0: the map's (0,0), (0,2), (0,4), (2,0), ...
    assert patches[0, :, 0].tolist() == [0, 2, 4, 12, 14, 16]
    # patch 0 of image 0, channel 0, its four pixels: (0,0), (0,1), (1,0), (1,1); image 1 starts at 72
    assert patches[:, 0, 0].tolist() == [0, 1, 6, 7, 72, 73, 78, 79]
    assert patches[3, 5].tolist() == [6 * 3 + 5, 24 + 6 * 3 + 5, 48 + 6 * 3 + 5]  # patch (1,2)'s bottom right
    assert torch.equal(fold(patches, 2, 4, 6), x)


def test_conformer_convolution_module_gates_and_convolves_depthwise():
    from kiln.models.conformer import ConvolutionModule

    module = ConvolutionModule(8, 15)
    assert module.pointwise1.out_channels == 16 and module.depthwise.groups == 8
    assert module.depthwise.kernel_size == (15,) and module.depthwise.padding == (7,)
    assert isinstance(module.bn, nn.BatchNorm1d)


def test_conformer_halves_its_feed_forward_steps():
    from kiln.models.conformer import ConformerBlock

    block = ConformerBlock(8, 2, 3, "sdpa").eval()
    for m in (block.attn, block.conv):
        m.forward = lambda x, *a: torch.zeros_like(x)
    block.ff1.forward = lambda x: torch.ones_like(x)  # x + 1/2
    block.ff2.forward = lambda x: 2 * torch.ones_like(x)  # + 1/2 * 2
    block.norm = nn.Identity()
    assert torch.equal(block(torch.zeros(1, 4, 8)), torch.full((1, 4, 8), 1.5))


def test_whisper_sinusoids_run_from_timescale_1_to_10000():
    from kiln.models.whisper_encoder import sinusoids

    table = sinusoids(16, 32)
    assert tuple(table.shape) == (16, 32)
    assert table[0].tolist() == [0.0] * 16 + [1.0] * 16
    t = torch.arange(16.0)
    torch.testing.assert_close(table[:, 0], torch.sin(t))  # timescale 1
    torch.testing.assert_close(table[:, 15], torch.sin(t / 10_000))  # timescale 10,000
    torch.testing.assert_close(table[:, 31], torch.cos(t / 10_000))
    model, _ = models.load("whisper_encoder")
    assert model.conv2.stride == (2,) and torch.equal(model.positions, table)


def test_gpt2_ties_its_head_to_the_token_embedding_and_uses_tanh_gelu():
    model, (ids,) = models.load("gpt2_block")
    x = model.ln_f(model.blocks(model.wte(ids) + model.wpe(torch.arange(16))))
    torch.testing.assert_close(run(model, (ids,)), x @ model.wte.weight.T)
    h = torch.linspace(-3, 3, 7)
    want = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
    for block in model.blocks:
        assert block.causal
        torch.testing.assert_close(block.activation(h), want)


def test_llama_rmsnorm_matches_torchs():
    from kiln.models.llama_block import RMSNorm

    torch.manual_seed(0)
    mine = RMSNorm(6)
    theirs = nn.RMSNorm(6, eps=1e-6)
    with torch.no_grad():
        theirs.weight.copy_(mine.weight)
    x = torch.randn(2, 3, 6)
    torch.testing.assert_close(mine(x), theirs(x))
    one = RMSNorm(2)
    with torch.no_grad():
        one.weight.fill_(1.0)
    torch.testing.assert_close(one(torch.tensor([3.0, 4.0])), torch.tensor([3.0, 4.0]) / math.sqrt(12.5 + 1e-6))


def test_llama_rotary_embedding_depends_on_relative_position_only():
    """RoPE's defining property: <R(m) q, R(n) k> depends on m - n alone; rotate_half swaps the
    halves and negates the second."""
    from kiln.models.llama_block import rotary_tables, rotate_half

    assert rotate_half(torch.tensor([0.0, 1, 2, 3])).tolist() == [-2, -3, 0, 1]
    cos, sin = rotary_tables(16, 8)
    assert cos[0].tolist() == [1.0] * 8 and sin[0].tolist() == [0.0] * 8
    torch.testing.assert_close(sin[5, 0], torch.sin(torch.tensor(5.0)))  # frequency 1
    torch.testing.assert_close(cos[:, 1], cos[:, 5])  # each frequency in both halves
    torch.manual_seed(0)
    q, k = torch.randn(8), torch.randn(8)

    def rotated(x, m):
        return x * cos[m] + rotate_half(x) * sin[m]

    for shift in (0, 3, 7):
        dots = [torch.dot(rotated(q, m + shift), rotated(k, m)) for m in range(8)]
        torch.testing.assert_close(torch.stack(dots), dots[0].expand(8))


def test_llama_attention_is_grouped_query():
    from kiln.models.llama_block import repeat_heads

    model, _ = models.load("llama_block")
    attention = model.layers[0].attn
    assert (attention.heads, attention.kv_heads) == (4, 2)
    assert attention.k_proj.out_features == attention.v_proj.out_features == 2 * 8
    x = torch.arange(2.0).view(1, 2, 1, 1)
    assert repeat_heads(x, 2).flatten().tolist() == [0, 0, 1, 1]
    assert not any(getattr(m, "bias", None) is not None for m in model.modules() if isinstance(m, nn.Linear))
    assert set(model.state_dict()) >= {"embed.weight"} and "cos" not in model.state_dict()


# ---------------------------------------------------------------- published sizes


def full_size(factory, **kwargs) -> int:
    with torch.device("meta"):
        return n_params(factory(**kwargs))


def test_deit_tiny_at_full_size_has_the_published_parameter_count():
    from kiln.models.deit_tiny import DeiT

    # timm's deit_tiny_patch16_224 (DeiT-Ti: 5.7 M in the paper's table 1)
    assert full_size(DeiT, image=224, patch=16, dim=192, heads=3, depth=12, classes=1000) == 5_717_416


def test_bert_tiny_at_full_size_has_the_published_parameter_count():
    from kiln.models.bert_tiny import Bert

    # google/bert_uncased_L-2_H-128_A-2 with its pooler
    assert full_size(Bert, vocab=30522, positions=512, dim=128, heads=2, depth=2) == 4_385_920


def test_gpt2_at_full_size_has_the_published_parameter_count():
    from kiln.models.gpt2_block import GPT2

    # GPT-2 small, "124M": token and position embeddings, 12 blocks, final norm, tied head
    assert full_size(GPT2, vocab=50257, positions=1024, dim=768, heads=12, depth=12) == 124_439_808


def test_llama_at_full_size_has_the_published_parameter_counts():
    from kiln.models.llama_block import Llama

    # Llama 2 7B (multi-head: 32 key/value heads) and TinyLlama 1.1B (grouped-query: 4)
    assert full_size(Llama, vocab=32000, dim=4096, heads=32, kv_heads=32, hidden=11008, depth=32) == 6_738_415_616
    assert full_size(Llama, vocab=32000, dim=2048, heads=32, kv_heads=4, hidden=5632, depth=22) == 1_100_048_384
