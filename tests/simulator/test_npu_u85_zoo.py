"""Every zoo and architecture model compiled by kiln for ethos-u85-256 (lowered for the U85,
compiled by Vela 5.2.0), each NPU delegate run on kiln's Ethos-U85 model and compared bit
for bit with tosa_reference_model on the same TOSA graph (random int8 inputs); a few
recompiled for the two-core ethos-u85-512 and four-core ethos-u85-2048."""

from __future__ import annotations

import functools
import re
import subprocess

import numpy as np
import pytest

from kiln.compile import compile_model
from kiln.lower.vela import compile_tosa, vela_command
from kiln.simulator.npu.config import config_for
from kiln.simulator.npu.cop1 import parse_cop1
from kiln.simulator.npu.executor import estimate
from kiln.simulator.npu.standalone import run_compiled
from kiln.spec import CompileSpec
from tests.simulator import helpers

OTHER_TARGETS = {"ethos-u85-512": ["resnet8", "digits"], "ethos-u85-2048": ["ds_cnn", "tiny_cnn"]}


def compiled(model: str):
    return helpers.compiled_zoo(model, "ethos-u85-256")


# kiln.models.ARCHITECTURES: published architectures' block structure (vit_tiny's and kwt's
# matmuls take their weights from IFM2 on the U85)
ARCHITECTURE_MODELS = [
    "mobilenet_v3_small",
    "efficientnet_b0",
    "resnet18",
    "shufflenet_v2",
    "squeezenet",
    "inception",
    "vit_tiny",
    "kwt",
    "tc_resnet8",
    "kws_gru",
    "kws_lstm",
    "unet_tiny",
    "yolo_tiny",
]
CASES = [("ethos-u85-256", m) for m in helpers.ZOO + ARCHITECTURE_MODELS]
CASES += [(t, m) for t, models in OTHER_TARGETS.items() for m in models]


@pytest.mark.parametrize("target, model", CASES)
def test_zoo_delegates_bit_exact_u85(target, model):
    """ethos-u85-256 runs what kiln compiled; another configuration runs the same TOSA
    graphs recompiled by Vela for it (with weights on every core)."""
    result, shapes = compiled(model)
    assert result.tosa
    streams = (
        result.vela
        if target == "ethos-u85-256"
        else [
            compile_tosa(tosa, f"{model}{i}", target, helpers.system_config(target), "Shared_Sram")
            for i, tosa in enumerate(result.tosa)
        ]
    )
    cores = config_for(target).cores
    for tosa, vela, part_shapes in zip(result.tosa, streams, shapes):
        run = helpers.assert_bit_exact(tosa, vela, part_shapes, target)
        assert run.coverage.as_dict()["U85 cores"].get(str(cores), 0) > 0


@pytest.mark.parametrize("model", helpers.ZOO)
def test_cycle_estimate_near_vela_u85_256(model):
    """kiln.simulator.npu.u85.cycles against Vela's own NPU cycles for the same streams:
    within 10 % on every zoo model (its docstring's aim)."""
    result, _ = compiled(model)
    config = config_for("ethos-u85-256")
    ours = sum(estimate(parse_cop1(vela.cmd_data).stream, config).counters()["cycles"] for vela in result.vela)
    vela_total = sum(vela.npu_cycles for vela in result.vela)
    assert 0.90 <= ours / vela_total <= 1.10, (ours, vela_total)


