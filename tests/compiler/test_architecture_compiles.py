"""`kiln compile` on the architecture models (kiln.models.ARCHITECTURES): each compiles for
ethos-u55-128, ethos-u55-256 and ethos-u65-256, and `kiln run-host` of the program is within
two quantization steps of the PT2E reference (torch running the quantized module the compile
made) on every output element.

Each model is compiled once per target per session (tests.compiler.helpers.compiled), so the
two tests of a (model, target) pair cost one compile.
"""

from __future__ import annotations

import pytest

from kiln import models
from tests.compiler.helpers import compiled, run_host_steps_off_pt2e

TARGETS = ("ethos-u55-128", "ethos-u55-256", "ethos-u65-256")
CASES = [(name, target) for name in models.ARCHITECTURES for target in TARGETS]


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
    for i, (off, scale) in enumerate(run_host_steps_off_pt2e(result)):
        assert (off <= entry.tolerance_steps).mean() >= entry.tolerance_fraction, (
            f"{name} on {target}, output {i}: up to {int(off.max())} steps of {scale:g} off the PT2E reference, "
            f"{(off > entry.tolerance_steps).sum()} of {off.size} elements beyond {entry.tolerance_steps}"
        )
