"""Slices on the NPU: every delegate of small kiln-compiled models with slices feeding
arithmetic runs on kiln's NPU model (Vela's command stream) bit for bit as on
tosa_reference_model (kiln.lower.lowerer's Lowerer.sliced says why a slice read by a widening
RESCALE goes through a copy)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from kiln.compile import compile_model
from kiln.frontend.export import LoadedModel
from kiln.spec import CompileSpec
from tests.simulator import helpers


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


_GATE_BIAS = torch.linspace(-2.0, 3.0, 32)

CASES = {
    "select_plus_select": (lambda x: x[:, 2] + x[:, 0], (1, 6, 16)),
    "select_plus_select_4d": (lambda x: x[:, 2] + x[:, 0], (1, 4, 4, 4)),
    "slices_kept_dims_add": (lambda x: x[:, 2:3] + x[:, 0:1], (1, 6, 16)),
    "select_relu_add": (lambda x: torch.relu(x[:, 2]) + x[:, 0], (1, 6, 16)),
    "select_mul": (lambda x: x[:, 2] * x[:, 0], (1, 6, 16)),
    "unbind_sub": (lambda x: torch.unbind(x, 1)[1] - torch.unbind(x, 1)[3], (1, 6, 16)),
    # a slice beside a constant, a table's result or a slice of another tensor: read in place
    "gate_slice_plus_constant": (lambda x: x[..., 32:64] + _GATE_BIAS, (1, 96)),
    "select_plus_constant": (lambda x: x[:, 2] - _GATE_BIAS[:16], (1, 6, 16)),
    "sigmoid_slice_plus_slice": (lambda x: torch.sigmoid(x[..., 0:32]) + x[..., 64:96], (1, 96)),
    "slices_of_two_tensors": (lambda x: torch.sigmoid(x)[..., 0:8] * x[..., 8:16], (1, 6, 16)),
    # attention: q and k selected from one qkv tensor, then q @ k.T
    "select_matmul": (lambda x: torch.matmul(x[0], x[1]), (3, 2, 4, 4)),
    "qkv_attention_scores": (
        lambda x: (lambda y: torch.matmul(y[0], y[1].transpose(-1, -2)))(
            x.reshape(1, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
        ),
        (1, 5, 24),
    ),
}


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
@pytest.mark.parametrize("name", CASES)
def test_slices_feeding_arithmetic_are_bit_exact(name, target):
    fn, shape = CASES[name]
    torch.manual_seed(0)
    x = torch.randn(*shape)
    result = compile_model(
        LoadedModel(name, Fn(fn).eval(), (x,)), CompileSpec(target), log=lambda *args, **kwargs: None
    )
    on_npu = {p.op.op_type for p in result.partitioning.placements if p.partition is not None}
    assert on_npu & {"aten.slice", "aten.select"}, on_npu
    diffs = []
    for tosa, vela, part in zip(result.tosa, result.vela, result.partitioning.partitions):
        rng = np.random.default_rng(0)
        arrays = [rng.integers(-128, 128, size=tuple(v.shape), dtype=np.int8) for v in part.inputs]
        diffs += helpers.compare(tosa, vela, arrays, target)[0]
    assert diffs == [0] * len(diffs) and diffs


@pytest.mark.parametrize("mode", ["Dedicated_Sram_384KB", "Sram_Only"])
def test_vela_reads_widened_slices_right_on_ethos_u85(mode):
    """Why kiln.families.SLICE_WIDEN_COPIES leaves Ethos-U85 out: the graph below that Vela places
    wrongly for Ethos-U55 runs right on the U85 model."""
    tosa = rows_added_graph()
    vela = compile_tosa(tosa, "rows_added", "ethos-u85-256", helpers.system_config("ethos-u85-256"), mode)
    x = [np.random.default_rng(0).integers(-128, 128, size=(1, 4, 6), dtype=np.int8)]
    assert helpers.compare(tosa, vela, x, "ethos-u85-256")[0] == [0]


# ---- Vela 5.2.0's own slips, which the copies above avoid --------------------------------
# Hand-built TOSA graphs of what kiln emits without Lowerer.unsliced's copies. In both, the
# registers Vela writes (its --verbose-register-command-stream listing says the same) read the
# wrong bytes, and the NPU model does exactly what they say. If a test here fails, Vela changed:
# see whether Lowerer.sliced's copies are still needed.

import tosa_serializer as ts  # noqa: E402

from kiln.lower.lowerer import attr, scale_to_multiplier  # noqa: E402
from kiln.lower.vela import compile_tosa  # noqa: E402
from kiln.simulator.npu import commands as npu_commands  # noqa: E402
from kiln.simulator.npu.cop1 import parse_cop1  # noqa: E402
from kiln.simulator.npu.u55.commands import U55_COMMANDS  # noqa: E402
from kiln.simulator.npu.u55.registers import U55Registers  # noqa: E402

TARGET = "ethos-u55-128"


_CONSTANTS = itertools.count(1)  # names of the constants the graphs below add


def _const(ser, array, dtype):
    name = f"c{next(_CONSTANTS)}"
    ser.addConst(list(np.shape(array)), dtype, np.array(array), name=name)
    return name


def _slice(ser, source, start, size):
    out = ser.addIntermediate(list(size), ts.DType.INT8).name
    ser.addOperator(
        ts.Op.SLICE,
        [
            source,
            _const(ser, np.array(start, np.int64), ts.DType.SHAPE),
            _const(ser, np.array(size, np.int64), ts.DType.SHAPE),
        ],
        [out],
        attr("Slice"),
    )
    return out


def _rescale(ser, source, shape, in_dtype, out_dtype, scale, output=False):
    multiplier, shift = scale_to_multiplier(scale, 32)
    out = (ser.addOutput if output else ser.addIntermediate)(list(shape), out_dtype).name
    ser.addOperator(
        ts.Op.RESCALE,
        [
            source,
            _const(ser, [multiplier], ts.DType.INT32),
            _const(ser, [shift], ts.DType.INT8),
            _const(ser, [0], in_dtype),
            _const(ser, [0], out_dtype),
        ],
        [out],
        attr("Rescale", True, ts.RoundingMode.SINGLE_ROUND, False, False, False),
    )
    return out


def rows_added_graph(rows=(2, 0), shape=(1, 4, 6)) -> bytes:
    """x[:, rows[0]] + x[:, rows[1]] as kiln lowers it without the copies: SLICE each row of the
    int8 input, RESCALE it to int32, ADD, RESCALE to int8."""
    ser = ts.TosaSerializer("", targetMinor=0, targetDraft=False)
    ser.addInputTensor(ts.TosaSerializerTensor("input-0", list(shape), ts.DType.INT8))
    size = [shape[0], 1, *shape[2:]]
    wide = [
        _rescale(
            ser, _slice(ser, "input-0", [0, r] + [0] * (len(shape) - 2), size), size, ts.DType.INT8, ts.DType.INT32, 0.5
        )
        for r in rows
    ]
    total = ser.addIntermediate(size, ts.DType.INT32).name
    ser.addOperator(ts.Op.ADD, wide, [total], attr("Add"))
    _rescale(ser, total, size, ts.DType.INT32, ts.DType.INT8, 1.0, output=True)
    return bytes(ser.serialize())


def selects_matmul_graph(shape=(3, 2, 4, 4)) -> bytes:
    """x[0] @ x[1] (int32 result) as kiln lowers it without the copies: SLICE and RESHAPE each
    operand out of the one input, MATMUL."""
    ser = ts.TosaSerializer("", targetMinor=0, targetDraft=False)
    ser.addInputTensor(ts.TosaSerializerTensor("input-0", list(shape), ts.DType.INT8))
    operands = []
    for i in (0, 1):
        piece = _slice(ser, "input-0", [i, 0, 0, 0], [1, *shape[1:]])
        flat = ser.addIntermediate(list(shape[1:]), ts.DType.INT8).name
        ser.addOperator(
            ts.Op.RESHAPE, [piece, _const(ser, np.array(shape[1:], np.int64), ts.DType.SHAPE)], [flat], attr("Reshape")
        )
        operands.append(flat)
    out = ser.addOutput(list(shape[1:]), ts.DType.INT32).name
    ser.addOperator(
        ts.Op.MATMUL,
        operands + [_const(ser, [0], ts.DType.INT8), _const(ser, [0], ts.DType.INT8)],
        [out],
        attr("MatMul"),
    )
    return bytes(ser.serialize())


def elementwise_registers(cmd_data: bytes, mode: int):
    """(IFM base 0, IFM2 base 0, OFM base 0, OFM (height, width, depth)) at every
    NPU_OP_ELEMENTWISE `mode`, as the command stream in Vela's driver payload sets them."""
    registers, found = U55Registers(), []
    for command in npu_commands.decode(npu_commands.as_words(parse_cop1(cmd_data).stream), U55_COMMANDS):
        if not command.is_operation:
            registers.set(command)
        elif command.name == "NPU_OP_ELEMENTWISE" and command.param == mode:
            found.append(
                (
                    registers.address("IFM_BASE0"),
                    registers.address("IFM2_BASE0"),
                    registers.address("OFM_BASE0"),
                    registers.ofm_shape(),
                )
            )
    return found


