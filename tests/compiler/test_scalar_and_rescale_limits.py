"""Two ways a model that exports ended in an error, each now a placement or a lowering:
a product whose requantization factor TOSA RESCALE cannot represent (an L2 normalisation of
rows that calibration saw all zero: rsqrt(eps^2) ~ 1e12 gives the next mul a huge factor)
stays on the CPU with the reason in the report, within two steps of the PT2E reference; and
rank-0 values (reductions to a scalar, a scalar input) on the NPU are [1] in the TOSA graph,
which tosa_reference_model accepts (kiln run-host runs it), within one step of PT2E."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from kiln import compile as kc
from kiln.errors import LoweringError
from kiln.frontend.export import LoadedModel
from kiln.partition import rescale, support
from kiln.reference import run_host as host
from kiln.spec import CompileSpec
from tests.compiler.helpers import Lambda
from tests.compiler.random_models import steps_off_pt2e

TARGETS = ["ethos-u55-128", "ethos-u85-256"]


def _compile(fn, inputs, target: str) -> kc.Result:
    module = Lambda(lambda layers, *xs: fn(*xs)).eval()
    return kc.compile_model(LoadedModel("m", module, inputs), CompileSpec(target), log=lambda line: None)


def _steps_off(result: kc.Result, inputs) -> float:
    got = host.run(result.pte, [x.numpy() for x in inputs])  # tosa_reference_model on each delegate
    return steps_off_pt2e(result, inputs, got)[0]


# ---- a requantization factor too large for RESCALE --------------------------------------------
def test_rescale_limits_by_hand():
    """A 32-bit multiplier m in [2^30, 2^31) with shift >= 2 reaches m * 2^-2 < 2^29; 16-bit: 2^13."""
    assert rescale.fits(1.5 * 2**28) and not rescale.fits(2.0**29) and not rescale.fits(3.85e9)
    assert rescale.fits(1.5 * 2**12, 16) and not rescale.fits(2.0**13, 16)
    assert rescale.fits([1.0, 2.0**-40]) and not rescale.fits([1.0, 2.0**30])


def _normalized_relu(x):
    return F.normalize(torch.relu_(x), dim=-1) * 3


def _zero_row_input():
    x = torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(3))
    x[0, 1] = -1.0  # relu makes it all zero: its norm is clamped at eps, rsqrt(eps^2) = 1e12
    return (x,)


def test_a_product_rescale_too_large_stays_on_the_cpu_with_its_reason():
    inputs = _zero_row_input()
    result = _compile(_normalized_relu, inputs, "ethos-u55-128")
    kept = [p for p in result.report["ops"] if p["where"] == "cpu" and "RESCALE" in (p["reason"] or "")]
    assert [p["op"] for p in kept] == ["aten.mul"], result.report["ops"]
    factor = float(re.search(r"factor of (\S+) ", kept[0]["reason"]).group(1))
    assert factor >= 2**29, kept[0]["reason"]  # beyond the largest 32-bit RESCALE factor (by hand, above)
    assert sum(p["where"] == "npu" for p in result.report["ops"]) >= 4  # the rest of the norm stays on the NPU
    assert _steps_off(result, inputs) <= 2


def test_a_rescale_too_large_in_the_lowering_names_node_op_and_target(monkeypatch):
    """Were the rule not there, the lowering's error names the node, its op and the NPU family."""
    inputs = _zero_row_input()
    node = next(
        p["node"]
        for p in _compile(_normalized_relu, inputs, "ethos-u55-128").report["ops"]
        if "RESCALE" in (p["reason"] or "")
    )
    monkeypatch.setattr(support, "RULES", [r for r in support.RULES if r.name != "representable_rescale"])
    with pytest.raises(LoweringError, match=rf"node {node} \(aten\.mul\) on ethos-u55: .*too large for TOSA RESCALE"):
        _compile(_normalized_relu, inputs, "ethos-u55-128")


# ---- rank-0 values on the NPU ----------------------------------------------------------------
SCALARS = {  # name -> (fn, the ops that must run on the NPU)
    "mean_times_2": (lambda x: x.mean() * 2, {"aten.mean", "aten.mul"}),
    "sum_plus_1": (lambda x: x.sum() + 1, {"aten.sum", "aten.add"}),
    "amax_gt_0": (lambda x: x.amax() > 0, {"aten.amax"}),
    "amax_times_3": (lambda x: x.amax() * 3, {"aten.amax", "aten.mul"}),
    "times_its_mean": (lambda x: x * x.mean(), {"aten.mean", "aten.mul"}),
    "minus_its_max": (lambda x: x - x.amax(), {"aten.amax", "aten.sub"}),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", SCALARS)
def test_scalars_on_the_npu_match_pt2e(name, target):
    fn, on_npu = SCALARS[name]
    inputs = (torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(0)),)
    result = _compile(fn, inputs, target)
    placed = {p["op"]: p["where"] for p in result.report["ops"]}
    assert all(placed[op] == "npu" for op in on_npu), placed
    assert _steps_off(result, inputs) <= 1


@pytest.mark.parametrize("target", TARGETS)
def test_a_scalar_input_to_an_npu_partition_matches_pt2e(target):
    inputs = (torch.tensor(0.7), torch.randn(2, 3, generator=torch.Generator().manual_seed(1)))
    result = _compile(lambda s, y: torch.sigmoid(s * 2) + y.mean(), inputs, target)
    assert all(p["where"] == "npu" for p in result.report["ops"] if "quantize" not in p["op"]), result.report["ops"]
    assert _steps_off(result, inputs) <= 1
