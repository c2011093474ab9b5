"""argmax of quantized values on the NPU: one TOSA ARGMAX (int32 indices, Vela places it on
Ethos-U55 and U85) then a CPU cast to PyTorch's int64. Checked against the PT2E reference's own
argmax, on tosa_reference_model, on kiln's NPU models, and through a whole program on run-host."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kiln import boards
from kiln import compile as kc
from kiln.errors import VelaRefusal
from kiln.frontend.export import LoadedModel
from kiln.lower import tosa as tosa_lowering
from kiln.lower import vela
from kiln.reference import run_host as host
from kiln.simulator.npu.config import config_for
from kiln.simulator.npu.standalone import run_compiled
from kiln.spec import CompileSpec
from tests.compiler.helpers import Lambda, lower_module, quantize_input, run_tosa, seeded

SYSTEMS = {
    "ethos-u55-128": ("Ethos_U55_High_End_Embedded", "Shared_Sram"),
    "ethos-u85-256": ("Ethos_U85_SYS_DRAM_Mid", "Sram_Only"),
}
# name -> (function of x, x's shape): along channels of an NHWC-stored map, along another dim of it,
# and of a rank-2 and rank-3 value (keepdim or not)
CASES = {
    "channels": (lambda x: torch.relu(x * 2.0).argmax(dim=1), (1, 8, 5, 6)),
    "width_keepdim": (lambda x: (x * 2.0).argmax(dim=3, keepdim=True), (1, 4, 5, 6)),
    "logits": (lambda x: (x * 0.5).argmax(dim=-1), (2, 10)),
    "tokens": (lambda x: (x + 1.0).argmax(dim=1, keepdim=True), (1, 7, 12)),
}
# Vela 5.2.0 runs ArgMax on Ethos-U55 along the last axis only (ethos_u55_constraints.cpp): x is in
# PyTorch's order here (elementwise ops keep the program input's NCHW), so these it refuses, and a
# compile leaves them on the CPU with Vela's reason.
U55_REFUSED = {"channels", "tokens"}


@pytest.mark.parametrize("target", list(SYSTEMS))
@pytest.mark.parametrize("name", list(CASES))
def test_argmax_equals_pt2e_on_tosa_and_the_npu_model(name, target):
    fn, shape = CASES[name]
    module = Lambda(lambda m, x: fn(x))
    inputs = seeded(11, shape)
    reference, g, parts = lower_module(module, inputs, [inputs, seeded(12, shape)], target)
    assert len(parts.partitions) == 1
    cpu = {p.op.op_type for p in parts.placements if p.partition is None}
    assert cpu <= {"aten._to_copy", "quantized_decomposed.quantize_per_tensor"}, cpu
    part = parts.partitions[0]
    tosa = tosa_lowering.lower(part, boards.target(target).npu)
    feeds = [quantize_input(inputs[0], g.inputs[0].qparams)]
    (indices,) = run_tosa(tosa, feeds)
    want = reference(*inputs)  # PT2E's argmax of the dequantized integers
    assert indices.dtype == np.int32 and np.array_equal(indices.reshape(want.shape), want.numpy())
    if target == "ethos-u55-128" and name in U55_REFUSED:
        with pytest.raises(VelaRefusal, match="ArgMax"):
            vela.compile_tosa(tosa, name, target, *SYSTEMS[target])
        return
    result = vela.compile_tosa(tosa, name, target, *SYSTEMS[target])
    raw, run = run_compiled(result, feeds, config_for(target))
    assert run.fault is None, run.fault
    assert raw[0] == np.ascontiguousarray(indices).tobytes()


def test_a_classifier_returns_int64_indices_equal_to_pt2e():
    """A whole program: the linear and argmax on the NPU, the cast on the CPU; run-host's int64
    indices equal the PT2E reference's on every sample."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(16, 10)).eval()
    classify = Lambda(lambda m, x: m[0](x).argmax(dim=1), model[0])
    samples = [seeded(20 + i, (4, 16))[0] for i in range(4)]
    result = kc.compile_model(
        LoadedModel("classify", classify.eval(), (samples[0],)), CompileSpec("ethos-u55-128"), log=lambda line: None
    )
    reasons = {p.op.op_type: p.reason for p in result.partitioning.placements if p.partition is None}
    assert reasons["aten._to_copy"] == "widens argmax's int32 indices (the NPU's) to PyTorch's int64 (a CPU kernel)"
    assert "aten.argmax" not in reasons
    for x in samples:
        (got,) = host.run(result.pte, [x.numpy()])
        want = result.quantized_module(x)
        assert got.dtype == np.int64 and np.array_equal(got, want.numpy())
