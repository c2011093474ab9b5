"""kiln's model zoo.

``MODELS`` maps each zoo name, in a fixed order, to a ``ZooEntry``; ``load(name)``
builds one: an ``nn.Module`` in eval mode with deterministic weights and a
tuple of example inputs. ``ARCHITECTURES`` is a second registry, of small
models with the block structure of published architectures (MobileNetV3,
EfficientNet, ResNet-18, ShuffleNetV2, SqueezeNet, Inception, ViT, keyword
spotting, U-Net, YOLO) written as users write them (in-place activations,
dropout, chunk, channel shuffle, attention): the frontend's test bench. They
are not zoo models (the zoo's tests hold every zoo model to a fully delegated
compile). ``TRANSFORMERS`` is the third: small transformers written from the published
descriptions of DeiT, MobileViT, the Keyword Transformer, Conformer, BERT, Whisper's
encoder, GPT-2 and Llama, each with attention through ``F.scaled_dot_product_attention``
and, where the architecture allows, a second entry (``_mha``) through
``nn.MultiheadAttention``; and of Swin and LeViT, with attention written by hand as their
reference implementations write it. ``LANGUAGE_MODELS`` is the fourth: language models with a
KV cache held in buffers and two methods, ``prefill`` and ``decode`` (``kiln_methods`` names them
with their example inputs, ``kiln_calibration`` the calls kiln calibrates with); ``load``
returns decode's example inputs. They have a registry of their own because their program is
several methods over shared state, not one forward: the other registries' test benches
compile and compare one forward. ``load`` and ``kiln compile`` accept all four registries'
names. Each model lives in its own file here, which also
defines ``ModelUnderTest`` and ``ModelInputs`` in the convention of
ExecuTorch's ``aot_arm_compiler`` (built on first access where that is costly).

Importing this package imports no model file and builds nothing; an entry's
model file is imported when the entry is built.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import types
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kiln.errors import UsageError

if TYPE_CHECKING:
    import torch

__all__ = ["ARCHITECTURES", "LANGUAGE_MODELS", "MODELS", "TRANSFORMERS", "ZooEntry", "find", "load"]


@dataclasses.dataclass(frozen=True)
class ZooEntry:
    """One model of the zoo.

    ``build()`` returns ``(module in eval mode, tuple of example inputs)``. The
    tolerances say how closely a compiled, quantized model must match the
    reference: at most ``tolerance_steps`` quantization steps of difference on
    at least ``tolerance_fraction`` of the output elements.
    """

    name: str
    summary: str
    build: Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]
    tolerance_steps: int = 1
    tolerance_fraction: float = 0.99


def _build(module: str, *args: Any) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    return importlib.import_module(f"{__name__}.{module}").build(*args)


def _entry(name: str, summary: str, module: str, *args: Any) -> ZooEntry:
    return ZooEntry(name, summary, functools.partial(_build, module, *args))


def _registry(*entries: ZooEntry) -> Mapping[str, ZooEntry]:
    """The entries by name, in order, read-only."""
    return types.MappingProxyType({entry.name: entry for entry in entries})


MODELS = _registry(
    _entry("tiny_cnn", "two 3x3 convolutions, global average pool, linear; 1x1x8x8 -> 4", "tiny_cnn"),
    _entry("ds_cnn", "MLPerf Tiny keyword spotting DS-CNN; 1x1x49x10 -> 12", "ds_cnn"),
    _entry("resnet8", "MLPerf Tiny image classification ResNet-8; 1x3x32x32 -> 10", "resnet8"),
    _entry(
        "mobilenet_v1_025",
        "MLPerf Tiny visual wake words MobileNetV1 x0.25; 1x3x96x96 -> 2",
        "mobilenet_v1_025",
    ),
    _entry(
        "fc_autoencoder",
        "MLPerf Tiny anomaly detection fully connected autoencoder; 1x640 -> 640",
        "fc_autoencoder",
    ),
    # Integer and float results part at rare rounding ties (6e-6 of the first layer's
    # outputs, each one step, measured); 52 layers of untrained weights amplify those
    # to a few steps at the logits, so this model declares a wider tolerance.
    dataclasses.replace(
        _entry("mobilenet_v2", "MobileNetV2 x1.0; 1x3x224x224 -> 1000", "mobilenet_v2", 1.0),
        tolerance_steps=8,
    ),
    _entry("mobilenet_v2_035", "MobileNetV2 x0.35; 1x3x96x96 -> 1000", "mobilenet_v2", 0.35),
    _entry("digits", "small CNN trained on scikit-learn's 8x8 digits; 1x1x8x8 -> 10", "digits"),
)


def _architecture(name: str, summary: str, module: str | None = None, *args: Any, steps: int = 2) -> ZooEntry:
    # Within `steps` (two unless a model says why not) on every output element.
    entry = _entry(name, summary, module or name, *args)
    return dataclasses.replace(entry, tolerance_steps=steps, tolerance_fraction=1.0)


ARCHITECTURES = _registry(
    # Up to 3 steps at a logit against PT2E in float64 (2 against float32's; not traced).
    _architecture(
        "mobilenet_v3_small",
        "MobileNetV3-Small blocks (hardswish, squeeze-excitation, in-place activations, dropout); 1x3x64x64 -> 10",
        steps=3,
    ),
    _architecture(
        "efficientnet_b0",
        "EfficientNet-B0 MBConv blocks (SiLU, SE, stochastic depth, dropout); 1x3x64x64 -> 10",
    ),
    # The last stage's 2x2 maps average to quarters: a quarter of the pooled values are
    # ties, which the NPU's average pool and PT2E's float rounding (half to even) round
    # apart; 12 of the 128 pooled values are one step off (measured, none before the
    # pool), and the classifier sums those into up to 4 steps at a logit (measured
    # against PT2E in float64, where every tie is exact; 3 against float32's).
    _architecture(
        "resnet18", "ResNet-18 at quarter width (in-place residual adds, max pool); 1x3x64x64 -> 10", steps=4
    ),
    _architecture("shufflenet_v2", "ShuffleNetV2 x0.5 (chunk, channel shuffle by view/transpose); 1x3x64x64 -> 10"),
    _architecture("squeezenet", "SqueezeNet 1.1 at half width (fire modules, ceil-mode max pool); 1x3x50x50 -> 10"),
    _architecture("inception", "GoogLeNet Inception modules (four parallel branches, cat); 1x3x32x32 -> 10"),
    # Transformers: exact against PT2E evaluated in float64 (measured: 0 steps on every
    # target; softmax's exps in Q20, kiln.lower.softmax).
    _architecture(
        "vit_tiny",
        "Vision Transformer (patch embedding, class token, learned positions, attention); 1x3x32x32 -> 10",
    ),
    _architecture(
        "kwt",
        "Keyword Transformer (frames as tokens, nn.MultiheadAttention, GELU); 1x49x10 MFCC -> 12",
    ),
    _architecture("tc_resnet8", "TC-ResNet8 keyword spotting (Conv1d over time, residual); 1x10x49 MFCC -> 12"),
    _architecture("kws_gru", "keyword spotting GRU (last output step, linear); 1x16x10 MFCC -> 12", "kws_rnn", "gru"),
    # The hidden state's projection (linear, on the NPU) rounds one step away from PT2E's
    # float rounding now and then, and 16 recurrent steps of sigmoid/tanh gates carry
    # that on: up to 4 steps at 3 of the 12 logits (measured against float32's PT2E and
    # float64's; exact with the linear ops on the CPU, and with the whole model on the CPU).
    _architecture(
        "kws_lstm",
        "keyword spotting LSTM (last hidden state, linear); 1x16x10 MFCC -> 12",
        "kws_rnn",
        "lstm",
        steps=4,
    ),
    _architecture(
        "unet_tiny",
        "U-Net (double convs, max pool, up-convolution and upsampling, cat); 1x3x32x32 -> 1x2x32x32",
    ),
    _architecture(
        "yolo_tiny",
        "YOLO-style detector (SiLU, SPPF, upsample, cat, sigmoid, decoded boxes); 1x3x64x64 -> 1x240x8",
    ),
)


def _attention_pair(name: str, summary: str, module: str | None = None) -> tuple[ZooEntry, ZooEntry]:
    # `name` through F.scaled_dot_product_attention, `name`_mha through nn.MultiheadAttention.
    return (
        _architecture(name, f"{summary}; F.scaled_dot_product_attention", module or name, "sdpa"),
        _architecture(f"{name}_mha", f"{summary}; nn.MultiheadAttention", module or name, "mha"),
    )


_KWT = "Keyword Transformer (MFCC frames as tokens, post-norm); 1x49x10 -> 12"

TRANSFORMERS = _registry(
    *_attention_pair(
        "deit_tiny", "DeiT-tiny-like ViT (patch convolution, class token, learned positions); 1x3x32x32 -> 10"
    ),
    *_attention_pair(
        "mobilevit", "MobileViT-like hybrid (convolutions, unfold to patches, attention, fold); 1x3x32x32 -> 10"
    ),
    # the architectures' kwt with its attention written the two other ways
    _architecture("kwt_sdpa", f"{_KWT}; F.scaled_dot_product_attention", "kwt", "sdpa"),
    _architecture("kwt_mha", f"{_KWT}; nn.MultiheadAttention without weights", "kwt", "mha"),
    *_attention_pair(
        "conformer",
        "Conformer blocks (half-step FFNs, attention, GLU and depthwise Conv1d); 1x32x20 -> 1x32x16",
    ),
    *_attention_pair(
        "bert_tiny",
        "BERT-tiny-like encoder (token, position and segment embeddings, padding mask, post-norm); "
        "3 x 1x16 int64 -> 1x16x32, 1x32",
    ),
    *_attention_pair(
        "whisper_encoder",
        "Whisper-tiny-like audio encoder (two Conv1d, sinusoidal positions, pre-norm); 1x16x32 -> 1x16x32",
    ),
    *_attention_pair(
        "gpt2_block",
        "GPT-2-like decoder (learned positions, tanh GELU, causal mask, tied head); 1x16 int64 -> 1x16x64",
    ),
    _architecture(
        "llama_block",
        "Llama-like decoder (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU, causal mask); "
        "1x16 int64 -> 1x16x64; F.scaled_dot_product_attention",
    ),
    # Hand-written window and LeViT attention (matmul, learned biases gathered by an index
    # buffer, softmax), as their reference implementations write it: one variant each.
    _architecture(
        "swin_tiny",
        "Swin-like stages (window attention with a relative position bias table, shifted windows by "
        "torch.roll and a mask built by slice assignment, patch merging); 1x3x32x32 -> 10; attention by hand",
    ),
    _architecture(
        "levit_tiny",
        "LeViT-like hybrid (conv stem with Hardswish, Linear+BatchNorm1d, attention biases, "
        "subsampling attention, distillation head averaged); 1x3x64x64 -> 10; attention by hand",
    ),
)


LANGUAGE_MODELS = _registry(
    _entry(
        "tinylm",
        "Llama-family byte-level language model trained on Python's pydoc topics (RMSNorm, rotary "
        "embeddings, grouped-query attention, SwiGLU, KV cache); prefill 1x32 int64, decode 1x1 int64 -> "
        "next byte, 1x256 logits",
        "tinylm",
    ),
    _entry(
        "smollm2_135m_shape",
        "SmolLM2-135M's shape (30 layers, width 576, 9 heads, 3 key/value heads, vocab 49152, tied "
        "embeddings) with random weights, never trained; prefill 1x32 int64, decode 1x1 int64 -> next token, "
        "1x49152 logits",
        "tinylm",
        "smollm2_135m",
    ),
)


def find(name: str) -> ZooEntry | None:
    """The entry of `name` in the zoo, among the architectures, the transformers or the language
    models; None if none has it."""
    return MODELS.get(name) or ARCHITECTURES.get(name) or TRANSFORMERS.get(name) or LANGUAGE_MODELS.get(name)


def load(name: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """Build the zoo, architecture, transformer or language model `name`: (module in eval mode,
    tuple of example inputs)."""
    entry = find(name)
    if entry is None:
        known = ", ".join([*MODELS, *ARCHITECTURES, *TRANSFORMERS, *LANGUAGE_MODELS])
        raise UsageError(f"unknown model {name!r}; known models: {known}")
    return entry.build()
