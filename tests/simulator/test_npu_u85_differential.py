"""Random TOSA graphs compiled by Vela 5.2.0 for Ethos-U85 configurations, run on kiln's
U85 model and compared bit for bit with tosa_reference_model (npu_harness, as for the
U55/U65 in test_npu_differential.py).

Each batch puts CASES random single-op subgraphs into one TOSA graph (one Vela call);
case i of batch s is rebuilt by npu_harness.build_batch(s, [i], KINDS)."""

from __future__ import annotations

import pytest

import npu_cases
import npu_harness

CASES = 10
NOT_MODELLED = {"resize_nearest", "table16"}  # NPU_OP_RESIZE, ACTIVATION LUT_S16_S16
KINDS = sorted(set(npu_cases.GENERATORS) - NOT_MODELLED)
BATCHES = [("ethos-u85-256", "Shared_Sram", 8500), ("ethos-u85-256", "Shared_Sram", 8501),
           ("ethos-u85-256", "Sram_Only", 8502), ("ethos-u85-256", "Dedicated_Sram_384KB", 8503),
           ("ethos-u85-128", "Shared_Sram", 8504), ("ethos-u85-512", "Shared_Sram", 8505),
           ("ethos-u85-512", "Sram_Only", 8506), ("ethos-u85-2048", "Shared_Sram", 8507)]


@pytest.mark.parametrize("target, mode, seed", BATCHES, ids=[f"{t}-{m}-{s}" for t, m, s in BATCHES])
def test_random_graphs_bit_exact_u85(target, mode, seed):
    results, rejected = npu_harness.run_batch(seed, CASES, target, mode, KINDS)
    assert len(results) >= CASES - 2, f"Vela rejected too many cases: {rejected}"
    wrong = [(description, diff) for description, diff in results if diff]
    assert not wrong, wrong
