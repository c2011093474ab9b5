"""kiln.partition.tables: TOSA's interpolated 16-bit TABLE worked out by hand, and the support rule that
admits a 16-bit unary function only where that table stays within a step of PT2E; 16-bit rsqrt by
normalisation, within a step over inputs of 1e-3 to 1e3."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kiln.partition import tables
from tests.compiler.helpers import compare_steps, lower_module


def test_int16_lookup_by_hand():
    """Entry i at q = 128 i - 32768; q = 100 is entry 256 (q = 0) and 100/128 of the way to
    entry 257: (10 << 7) + (74 - 10) * 100 = 7680, / 128 = 60; q = -32768 is entry 0 itself;
    q = 127 is (1280 + 64 * 127 + 64) >> 7 = 74 (73.5 rounded up)."""
    table = np.zeros(513, np.int16)
    table[0], table[256], table[257] = -5, 10, 74
    got = tables.int16_lookup(table, np.array([100, -32768, 127, 0]))
    assert got.tolist() == [60, -5, 74, 10]


class Unary(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def placements(fn, spread=2.0):
    x = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(0)) * spread
    _, _, parts = lower_module(Unary(fn), (x,), [(x,)], bits=16)
    return {p.op.op_type: p for p in parts.placements if "quantize" not in p.op.op_type}


def test_smooth_functions_take_the_16_bit_table_and_steps_stay_on_the_cpu_with_the_distance():
    """gelu and silu (smooth) are within a step on this range and go to the NPU; floor's
    table interpolates across its steps, so it stays on the CPU, and the reason gives the
    distance the rule measured, which the lookup worked out here (over every input) confirms."""
    for fn in (torch.nn.functional.gelu, torch.nn.functional.silu):
        (placed,) = placements(fn).values()
        assert placed.partition is not None, placed.reason
    floor = placements(torch.floor)["aten.floor"]
    assert floor.partition is None
    q = torch.arange(-32767, 32768, dtype=torch.int32)
    steps = int(
        np.abs(
            tables.int16_lookup(tables.int16_table(floor.op), q.numpy())
            - tables.reference(floor.op, q).astype(np.int64)
        ).max()
    )
    assert steps > 1 and floor.reason == (
        f"16-bit aten.floor: TOSA's interpolated 16-bit table is {steps} steps from PT2E's reference in this input's "
        "range (kiln takes it within 1 step; an 8-bit table is exact)"
    )


@pytest.mark.parametrize(("low", "high"), [(1e-3, 1.0), (0.5, 2.0), (10.0, 1000.0)])
def test_16_bit_rsqrt_within_a_step_of_pt2e(low, high):
    """rsqrt from int16 to int16 (what a 16-bit norm computes) on tosa_reference_model: every input
    at least one step above 0 within one step of PT2E, on ethos-u55-128 (it stays on the NPU)."""
    g = torch.Generator().manual_seed(1)
    calibration = [(torch.rand(3, 40, generator=g) * (high - low) + low,) for _ in range(2)]
    module = type("M", (torch.nn.Module,), {"forward": lambda self, x: torch.rsqrt(x)})()
    (d,), _ = compare_steps(module, calibration[0], calibration, bits=16)
    assert d.max() <= 1, d.max()


def test_rsqrt16_table_by_hand():
    """Entry 128 is m = 0.25: rsqrt 2, 32767 units of 2/32767; entry 512 is m = 1: 16383.5, rounded
    to even 16384; entry 0, below 0.25, repeats entry 128."""
    entries, unit = tables.rsqrt16_table()
    assert unit == 2 / 32767
    assert (entries[128], entries[512], entries[0]) == (32767, 16384, 32767)
