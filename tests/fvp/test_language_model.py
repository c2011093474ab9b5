"""The zoo's language model (kiln.models.tinylm) generating on the virtual platform: compiled for
ethos-u85-256 (prefill and decode sharing the KV cache as program state), built into kiln's
generation app and run for a dozen tokens after a prompt. The firmware's tokens and every step's
logits must equal `kiln generate`'s on the host bit for bit (run-host: tosa_reference_model and
numpy kernels, independent of the firmware), and every op of both methods runs on the NPU but
for what the report names as only the CPU's: index checks, conversions at the program's edges
and int64 index arithmetic. The generation app keeps under 4 KiB of RAM beyond the program's planned
buffers, read from its ELF."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile

from kiln import flow
from kiln.pte.reader import deserialize
from kiln.reference import generate

from .helpers import compiled

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

# Issue 29's goal: the runtime's RAM beyond the planned buffers under 4 KB.
RAM_BUDGET = 4096
BUFFER_ALIGNMENT = 32  # the build's planned buffers are whole D-cache lines


@pytest.fixture(scope="module")
def tinylm(work, builder):
    path = compiled(work, "tinylm", TARGET)
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


def test_the_firmware_generates_kiln_generates_tokens_and_logits_bit_for_bit(tinylm, tmp_path):
    path, elf = tinylm
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
    text = bytes(done.token_ids)
    assert text.isascii() and b" " in text  # words of the training text, not noise


def test_the_app_keeps_under_4_kib_of_ram_beyond_the_planned_buffers(tinylm):
    """From the ELF's sections and symbols (pyelftools), not the build's report: every byte of the
    writable sections the image loads or zeroes (.data, .bss, each region's .bss), less the main
    stack (board.toml's) and the buffers planned from the .pte: memory ids 1..n (each the largest
    any plan of the .pte asks for, kiln.pte.reader, to whole 32-byte lines: the activations and the
    KV cache) and the NPU's scratch and fast scratch. What is left is the app's own state (the
    command line, prompt and generated tokens, the NPU driver's) and the runtime's method tables."""
    path, elf = tinylm
    plans = deserialize(path.read_bytes()).program.execution_plans
    with open(elf, "rb") as stream:
        f = ELFFile(stream)
        writable = SH_FLAGS.SHF_ALLOC | SH_FLAGS.SHF_WRITE
        sections = {s.name: s["sh_size"] for s in f.iter_sections() if s["sh_flags"] & writable == writable}
        symbols = [(s.name, s["st_size"]) for s in f.get_section_by_name(".symtab").iter_symbols()]
    planned = {int(m.group(1)): size for name, size in symbols if (m := re.search(r"kiln_planned_(\d+)E$", name))}
    scratch = [size for name, size in symbols if re.search(r"kiln_ethosu_(fast_)?scratchE$", name)]
    ids = range(1, max(len(p.non_const_buffer_sizes) for p in plans))
    asked = {k: max(p.non_const_buffer_sizes[k] for p in plans if k < len(p.non_const_buffer_sizes)) for k in ids}
    assert planned == {k: -(-size // BUFFER_ALIGNMENT) * BUFFER_ALIGNMENT for k, size in asked.items()}
    assert planned[2] == 8 * 2 * 128 * 32 and len(scratch) == 2  # the cache; Dedicated_Sram's two scratches
    ram = sum(sections.values()) - sections[".stack"] - sum(planned.values()) - sum(scratch)
    assert 0 < ram < RAM_BUDGET, sections
