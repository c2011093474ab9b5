"""The language models (kiln.models.LANGUAGE_MODELS): tinylm trains to readable text, its KV
cache's prefill and decode compute what a whole-sequence forward computes, both methods export
with the cache as mutated state, and SmolLM2-135M's shape builds and decodes.

The whole-sequence reference below is Llama's forward written from the paper's formulas with
the model's weights, in float64: no cache, rotary embeddings as complex rotations, heads
repeated by repeat_interleave, attention by matmul and softmax. The loss and text thresholds
are measured figures with a margin; SmolLM2-135M's parameter count is worked out by hand from
its published config. The trained weights come from the disk cache (kiln.paths.cache_dir()),
so the suite trains at most once per machine.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys

import pytest
import torch
from torch.nn import functional as F

from kiln import models
from tests.models.helpers import assert_builds_identically, n_params

NAMES = ["tinylm", "smollm2_135m_shape"]

# Measured (python -m kiln.models.tinylm): 1.111 nats per byte on the validation text (train
# 1.125); an untrained model scores about ln(256) = 5.55.
VALIDATION_LOSS_BELOW = 1.15


@pytest.fixture(scope="module")
def tinylm():
    from kiln.models import tinylm

    return tinylm


def reference_logits(model, tokens: list[int]) -> torch.Tensor:
    """Logits [len(tokens), vocab] of Llama's causal forward over `tokens` at positions 0.., float64."""
    config = model.config
    head_dim = config.dim // config.heads
    weights = {name: value.double() for name, value in model.state_dict().items()}
    length = len(tokens)
    # the angles t * theta^(-2i / head_dim) in float32, as the model's (and Llama's) tables hold them
    frequencies = config.theta ** (-torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(length).float(), frequencies).double()
    rotation = torch.polar(torch.ones_like(angles), angles)

    def rope(x):  # [heads, length, head_dim]; component i pairs with i + head_dim / 2
        z = torch.complex(x[..., : head_dim // 2], x[..., head_dim // 2 :]) * rotation
        return torch.cat((z.real, z.imag), dim=-1)

    def rms(x, weight):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + config.eps) * weight

    def heads(x, count):
        return x.view(length, count, head_dim).transpose(0, 1)

    future = torch.ones(length, length, dtype=torch.bool).triu(1)
    x = weights["embed.weight"][torch.tensor(tokens)]
    for i in range(config.layers):
        w = {name.removeprefix(f"layers.{i}."): value for name, value in weights.items() if f"layers.{i}." in name}
        h = rms(x, w["input_norm.weight"])
        q = rope(heads(h @ w["attn.q_proj.weight"].T, config.heads))
        k = rope(heads(h @ w["attn.k_proj.weight"].T, config.kv_heads))
        v = heads(h @ w["attn.v_proj.weight"].T, config.kv_heads)
        groups = config.heads // config.kv_heads
        k, v = k.repeat_interleave(groups, 0), v.repeat_interleave(groups, 0)
        scores = (q @ k.transpose(1, 2) / head_dim**0.5).masked_fill(future, float("-inf"))
        x = x + (scores.softmax(-1) @ v).transpose(0, 1).reshape(length, -1) @ w["attn.o_proj.weight"].T
        h = rms(x, w["post_attention_norm.weight"])
        x = x + (F.silu(h @ w["w1.weight"].T) * (h @ w["w3.weight"].T)) @ w["w2.weight"].T
    return rms(x, weights["norm.weight"]) @ weights["head.weight"].T


# ---------------------------------------------------------------- registry


def test_registry_lists_the_language_models_apart_from_the_others():
    assert list(models.LANGUAGE_MODELS) == NAMES
    others = set(models.MODELS) | set(models.ARCHITECTURES) | set(models.TRANSFORMERS)
    assert not set(models.LANGUAGE_MODELS) & others
    for name, entry in models.LANGUAGE_MODELS.items():
        assert isinstance(entry, models.ZooEntry) and entry.name == name and entry.summary
        assert models.find(name) is entry


def test_kiln_compile_finds_tinylm_by_name_with_decodes_inputs():
    from kiln.frontend.export import load_model

    loaded = load_model("tinylm")
    assert loaded.name == "tinylm" and set(loaded.module.kiln_methods) == {"prefill", "decode"}
    assert [(tuple(x.shape), x.dtype) for x in loaded.inputs] == [((1, 1), torch.int64), ((1,), torch.int64)]


def test_importing_the_model_file_neither_trains_nor_reads_the_cache():
    code = """
import kiln.models.tinylm as tinylm
assert "ModelUnderTest" not in vars(tinylm) and "ModelInputs" not in vars(tinylm)
assert tinylm.trained_state.cache_info().currsize == 0 and tinylm.corpus.cache_info().currsize == 0
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


# ---------------------------------------------------------------- tinylm: what it learnt


def test_tinylm_validation_loss(tinylm):
    model, _ = models.load("tinylm")
    assert tinylm.loss(model, tinylm.splits()[1]) < VALIDATION_LOSS_BELOW


def test_tinylm_writes_words_of_its_training_text(tinylm):
    """Greedy text after each prompt is printable ASCII made of the corpus's words, and repeats
    runs of the corpus verbatim. Measured on the 8 prompts: 64 of 64 bytes printable, 7 to 13
    whole words all in the corpus, runs of 16 to 23 bytes; a seeded untrained model: 0 to 14
    printable bytes, runs of at most 3."""
    model, _ = models.load("tinylm")
    text = tinylm.corpus()
    known = set(re.findall(rb"[A-Za-z]+", text))
    for prompt in tinylm.PROMPTS:
        generated = tinylm.generate(model, prompt, 64)
        assert len(generated) == 64
        assert sum(32 <= b < 127 or b == 10 for b in generated) >= 60, generated
        words = re.findall(rb"[A-Za-z]+", generated)[1:-1]  # the first may continue the prompt's, the last is cut
        assert len(words) >= 6 and sum(w in known for w in words) >= 0.9 * len(words), generated
        assert any(generated[i : i + 12] in text for i in range(len(generated) - 12)), generated


# ---------------------------------------------------------------- the cache and the methods


def test_prefill_and_decode_match_a_whole_sequence_forward(tinylm):
    """Each call's logits equal the reference's at its position over the same tokens, and its
    token is the reference's argmax. The calls are replayed with the cache as the generation
    left it, and the second, shorter prompt follows the first: cache rows beyond a position
    (stale, or a padded prompt's) must be masked. The model runs in float64, so that the two
    differ by the rotary tables' float32 cos and sin alone: 7e-7 at most, measured, on logits
    up to 20 (6e-6 with the model in float32)."""
    model = models.load("tinylm")[0].double()
    for prompt in (b"Assignment statements assign", b"def f("):
        calls, generated = tinylm.greedy_calls(model, prompt, 24)
        assert [method for method, _ in calls] == ["prefill"] + ["decode"] * 23
        want = reference_logits(model, [*prompt, *generated[:-1]])
        with torch.no_grad():
            for (method, inputs), position in zip(calls, range(len(prompt) - 1, len(prompt) + 23), strict=True):
                token, logits = getattr(model, method)(*inputs)
                assert logits.shape == (1, 256) and token.shape == (1,) and token.dtype == torch.int64
                torch.testing.assert_close(logits[0], want[position], rtol=0, atol=1e-5)
                assert token.item() == want[position].argmax().item() == generated[position - len(prompt) + 1]


def test_calibration_follows_the_float_models_greedy_tokens():
    """kiln_calibration: per calibration prompt a prefill and 16 decodes, each decode's token the
    previous call's argmax at the next position; kiln_methods holds the first two calls' inputs.
    The model comes back with its cache zeroed."""
    model, inputs = models.load("tinylm")
    assert all(torch.count_nonzero(b) == 0 for n, b in model.named_buffers() if n.endswith("_cache"))
    prefill, decode = model.kiln_methods["prefill"], model.kiln_methods["decode"]
    assert list(model.kiln_methods) == ["prefill", "decode"] and inputs is decode
    assert [(tuple(x.shape), x.dtype) for x in prefill] == [((1, 32), torch.int64), ((1,), torch.int64)]
    assert [(tuple(x.shape), x.dtype) for x in decode] == [((1, 1), torch.int64), ((1,), torch.int64)]
    calls = model.kiln_calibration
    assert [method for method, _ in calls] == (["prefill"] + ["decode"] * 16) * 4
    assert calls[0][1] is prefill and calls[1][1] is decode
    with torch.no_grad():
        for (method, inputs), (following, next_inputs) in zip(calls, calls[1:]):
            token, _ = getattr(model, method)(*inputs)
            if following == "decode":
                position = inputs[1] - 1 if method == "prefill" else inputs[1]
                assert torch.equal(next_inputs[0], token.view(1, 1)) and torch.equal(next_inputs[1], position + 1)


def test_generate_refuses_what_the_cache_cannot_hold(tinylm):
    model, _ = models.load("tinylm")
    with pytest.raises(ValueError, match="prefill takes 1 to 32"):
        tinylm.generate(model, b"x" * 33, 1)
    with pytest.raises(ValueError, match="prefill takes 1 to 32"):
        tinylm.generate(model, b"", 1)
    # 28 bytes and 101 tokens: decodes at positions 28..127, the context's last row
    assert len(tinylm.generate(model, b"Assignment statements assign", 101)) == 101
    with pytest.raises(ValueError, match="positions reach 128, the context holds 128"):
        tinylm.generate(model, b"Assignment statements assign", 102)


def test_building_twice_gives_identical_models():
    assert_builds_identically("tinylm")


@pytest.mark.parametrize("method", ["prefill", "decode"])
def test_each_method_exports_with_every_cache_as_mutated_state(method):
    """torch.export of a module calling the method: the graph, functionalised, writes each
    layer's k_cache and v_cache by index_copy, and computes what the method computes."""
    model, _ = models.load("tinylm")

    class Method(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *inputs):
            return getattr(self.model, method)(*inputs)

    inputs = model.kiln_methods[method]
    program = torch.export.export(Method(), inputs, strict=False).run_decompositions({})
    mutated = sorted(program.graph_signature.buffers_to_mutate.values())
    assert mutated == sorted(f"model.layers.{i}.attn.{c}_cache" for i in range(4) for c in "kv")
    ops = collections.Counter(str(n.target) for n in program.graph.nodes if n.op == "call_function")
    assert ops["aten.index_copy.default"] == 8 and ops["aten.scaled_dot_product_attention.default"] == 4
    with torch.no_grad():
        want = getattr(model, method)(*inputs)
        model.reset_cache()
        got = program.module()(*inputs)
    assert torch.equal(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])


# ---------------------------------------------------------------- the disk cache


def test_trained_weights_are_kept_on_disk(tinylm, tmp_path, monkeypatch):
    """The first call trains and writes the file (and nothing else) under KILN_CACHE; a later
    process's call reads it instead of training."""
    monkeypatch.setenv("KILN_CACHE", str(tmp_path / "cache"))
    trained = []

    def train(config):
        trained.append(config)
        return {"weight": torch.arange(6.0)}

    monkeypatch.setattr(tinylm, "train", train)
    load = tinylm.trained_state.__wrapped__  # past the in-process cache, as a new process
    config = tinylm.LMConfig(vocab=256, dim=8, layers=1, heads=2, kv_heads=1, hidden=16, context=8, prompt=4)
    assert torch.equal(load(config)["weight"], torch.arange(6.0)) and trained == [config]
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [tinylm._cache_file(config).name]
    assert torch.equal(load(config)["weight"], torch.arange(6.0)) and trained == [config]
    assert tinylm._cache_file(config) != tinylm._cache_file(tinylm.TINYLM)


# ---------------------------------------------------------------- SmolLM2-135M's shape


def test_smollm2_135m_shape_has_the_published_parameter_count_and_decodes_a_token(tinylm):
    """SmolLM2-135M's config.json (vocab 49152, width 576, 30 layers, 9 heads of 64, 3 key/value
    heads, feed-forward 1536, tied embeddings): embedding 49152 * 576 = 28,311,552; per layer
    q and o 2 * 576 * 576, k and v 2 * 576 * 192, the feed-forward 3 * 576 * 1536 and two norms
    2 * 576 = 3,540,096, times 30; the final norm 576: 134,515,008. One decode step writes row 0
    of every cache and nothing else."""
    with torch.no_grad():
        model = tinylm.TinyLM(tinylm.SMOLLM2_135M).eval()
        assert n_params(model) == 134_515_008 and model.head.weight is model.embed.weight
        token, logits = model.decode(torch.tensor([[1234]]), torch.tensor([0]))
    assert logits.shape == (1, 49152) and torch.isfinite(logits).all() and logits.min() < logits.max()
    assert token.item() == logits.argmax().item()
    cache = model.layers[29].attn.v_cache
    assert cache.shape == (1, 3, 128, 64) and cache[:, :, 0].abs().sum() > 0 and not cache[:, :, 1:].any()


def test_the_cache_directory_follows_the_environment(tmp_path, monkeypatch):
    from kiln.paths import cache_dir

    monkeypatch.delenv("KILN_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "kiln"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "kiln"
    monkeypatch.setenv("KILN_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