MUL, ADD = 0, 1


def test_vela_widening_rescale_of_slices_reads_and_writes_the_whole_input():
    """x[:, 2] + x[:, 0], x int8 [1, 4, 6]: Vela 5.2.0 rewrites each RESCALE int8 -> int32
    (GraphIrOptimiser::RewriteRescale) as an ADD that widens the whole input (24 elements, not
    the row) and a MUL by the multiplier whose IFM is that whole copy from its first byte (no
    row offset: x[:, 2] starts 2 * 24 bytes in) and whose OFM area is the input's 4 x 6, written
    into a 1 x 6 tensor (NHCWB16 int32, 64 bytes). Its own high-level stream says so: "Mul OFM
    area [0, 0, 0, 0 - 1, 1, 4, 6], IFM [0, 0, 0, 0 - 1, 1, 4, 6]" for OFM [1, 1, 1, 6]. The
    second such MUL writes 152 bytes from its tensor at scratch 0xa0, past the 224-byte
    scratch area (on hardware: over whatever follows it)."""
    tosa = rows_added_graph()
    vela = compile_tosa(tosa, "rows_added", TARGET, "Ethos_U55_High_End_Embedded", "Shared_Sram")
    (source,) = vela.inputs
    widen = elementwise_registers(vela.cmd_data, ADD)[:2]
    muls = elementwise_registers(vela.cmd_data, MUL)
    assert [(ifm, ofm_shape) for ifm, _, _, ofm_shape in widen] == [(source.offset, (1, 1, 24))] * 2  # all of x
    assert len(muls) == 2  # the two rescales to int32 (the one back to int8 is fused into the ADD)
    for (ifm, _, _, ofm_shape), (_, _, copy, _) in zip(muls, widen):
        assert ifm == copy and ofm_shape == (1, 4, 6)  # the whole copy from its start, 4 x 6 out
    x = [np.random.default_rng(0).integers(-128, 128, size=(1, 4, 6), dtype=np.int8)]
    _, result = helpers.run_on_model(vela, x, TARGET, [np.int8])
    assert result.fault is not None and result.fault.kind == "bus_error", result.fault
    assert "write of 152 bytes at 0x200000a0" in result.fault.message, result.fault


