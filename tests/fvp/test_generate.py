"""kiln's generation app (firmware/apps/generate) end to end on the virtual platform, built with
./scripts/build_executor_runner.sh --generate and run through kiln.flow.generate, on a toy
byte-level language model of CPU kernels written with kiln's own .pte writer
(tests/firmware/runtime/toy_lm.py): its tokens and every step's logits must equal `kiln generate`'s
on the host (kiln.reference.generate over run-host's numpy kernels) and what numpy works out by
hand for the same prompt (both independent of the firmware), the KV cache carried from prefill
through every decode in the state arena. Programs with ExecuTorch's get_max_seq_len and without
prefill generate as kiln generate does; the refusals end with their status and one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kiln import flow
from kiln.pte.reader import deserialize
from kiln.reference import generate as host
from tests.firmware.runtime import state_program, toy_lm

pytestmark = pytest.mark.fvp
TARGET = "ethos-u55-128"
CACHE = 16  # the toy's cache length, and prefill's token count
EXIT_USAGE, EXIT_BIND = 2, 5  # firmware/apps/executor_runner/runner.h


@pytest.fixture(scope="module")
def toy(work, builder) -> tuple[Path, Path]:
    """The toy model's .pte and its generation app's ELF."""
    pte = work / "toy_lm.pte"
    pte.write_bytes(toy_lm.write(CACHE))
    return pte, builder(pte, TARGET, "--generate")


def assert_generates_as_the_host(done: flow.Generated, pte: Path, prompt: bytes, tokens: int, prefill=True):
    """`done` finished with kiln generate's tokens, positions and logits for `prompt`, which are
    also numpy's by hand (toy_lm.generate)."""
    assert done.complete, done.log
    steps = host.generate(pte.read_bytes(), prompt, tokens)
    assert done.token_ids == [s.token for s in steps]
    assert [t.position for t in done.tokens] == [s.position for s in steps]
    assert [g.tobytes() for g in done.logits] == [np.ascontiguousarray(s.logits).tobytes() for s in steps]
    by_hand, logits = toy_lm.generate(prompt, len(steps), CACHE, prefill)
    assert done.token_ids == by_hand and [g.tobytes() for g in done.logits] == [x.tobytes() for x in logits]
    assert done.run.transcript.generation.text == bytes(by_hand)


def test_the_app_generates_the_toy_models_tokens_and_logits(toy, tmp_path):
    pte, elf = toy
    prompt = b"Hi, it's me\n"
    done = flow.generate(
        elf, TARGET, prompt, 5, pte, tmp_path, platform="virtual", timeout=300, count_instructions=True
    )
    assert_generates_as_the_host(done, pte, prompt, 5)
    generation = done.run.transcript.generation
    assert (generation.prompt, generation.prefill_length, generation.cache_length) == (prompt, CACHE, CACHE)
    assert [(t.index, t.position, t.method) for t in done.tokens] == [
        (k, len(prompt) + k, "prefill" if k == 0 else "decode") for k in range(5)
    ]
    assert [g.dtype for g in done.logits] == [np.int8] * 5
    assert all(t.npu_cycles == 0 and t.streams == 0 and t.pmu is None for t in done.tokens)  # CPU only
    assert done.cpu_instructions is not None and len(done.cpu_instructions) == 5
    assert all(n > 0 for n in done.cpu_instructions)


def test_generation_stops_at_the_end_of_the_cache(toy, tmp_path):
    """After a prompt of L bytes decode writes positions L, L + 1, ...: the last it may is the
    cache's (T - 1, T read from the cache tensors' dim 2), so N tokens shorten to T - L + 1."""
    pte, elf = toy
    prompt = b"abc"
    done = flow.generate(elf, TARGET, prompt, 40, pte, tmp_path, platform="virtual", timeout=300)
    assert done.run.transcript.generation.tokens_asked == CACHE - len(prompt) + 1 == len(done.tokens)
    assert done.tokens[-1].position == CACHE
    assert done.asked == 40
    assert_generates_as_the_host(done, pte, prompt, CACHE - len(prompt) + 1)


