"""Architecture models compiled for a CPU alone (--target cortex-m55: every quantized op an
integer cortex_m kernel where one takes it) give, in `kiln run-host`, the PT2E reference's integers:
within one output step of the quantized module the compile made, its float ops run in float64
(tests.compiler.helpers.Float64Arithmetic), on the compile's example input.

The models are those whose integers CMSIS-NN's double rounding (a requantization's high multiply
rounded, then its shift) carried furthest from PT2E: yolo_tiny 8 steps at its detection head,
resnet18 and vit_tiny 4, kws_gru 2. mobilenet_v3_small's hard-swish blocks carry PT2E's own float32
rounding 3 steps from its float64 arithmetic: there kiln's integers may be as far as float32's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kiln.reference import run_host as host
from tests.compiler.helpers import Float64Arithmetic, compiled, output_scales, steps_off

TARGET = "cortex-m55"


@pytest.mark.parametrize("name", ["yolo_tiny", "resnet18", "vit_tiny", "kws_gru", "mobilenet_v3_small"])
def test_run_host_gives_pt2e_s_integers(name):
    result = compiled(name, TARGET)
    assert {op["arithmetic"] for op in result.report["ops"] if op.get("op") == "aten.conv2d"} <= {"integer"}
    module, inputs = result.quantized_module, result.inputs
    with torch.no_grad():
        exact = Float64Arithmetic(module).run(*inputs)
        float32 = module(*inputs)
    exact = exact if isinstance(exact, (tuple, list)) else (exact,)
    float32 = float32 if isinstance(float32, (tuple, list)) else (float32,)
    got = host.run(result.pte, [x.numpy() for x in inputs])
    for g, e, f, scale in zip(got, exact, float32, output_scales(module), strict=True):
        pt2e_float32_off = steps_off(f.double().numpy(), e, scale).max()
        off = steps_off(g, e, scale)
        assert off.max() <= max(1, pt2e_float32_off), f"{name}: {int(off.max())} steps off at {np.argmax(off)}"
