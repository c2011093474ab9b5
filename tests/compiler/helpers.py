"""Shared by the lowering tests: run a module's NPU partition on tosa_reference_model
and compare with the PT2E reference (quantize(PT2E-converted module(x)))."""

from __future__ import annotations

import numpy as np
import torch
import tosa_reference_model

from kiln import boards, graph
from kiln.frontend import export as frontend
from kiln.frontend.quantizer import EthosUQuantizer, QuantizationScheme, quantize
from kiln.isolation import quiet_native_output
from kiln.lower import tosa as tosa_lowering
from kiln.partition import partitioner as partition

qd = torch.ops.quantized_decomposed


def quantize_input(x: torch.Tensor, qp: graph.QParams, dtype=torch.int8) -> np.ndarray:
    return qd.quantize_per_tensor.default(x, qp.scale, qp.zero_point, qp.qmin, qp.qmax, dtype).numpy()


def run_tosa(tosa: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    with quiet_native_output():
        outputs, status = tosa_reference_model.run(tosa, inputs)
    assert status == tosa_reference_model.GraphStatus.TOSA_VALID, status
    return outputs


def lower_module(
    module: torch.nn.Module,
    inputs: tuple,
    calibration: list[tuple] | None = None,
    target: str = "ethos-u55-128",
    bits: int = 8,
):
    """(quantized reference module, kiln graph with integer I/O, partitioning) of `module`."""
    loaded = frontend.LoadedModel("case", module.eval(), inputs)
    reference = quantize(
        frontend.export(loaded).module(check_guards=False),
        calibration or [inputs],
        EthosUQuantizer(QuantizationScheme(bits)),
    )
    g = graph.from_pt2e(reference, io_quantized=True)
    return reference, g, partition.partition(g, boards.target(target).npu)


def compare_steps(module: torch.nn.Module, inputs: tuple, calibration=None, target="ethos-u55-128", bits=8):
    """Max difference in quantization steps between the NPU partition on
    tosa_reference_model and the PT2E reference, per output; asserts one partition."""
    reference, g, parts = lower_module(module, inputs, calibration, target, bits)
    cpu = [(p.op.name, p.reason) for p in parts.placements if p.partition is None]
    assert not cpu, f"ops left on the CPU: {cpu}"
    assert len(parts.partitions) == 1
    part = parts.partitions[0]
    tosa = tosa_lowering.lower(part, boards.target(target).npu)
    dtype = getattr(torch, QuantizationScheme(bits).activation_dtype)
    # the partition takes its inputs in order of first use and returns its outputs in order of
    # production, which need not be the model's orders
    feeds = {id(v): quantize_input(x, v.qparams, dtype) for x, v in zip(inputs, g.inputs)}
    produced = dict(zip((id(v) for v in part.outputs), run_tosa(tosa, [feeds[id(v)] for v in part.inputs])))
    outputs = [produced[id(v)] for v in g.outputs]
    expected = reference(*inputs)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    diffs = []
    for got, want, v in zip(outputs, expected, g.outputs):
        qp = v.qparams
        want_q = qd.quantize_per_tensor.default(want, qp.scale, qp.zero_point, qp.qmin, qp.qmax, dtype)
        assert got.shape == tuple(want_q.shape), (got.shape, want_q.shape)
        diffs.append(np.abs(got.astype(np.int32) - want_q.numpy().astype(np.int32)))
    return diffs, tosa
