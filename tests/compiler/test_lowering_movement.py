"""slice, select and expand on the NPU: the lowered TOSA on tosa_reference_model equals the PT2E
reference (they only copy int8 values, so exactly), Vela places the graph on ethos-u55-128 (and
ethos-u85-256), and kiln's NPU model runs Vela's stream to the same bytes; what is not lowered
stays on the CPU with its rule's text."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from kiln import boards
from kiln.lower import tosa as tosa_lowering
from kiln.lower import vela
from kiln.simulator.npu.config import config_for
from kiln.simulator.npu.standalone import run_compiled
from tests.compiler.helpers import Lambda, compare_steps, conv, lower_module, quantize_input, run_tosa, seeded


def _mul_add(a, b, c):
    return a * b + c


# Each case: (module, input shapes). Slices after a convolution read an NHWC value; the
# others a value in PyTorch's order.
CASES = {
    "slice_channels": (Lambda(lambda m, x: m[0](x)[:, 1:5]), [(1, 3, 8, 7)], conv(3, 8, 3, padding=1)),
    "slice_rows_negative": (Lambda(lambda m, x: m[0](x)[:, :, -5:-1]), [(1, 3, 8, 7)], conv(3, 8, 3, padding=1)),
    "slice_columns_clamped": (Lambda(lambda m, x: m[0](x)[..., 2:100]), [(1, 3, 8, 7)], conv(3, 8, 3, padding=1)),
    "slice_rank3": (Lambda(lambda m, x: torch.relu(x)[:, 3:, :-2]), [(2, 9, 6)]),
    "slice_rank2_chain": (Lambda(lambda m, x: torch.relu(x)[1:][:, 4:9]), [(5, 11)]),
    "split_halves": (Lambda(lambda m, x: torch.relu(x[:, :4]) + x[:, 4:]), [(1, 8, 5, 5)]),
    "select_channel": (Lambda(lambda m, x: m[0](x).select(1, -2)), [(1, 3, 8, 7)], conv(3, 8, 3, padding=1)),
    "select_row": (Lambda(lambda m, x: m[0](x)[:, :, 3]), [(1, 3, 8, 7)], conv(3, 8, 3, padding=1)),
    "select_rank3": (Lambda(lambda m, x: torch.relu(x)[:, 0]), [(2, 9, 6)]),
    "expand_channels": (Lambda(lambda m, x: m[0](x).expand(1, 8, 6, 7)), [(1, 3, 6, 7)], conv(3, 1, 1)),
    "expand_rows": (Lambda(lambda m, x: torch.relu(x).expand(1, 4, 5, 6)), [(1, 4, 1, 6)]),
    "expand_new_dims": (Lambda(lambda m, x: torch.relu(x).expand(2, 3, 5, 6)), [(5, 1)]),
    "unbind": (Lambda(lambda m, x: _mul_add(*torch.relu(x).unbind(2))), [(1, 4, 3, 6)]),
}


def _case(name):
    module, shapes, *layers = CASES[name]
    module.layers = nn.ModuleList(layers)
    return module, seeded(2, *shapes), [seeded(2, *shapes), seeded(3, *shapes)]


@pytest.mark.parametrize("name", list(CASES))
def test_lowered_movement_equals_pt2e_and_vela_places_it(name):
    module, inputs, calibration = _case(name)
    diffs, tosa = compare_steps(module, inputs, calibration)
    limit = 1 if name in ("split_halves", "unbind") else 0  # add and mul round; copies are exact
    for d in diffs:
        assert d.max() <= limit, f"{name}: up to {d.max()} steps off"
    _assert_vela_places(tosa, name)


def _assert_vela_places(tosa: bytes, name: str):
    for target, config, mode in (
        ("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram"),
        ("ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid", "Dedicated_Sram_384KB"),
    ):
        result = vela.compile_tosa(tosa, name, target, config, mode)
        assert result.cmd_data[:4] == b"COP1"


@pytest.mark.parametrize("name", list(CASES))
def test_npu_model_runs_the_stream_as_tosa_reference_model(name):
    """The virtual platform's NPU model runs Vela's ethos-u55-128 stream to tosa_reference_model's
    bytes (a REVERSE, which flip would need, faults there: flip stays on the CPU)."""
    module, inputs, calibration = _case(name)
    _, g, parts = lower_module(module, inputs, calibration)
    tosa = tosa_lowering.lower(parts.partitions[0], boards.target("ethos-u55-128").npu)
    feeds = [quantize_input(x, v.qparams) for x, v in zip(inputs, g.inputs)]
    result = vela.compile_tosa(tosa, name, "ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram")
    raw, run = run_compiled(result, feeds, config_for("ethos-u55-128"))
    assert run.fault is None, run.fault
    for got, want in zip(raw, run_tosa(tosa, feeds)):
        assert got == np.ascontiguousarray(want).tobytes()


@pytest.mark.parametrize(
    "fn, shape, op_type, reason",
    [
        (
            lambda x: torch.flip(torch.relu(x), [2]),
            (1, 3, 4, 4),
            "aten.flip",
            "kiln has no TOSA lowering for aten.flip",
        ),
        (
            lambda x: torch.relu(x)[3],
            (5,),
            "aten.select",
            "aten.select to shape []: the NPU has no empty or 0-dimensional tensors",
        ),
    ],
)
def test_what_is_not_lowered_stays_on_the_cpu_with_its_reason(fn, shape, op_type, reason):
    _, _, parts = lower_module(Lambda(lambda m, x: fn(x)), seeded(6, shape))
    reasons = {p.op.op_type: p.reason for p in parts.placements if p.partition is None}
    assert reasons.get(op_type) == reason, reasons
