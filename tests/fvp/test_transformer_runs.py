"""Transformers of the zoo (kiln.models.TRANSFORMERS) on the virtual platform: compiled for
ethos-u55-128 and ethos-u85-256, built into kiln's executor runner and run on two random
samples, each must give `kiln run-host`'s outputs bit for bit (run-host: numpy kernels and
tosa_reference_model, independent of the firmware).

A few models with float inputs, between them every kind of layer the zoo has: a ViT with
SDPA attention (patch convolution, class token, layer norm, GELU), a Conformer with
nn.MultiheadAttention (GLU, depthwise Conv1d, BatchNorm, SiLU) and Whisper's encoder (Conv1d
with GELU, sinusoidal positions). Each program is compiled once per session (helpers.compiled).
"""

from __future__ import annotations

import pytest

from .helpers import assert_matches_host, compiled, random_samples

pytestmark = pytest.mark.fvp

MODELS = ("deit_tiny", "conformer_mha", "whisper_encoder")
TARGETS = ("ethos-u55-128", "ethos-u85-256")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", MODELS)
def test_transformer_equals_run_host_bit_for_bit(work, builder, tmp_path, name, target):
    pte_path = compiled(work, name, target)
    elf = builder(pte_path, target)
    assert_matches_host(pte_path, elf, target, random_samples(pte_path, 2, seed=28), tmp_path)
