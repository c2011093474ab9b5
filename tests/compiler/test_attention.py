"""Attention as PyTorch writes it (kiln.frontend.attention): each decomposition against eager
PyTorch in float, and models compiled for ethos-u85-256 with every op but the I/O conversions on
the NPU, `kiln run-host` against the PT2E reference, and the masked outputs against float."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from kiln import compile as kc
from kiln.errors import ModelError
from kiln.frontend.export import LoadedModel
from kiln.reference import run_host as host
from kiln.spec import CompileSpec
from tests.compiler.helpers import Lambda, call_targets, normalised, seeded
from tests.compiler.random_models import steps_off_pt2e

aten = torch.ops.aten

# The NPU's softmax rounds once from 16-bit intermediates where the PT2E reference rounds float
# values, so a probability may land one step off; the matmul by the values after it can carry
# that to 3 output steps on a few elements (hand-written matmul + softmax attention does the same).
WORST_STEPS = 3
WITHIN_2_STEPS = 0.99


class Sdpa(nn.Module):
    """F.scaled_dot_product_attention of q, k, v projected from x [1, 16, 32] by one linear;
    `kwargs` go to the attention, `heads` / `kv_heads` key and value heads (grouped-query)."""

    def __init__(self, heads=4, kv_heads=4, **kwargs):
        super().__init__()
        self.heads, self.kv_heads, self.kwargs = heads, kv_heads, kwargs
        self.width = 32 // heads
        self.qkv = nn.Linear(32, (heads + 2 * kv_heads) * self.width)

    def forward(self, x):
        n, w = x.shape[1], self.width
        q, k, v = self.qkv(x).split([self.heads * w, self.kv_heads * w, self.kv_heads * w], -1)
        q, k, v = (t.view(1, n, -1, w).transpose(1, 2) for t in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v, **self.kwargs).transpose(1, 2).reshape(1, n, 32)


def _bool_mask():
    return torch.rand(16, 16, generator=torch.Generator().manual_seed(1)) > 0.3


def _float_mask():
    return torch.randn(16, 16, generator=torch.Generator().manual_seed(2))


SDPA_CASES = {
    "plain": dict(),
    "causal": dict(is_causal=True),
    "bool_mask": dict(attn_mask=_bool_mask()),
    "bool_mask_broadcast": dict(attn_mask=_bool_mask()[None, None]),
    "float_mask": dict(attn_mask=_float_mask()),
    "scale": dict(scale=0.5),
    "gqa": dict(heads=4, kv_heads=2, enable_gqa=True),
    "mqa_causal": dict(heads=4, kv_heads=1, enable_gqa=True, is_causal=True),
}


def _sdpa(name):
    torch.manual_seed(0)
    kwargs = dict(SDPA_CASES[name])
    return Sdpa(kwargs.pop("heads", 4), kwargs.pop("kv_heads", 4), **kwargs).eval()


@pytest.mark.parametrize("name", SDPA_CASES)
def test_sdpa_decomposition_equals_eager(name):
    module, inputs = _sdpa(name), seeded(0, (1, 16, 32))
    gm = normalised(module, inputs)
    assert aten.scaled_dot_product_attention.default not in call_targets(gm)
    assert aten.softmax.int in call_targets(gm)
    torch.testing.assert_close(gm(*inputs), module(*inputs), rtol=1e-5, atol=1e-5)


def test_sdpa_with_every_position_of_a_row_masked_in_float_gives_a_uniform_row():
    mask = torch.ones(16, 16, dtype=torch.bool)
    mask[3] = False
    module, inputs = Sdpa(attn_mask=mask).eval(), seeded(0, (1, 16, 32))
    got = normalised(module, inputs)(*inputs)
    _, _, v = module.qkv(inputs[0]).view(1, 16, 3, 4, 8).unbind(2)
    torch.testing.assert_close(got[0, 3], v[0].mean(0).reshape(32))  # PyTorch gives NaN there


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(dropout_p=0.1), "attention dropout 0.1"),
        (dict(is_causal=True, attn_mask=_bool_mask()), "attn_mask and is_causal"),
    ],
)
def test_sdpa_refusals_name_the_node(kwargs, message):
    with pytest.raises(
        ModelError, match=rf"node scaled_dot_product_attention\S* \(aten.scaled_dot_product_attention\).*{message}"
    ):
        normalised(Sdpa(**kwargs).eval(), seeded(0, (1, 16, 32)))


class Several(nn.Module):
    """Every module of `modules` applied to the one input, one output each (one compile)."""

    def __init__(self, modules):
        super().__init__()
        self.parts = nn.ModuleList(modules)

    def forward(self, *xs):
        outputs = [part(*xs) for part in self.parts]
        return tuple(t for o in outputs for t in (o if isinstance(o, tuple) else (o,)))


def _compiled(module, inputs, target="ethos-u85-256"):
    result = kc.compile_model(LoadedModel("attention", module, inputs), CompileSpec(target), log=lambda line: None)
    return result, host.run(result.pte, [x.numpy() for x in inputs])


def _several_compiled(modules, seed, target="ethos-u85-256"):
    """(model, inputs, result, run-host's outputs): `modules` as one model on one input [1, 16, 32]."""
    module, inputs = Several(modules).eval(), seeded(seed, (1, 16, 32))
    return module, inputs, *_compiled(module, inputs, target)


def _assert_on_npu_and_near_pt2e(result, inputs, got, delegates=1):
    """Every op but the I/O conversions on the NPU, in `delegates` delegates (one per independent
    part), every output near the PT2E reference."""
    on_cpu = [o["op"] for o in result.report["ops"] if o["where"] == "cpu" and "quantize" not in o["op"]]
    assert on_cpu == []
    assert len(result.report["delegates"]) == delegates
    worst, within = steps_off_pt2e(result, inputs, got)
    assert worst <= WORST_STEPS and within >= WITHIN_2_STEPS, (worst, within)


def _assert_follows_float(module, inputs, got, names, floor):
    """Each of run-host's outputs `got` correlates with the float module's by more than `floor`."""
    with torch.no_grad():
        want = module(*inputs)
    correlations = [float(np.corrcoef(g.ravel(), w.numpy().ravel())[0, 1]) for g, w in zip(got, want, strict=True)]
    assert min(correlations) > floor, list(zip(names or range(len(got)), correlations))


@pytest.fixture(scope="module")
def sdpa_u85():
    return _several_compiled([_sdpa(name) for name in SDPA_CASES], 3)


def test_sdpa_runs_on_the_npu_near_the_pt2e_reference(sdpa_u85):
    module, inputs, result, got = sdpa_u85
    _assert_on_npu_and_near_pt2e(result, inputs, got, delegates=len(SDPA_CASES))


def test_sdpa_masked_outputs_follow_float(sdpa_u85):
    """A masked score quantizes to the lowest level of a range reaching far enough below the
    scores that the softmax weighs it at 0: each output correlates with float as the unmasked one
    does (a masked position at the scores' own lowest value gave 0.88 for the causal case)."""
    module, inputs, result, got = sdpa_u85
    _assert_follows_float(module, inputs, got, SDPA_CASES, 0.999)


def _causal_by_masked_fill(scores):
    return scores.masked_fill(torch.ones(16, 16, dtype=torch.bool).triu(1), float("-inf"))


def _causal_by_where(scores):
    return torch.where(torch.ones(16, 16).tril().bool(), scores, float("-inf"))


def _causal_by_arange(scores):
    i = torch.arange(16)
    return scores.masked_fill(~(i[:, None] >= i[None, :]), -1e9)


def _causal_additive(scores):
    return scores + torch.full((16, 16), float("-inf")).triu(1)


def _causal_additive_finfo_min(scores):
    return scores + torch.full((16, 16), torch.finfo(torch.float32).min).triu(1)


MASK_FORMS = {
    "masked_fill": _causal_by_masked_fill,
    "where": _causal_by_where,
    "arange": _causal_by_arange,
    "additive_inf": _causal_additive,
    "additive_finfo_min": _causal_additive_finfo_min,
}


class HandAttention(nn.Module):
    """Attention written as matmul + softmax with a causal mask built in the model by `mask`."""

    def __init__(self, mask):
        super().__init__()
        self.mask = mask
        self.qkv = nn.Linear(32, 96)

    def forward(self, x):
        q, k, v = self.qkv(x).view(1, 16, 3, 4, 8).permute(2, 0, 3, 1, 4)
        scores = self.mask((q @ k.transpose(-2, -1)) * 8**-0.5)
        return (scores.softmax(-1) @ v).transpose(1, 2).reshape(1, 16, 32)


def _hand(form):
    torch.manual_seed(0)
    return HandAttention(MASK_FORMS[form]).eval()


@pytest.mark.parametrize("form", MASK_FORMS)
def test_masks_built_in_the_model_fold_into_an_add(form):
    module, inputs = _hand(form), seeded(0, (1, 16, 32))
    gm = normalised(module, inputs)
    left = call_targets(gm)
    assert aten.masked_fill.Scalar not in left and aten.where.self not in left and aten.add.Tensor in left
    torch.testing.assert_close(gm(*inputs), module(*inputs), rtol=1e-5, atol=1e-5)


def test_a_runtime_bool_mask_stays_a_select():
    class RuntimeMask(nn.Module):
        def forward(self, x, mask):
            return torch.where(mask, x, float("-inf")).softmax(-1)

    mask = torch.rand(4, 8, generator=torch.Generator().manual_seed(5)) > 0.5
    inputs = (
        torch.randn(4, 8, generator=torch.Generator().manual_seed(6)),
        mask.index_fill(1, torch.tensor([0]), True),
    )
    gm = normalised(RuntimeMask(), inputs)
    assert aten.where.self in call_targets(gm)
    torch.testing.assert_close(gm(*inputs), RuntimeMask()(*inputs))


@pytest.fixture(scope="module")
def masks_u55():
    return _several_compiled([_hand(form) for form in MASK_FORMS], 4, "ethos-u55-128")


def test_masks_built_in_the_model_run_on_the_u55_npu(masks_u55):
    """Ethos-U55 does not select: the constant masks, as adds, keep attention on its NPU."""
    module, inputs, result, got = masks_u55
    _assert_on_npu_and_near_pt2e(result, inputs, got, delegates=len(MASK_FORMS))
    _assert_follows_float(module, inputs, got, MASK_FORMS, 0.999)


class Mha(nn.Module):
    """nn.MultiheadAttention(32, 4) as self-attention on x [1, 16, 32] (batch first or not), its
    weights returned with the output when need_weights."""

    def __init__(self, batch_first=True, need_weights=False, **kwargs):
        super().__init__()
        self.attention = nn.MultiheadAttention(32, 4, batch_first=batch_first)
        self.batch_first, self.need_weights, self.kwargs = batch_first, need_weights, kwargs

    def forward(self, x, key_padding_mask=None):
        x = x if self.batch_first else x.transpose(0, 1)
        mask = self.kwargs.get("key_padding_mask", key_padding_mask)
        kwargs = {k: v for k, v in self.kwargs.items() if k != "key_padding_mask"}
        out, weights = self.attention(x, x, x, need_weights=self.need_weights, key_padding_mask=mask, **kwargs)
        return (out, weights) if self.need_weights else out


class Decoder(nn.Module):
    """nn.TransformerDecoderLayer on x [1, 16, 32] with a causal target mask, its memory x's first 8 positions."""

    def __init__(self, **kwargs):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True, **kwargs)

    def forward(self, x):
        mask = nn.Transformer.generate_square_subsequent_mask(16)
        return self.layer(x, x[:, :8], tgt_mask=mask, tgt_is_causal=True)


