"""Random TOSA graphs compiled by Vela for every U55/U65 configuration and memory mode,
run on kiln's NPU model and compared bit for bit with tosa_reference_model.

Each batch puts CASES random single-op subgraphs into one TOSA graph (one Vela call);
case i of batch s is rebuilt by helpers.build_batch(s, [i])."""

from __future__ import annotations

import pytest

from tests.simulator import helpers

CASES = 10
COMBINATIONS = [
    (target, mode)
    for target in ("ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256")
    for mode in ("Shared_Sram", "Sram_Only")
]
COMBINATIONS += [
    (target, mode) for target in ("ethos-u65-256", "ethos-u65-512") for mode in ("Shared_Sram", "Dedicated_Sram")
]
BATCHES = [(target, mode, 1000 * i + b) for i, (target, mode) in enumerate(COMBINATIONS) for b in range(2)]


@pytest.mark.parametrize("target, mode, seed", BATCHES, ids=[f"{t}-{m}-{s}" for t, m, s in BATCHES])
def test_random_graphs_bit_exact(target, mode, seed):
    results, rejected = helpers.run_batch(seed, CASES, target, mode)
    assert len(results) >= CASES - 2, f"Vela rejected too many cases: {rejected}"
    wrong = [(description, diff) for description, diff in results if diff]
    assert not wrong, wrong
