"""The zoo's language model (kiln.models.tinylm) generating on the virtual platform: compiled for
ethos-u85-256 (prefill and decode sharing the KV cache as program state), built into kiln's
generation app and run for a dozen tokens after a prompt. The firmware's tokens and every step's
logits must equal `kiln generate`'s on the host bit for bit (run-host: tosa_reference_model and
numpy kernels, independent of the firmware), and every op of both methods runs on the NPU but
for what the report names as only the CPU's: index checks, conversions at the program's edges
and int64 index arithmetic. So must a model whose head is tied to its embedding
(tests/fixtures/tied_lm.py), whose head reads the GATHER's table as a MATMUL operand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kiln import flow
from kiln.reference import generate

from .helpers import compiled

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.fvp
TARGET = "ethos-u85-256"
PROMPT = b"A class definition "
TOKENS = 12
# What only the CPU does in a language model's program (the report's op types): the index check
# before a gather or a scatter (the NPU's DMA must not read or write out of bounds), the program's
# float and int64 edges, and arithmetic on int64 indices (the NPU has no 64-bit integers).
CPU_ONLY = {
    "kiln.checked_index",
    "quantized_decomposed.quantize_per_tensor",
    "quantized_decomposed.dequantize_per_tensor",
    "aten._to_copy",  # argmax's int32 index widened to PyTorch's int64 token
    "aten.sub",  # length - 1, the prompt's last position
    "aten.le",  # the cache rows a position may attend: arange(T) <= position
}


@pytest.fixture(scope="module")
def tinylm(work, builder):
    path = compiled(work, "tinylm", TARGET)
    return path, builder(path, TARGET, "--generate")


@pytest.fixture(scope="module")
def tied_lm(work, builder):
    path = compiled(work, str(ROOT / "tests" / "fixtures" / "tied_lm.py"), TARGET)
    return path, builder(path, TARGET, "--generate")


def test_every_op_of_both_methods_runs_on_the_npu_but_what_only_the_cpu_does(tinylm):
    path, _ = tinylm
    report = json.loads(path.with_suffix(".json").read_text())
    assert set(report["methods"]) == {"prefill", "decode"}
    for name, method in report["methods"].items():
        assert len(method["delegates"]) == 1, name
        cpu = {o["op"] for o in method["ops"] if o["where"] == "cpu"}
        assert cpu <= CPU_ONLY, (name, cpu - CPU_ONLY)
        npu = [o for o in method["ops"] if o["where"] == "npu"]
        assert len(npu) > 200 and method["macs"]["npu_share"] == 1.0, name
        assert {"aten.index_copy", "aten.embedding", "aten.argmax"} <= {o["op"] for o in npu}, name
    assert report["state"]["bytes"] == 8 * 2 * 128 * 32  # 4 layers' int8 keys and values, 2 heads of 32, 128 rows


def generates_as_the_host(path, elf, tmp_path) -> flow.Generated:
    """The generation app `elf` of program `path` on the virtual platform: its tokens and every
    step's logits equal `kiln generate`'s bit for bit, prefill first, one NPU stream a step."""
    done = flow.generate(elf, TARGET, PROMPT, TOKENS, path, tmp_path)
    assert done.complete, done.log
    host = generate.generate(path.read_bytes(), PROMPT, TOKENS)
    assert done.token_ids == [s.token for s in host]
    assert [t.position for t in done.tokens] == [s.position for s in host]
    assert [t.method for t in done.tokens] == ["prefill"] + ["decode"] * (TOKENS - 1)
    assert len(done.logits) == TOKENS
    for got, want in zip(done.logits, host):
        assert got.dtype == want.logits.dtype and np.array_equal(got, want.logits)
    assert all(t.npu_cycles > 0 and t.streams == 1 for t in done.tokens)
    return done


def test_the_firmware_generates_kiln_generates_tokens_and_logits_bit_for_bit(tinylm, tmp_path):
    text = bytes(generates_as_the_host(*tinylm, tmp_path).token_ids)
    assert text.isascii() and b" " in text  # words of the training text, not noise


def test_a_head_tied_to_its_embedding_generates_as_the_host_bit_for_bit(tied_lm, tmp_path):
    generates_as_the_host(*tied_lm, tmp_path)
