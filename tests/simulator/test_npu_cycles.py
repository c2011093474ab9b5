"""The cycle estimate against Vela's own (VelaResult.npu_cycles) on the zoo models."""

from __future__ import annotations

import pytest

from test_npu_zoo import compiled, _inputs

import npu_harness

TOLERANCE = 0.25
# tiny_cnn's four small convolutions: Vela charges fixed costs this model does not have
# (measured ratio 0.66 on ethos-u55-128)
KNOWN_MISS = {"tiny_cnn"}


@pytest.mark.parametrize("model", ["tiny_cnn", "ds_cnn", "resnet8", "mobilenet_v1_025", "fc_autoencoder",
                                   "mobilenet_v2_035", "digits"])
def test_cycles_close_to_vela_u55_128(model):
    if model in KNOWN_MISS:
        pytest.xfail("cycle estimate outside 25 % of Vela's for this model")
    result, shapes = compiled(model)
    cycles = vela_cycles = 0
    for vela, part_shapes in zip(result.vela, shapes):
        _, run = npu_harness.run_on_model(vela, _inputs(part_shapes, 0), "ethos-u55-128")
        cycles += run.cycles
        vela_cycles += vela.npu_cycles
    assert abs(cycles / vela_cycles - 1) <= TOLERANCE, (cycles, vela_cycles)
