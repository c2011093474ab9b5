"""Lowering choices (kiln.lower.tosa.lower_noting_choices, kiln.compile.fastest): where a
partition has equivalent TOSA graphs whose cost Vela's scheduling decides (a global mean as a
REDUCE_SUM, or read in place by a pool or a depthwise sum; a layout change as a rank-4 or a 2-D
TRANSPOSE), compile_model keeps one Vela's own estimate puts fastest, checked here by compiling
every combination of the choices with Vela apart; the choice taken is the graph the program
holds, the profile traces it, and its output is the PT2E reference's within one step."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
import torch
from torch import nn

from kiln import boards, families
from kiln import compile as kc
from kiln.frontend.export import LoadedModel
from kiln.lower import tosa as tosa_lowering
from kiln.lower import vela
from kiln.reference import profile
from kiln.reference import run_host as host
from kiln.spec import CompileSpec

TARGET = "ethos-u65-256"
SHAPES = [(2, 2, 128), (4, 4, 128)]


class ConvMeanLinear(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.fc = nn.Conv2d(16, c, 3, padding=1), nn.Linear(c, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


@functools.cache
def compiled(h: int, w: int, c: int):
    torch.manual_seed(1)
    loaded = LoadedModel(f"mean_{h}x{w}x{c}", ConvMeanLinear(c).eval(), (torch.randn(1, 16, h, w),))
    return kc.compile_model(loaded, CompileSpec(TARGET), log=lambda line: None)


def every_combination(result) -> dict[frozenset[str], tuple[tuple[int, int], bytes]]:
    """(run time, TOSA) per combination of the choices the result's one delegate meets, by Vela."""
    spec = CompileSpec(TARGET).resolved()
    (part,) = result.program.delegates
    _, choices = tosa_lowering.lower_noting_choices(part, boards.target(TARGET).npu)
    graphs = {}
    for k in range(len(choices) + 1):
        for flipped in map(frozenset, itertools.combinations(sorted(choices), k)):
            flatbuffer = tosa_lowering.lower(part, boards.target(TARGET).npu, flipped)
            compiled_alone = vela.compile_tosa(flatbuffer, "alone", TARGET, spec.system_config, spec.memory_mode)
            graphs[flipped] = kc.run_time(compiled_alone), flatbuffer
    return graphs


@pytest.mark.parametrize("h, w, c", SHAPES)
def test_the_program_holds_the_graph_vela_estimates_fastest(h, w, c):
    result = compiled(h, w, c)
    graphs = every_combination(result)
    assert set(graphs) >= {frozenset({families.POOLED_MEANS.name}), frozenset({families.RANK4_TRANSPOSES.name})}
    (flipped,) = result.flipped
    assert result.tosa == [graphs[flipped][1]] and result.report["delegates"][0]["flipped_choices"] == sorted(flipped)
    assert kc.run_time(result.vela[0]) == graphs[flipped][0] == min(time for time, _ in graphs.values())


def test_both_forms_of_a_mean_are_taken_on_one_target():
    """Not a rule of shapes: of these two maps, Vela's estimate favours a different form each."""
    assert {families.POOLED_MEANS.name in compiled(*shape).flipped[0] for shape in SHAPES} == {True, False}


def test_a_flipped_graph_is_profiled_and_matches_pt2e():
    result = compiled(2, 2, 128)
    assert families.POOLED_MEANS.name in result.flipped[0]
    p = profile.profile(result)
    assert sum(layer.npu_cycles or 0 for layer in p.layers) == p.total_npu_cycles > 0
    (mean,) = [layer for layer in p.layers if layer.name == "mean"]
    assert [op.split()[0] for op in mean.vela_operations] == ["DepthwiseConv2D"]  # a mean's finer step: no pool
    (got,) = host.run(result.pte, [x.numpy() for x in result.inputs])
    want = result.quantized_module(*result.inputs).detach().numpy()
    step = result.graph.outputs[0].producer.inputs[0].qparams.scale  # the dequantized int8 output's
    assert np.abs(got - want).max() <= step * 1.0001


def test_a_graph_vela_fails_on_is_dropped(monkeypatch):
    """Vela failing on a flipped graph (here: each after the first, as a timeout) leaves the first."""
    from kiln.errors import VelaError

    (part,) = compiled(4, 4, 128).program.delegates
    first, choices = tosa_lowering.lower_noting_choices(part, boards.target(TARGET).npu)
    real, calls = vela.compile_tosa, []

    def failing(flatbuffer, *args, **kwargs):
        calls.append(flatbuffer)
        if len(calls) > 1:
            raise VelaError("Vela did not finish compiling alone within 600 s")
        return real(flatbuffer, *args, **kwargs)

    monkeypatch.setattr(vela, "compile_tosa", failing)
    flipped, flatbuffer, _ = kc.fastest(
        part, first, choices, "alone", boards.target(TARGET), CompileSpec(TARGET).resolved(), None
    )
    assert flipped == frozenset() and flatbuffer == first and len(calls) == 1 + len(choices) > 1
