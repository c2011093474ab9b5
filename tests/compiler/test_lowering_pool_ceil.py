"""Pools with ceil_mode on the NPU: average pooling (count_include_pad either way) and max pooling
whose last window ceil_mode adds runs past the input, compared with the PT2E reference on
tosa_reference_model over a sweep of kernels, strides and paddings on an input of odd height and
even width, and end to end through Vela on kiln's NPU model (kiln run-host); a ResNet-D shortcut
is one delegate."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kiln import compile as kc
from kiln.frontend import export as frontend
from kiln.frontend.quantizer import EthosUQuantizer, quantize
from kiln.reference import run_host as host
from kiln.spec import CompileSpec
from tests.compiler.helpers import Lambda, compare_steps, conv, quantize_input, run_tosa, seeded, steps_off

SHAPE = (1, 3, 7, 6)  # odd height, even width
SWEEP = [
    (k, s, p, include) for k, s, p, include in itertools.product((2, 3), (1, 2, 3), (0, 1), (True, False)) if 2 * p <= k
]


def _avg(k, s, p, include):
    return Lambda(lambda m, x: F.avg_pool2d(x, k, s, p, ceil_mode=True, count_include_pad=include))


def _max(k, s, p):
    return Lambda(lambda m, x: F.max_pool2d(x, k, s, p, ceil_mode=True))


@pytest.mark.parametrize("k, s, p, include", SWEEP)
def test_avg_pool_ceil_mode_equals_the_pt2e_reference(k, s, p, include):
    (diff,), _ = compare_steps(_avg(k, s, p, include), seeded(k * 100 + s * 10 + p, SHAPE))
    assert diff.max() <= 1


@pytest.mark.parametrize("k, s, p", sorted({(k, s, p) for k, s, p, _ in SWEEP}))
def test_max_pool_ceil_mode_equals_the_pt2e_reference(k, s, p):
    (diff,), _ = compare_steps(_max(k, s, p), seeded(k * 100 + s * 10 + p, SHAPE))
    assert diff.max() == 0


def test_ceil_mode_pools_add_a_window_in_the_sweep():
    """The sweep holds pools whose last window ceil_mode adds, along each axis."""
    added = [
        tuple(F.avg_pool2d(torch.zeros(SHAPE), k, s, p, ceil_mode=True).shape[2:])
        != tuple(F.avg_pool2d(torch.zeros(SHAPE), k, s, p).shape[2:])
        for k, s, p, _ in SWEEP
    ]
    assert sum(added) >= 8


class ResNetDShortcut(torch.nn.Module):
    """ResNet-D's downsampling shortcut: a 2x2 average pool with ceil_mode and without
    count_include_pad, then a 1x1 convolution, added to the main path's 3x3 strided convolution."""

    def __init__(self):
        super().__init__()
        self.main = conv(8, 16, 3, stride=2, padding=1)
        self.short = conv(8, 16, 1)

    def forward(self, x):
        pooled = F.avg_pool2d(x, 2, 2, ceil_mode=True, count_include_pad=False)
        return torch.relu(self.main(x) + self.short(pooled))


CASES = {
    "resnet_d_odd": (ResNetDShortcut(), (1, 8, 7, 9)),
    "resnet_d_even": (ResNetDShortcut(), (1, 8, 8, 8)),
    "avg_3_2_1_include": (_avg(3, 2, 1, True), (1, 4, 8, 7)),
    "avg_3_2_1_exclude": (_avg(3, 2, 1, False), (1, 4, 8, 7)),
    "avg_2_3_0": (_avg(2, 3, 0, False), (1, 4, 7, 8)),
    "max_3_2_1": (_max(3, 2, 1), (1, 4, 8, 7)),
}


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
@pytest.mark.parametrize("name", CASES)
def test_ceil_mode_pools_run_through_vela_as_tosa_defines_them(name, target):
    """One delegate; Vela's command stream on kiln's NPU model (run-host) computes what
    tosa_reference_model does on the delegate's TOSA graph, bit for bit, and the pools alone are
    within a step of the PT2E reference. (The ResNet-D block is within 3: so it is on an even
    input too, where ceil_mode adds no window, from its convolutions and add.)"""
    module, shape = CASES[name]
    (x,) = seeded(7, shape)
    loaded = frontend.LoadedModel(name, module.eval(), (x,))
    result = kc.compile_model(loaded, CompileSpec(target), log=lambda line: None)
    cpu = [o["node"] for o in result.report["ops"] if o["where"] == "cpu" and not o["node"].startswith("quantize")]
    assert not cpu and len(result.report["delegates"]) == 1
    (got,) = host.run(result.pte, [x.numpy()])
    (part,) = result.partitioning.partitions
    (tosa_out,) = run_tosa(result.tosa[0], [quantize_input(x, part.inputs[0].qparams)])
    out_qp = part.outputs[0].qparams
    np.testing.assert_array_equal(got, (tosa_out.astype(np.float32) - out_qp.zero_point) * np.float32(out_qp.scale))
    ref = quantize(frontend.export(loaded).module(check_guards=False), [(x,)], EthosUQuantizer())
    assert steps_off(got, ref(x), out_qp.scale).max() <= (3 if name.startswith("resnet_d") else 1)


def test_ceil_mode_beyond_the_npu_strides_stays_on_the_cpu_where_it_adds_windows():
    """A stride of 4 is run as window sums divided by the kernel's area: where ceil_mode adds a
    window it holds fewer values, so the pool stays on the CPU with that reason; where ceil_mode
    adds none it is the plain pool, on the NPU."""
    reason = (
        "average pooling with kernel [4, 4] and ceil_mode on [1, 4, 10, 8]: kiln runs a stride beyond the NPU's 1..3 "
        "as window sums divided by the window's size, and ceil_mode adds windows at the edges that hold fewer values"
    )
    for shape, cpu in (((1, 4, 10, 8), {"avg_pool2d": reason}), ((1, 4, 8, 8), {})):
        (x,) = seeded(3, shape)
        module = Lambda(lambda m, x: F.avg_pool2d(x, 4, ceil_mode=True))
        result = kc.compile_model(frontend.LoadedModel("s4", module.eval(), (x,)), CompileSpec("ethos-u55-128"))
        got = {o["node"]: o["reason"] for o in result.report["ops"] if o["where"] == "cpu"}
        assert {k: v for k, v in got.items() if not k.startswith("quantize")} == cpu
        ref = quantize(frontend.export(frontend.LoadedModel("s4", module, (x,))).module(), [(x,)], EthosUQuantizer())
        (out,) = host.run(result.pte, [x.numpy()])
        assert np.abs(out - ref(x).numpy()).max() <= 1.01 * result.graph.outputs[0].producer.inputs[0].qparams.scale
