"""kiln's generation app (firmware/apps/generate) end to end on the virtual platform, built with
./scripts/build_executor_runner.sh --generate and run through kiln.flow.generate, on a toy
byte-level language model of CPU kernels written with kiln's own .pte writer
(tests/firmware/runtime/toy_lm.py): its tokens and every step's logits must equal what numpy
works out for the same prompt (the reference, independent of the firmware), the KV cache carried
from prefill through every decode in the state arena. The refusals (a prompt or a run past the
cache, a program without the two methods) end with their status and one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kiln import flow
from kiln.pte.reader import deserialize
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


def test_the_app_generates_the_toy_models_tokens_and_logits(toy, tmp_path):
    pte, elf = toy
    prompt = b"Hi, it's me\n"
    done = flow.generate(
        elf, TARGET, prompt, 5, pte, tmp_path, platform="virtual", timeout=300, count_instructions=True
    )
    assert done.complete, done.log
    tokens, logits = toy_lm.generate(prompt, 5, CACHE)
    assert done.token_ids == tokens
    assert len(done.logits) == 5 and all(g.tobytes() == e.tobytes() for g, e in zip(done.logits, logits))
    assert [g.dtype for g in done.logits] == [np.int8] * 5
    generation = done.run.transcript.generation
    assert (generation.prompt, generation.prefill_length, generation.cache_length) == (prompt, CACHE, CACHE)
    assert [(t.index, t.position, t.method) for t in done.tokens] == [
        (k, len(prompt) + k, "prefill" if k == 0 else "decode") for k in range(5)
    ]
    assert generation.text == bytes(tokens)
    assert all(t.npu_cycles == 0 and t.streams == 0 and t.pmu is None for t in done.tokens)  # CPU only
    assert done.cpu_instructions is not None and len(done.cpu_instructions) == 5
    assert all(n > 0 for n in done.cpu_instructions)


def test_a_run_to_the_last_position_of_the_cache_runs_and_one_past_it_is_refused(toy, tmp_path):
    """After a prompt of L bytes, N tokens run decode up to position L + N - 2: the cache's last
    position at N = T - L + 1; one more is refused before anything runs."""
    pte, elf = toy
    prompt = b"abc"
    fits = CACHE - len(prompt) + 1
    done = flow.generate(elf, TARGET, prompt, fits, pte, tmp_path / "fits", platform="virtual", timeout=300)
    assert done.complete, done.log
    assert done.token_ids == toy_lm.generate(prompt, fits, CACHE)[0]
    assert done.tokens[-1].position == CACHE
    past = flow.generate(elf, TARGET, prompt, fits + 1, pte, tmp_path / "past", platform="virtual", timeout=300)
    assert past.status == EXIT_USAGE and past.tokens == [], past.log
    assert past.run.transcript.runner_messages == [
        f"--tokens={fits + 1} after a prompt of 3 bytes takes decode to position {CACHE}; "
        f"the cache holds {CACHE} positions"
    ]


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
    assert done.run.transcript.runner_messages == [f"the prompt has {CACHE + 1} bytes; prefill takes 1 to {CACHE}"]


def test_a_program_without_prefill_is_refused_at_bind(work, builder, tmp_path):
    """The two-method state program (methods accumulate and scale) has no prefill."""
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
