"""Random TOSA graphs compiled by Vela 5.2.0 for Ethos-U85 configurations, run on kiln's
U85 model and compared bit for bit with tosa_reference_model (npu_harness, as for the
U55/U65 in test_npu_differential.py; npu_u85_cases adds what only the U85 runs).

Each batch puts CASES random single-op subgraphs into one TOSA graph (one Vela call);
case i of batch s is rebuilt by npu_harness.build_batch(s, [i], generators=GENERATORS)."""

from __future__ import annotations

import pytest

import npu_cases
import npu_harness
import npu_u85_cases

CASES = 10
GENERATORS = {**npu_cases.GENERATORS, **npu_u85_cases.GENERATORS}  # the U55's kinds and U85-only ones
BATCHES = [("ethos-u85-256", "Shared_Sram", 8500), ("ethos-u85-256", "Shared_Sram", 8501),
           ("ethos-u85-256", "Sram_Only", 8502), ("ethos-u85-256", "Dedicated_Sram_384KB", 8503),
           ("ethos-u85-128", "Shared_Sram", 8504), ("ethos-u85-512", "Shared_Sram", 8505),
           ("ethos-u85-512", "Sram_Only", 8506), ("ethos-u85-2048", "Shared_Sram", 8507)]


@pytest.mark.parametrize("target, mode, seed", BATCHES, ids=[f"{t}-{m}-{s}" for t, m, s in BATCHES])
def test_random_graphs_bit_exact_u85(target, mode, seed):
    results, rejected = npu_harness.run_batch(seed, CASES, target, mode, generators=GENERATORS)
    assert len(results) >= CASES - 2, f"Vela rejected too many cases: {rejected}"
    wrong = [(description, diff) for description, diff in results if diff]
    assert not wrong, wrong


def test_u85_only_operations_run_in_hardware():
    """RESIZE (nearest and bilinear at random scales, offsets and borders) is one
    NPU_OP_RESIZE on the U85, and the model equals tosa_reference_model on it."""
    graph = npu_harness.build_batch(8600, range(12), generators=npu_u85_cases.GENERATORS)
    from kiln.lower.vela import compile_tosa
    vela = compile_tosa(graph.serialize(), "resize", "ethos-u85-256", npu_harness.system_config("ethos-u85-256"),
                        "Shared_Sram")
    diffs, result = npu_harness.compare(graph.serialize(), vela, graph.inputs, "ethos-u85-256")
    assert diffs == [0] * len(diffs), list(zip(graph.descriptions, diffs))
    resize = result.coverage.as_dict()["resize"]
    assert resize["NEAREST"] > 0 and resize["BILINEAR"] > 0, resize
