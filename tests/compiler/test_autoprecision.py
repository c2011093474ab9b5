"""`--int16 auto` (kiln.frontend.autoprecision): the values whose 8 bits cost the output the most,
measured against the float model, computed at 16 bits. The references: PyTorch eager float (the
error each program makes, by `kiln run-host`), and models built by hand so that which value needs
16 bits is known beforehand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from kiln import compile as kc
from kiln.frontend import export as frontend
from kiln.frontend.autoprecision import sqnr_db
from kiln.reference import run_host as host
from kiln.spec import AutoRule, CompileSpec, Int16Regions

from .test_state import accumulator

OUTLIER = 500.0  # how far channel 0 of the middle layer's output reaches beyond the others


class Mlp(nn.Module):
    """Three linear layers. With `outlier`, channel 0 of fc2's output is OUTLIER times larger (its
    weights and a bias of 100) and scaled back by a constant before fc3: fc2's output spans
    hundreds, its other channels about one, which 8 bits (a step of range / 255) cannot resolve;
    every other value keeps a range of a few units."""

    def __init__(self, outlier: bool):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2, self.fc3 = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 8)
        damp = torch.ones(32)
        if outlier:
            with torch.no_grad():
                self.fc2.weight[0] *= OUTLIER
                self.fc2.bias[0] = 100.0
            damp[0] = 1 / OUTLIER
        self.register_buffer("damp", damp)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))) * self.damp)


def loaded(outlier: bool) -> frontend.LoadedModel:
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    return frontend.LoadedModel("mlp", Mlp(outlier).eval(), (x,))


def compiled(outlier: bool, int16: Int16Regions | None = None):
    spec = CompileSpec("ethos-u85-256", int16=int16 or Int16Regions())
    return kc.compile_model(loaded(outlier), spec, log=lambda line: None)


AUTO = Int16Regions(auto=AutoRule())


@pytest.fixture(scope="module")
def outlier():
    """The outlier model at 8 bits and with --int16 auto, and its float output."""
    model = loaded(True)
    with torch.no_grad():
        want = model.module(*model.inputs).numpy()
    return compiled(True), compiled(True, AUTO), want


def program_sqnr(result, want: np.ndarray) -> float:
    got = host.run(result.pte, [x.numpy() for x in result.inputs])[0]
    return sqnr_db(torch.from_numpy(want), torch.from_numpy(got))


def test_the_layer_8_bits_cannot_resolve_is_chosen_and_nothing_else(outlier):
    _, auto, _ = outlier
    ops = {op.name: op for op in auto.graph.ops if op.origin[1] != "requantize" and op.op_type.startswith("aten.")}
    # the value fc2 writes (its linear and the relu fused after it) and the op reading it (the mul)
    fc2 = {name for name, op in ops.items() if op.module == "fc2"} | {"relu_1"}
    reader = {name for name, op in ops.items() if op.op_type.startswith("aten.mul")}
    report = auto.report["int16_auto"]
    assert [c["value"] for c in report["promoted"]] == ["relu_1"]
    assert set(report["promoted"][0]["ops"]) == fc2 | reader and len(fc2 | reader) == 3
    chosen = {e["node"] for e in auto.report["int16"] if e["why"].startswith("auto:")}
    assert chosen <= fc2 | reader and {"linear_1", "mul"} <= chosen  # the fused relu writes fc2's value
    for name in ("linear", "linear_2"):
        assert ops[name].output.dtype == "int8", name
    assert report["cpu_ops"] == {}


def test_the_choice_brings_the_program_close_to_float(outlier):
    """Against PyTorch eager float, by run-host: 8 bits lose fc2's small channels (under 15 dB);
    with its value at 16 bits the program is within 35 dB, as the report's measure said."""
    int8, auto, want = outlier
    before, after = program_sqnr(int8, want), program_sqnr(auto, want)
    assert before < 15 and after > 35, (before, after)
    report = auto.report["int16_auto"]
    assert report["int8_sqnr_db"] < 15 and report["chosen_sqnr_db"] >= report["rule"]["target_sqnr_db"]
    assert abs(report["pt2e_sqnr_db"] - after) < 3


def test_a_model_8_bits_serve_promotes_nothing_and_compiles_as_int8():
    int8, auto = compiled(False), compiled(False, AUTO)
    report = auto.report["int16_auto"]
    assert report["int8_sqnr_db"] >= report["rule"]["target_sqnr_db"]
    assert report["promoted"] == [] and auto.report["int16"] == []
    assert auto.pte == int8.pte


def test_the_choice_is_the_same_on_every_compile(outlier):
    _, auto, _ = outlier
    again = compiled(True, AUTO)
    assert again.report["int16_auto"] == auto.report["int16_auto"]
    assert again.pte == auto.pte


