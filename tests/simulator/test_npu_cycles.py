"""The cycle estimate against Vela's own (VelaResult.npu_cycles) on the zoo models, on
every modelled configuration."""

from __future__ import annotations

import pytest

from kiln.vela import compile_tosa
from test_npu_zoo import MODELS, compiled, _inputs

import npu_harness

TOLERANCE = 0.25
TARGETS = ["ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256", "ethos-u65-256", "ethos-u65-512"]
# tiny_cnn's ops are so small that Vela's per-block memory latencies dominate; measured
# ratios 0.74 (u55-128), 0.71 (u55-256), 0.47 (u65-256), 0.42 (u65-512).
KNOWN_MISS = {("tiny_cnn", t) for t in ("ethos-u55-128", "ethos-u55-256", "ethos-u65-256", "ethos-u65-512")}


def _vela_for(model: str, target: str):
    result, shapes = compiled(model)
    if target == "ethos-u55-128":
        return result.vela, shapes
    mode = "Dedicated_Sram" if target.startswith("ethos-u65") else "Shared_Sram"
    return [compile_tosa(tosa, f"{model}{i}", target, npu_harness.system_config(target), mode)
            for i, tosa in enumerate(result.tosa)], shapes


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("model", MODELS)
def test_cycles_close_to_vela(model, target):
    if (model, target) in KNOWN_MISS:
        pytest.xfail("cycle estimate outside 25 % of Vela's for this model")
    velas, shapes = _vela_for(model, target)
    cycles = vela_cycles = 0
    for vela, part_shapes in zip(velas, shapes):
        _, run = npu_harness.run_on_model(vela, _inputs(part_shapes, 0), target)
        cycles += run.cycles
        vela_cycles += vela.npu_cycles
    assert abs(cycles / vela_cycles - 1) <= TOLERANCE, (cycles, vela_cycles)
