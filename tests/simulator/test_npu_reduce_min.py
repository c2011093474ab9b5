"""REDUCE_MIN and REDUCE_MAX (int8), with and without a following RESHAPE, compiled by Vela
for ethos-u55-128 and run on kiln's NPU model against tosa_reference_model; and 16-bit amin
on ethos-u85-256.

Vela 5.2.0 (regor) lowers an int8 REDUCE_MIN as pivot - max(pivot - x) with the pivot -1
(0xFF) a constant in region 0. When the result is reshaped, it first broadcasts the pivot
to the output shape: an ADD of an all-zero constant `const_zero` that it places at offset
0x10 of region 0, so the read-only area is 0xFF, 15 zeros, then the zeros of const_zero
(32 bytes). np.savez stores that as a 0-d "S32" array, whose .item() drops trailing NULs:
kiln read 1 byte of weights, and the NPU model faulted at the ADD's read of const_zero
(7 bytes at region 0 + 0x10 for [5, 7] -> [7]). kiln.lower.vela now keeps every byte.

A second fault is Vela's own: when the RESHAPE moves the reduced result to other NHWC
axes (a [1, 1, 1, C] result reshaped to [1, C, 1, 1] or [1, 1, C, 1]; [2, 1, 4] to [2, 4]),
the last SUB (pivot - max) reads the max in its pre-reshape shape as IFM2 and broadcasts it
along the OFM axis it lacks, so every output along that axis takes IFM2's element 0
(test_vela_reduce_min_reshaped_across_axes_reuses_one_row). No register setting lets
channel c of IFM2 feed OFM row c, so the hardware computes the same; kiln lowers amin as
~max(~q) there and emits no REDUCE_MIN (compiler/kiln/lower/tosa.py, _bitwise_not). The same
graphs compiled for ethos-u85-256, whose NPU reduces by min itself, run right, so on U85
kiln's amin is one REDUCE_MIN (kiln.families.MIN_AS_MAX)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tosa_serializer as ts

from kiln.lower.lowerer import attr
from kiln.lower.vela import compile_tosa
from tests.simulator import helpers

TARGET = "ethos-u55-128"


def reduce_graph(kind: str, shape, axis: int, reshape_to=None) -> bytes:
    """input-0 (int8 `shape`) -> REDUCE_`kind` along `axis` [-> RESHAPE to `reshape_to`]."""
    ser = ts.TosaSerializer("", targetMinor=0, targetDraft=False)
    ser.addInputTensor(ts.TosaSerializerTensor("input-0", list(shape), ts.DType.INT8))
    reduced = list(shape)
    reduced[axis] = 1
    attribute = attr(kind.title().replace("_", ""), axis, ts.NanPropagationMode.PROPAGATE)
    if reshape_to is None:
        out = ser.addOutput(reduced, ts.DType.INT8)
        ser.addOperator(getattr(ts.Op, kind), ["input-0"], [out.name], attribute)
    else:
        mid = ser.addIntermediate(reduced, ts.DType.INT8)
        ser.addOperator(getattr(ts.Op, kind), ["input-0"], [mid.name], attribute)
        ser.addConst([len(reshape_to)], ts.DType.SHAPE, np.array(reshape_to, np.int64), name="new_shape")
        out = ser.addOutput(list(reshape_to), ts.DType.INT8)
        ser.addOperator(ts.Op.RESHAPE, [mid.name, "new_shape"], [out.name], attr("Reshape"))
    return bytes(ser.serialize())


def compile_graph(kind, shape, axis, reshape_to=None):
    tosa = reduce_graph(kind, shape, axis, reshape_to)
    return tosa, compile_tosa(tosa, kind.lower(), TARGET, "Ethos_U55_High_End_Embedded", "Shared_Sram")


def inputs(shape, seed=0):
    return [np.random.default_rng(seed).integers(-128, 128, size=shape, dtype=np.int8)]


CASES = {
    "5x7_axis0_to_7": ((5, 7), 0, [7]),
    "5x7_axis0_kept": ((5, 7), 0, None),
    "3x1x1x5_axis0_to_5": ((3, 1, 1, 5), 0, [5]),
    "1x1x3x5_axis2_to_5": ((1, 1, 3, 5), 2, [5]),
    "2x6x4_axis1_to_2x4": ((2, 6, 4), 1, [2, 4]),  # REDUCE_MAX only, see VELA_WRONG
    "1x3x2x8_axis1_kept": ((1, 3, 2, 8), 1, None),
}


# Vela 5.2.0 gets these REDUCE_MIN -> RESHAPE wrong: case -> what its stream computes from
# m, the true minimum (the reduced axis dropped): the broadcast IFM2 reuses index 0.
VELA_WRONG = {
    "1x1x4x16_axis2_to_1x16x1x1": ((1, 1, 4, 16), 2, [1, 16, 1, 1], lambda m: np.full(m.shape, m.reshape(-1)[0])),
    "1x1x3x5_axis2_to_1x1x5x1": ((1, 1, 3, 5), 2, [1, 1, 5, 1], lambda m: np.full(m.shape, m.reshape(-1)[0])),
    "2x6x4_axis1_to_2x4": ((2, 6, 4), 1, [2, 4], lambda m: np.broadcast_to(m[:1], m.shape)),
}


@pytest.mark.parametrize(
    "kind, case",
    [
        (kind, case)
        for kind in ("REDUCE_MIN", "REDUCE_MAX")
        for case in CASES
        if not (kind == "REDUCE_MIN" and case in VELA_WRONG)
    ],
)
def test_reduce_bit_exact(kind, case):
    shape, axis, reshape_to = CASES[case]
    tosa, vela = compile_graph(kind, shape, axis, reshape_to)
    assert len(vela.weight_data) % 16 == 0  # Vela's read-only allocations are 16-byte aligned
    for seed in range(3):
        diffs, _ = helpers.compare(tosa, vela, inputs(shape, seed), TARGET)
        assert diffs == [0], (seed, diffs)


def test_reduce_min_reshaped_keeps_vela_zero_constant():
    """Region 0 of REDUCE_MIN [5, 7] -> [7]: the pivot at 0, const_zero at 0x10, all 32 bytes
    (kiln used to read b"\\xff" alone and the NPU read past the end of the weights)."""
    _, vela = compile_graph("REDUCE_MIN", (5, 7), 0, [7])
    assert vela.weight_data == b"\xff" + bytes(31)


def test_reduce_max_has_no_weights():
    """An empty read-only area (saved by np.savez as one NUL of type "S1") stays empty."""
    _, vela = compile_graph("REDUCE_MAX", (5, 7), 0, [7])
    assert vela.weight_data == b""


@pytest.mark.parametrize("case", VELA_WRONG)
def test_vela_reduce_min_reshaped_across_axes_reuses_one_row(case):
    """Vela 5.2.0's stream, not the model: when the RESHAPE moves the reduced result to
    other NHWC axes ([1, 1, 1, C] -> [1, C, 1, 1]: OFM H x W x C = C x 1 x 1; [1, 2, 1, 4] ->
    [1, 1, 2, 4]), the last SUB (pivot - max) reads the max as IFM2 in its pre-reshape shape
    and broadcasts it along the OFM axis it lacks (IFM2_BROADCAST bit 0 or 1), so every
    output along that axis takes IFM2's element 0 of it. REDUCE_MAX so reshaped is right.
    If this fails, Vela changed: see whether kiln's amin lowering still needs ~max(~q)."""
    shape, axis, reshape_to, computed = VELA_WRONG[case]
    tosa, vela = compile_graph("REDUCE_MIN", shape, axis, reshape_to)
    x = inputs(shape)
    got, result = helpers.run_on_model(vela, x, TARGET, [np.int8])
    assert result.fault is None, result.fault
    m = x[0].min(axis=axis)
    want = helpers.reference(tosa, x)[0]
    assert np.array_equal(want.reshape(-1), m.reshape(-1))
    assert np.array_equal(got[0], computed(m).reshape(-1))
    assert not np.array_equal(got[0], want.reshape(-1))
    tosa, vela = compile_graph("REDUCE_MAX", shape, axis, reshape_to)
    assert helpers.compare(tosa, vela, x, TARGET)[0] == [0]


