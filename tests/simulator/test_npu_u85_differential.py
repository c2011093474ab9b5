"""Random TOSA graphs compiled by Vela 5.2.0 for Ethos-U85 configurations, run on kiln's
U85 model and compared bit for bit with tosa_reference_model (tests/simulator/helpers.py, as for the
U55/U65 in test_npu_differential.py; npu_u85_cases adds what only the U85 runs).

Each batch puts CASES random single-op subgraphs into one TOSA graph (one Vela call);
case i of batch s is rebuilt by helpers.build_batch(s, [i], generators=GENERATORS)."""

from __future__ import annotations

import pytest

from tests.simulator import helpers, npu_cases, npu_u85_cases

CASES = 10
GENERATORS = {**npu_cases.GENERATORS, **npu_u85_cases.GENERATORS}  # the U55's kinds and U85-only ones
BATCHES = [
    ("ethos-u85-256", "Shared_Sram", 8500),
    ("ethos-u85-256", "Shared_Sram", 8501),
    ("ethos-u85-256", "Sram_Only", 8502),
    ("ethos-u85-256", "Dedicated_Sram_384KB", 8503),
    ("ethos-u85-128", "Shared_Sram", 8504),
    ("ethos-u85-512", "Shared_Sram", 8505),
    ("ethos-u85-512", "Sram_Only", 8506),
    ("ethos-u85-2048", "Shared_Sram", 8507),
]


@pytest.mark.parametrize("target, mode, seed", BATCHES, ids=[f"{t}-{m}-{s}" for t, m, s in BATCHES])
def test_random_graphs_bit_exact_u85(target, mode, seed):
    results, rejected = helpers.run_batch(seed, CASES, target, mode, generators=GENERATORS)
    assert len(results) >= CASES - 2, f"Vela rejected too many cases: {rejected}"
    wrong = [(description, diff) for description, diff in results if diff]
    assert not wrong, wrong


# U85-only features the cases of npu_u85_cases must reach: (coverage category, value)
U85_FEATURES = [
    ("resize", "NEAREST"),
    ("resize", "BILINEAR"),
    ("elementwise", "DIV"),
    ("elementwise", "CMP_EQ"),
    ("elementwise", "CMP_GT"),
    ("elementwise", "CMP_GE"),
    ("elementwise", "AND"),
    ("elementwise", "OR"),
    ("elementwise", "XOR"),
    ("elementwise", "NOT"),
    ("elementwise", "LSR"),
    ("pooling", "ARGMAX_X"),
    ("pooling", "MIN"),
    ("dma", "gather"),
    ("ofm_transpose", "WHC"),
    ("ofm_transpose", "HCW"),
    ("ofm_transpose", "CWH"),
    ("ofm_reverse", "W"),
    ("dma", "scatter"),
    ("dma", "3-D"),
    ("broadcast", "IFM SCALAR"),
    ("activation", "LUT_S16_S32"),
    ("weights", "IFM2"),
]
CASES_PER_KIND = 5


def test_u85_only_operations_bit_exact():
    """Operations Vela runs only on the U85 (RESIZE at any scale, INTDIV, comparisons, logical
    and bitwise ops, shifts, TRANSPOSE, REVERSE, REDUCE_MIN/MAX, ARGMAX, GATHER, SCATTER (into one plane or several), a
    scalar first operand, a 16-bit table with a 32-bit result, MATMUL): CASES_PER_KIND cases of each
    kind, each compiled alone for ethos-u85-256, equal to tosa_reference_model, and the
    hardware features reached."""
    from kiln.lower.vela import compile_tosa
    from kiln.simulator.npu.coverage import Coverage

    total = Coverage()
    wrong = []
    for n, kind in enumerate(sorted(npu_u85_cases.GENERATORS)):
        for i in range(CASES_PER_KIND):
            graph = helpers.build_batch(8800 + n, [i], [kind], npu_u85_cases.GENERATORS)
            tosa = graph.serialize()
            vela = compile_tosa(
                tosa, f"{kind}{i}", "ethos-u85-256", helpers.system_config("ethos-u85-256"), "Shared_Sram"
            )
            diffs, result = helpers.compare(tosa, vela, graph.inputs, "ethos-u85-256")
            total.merge(result.coverage)
            wrong += [(graph.descriptions[0], d) for d in diffs if d]
    assert not wrong, wrong
    reached = total.as_dict()
    missing = [f for f in U85_FEATURES if not reached.get("U85 " + f[0], {}).get(f[1])]
    assert not missing, missing
