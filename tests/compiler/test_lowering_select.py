"""Comparisons, logical ops and any/all of masks, and select (Ethos-U85): the lowered TOSA on
tosa_reference_model against the PT2E reference, Vela places the graph on ethos-u85-256 and
refuses it on ethos-u55-128 (the support rule's claim), kiln's U85 model runs Vela's stream to
tosa_reference_model's bytes, and on Ethos-U55 the ops stay on the CPU with the rule's
reason."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kiln.errors import VelaRefusal
from kiln.lower import elementwise, vela
from kiln.simulator.npu.config import config_for
from kiln.simulator.npu.standalone import run_compiled
from tests.compiler.helpers import Lambda, compare_steps, lower_module, quantize_input, run_tosa, seeded

# name -> (function, input shapes, steps from PT2E allowed): a select copies one operand's integer
# (they share the output's quantization), so only an arithmetic op before it may round.
CASES = {
    "gt_tensors": (lambda x, y: torch.where(x > y, x, y), [(1, 8, 6, 6), (1, 8, 6, 6)], 0),
    "le_broadcast": (lambda x, y: torch.where(x <= y, x, y), [(1, 8, 6, 6), (1, 8, 1, 1)], 0),
    "ge_number": (lambda x: torch.where(x >= 0.3, x, 0.0), [(1, 4, 5, 6)], 0),
    "lt_number_3d": (lambda x, y: torch.where(x < -0.2, x, y), [(1, 6, 16), (1, 6, 16)], 0),
    "ne_rounded": (lambda x, y: torch.where(torch.round(x) != torch.round(y), x, -y), [(1, 6, 16), (1, 6, 16)], 0),
    "eq_number": (lambda x: torch.where(torch.round(x * 2) == 1.0, x, x * 0.5), [(1, 3, 8, 8)], 1),
    "gt_scaled": (lambda x, y: torch.where(x * 3.0 > y, x, y * 0.25), [(2, 4, 7), (2, 4, 7)], 1),
    # masks combined: & | ~ of bool tensors are logical_and / logical_or / logical_not
    "masks": (lambda x, y: torch.where(((x > 0.2) & (y < x)) | ~(x > y), x, y), [(1, 4, 6, 5), (1, 4, 6, 5)], 0),
    "mask_broadcast": (
        lambda x, y: torch.where(torch.logical_or(x < -0.5, y > 0.5), x, 0.0),
        [(1, 3, 8), (1, 1, 8)],
        0,
    ),
    # any / all of masks (REDUCE_ANY / REDUCE_ALL) along the last dim, channels, and two dims
    # tril / triu of activations: a select by a constant triangle
    "tril": (lambda x: torch.tril(x), [(1, 2, 6, 6)], 0),
    "triu_diagonal": (lambda x: torch.triu(x, 1) + x.amax(), [(2, 5, 7)], 1),  # x read by the select and amax
    "any_rows": (lambda x, y: torch.where((x > 0.2).any(dim=-1, keepdim=True), x, y), [(1, 6, 16), (1, 6, 16)], 0),
    "all_channels": (lambda x: torch.where((x < 0.5).all(dim=1, keepdim=True), x, 0.0), [(1, 8, 5, 6)], 0),
    "any_planes": (
        lambda x, y: torch.where(torch.any(x > y, dim=(2, 3), keepdim=True), x, y),
        [(1, 4, 6, 5), (1, 4, 6, 5)],
        0,
    ),
}


# At 16 bits: comparisons with numbers, and of two tensors of one scale (a transpose shares its input's)
CASES16 = {
    "ge_number_16": CASES["ge_number"],
    "lt_number_3d_16": CASES["lt_number_3d"],
    "eq_number_16": (lambda x: torch.where(x == 0.0, x + 1.0, x), [(1, 3, 8, 8)], 1),
    "gt_transposed_16": (lambda x: torch.where(x > x.transpose(-1, -2), x, 0.0), [(1, 6, 6)], 0),
    "ne_permuted_16": (lambda x: torch.where(x.permute(0, 1, 3, 2) != x, x, 0.0), [(1, 4, 5, 5)], 0),
    "tril_16": CASES["tril"],
}


def _case(name):
    fn, shapes, steps = {**CASES, **CASES16}[name]
    inputs = seeded(7, *shapes)
    return Lambda(lambda m, *xs: fn(*xs)), inputs, [inputs, seeded(8, *shapes)], steps


@pytest.mark.parametrize("name, bits", [(name, 8) for name in CASES] + [(name, 16) for name in CASES16])
def test_select_matches_pt2e_on_the_u85_and_its_npu_model(name, bits):
    module, inputs, calibration, steps = _case(name)
    diffs, tosa = compare_steps(module, inputs, calibration, target="ethos-u85-256", bits=bits)
    for d in diffs:
        assert d.max() <= steps, f"{name}: up to {d.max()} steps off"
    result = vela.compile_tosa(tosa, name, "ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid", "Sram_Only")
    _, g, _ = lower_module(module, inputs, calibration, "ethos-u85-256", bits)
    feeds = [quantize_input(x, v.qparams, getattr(torch, f"int{bits}")) for x, v in zip(inputs, g.inputs)]
    raw, run = run_compiled(result, feeds, config_for("ethos-u85-256"))
    assert run.fault is None, run.fault
    for got, want in zip(raw, run_tosa(tosa, feeds)):
        assert got == np.ascontiguousarray(want).tobytes()
    with pytest.raises(VelaRefusal):
        vela.compile_tosa(tosa, name, "ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram")


def test_on_the_u55_comparisons_and_select_stay_on_the_cpu_with_the_rules_reason():
    module, inputs, calibration, _ = _case("gt_tensors")
    _, _, parts = lower_module(module, inputs, calibration, "ethos-u55-128")
    reasons = {p.op.op_type: p.reason for p in parts.placements if p.partition is None}
    rule = "Vela 5.2.0 runs comparisons, logical ops (any, all) and selects on Ethos-U85, not on Ethos-U55 or U65"
    assert reasons == {"aten.gt": f"aten.gt: {rule}", "aten.where": f"aten.where: {rule}"}


def test_two_int16_tensors_of_two_scales_stay_on_the_cpu_with_the_rules_reason():
    module = Lambda(lambda m, x, y: torch.where(x * 30.0 > y, x, y))
    inputs = seeded(7, (1, 8, 6, 6), (1, 8, 6, 6))
    _, _, parts = lower_module(module, inputs, [inputs], "ethos-u85-256", 16)
    reasons = {p.op.op_type: p.reason for p in parts.placements if p.partition is None}
    assert reasons["aten.gt"] == (
        "aten.gt of [1, 8, 6, 6] and [1, 8, 6, 6]: kiln compares tensors quantized per tensor, two int8 ones or two "
        "int16 ones of one scale (no bits are left beside 16-bit values for a ratio of scales), or one int8 or "
        "int16 tensor with a finite number, or a checked index with integers"
    )


def test_threshold_test_by_hand():
    values = np.arange(-128, 128)
    assert elementwise.threshold_test(values >= 5) == ("GREATER_EQUAL", False, False, 5)
    assert elementwise.threshold_test(values <= -3) == ("GREATER_EQUAL", True, False, -3)
    assert elementwise.threshold_test(values == 7) == ("EQUAL", False, False, 7)
    assert elementwise.threshold_test(values != 7) == ("EQUAL", False, True, 7)
    assert elementwise.threshold_test(values > 200) == ("GREATER", True, False, -128)  # never: -128 > x
    assert elementwise.threshold_test(values > -200) == ("GREATER_EQUAL", False, False, -128)  # always
    wide = np.arange(-32768, 32768)
    assert elementwise.threshold_test(wide >= 1000, -32768) == ("GREATER_EQUAL", False, False, 1000)
    assert elementwise.threshold_test(wide > 40000, -32768) == ("GREATER", True, False, -32768)


def test_comparison_multipliers_by_hand():
    assert elementwise.comparison_multipliers(0.02, 0.01) == (2**20, 2**19)
    assert elementwise.comparison_multipliers(0.01, 0.03) == (349525, 2**20)  # round(2^20 / 3)
    assert elementwise.comparison_multipliers(0.03, 0.03) == (1, 1)


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
def test_any_and_all_through_a_program_equal_pt2e(target):
    """any/all in every spelling (a dim, dims, none; of a mask or of floats) through the front end,
    on the CPU kernels (Ethos-U55) or the NPU (Ethos-U85), equal PT2E's reference on run-host."""
    from kiln import compile as kc
    from kiln.frontend.export import LoadedModel
    from kiln.reference import run_host as host
    from kiln.spec import CompileSpec

    module = Lambda(
        lambda m, x: (
            (x > 0.3).any(dim=1),
            torch.all(x < 0.8, dim=(2, 3), keepdim=True),
            (x * 2.0).any(),
            (x > -2.0).all(-1),
        )
    )
    samples = [seeded(30 + i, (1, 4, 5, 6))[0] for i in range(3)]
    result = kc.compile_model(
        LoadedModel("any_all", module.eval(), (samples[0],)), CompileSpec(target), log=lambda line: None
    )
    where = {
        p.op.op_type: p.partition is not None
        for p in result.partitioning.placements
        if p.op.op_type in ("aten.any", "aten.all")
    }
    assert where == {"aten.any": target == "ethos-u85-256", "aten.all": target == "ethos-u85-256"}
    for x in samples:
        got = host.run(result.pte, [x.numpy()])
        want = result.quantized_module(x)
        assert [g.dtype for g in got] == [np.bool_] * 4
        for g, w in zip(got, want):
            assert np.array_equal(g, w.numpy())