@pytest.mark.parametrize("prefill", [True, False], ids=["prefill", "decode alone"])
def test_get_max_seq_len_bounds_the_run_and_decode_alone_reads_the_prompt(work, builder, tmp_path, prefill):
    """ExecuTorch's constant method get_max_seq_len (12 here, the caches holding 16) bounds the
    prompt and the run, as kiln generate's; a program without prefill reads the prompt through
    decode, a token at a time, its last call giving token 0."""
    pte = work / f"toy_lm_max12_{'prefill' if prefill else 'decode'}.pte"
    pte.write_bytes(toy_lm.write(CACHE, max_seq_len=12, prefill=prefill))
    elf = builder(pte, TARGET, "--generate")
    prompt = b"Hello"
    done = flow.generate(elf, TARGET, prompt, 20, pte, tmp_path, platform="virtual", timeout=300)
    assert len(done.tokens) == 12 - len(prompt) + 1, done.log
    assert_generates_as_the_host(done, pte, prompt, 20, prefill)
    assert done.tokens[0].method == ("prefill" if prefill else "decode")
    assert done.run.transcript.generation.prefill_length == (CACHE if prefill else 0)
    too_long = flow.generate(elf, TARGET, bytes(13), 1, pte, tmp_path / "long", platform="virtual", timeout=300)
    assert too_long.status == EXIT_USAGE, too_long.log
    assert too_long.run.transcript.runner_messages == ["the prompt has 13 bytes; this program takes 1 to 12"]


def test_without_options_the_app_generates_what_the_cache_holds_after_its_prompt(toy):
    """kiln run's plain run of the app: its default prompt (16 bytes, "Once upon a time") fills
    the toy's 16 positions, so the default 16 tokens shorten to prefill's one."""
    pte, elf = toy
    done = flow.run(flow.firmware(elf, TARGET), platform="virtual", timeout=300)
    assert done.status == 0, "\n".join(done.uart)
    generation = done.transcript.generation
    assert (generation.prompt, generation.tokens_asked) == (b"Once upon a time", 1)
    assert [t.token for t in generation.tokens] == toy_lm.generate(b"Once upon a time", 1, CACHE)[0]


def test_a_prompt_longer_than_prefill_takes_is_refused(toy, tmp_path):
    pte, elf = toy
    done = flow.generate(elf, TARGET, bytes(CACHE + 1), 1, pte, tmp_path, platform="virtual", timeout=300)
    assert done.status == EXIT_USAGE, done.log
    assert done.run.transcript.runner_messages == [f"the prompt has {CACHE + 1} bytes; this program takes 1 to {CACHE}"]


def test_a_program_without_decode_is_refused_at_bind(work, builder, tmp_path):
    """The two-method state program (methods accumulate and scale) has no decode."""
    pte = work / "state_program_for_generate.pte"
    pte.write_bytes(state_program.write())
    elf = builder(pte, TARGET, "--generate")
    done = flow.generate(elf, TARGET, b"x", 2, pte, tmp_path, platform="virtual", timeout=300)
    assert done.status == EXIT_BIND, done.log
    assert done.run.transcript.failures == [
        ("binding the program", "method: no such method: none of that name among 2")
    ]


def test_the_memory_report_shares_one_activation_buffer_and_the_state_arena(toy):
    """Planned buffer 1 is the larger method's activations, planned buffer 2 the arena both
    declare (read from the .pte with kiln.pte.reader); the report says how the methods share them."""
    pte, elf = toy
    plans = deserialize(pte.read_bytes()).program.execution_plans
    report = json.loads(elf.with_suffix(".memory_report.json").read_text())
    assert report["methods"] == [
        {
            "name": p.name,
            "planned": list(p.non_const_buffer_sizes[1:]),
            "values": len(p.values),
            "operators": len(p.operators),
            "delegates": 0,
        }
        for p in plans
    ]
    planned = [b for b in report["buffers"] if b["what"].startswith("planned buffer")]
    assert [b["size"] for b in planned] == [
        max(p.non_const_buffer_sizes[1] for p in plans),
        CACHE * 8,
    ]
    assert report["state_arena"] == {"size": CACHE * 8, "region": planned[1]["region"]}
    text = elf.with_suffix(".memory_report.txt").read_text()
    assert text.startswith("kiln generate: toy_lm for ethos-u55-128")
    assert "methods: prefill, decode: the apps run one at a time" in text