@pytest.mark.parametrize("case", list(CASES) + list(VELA_WRONG))
def test_reduce_min_on_ethos_u85_bit_exact(case):
    shape, axis, reshape_to = (CASES.get(case) or VELA_WRONG[case])[:3]
    tosa = reduce_graph("REDUCE_MIN", shape, axis, reshape_to)
    vela = compile_tosa(tosa, "reduce_min", "ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid", "Shared_Sram")
    for seed in range(3):
        assert helpers.compare(tosa, vela, inputs(shape, seed), "ethos-u85-256")[0] == [0], seed


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u65-256", "ethos-u85-256"])
@pytest.mark.parametrize(
    "dims, keepdim, shape", [(-1, False, (1, 6, 16)), (1, True, (1, 8, 6, 6)), ((2, 3), False, (1, 4, 5, 6))]
)
def test_amin_lowered_for_each_family_bit_exact(dims, keepdim, shape, target):
    """kiln's amin (~max(~q) on U55/U65, REDUCE_MIN on U85) on the NPU model as tosa_reference_model."""
    import torch

    module = type("M", (torch.nn.Module,), {"forward": lambda self, x: x.amin(dims, keepdim=keepdim)})()
    diffs, result = helpers.module_on_the_model(module, shape, "amin", target)
    assert diffs == [0] and result.counters["block_ops"] > 0, (diffs, result)


@pytest.mark.parametrize(
    "name, shape, dims", [("last", (2, 3, 10), (-1,)), ("first", (5, 7), (0,)), ("planes", (1, 4, 6, 6), (2, 3))]
)
def test_16_bit_amin_on_ethos_u85_equals_tosa_reference(name, shape, dims):
    """16-bit amin on ethos-u85-256 (one REDUCE_MIN, results reshaped onto other axes where a dim
    goes): kiln's NPU model runs Vela's stream to tosa_reference_model's values."""
    module = type("M", (torch.nn.Module,), {"forward": lambda self, x: x.amin(dims)})()
    diffs, result = helpers.module_on_the_model(module, shape, name, "ethos-u85-256", bits=16, spread=3.0)
    assert diffs == [0] and result.counters["block_ops"] > 0, (diffs, result)