def test_vela_matmul_of_selects_does_not_step_its_ifm_over_the_batch():
    """x[0] @ x[1], x int8 [3, 2, 4, 4] (batch 2 of [4, 4] @ [4, 4]): Vela 5.2.0 copies and
    transposes x[1] (IFM base = input + 0x20, right) and reads x[0] in place, but its MULs for
    batch 1 keep IFM_BASE0 = the input's offset, where the IFM2 (0x60 -> 0x70) and OFM (0x80 ->
    0xc0) bases step on: batch 1 computes x[0, 0] @ x[1, 1] instead of x[0, 1] @ x[1, 1]."""
    tosa = selects_matmul_graph()
    vela = compile_tosa(tosa, "selects_matmul", TARGET, "Ethos_U55_High_End_Embedded", "Shared_Sram")
    (source,) = vela.inputs
    muls = elementwise_registers(vela.cmd_data, MUL)
    assert len(muls) == 8  # a MUL (and a REDUCE_SUM) per output column per batch
    assert {ifm for ifm, *_ in muls} == {source.offset}  # never source.offset + 0x10 = x[0, 1]
    assert len({ifm2 for _, ifm2, *_ in muls}) == 8
    x = np.random.default_rng(0).integers(-128, 128, size=(3, 2, 4, 4), dtype=np.int8)
    got, result = helpers.run_on_model(vela, [x], TARGET, [np.int32])
    assert result.fault is None, result.fault
    got = got[0].reshape(2, 4, 4)
    want = helpers.reference(tosa, [x])[0]
    assert np.array_equal(got[0], want[0]) and not np.array_equal(got[1], want[1])
    as_read = x.copy()
    as_read[0, 1] = x[0, 0]
    assert np.array_equal(got, helpers.reference(tosa, [as_read])[0])
