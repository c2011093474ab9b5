"""Every zoo and architecture model compiled by kiln for ethos-u85-256 (lowered for the U85,
compiled by Vela 5.2.0), each NPU delegate run on kiln's Ethos-U85 model and compared bit
for bit with tosa_reference_model on the same TOSA graph (random int8 inputs); a few
recompiled for the two-core ethos-u85-512 and four-core ethos-u85-2048."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from kiln.compile import compile_model
from kiln.lower.vela import compile_tosa
from kiln.simulator.npu.config import config_for
from kiln.spec import CompileSpec

import npu_harness

MODELS = ["tiny_cnn", "ds_cnn", "resnet8", "mobilenet_v1_025", "fc_autoencoder", "mobilenet_v2_035", "digits"]
OTHER_TARGETS = {"ethos-u85-512": ["resnet8", "digits"], "ethos-u85-2048": ["ds_cnn", "tiny_cnn"]}


@functools.lru_cache(maxsize=None)
def compiled(model: str):
    result = compile_model(model, CompileSpec(target="ethos-u85-256"))
    shapes = [[tuple(v.shape) for v in part.inputs] for part in result.partitioning.partitions]
    return result, shapes


def _check(tosa: bytes, vela, shapes, target: str):
    rng = np.random.default_rng(0)
    inputs = [rng.integers(-128, 128, size=shape, dtype=np.int8) for shape in shapes]
    diffs, result = npu_harness.compare(tosa, vela, inputs, target)
    assert diffs == [0] * len(diffs)
    assert result.ops > 0
    return result


# kiln.models.ARCHITECTURES: published architectures' block structure (vit_tiny's and kwt's
# matmuls take their weights from IFM2 on the U85)
ARCHITECTURE_MODELS = ["mobilenet_v3_small", "efficientnet_b0", "resnet18", "shufflenet_v2", "squeezenet",
                       "inception", "vit_tiny", "kwt", "tc_resnet8", "kws_gru", "kws_lstm", "unet_tiny", "yolo_tiny"]
CASES = [("ethos-u85-256", m) for m in MODELS + ARCHITECTURE_MODELS]
CASES += [(t, m) for t, models in OTHER_TARGETS.items() for m in models]


@pytest.mark.parametrize("target, model", CASES)
def test_zoo_delegates_bit_exact_u85(target, model):
    """ethos-u85-256 runs what kiln compiled; another configuration runs the same TOSA
    graphs recompiled by Vela for it (with weights on every core)."""
    result, shapes = compiled(model)
    assert result.tosa
    streams = result.vela if target == "ethos-u85-256" else [
        compile_tosa(tosa, f"{model}{i}", target, npu_harness.system_config(target), "Shared_Sram")
        for i, tosa in enumerate(result.tosa)]
    cores = config_for(target).cores
    for tosa, vela, part_shapes in zip(result.tosa, streams, shapes):
        run = _check(tosa, vela, part_shapes, target)
        assert run.coverage.as_dict()["U85 cores"].get(str(cores), 0) > 0


@pytest.mark.parametrize("model", ["tiny_cnn", "resnet8", "fc_autoencoder", "mobilenet_v2_035"])
def test_cycle_estimate_near_vela_u85_256(model):
    """kiln.simulator.npu.u85_cycles against Vela's own NPU cycles for the same streams
    (its docstring lists every zoo model's ratio; these are the ones within 15 %)."""
    result, shapes = compiled(model)
    ours = vela_total = 0
    for tosa, vela, part_shapes in zip(result.tosa, result.vela, shapes):
        ours += _check(tosa, vela, part_shapes, "ethos-u85-256").cycles
        vela_total += vela.npu_cycles
    assert 0.85 <= ours / vela_total <= 1.15, (ours, vela_total)


# 16-bit activations (kiln compile --activation-bits 16): int48 accumulators, 16-bit tables,
# unet_tiny's 64-bit OFM, vit_tiny's 16-bit attention (Q @ K^T of selects from one qkv tensor, which
# Vela 5.2.0 reads at head 0's rows for every head unless the select is copied by a CLAMP:
# kiln.lower.tosa.CLAMP_COPY_FAMILIES).
MODELS_16 = ["resnet8", "mobilenet_v2_035", "kwt", "unet_tiny", "kws_gru", "vit_tiny"]


@functools.lru_cache(maxsize=None)
def compiled_16(model: str):
    result = compile_model(model, CompileSpec(target="ethos-u85-256", activation_bits=16))
    return result, [list(part.inputs) for part in result.partitioning.partitions]


@pytest.mark.parametrize("model", MODELS_16)
def test_16_bit_activations_bit_exact_u85_256(model):
    result, part_inputs = compiled_16(model)
    rng = np.random.default_rng(0)
    for tosa, vela, values in zip(result.tosa, result.vela, part_inputs):
        inputs = []
        for value in values:
            dtype = np.dtype(str(value.dtype).replace("torch.", ""))
            info = np.iinfo(dtype)
            inputs.append(rng.integers(info.min + 1, info.max, size=tuple(value.shape), dtype=dtype))
        diffs, run = npu_harness.compare(tosa, vela, inputs, "ethos-u85-256")
        assert diffs == [0] * len(diffs)