def _vela_layer_cycles(tosa: bytes, vela, directory) -> list[int]:
    """The "NPU" column of Vela's per-layer performance table (--verbose-performance) for
    `tosa` compiled as `vela` was (ethos-u85-256, its system config and memory mode)."""
    source = directory / "graph.tosa"
    source.write_bytes(tosa)
    run = subprocess.run(
        vela_command()
        + [
            "--accelerator-config",
            "ethos-u85-256",
            "--system-config",
            vela.summary["system_config"],
            "--memory-mode",
            vela.summary["memory_mode"],
            "--output-format",
            "raw",
            "--verbose-performance",
            "--output-dir",
            str(directory),
            str(source),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = run.stdout.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("---") and " NPU " in lines[i - 1])
    spans = [m.span() for m in re.finditer(r"-+", lines[rule])]
    start, end = next((a, b) for a, b in spans if lines[rule - 1][a:b].strip() == "NPU")
    layers = []
    for line in lines[rule + 1 :]:
        if not line.strip():
            break
        layers.append(int(line[start:end]))
    return layers


@pytest.mark.parametrize("model", ["tiny_cnn", "ds_cnn", "resnet8", "digits"])
def test_operation_cycles_near_vela_layers_u85_256(model, tmp_path):
    """U85CycleModel.operations() against Vela's per-layer NPU cycles, layer by layer
    (layers Vela charges nothing, chained or fused into another, left out): within 2 %.
    ds_cnn's first convolution runs as two depth slices, resnet8 chains its residual adds,
    digits writes a transposed OFM; each cost as one operation. The model fed by the
    executor counts the same total."""
    result, shapes = compiled(model)
    config = config_for("ethos-u85-256")
    rng = np.random.default_rng(0)
    for i, (tosa, vela, part_shapes) in enumerate(zip(result.tosa, result.vela, shapes)):
        model_cycles = estimate(parse_cop1(vela.cmd_data).stream, config)
        ours = [cycles for _, _, cycles in model_cycles.operations() if cycles]
        directory = tmp_path / str(i)
        directory.mkdir()
        theirs = [cycles for cycles in _vela_layer_cycles(tosa, vela, directory) if cycles]
        assert len(ours) == len(theirs), (ours, theirs)
        for layer, (a, b) in enumerate(zip(ours, theirs)):
            assert abs(a - b) <= 0.02 * b, (layer, a, b)
        inputs = [rng.integers(-128, 128, size=shape, dtype=np.int8) for shape in part_shapes]
        _, run = run_compiled(vela, inputs, config)
        assert run.cycles == model_cycles.counters()["cycles"]


# 16-bit activations (kiln compile --activation-bits 16): int48 accumulators, 16-bit tables,
# unet_tiny's 64-bit OFM, vit_tiny's 16-bit attention (Q @ K^T of selects from one qkv tensor, which
# Vela 5.2.0 reads at head 0's rows for every head unless the select is copied by a CLAMP:
# kiln.families.CLAMP_COPIES).
MODELS_16 = ["resnet8", "mobilenet_v2_035", "kwt", "unet_tiny", "kws_gru", "vit_tiny"]


@functools.cache
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
        diffs, run = helpers.compare(tosa, vela, inputs, "ethos-u85-256")
        assert diffs == [0] * len(diffs)


def test_bert_tiny_mask_view_bit_exact_u85():
    """bert_tiny (kiln.models.TRANSFORMERS) on ethos-u85-256: its one delegate holds the embeddings'
    gathers and the unsqueeze of the padding mask (a view of bools) before the select it feeds; on
    kiln's Ethos-U85 model as on tosa_reference_model, for random token ids, positions and masks."""
    result = compile_model("bert_tiny", CompileSpec("ethos-u85-256"), log=lambda line: None)
    (part,) = result.partitioning.partitions
    assert any(op.op_type == "aten.unsqueeze" and op.output.dtype == "bool" for op in part.ops)
    rng = np.random.default_rng(0)

    def sample(v):  # an index below the rows of every table it reads; a mask with about 30 % padding
        if v.dtype == "bool":
            return rng.random(v.shape) < 0.7
        rows = min(reader.inputs[0].shape[0] for reader in v.users)
        return rng.integers(0, rows, v.shape).astype(np.int32)

    assert {v.dtype for v in part.inputs} == {"int32", "bool"}
    inputs = [sample(v) for v in part.inputs]
    diffs, _ = helpers.compare(result.tosa[0], result.vela[0], inputs, "ethos-u85-256")
    assert diffs == [0] * len(diffs)