def _encoder_layer(**kwargs):
    return nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, **kwargs)


PADDING = torch.arange(16)[None] >= 12  # the last 4 positions are padding

LAYERS = {
    "mha": lambda: Mha(),
    "mha_sequence_first": lambda: Mha(batch_first=False),
    "mha_weights": lambda: Mha(need_weights=True),
    "mha_weights_per_head": lambda: Mha(need_weights=True, average_attn_weights=False),
    "mha_key_padding_mask": lambda: Mha(key_padding_mask=PADDING),
    "mha_attn_mask": lambda: Mha(attn_mask=torch.ones(16, 16, dtype=torch.bool).triu(1)),
    "encoder_layer_post_norm_relu": lambda: _encoder_layer(),
    "encoder_layer_pre_norm_gelu": lambda: _encoder_layer(norm_first=True, activation="gelu"),
    "encoder": lambda: nn.TransformerEncoder(_encoder_layer(), 2, enable_nested_tensor=False),
    "decoder_layer": lambda: Decoder(),
    "decoder_layer_pre_norm_gelu": lambda: Decoder(norm_first=True, activation="gelu"),
}


def _layer(name):
    torch.manual_seed(0)
    return LAYERS[name]().eval()


@pytest.mark.parametrize("name", LAYERS)
def test_torch_nn_attention_layers_decompose_as_eager(name):
    module, inputs = _layer(name), seeded(0, (1, 16, 32))
    gm = normalised(module, inputs)
    assert aten.scaled_dot_product_attention.default not in call_targets(gm)
    want = module(*inputs)
    got = gm(*inputs)
    for g, w in zip(*((t if isinstance(t, (tuple, list)) else (t,)) for t in (got, want)), strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


# Compiled for the NPU (one Vela run each): the layers whose graphs differ (the others' are these'
# parts: a plain MultiheadAttention, its bool attn_mask and post-norm are in the encoder and decoder).
COMPILED_LAYERS = (
    "mha_sequence_first",
    "mha_weights",
    "mha_weights_per_head",
    "mha_key_padding_mask",
    "encoder_layer_pre_norm_gelu",
    "encoder",
    "decoder_layer",
)


@pytest.fixture(scope="module")
def layers_u85():
    return _several_compiled([_layer(name) for name in COMPILED_LAYERS], 5)


def test_torch_nn_attention_layers_run_on_the_u85_npu(layers_u85):
    module, inputs, result, got = layers_u85
    _assert_on_npu_and_near_pt2e(result, inputs, got, delegates=len(COMPILED_LAYERS))
    _assert_follows_float(module, inputs, got, None, 0.998)


class RuntimePadding(nn.Module):
    """Self-attention whose key padding mask is a model input."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.attention = Mha()

    def forward(self, x, key_padding_mask):
        return self.attention(x, key_padding_mask)


def _runtime_padding_inputs():
    return (*seeded(6, (1, 16, 32)), PADDING.clone())


@pytest.mark.parametrize(
    "target, on_cpu",
    [
        ("ethos-u85-256", []),
        (
            "ethos-u55-128",
            [("aten.where", "Vela 5.2.0 runs comparisons, logical ops (any, all) and selects on Ethos-U85")],
        ),
    ],
)
def test_a_key_padding_mask_input_compiles_with_the_cpu_ops_listed(target, on_cpu):
    module, inputs = RuntimePadding().eval(), _runtime_padding_inputs()
    result, got = _compiled(module, inputs, target)
    cpu = [(o["op"], o["reason"]) for o in result.report["ops"] if o["where"] == "cpu" and "quantize" not in o["op"]]
    assert [op for op, _ in cpu] == [op for op, _ in on_cpu]
    assert all(want in reason for (_, reason), (_, want) in zip(cpu, on_cpu, strict=True))
    worst, within = steps_off_pt2e(result, inputs, got)
    assert worst <= WORST_STEPS and within >= WITHIN_2_STEPS, (worst, within)


class Einsum(nn.Module):
    def __init__(self, equation):
        super().__init__()
        self.equation = equation

    def forward(self, *xs):
        return torch.einsum(self.equation, *xs)


EINSUMS = {
    "bhqd,bhkd->bhqk": [(2, 3, 5, 4), (2, 3, 6, 4)],
    "bhqk,bhkd->bhqd": [(2, 3, 5, 6), (2, 3, 6, 4)],
    "...qd,...kd->...qk": [(2, 3, 5, 4), (2, 3, 6, 4)],
    "ij,jk->ik": [(3, 4), (4, 5)],
    "bij,bjk->bik": [(4, 2, 3), (1, 3, 5)],  # b broadcasts
    "ij,jk,kl->il": [(2, 3), (3, 4), (4, 5)],
    "i,i->": [(6,), (6,)],
    "i,j->ij": [(3,), (4,)],
    "bnd,d->bn": [(2, 3, 4), (4,)],
    "bqhd,bkhd->bhqk": [(1, 5, 2, 4), (1, 6, 2, 4)],
    "ij->ji": [(3, 4)],
    "bij->bj": [(2, 3, 4)],
    "abc,cd->abd": [(2, 3, 4), (4, 5)],
}


@pytest.mark.parametrize("equation", EINSUMS)
def test_einsum_decomposes_into_matmul_and_moves(equation):
    inputs = seeded(7, *EINSUMS[equation])
    gm = normalised(Einsum(equation), inputs)
    assert aten.einsum.default not in call_targets(gm)
    torch.testing.assert_close(gm(*inputs), torch.einsum(equation, *inputs), rtol=1e-5, atol=1e-5)


def test_einsum_with_a_repeated_label_is_kept():
    inputs = seeded(8, (3, 3))
    assert aten.einsum.default in call_targets(normalised(Einsum("ii->i"), inputs))


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
def test_repeat_interleave_decomposes_as_eager(dim):
    inputs = seeded(9, (2, 3, 4))
    module = Lambda(lambda layers, x: x.repeat_interleave(3, dim))
    gm = normalised(module, inputs)
    assert aten.repeat_interleave.self_int not in call_targets(gm)
    torch.testing.assert_close(gm(*inputs), module(*inputs))


@pytest.mark.parametrize("shapes", [[(1, 4, 6, 8), (1, 1, 8, 6)], [(4, 6, 8), (2, 4, 8, 6)], [(2, 1, 6, 8), (3, 8, 5)]])
def test_batched_matmul_with_broadcasting_expands_to_the_output_batch(shapes):
    inputs = seeded(10, *shapes)
    module = Lambda(lambda layers, x, y: x @ y)
    gm = normalised(module, inputs)
    matmuls = [n for n in gm.graph.nodes if n.target is aten.matmul.default]
    assert [list(n.args[0].meta["val"].shape[:-2]) == list(n.meta["val"].shape[:-2]) for n in matmuls] == [True]
    torch.testing.assert_close(gm(*inputs), module(*inputs))


class HandGrouped(nn.Module):
    """Grouped-query attention written by hand: 4 query heads, 2 (or 1) key/value heads repeated
    by `form`: repeat_interleave, expand + reshape, a broadcasting matmul, or einsum."""

    def __init__(self, form, kv_heads=2):
        super().__init__()
        self.form, self.kv_heads = form, kv_heads
        self.q, self.kv = nn.Linear(32, 32), nn.Linear(32, 2 * kv_heads * 8)

    def forward(self, x):
        q = self.q(x).view(1, 16, 4, 8).transpose(1, 2)
        k, v = self.kv(x).view(1, 16, 2 * self.kv_heads, 8).transpose(1, 2).split(self.kv_heads, 1)
        groups = 4 // self.kv_heads
        if self.form == "repeat_interleave":
            k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
        elif self.form == "expand":
            k, v = (t[:, :, None].expand(1, self.kv_heads, groups, 16, 8).reshape(1, 4, 16, 8) for t in (k, v))
        if self.form == "einsum":
            k, v = k.expand(1, 4, 16, 8), v.expand(1, 4, 16, 8)
            weights = torch.einsum("bhqd,bhkd->bhqk", q, k).mul(8**-0.5).softmax(-1)
            out = torch.einsum("bhqk,bhkd->bhqd", weights, v)
        else:  # "broadcast": one key/value head, read by every query head through matmul's broadcasting
            out = ((q @ k.transpose(-2, -1)) * 8**-0.5).softmax(-1) @ v
        return out.transpose(1, 2).reshape(1, 16, 32)


GROUPED = {
    "repeat_interleave": dict(kv_heads=2),
    "expand": dict(kv_heads=2),
    "einsum": dict(kv_heads=1),
    "broadcast": dict(kv_heads=1),
}


def _grouped(form):
    torch.manual_seed(0)
    return HandGrouped(form, **GROUPED[form]).eval()


@pytest.mark.parametrize("form", GROUPED)
def test_grouped_attention_by_hand_decomposes_as_eager(form):
    module, inputs = _grouped(form), seeded(0, (1, 16, 32))
    torch.testing.assert_close(normalised(module, inputs)(*inputs), module(*inputs), rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def grouped_u85():
    return _several_compiled([_grouped(form) for form in GROUPED], 11)


def test_grouped_attention_by_hand_runs_on_the_u85_npu(grouped_u85):
    module, inputs, result, got = grouped_u85
    _assert_on_npu_and_near_pt2e(result, inputs, got, delegates=len(GROUPED))