def test_a_budget_smaller_than_the_value_promotes_nothing():
    """fc2's value takes 3 ops to 16 bits; a budget of 2 leaves it at 8 bits (and takes what fits)."""
    result = compiled(True, Int16Regions(auto=AutoRule(budget=2)))
    report = result.report["int16_auto"]
    assert report["rule"]["budget_ops"] == 2
    assert "relu_1" not in [c["value"] for c in report["promoted"]]
    assert len({op for c in report["promoted"] for op in c["ops"]}) <= 2
    fc2 = next(c for c in report["measured"] if c["value"] == "relu_1")
    assert fc2["gain_db"] > 20 and len(fc2["ops"]) == 3
    assert report["chosen_sqnr_db"] < 15


class Scores(nn.Module):
    """A product of two activations, q's channel 0 300 times the others and k's 300 times smaller
    (so their product is of the others' size): at 8 bits both lose it. On Ethos-U55 a 16-bit
    matmul runs on the CPU (kiln.families' int16_matmul row), on Ethos-U85 on the NPU."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.q, self.k, self.out = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(8, 4)
        with torch.no_grad():
            self.q.weight[0] *= 300
            self.k.weight[0] /= 300
            self.k.bias[0] = 0

    def forward(self, x):
        return self.out(self.q(x) @ self.k(x).transpose(-2, -1))


@pytest.mark.parametrize(("target", "promoted"), [("ethos-u85-256", True), ("ethos-u55-128", False)])
def test_a_value_whose_reader_would_leave_the_npu_is_not_promoted(target, promoted):
    model = frontend.LoadedModel("scores", Scores().eval(), (torch.randn(1, 8, 16),))
    result = kc.compile_model(model, CompileSpec(target, int16=AUTO), log=lambda line: None)
    report = result.report["int16_auto"]
    first = next(c for c in report["measured"] if c["value"] == "linear")
    assert first["gain_db"] > 10 and "matmul" in first["ops"]
    if promoted:
        assert "linear" in [c["value"] for c in report["promoted"]]
    else:
        assert first["refused"] == f"matmul would run on the CPU at 16 bits on {target}"
        assert not any("matmul" in c["ops"] for c in report["promoted"])
    placed = {o["node"]: o["where"] for o in result.report["ops"]}
    assert placed["matmul"] == "npu"


def test_auto_combines_with_a_policy():
    """--int16-module fc1 --int16 auto: the pattern's ops first, then the measured choice on top."""
    int16 = Int16Regions(modules=("fc1",), auto=AutoRule())
    result = compiled(True, int16)
    why = {e["node"]: e["why"] for e in result.report["int16"]}
    assert why["linear"] == "module pattern 'fc1'"
    assert why["linear_1"].startswith("auto: relu_1's value at 8 bits costs")


def test_a_program_state_keeps_8_bits_in_every_method():
    """The accumulator of test_state (two methods sharing a running total) with an unreachable
    target: every value is measured, the state's is refused by name, and the total stays int8 in
    both methods (the program's state section says so, and what it costs)."""
    model, xs = accumulator()
    spec = CompileSpec("ethos-u85-256", int16=Int16Regions(auto=AutoRule(target_db=200)))
    result = kc.compile_model(frontend.LoadedModel("accumulator", model, xs[:1]), spec, log=lambda line: None)
    for name, method in result.report["methods"].items():
        auto = method["int16_auto"]
        state = [c for c in auto["measured"] if c["value"] == "state_total"]
        assert state and state[0]["refused"].endswith("the program's state total, which keeps 8 bits in every method")
        assert not any(set(c["ops"]) & set(state[0]["ops"]) for c in auto["promoted"]), name
    [buffer] = result.report["state"]["buffers"]
    assert buffer["dtype"] == "int8" and buffer["bytes"] == 8 and buffer["bits"] == 8
    text = kc.format_report(result.report)
    assert "  total: int8[1, 8] (8 B at 8 bits, 16 B at 16 bits" in text


def test_the_rule_promotes_by_figure_in_rounds_within_the_budget():
    """choose() on a measure worked out by hand: a exact gives 12 dB, b 5 dB only once a is exact
    (0 before), c and d 2 dB each (equal: c first, graph order), e 0.05 dB (below MIN_GAIN_DB)."""
    from kiln.frontend.autoprecision import Candidate, choose

    def measure(on) -> float:
        on = set(on)
        return 10 + 12 * (0 in on) + 5 * ({0, 1} <= on) + 2 * (2 in on) + 2 * (3 in on) + 0.05 * (4 in on)

    def candidates():
        return [Candidate(n, [i], [f"{n}_op", "shared"] if n == "b" else [f"{n}_op"]) for i, n in enumerate("abcde")]

    picked = choose(candidates(), measure, target_db=30, budget=None)
    assert [c.name for c in picked.promoted] == ["a", "c", "d", "b"]  # b only in round 2
    assert [c.round for c in picked.promoted] == [1, 1, 1, 2] and picked.chosen_db == 31
    assert choose(candidates(), measure, target_db=23, budget=None).promoted[-1].name == "c"  # 24 >= 23
    assert [c.name for c in choose(candidates(), measure, 30, budget=2).promoted] == ["a", "c"]
    assert choose(candidates(), measure, target_db=10, budget=None).promoted == []  # met at 8 bits
