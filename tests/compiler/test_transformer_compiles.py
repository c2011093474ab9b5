"""`kiln compile` on the transformer zoo (kiln.models.TRANSFORMERS), issue 28's Done-when:

- ethos-u85-256: every op but the I/O conversions (and the index checks of the embedding
  lookups; BERT's int64 mask input made bool) on the NPU, in one delegate;
- ethos-u55-128 and ethos-u65-256: the compile succeeds and leaves exactly the ops listed in
  CPU_OPS on the CPU (each with its reason in the comment above it);
- on every target, `kiln run-host` within two quantization steps of the PT2E reference (torch
  running the quantized module the compile made, in float64: helpers.Float64Arithmetic) on every
  output element, at 8 bits.

Each model is compiled once per target per session (tests.compiler.helpers.compiled), so the
tests of a (model, target) pair cost one compile.
"""

from __future__ import annotations

import pytest

from kiln import models
from tests.compiler.helpers import compiled, run_host_steps_off_pt2e

U85 = "ethos-u85-256"
TARGETS = (U85, "ethos-u55-128", "ethos-u65-256")
NAMES = list(models.TRANSFORMERS)

# The program's float/int8 conversions at its inputs and outputs, and the bounds checks of
# gather indices (kiln.checked_index: an index out of range is an error the NPU cannot raise).
IO_OPS = {"quantized_decomposed.quantize_per_tensor", "quantized_decomposed.dequantize_per_tensor"}
INDEX_OPS = {"kiln.checked_index"}

# BERT's padding mask is an int64 input, made bool by `attention_mask.bool()` (aten._to_copy):
# the NPU takes no int64 tensor, so that conversion of an input runs on the CPU, as the float
# inputs' quantization does.
MASK_INPUT = {"aten._to_copy"}
U85_CPU_OPS = {"bert_tiny": MASK_INPUT, "bert_tiny_mha": MASK_INPUT}

# What stays on the CPU of the U55 and U65 (beside the I/O conversions and index checks);
# every other model runs wholly on the NPU. Vela 5.2.0 runs no GATHER (the embeddings) and no
# SELECT or logical op on Ethos-U55 or U65: BERT's padding mask (not a constant) becomes a
# `where` of the scores and the most negative value, and nn.MultiheadAttention's
# key_padding_mask a logical_not; GPT-2's and Llama's causal masks are constants, whose select
# becomes an add. bert_tiny unsqueezes its bool mask: Vela takes no bool tensor there.
CPU_OPS: dict[str, set[str]] = {
    "bert_tiny": MASK_INPUT | {"aten.unsqueeze", "aten.embedding", "aten.where"},
    "bert_tiny_mha": MASK_INPUT | {"aten.logical_not", "aten.embedding", "aten.where"},
    "gpt2_block": {"aten.embedding"},
    "gpt2_block_mha": {"aten.embedding"},
    "llama_block": {"aten.embedding"},
}


def cpu_ops(report: dict) -> set[str]:
    return {op["op"] for op in report["ops"] if op["where"] == "cpu"}


@pytest.mark.parametrize("name, target", [(name, U85) for name in NAMES])
def test_u85_runs_everything_but_the_io_on_the_npu_in_one_delegate(name, target):
    report = compiled(name, target).report
    cpu = {(op["op"], op["reason"]) for op in report["ops"] if op["where"] == "cpu"}
    assert {op for op, _ in cpu} <= IO_OPS | INDEX_OPS | U85_CPU_OPS.get(name, set()), sorted(cpu)
    assert len(report["delegates"]) == 1


@pytest.mark.parametrize("name, target", [(name, t) for name in NAMES for t in TARGETS if t != U85])
def test_u55_u65_compile_with_the_listed_cpu_ops(name, target):
    report = compiled(name, target).report
    assert cpu_ops(report) - IO_OPS - INDEX_OPS == CPU_OPS.get(name, set())


@pytest.mark.parametrize("name, target", [(name, t) for name in NAMES for t in TARGETS])
def test_run_host_within_two_steps_of_pt2e(name, target):
    result = compiled(name, target)
    offs = run_host_steps_off_pt2e(result)
    report = result.report
    print(
        f"{name} {target}: {len(report['delegates'])} delegate(s), CPU ops {sorted(cpu_ops(report) - IO_OPS)}, "
        f"worst steps off PT2E per output {[int(off.max()) for off, _ in offs]}"
    )
    for i, (off, scale) in enumerate(offs):
        assert off.max() <= 2, (
            f"{name} on {target}, output {i}: up to {int(off.max())} steps of {scale:g} off the PT2E reference, "
            f"{(off > 2).sum()} of {off.size} elements beyond 2"
        )
