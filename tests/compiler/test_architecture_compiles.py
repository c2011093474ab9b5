"""`kiln compile` on the architecture models (kiln.models.ARCHITECTURES): each compiles for
ethos-u55-128, ethos-u55-256 and ethos-u65-256, and `kiln run-host` of the program is within
two quantization steps of the PT2E reference (torch running the quantized module the compile
made) on every output element.

Each model is compiled once per target per session (the outcome, error included, is kept),
so the two tests of a (model, target) pair cost one compile.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kiln import compile as kc
from kiln import models
from kiln.reference import run_host as host
from kiln.spec import CompileSpec
from tests.compiler.helpers import steps_off

TARGETS = ("ethos-u55-128", "ethos-u55-256", "ethos-u65-256")
CASES = [(name, target) for name in models.ARCHITECTURES for target in TARGETS]

_outcomes: dict[tuple[str, str], kc.Result | Exception] = {}


def compiled(name: str, target: str) -> kc.Result:
    """The session's compile of `name` for `target`; a failed compile raises its error again."""
    key = (name, target)
    if key not in _outcomes:
        try:
            _outcomes[key] = kc.compile_model(name, CompileSpec(target), log=lambda line: None)
        except Exception as error:  # kept, so the pair's other test reports it without compiling again
            _outcomes[key] = error
    outcome = _outcomes[key]
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def output_scales(module: torch.fx.GraphModule) -> list[float]:
    """Per output of the PT2E module, the scale of the int8 value its output dequantizes."""
    (output,) = [n for n in module.graph.nodes if n.op == "output"]
    scales = []
    for i, node in enumerate(output.args[0]):
        assert node.target == torch.ops.quantized_decomposed.dequantize_per_tensor.default, (
            f"output {i} of the PT2E reference is {node.target}, not a dequantized int8 value"
        )
        scales.append(float(node.args[1]))
    return scales


@pytest.mark.parametrize("name, target", CASES)
def test_compiles(name, target):
    result = compiled(name, target)
    report = result.report
    assert result.pte and report["target"] == target
    assert {op["where"] for op in report["ops"]} <= {"npu", "cpu"}
    inputs = [tuple(e["shape"]) for e in report["io"] if e["kind"] == "input"]
    assert inputs == [tuple(x.shape) for x in result.inputs]
    print(
        f"{name} {target}: NPU share of MACs {report['macs']['npu_share']:.3f}, "
        f"{len(report['delegates'])} delegate(s), CPU ops "
        f"{sorted({o['op'] for o in report['ops'] if o['where'] == 'cpu'})}"
    )


@pytest.mark.parametrize("name, target", CASES)
def test_run_host_within_two_steps_of_pt2e(name, target):
    entry = models.ARCHITECTURES[name]
    result = compiled(name, target)
    inputs = result.inputs
    with torch.no_grad():
        want = result.quantized_module(*inputs)
    want = want if isinstance(want, (tuple, list)) else (want,)
    got = host.run(result.pte, [x.numpy() for x in inputs])
    assert len(got) == len(want)
    for i, (g, w, scale) in enumerate(zip(got, want, output_scales(result.quantized_module), strict=True)):
        assert g.shape == tuple(w.shape) and g.dtype == np.float32
        off = steps_off(g, w, scale)
        assert (off <= entry.tolerance_steps).mean() >= entry.tolerance_fraction, (
            f"{name} on {target}, output {i}: up to {int(off.max())} steps of {scale:g} off the PT2E reference, "
            f"{(off > entry.tolerance_steps).sum()} of {off.size} elements beyond {entry.tolerance_steps}"
        )
