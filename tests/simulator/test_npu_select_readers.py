"""A SELECT, or an any, whose operand another op also reads, compiled by Vela 5.2.0 for
ethos-u85-256 and run on kiln's NPU model against tosa_reference_model.

Two faults are Vela's own (the register listing shows the stream computing what the model
computes; no register setting would make the hardware compute the select):

- A SELECT operand that a RESHAPE into another shape also reads (beyond adding leading unit
  dims): Vela reads the operand in the RESHAPE's shape. where(x > y, x, y) beside x reshaped to
  [5, 14], x [2, 5, 7]: the select's AND (Vela builds SELECT as AND, AND_NOT and OR of the
  NPU's -1 mask) reads x as [1, 1, 5, 14] broadcast over H (IFM_BROADCAST H, IFM_STRIDE_X 14)
  against the [1, 2, 5, 7] mask, so output [h, w, c] takes x.reshape(5, 14)[w, c]. The same
  for the condition or the other operand; a SELECT of reshaped views reads right. kiln reads
  one of the two through a copy (kiln.families.SELECT_OPERAND_COPIES).
- A bool graph output that other ops in the graph read: Vela turns it into TOSA's 0 and 1 in
  place (an AND with 1 chained to its comparison) and the other readers read that, where they
  take -1 for true: the select's AND keeps x's lowest bit (x & 1 | y & ~1), an any (a MIN pool
  of the -1 mask) of 0 and 1 is an all, a TRANSPOSE carries the 0 and 1 to a select. Logical
  ops and a CAST of such an output read right. kiln writes such an output as a copy of its
  own (kiln.families.BOOL_OUTPUT_COPIES).

Both are what kiln's rule `sole_reader_of_its_mask` kept off the NPU: with the any on the
NPU its RESHAPE shared the mask with the select; with it on the CPU the mask became a graph
output read by the select, the second fault (the select 132 of 288 elements off)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tosa_serializer as ts

from kiln import boards
from kiln.lower import tosa as tosa_lowering
from kiln.lower.lowerer import attr
from kiln.lower.vela import compile_tosa
from tests.compiler.helpers import Lambda, lower_module, quantize_input, seeded
from tests.simulator import helpers

TARGET = "ethos-u85-256"
SHAPE = [2, 5, 7]


def _compile(tosa: bytes):
    return compile_tosa(tosa, "select_readers", TARGET, "Ethos_U85_SYS_DRAM_Mid", "Sram_Only")


def _run(tosa: bytes, inputs) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(model's outputs, tosa_reference_model's), each flat and of the reference's dtype."""
    want = helpers.reference(tosa, inputs)
    got, result = helpers.run_on_model(_compile(tosa), inputs, TARGET, [w.dtype for w in want])
    assert result.fault is None, result.fault
    return got, [w.reshape(-1) for w in want]


class Graph:
    """A TOSA graph under construction: int8 inputs x and y of SHAPE and the mask m = x > y."""

    def __init__(self, mask_output: bool = False):
        self.ser = ts.TosaSerializer("", targetMinor=0, targetDraft=False)
        for name in ("x", "y"):
            self.ser.addInputTensor(ts.TosaSerializerTensor(name, SHAPE, ts.DType.INT8))
        self.count = 0
        self.tensors: dict[str, ts.TosaSerializerTensor] = {}
        wide = [self.rescale(name, ts.DType.INT32) for name in ("x", "y")]
        self.m = self.op("GREATER", wide, SHAPE, ts.DType.BOOL, output=mask_output)

    def const(self, values: np.ndarray, dtype) -> str:
        self.count += 1
        self.ser.addConst(list(values.shape), dtype, values, name=f"c{self.count}")
        return f"c{self.count}"

    def op(self, kind: str, inputs: list[str], shape, dtype, *args, output: bool = True) -> str:
        out = (self.ser.addOutput if output else self.ser.addIntermediate)(list(shape), dtype)
        self.tensors[out.name] = out
        self.ser.addOperator(getattr(ts.Op, kind), inputs, [out.name], attr(kind.title().replace("_", ""), *args))
        return out.name

    def rescale(self, name: str, dtype) -> str:
        """An identity RESCALE of int8 `name` (2^30 >> 30, zero points 0) to `dtype`."""
        operands = [
            self.const(np.array([1 << 30], np.int32), ts.DType.INT32),
            self.const(np.array([30], np.int8), ts.DType.INT8),
            self.const(np.array([0], np.int8), ts.DType.INT8),
            self.const(np.array([0], np.int32 if dtype == ts.DType.INT32 else np.int8), dtype),
        ]
        rounding = (True, ts.RoundingMode.SINGLE_ROUND, False, False, False)
        return self.op("RESCALE", [name, *operands], SHAPE, dtype, *rounding, output=False)

    def copy(self, name: str) -> str:
        """kiln's copy (Lowerer.copy): an identity RESCALE of an int8, LOGICAL_AND of a bool with itself."""
        if name == self.m:
            return self.op("LOGICAL_AND", [name, name], SHAPE, ts.DType.BOOL, output=False)
        return self.rescale(name, ts.DType.INT8)

    def reshape(self, name: str, shape, dtype, output: bool = True) -> str:
        target = self.const(np.array(shape, np.int64), ts.DType.SHAPE)
        return self.op("RESHAPE", [name, target], shape, dtype, output=output)

    def bytes(self) -> bytes:
        return bytes(self.ser.serialize())


def select_beside_a_reshape(shared: str, reshape_to, copied: bool) -> bytes:
    """Output 0 SELECT(m, x, y), output 1 the max (of the mask: any) along axis 0 of operand
    `shared` (cond, a or b) reshaped to `reshape_to`; `copied`: the select reads that operand
    through kiln's copy. (Not the reshaped mask as an output: that is the second fault.)"""
    g = Graph()
    operands = [g.m, "x", "y"]
    index = ["cond", "a", "b"].index(shared)
    source = operands[index]
    if copied:
        operands[index] = g.copy(source)
    g.op("SELECT", operands, SHAPE, ts.DType.INT8)
    dtype = ts.DType.BOOL if shared == "cond" else ts.DType.INT8
    view = g.reshape(source, reshape_to, dtype, output=False)
    reduced = [1, *reshape_to[1:]]
    if shared == "cond":
        g.op("REDUCE_ANY", [view], reduced, dtype, 0)
    else:
        g.op("REDUCE_MAX", [view], reduced, dtype, 0, ts.NanPropagationMode.PROPAGATE)
    return g.bytes()


@pytest.mark.parametrize("shared", ["cond", "a", "b"])
def test_vela_select_reads_an_operand_a_reshape_regroups_in_the_reshapes_shape(shared):
    """Vela's stream, not the model: the select is wrong beside a RESHAPE of its operand to
    [5, 14] (output [h, w, c] of operand a is x.reshape(5, 14)[w, c] where the mask holds);
    right beside one to [1, 2, 5, 7] (leading unit dims only), and right when it reads the
    operand through kiln's copy."""
    inputs = helpers.int8_inputs([SHAPE, SHAPE], 0)
    got, want = _run(select_beside_a_reshape(shared, [5, 14], copied=False), inputs)
    assert np.array_equal(got[1], want[1])  # the reduction
    assert np.count_nonzero(got[0] != want[0]) > 10
    if shared == "a":
        x, y = inputs
        m = x.astype(np.int32) > y
        rows = np.broadcast_to(x.reshape(5, 14)[None, :, :7], SHAPE)
        assert np.array_equal(got[0], np.where(m, rows, y).reshape(-1))
    for tosa in (select_beside_a_reshape(shared, [1, *SHAPE], False), select_beside_a_reshape(shared, [5, 14], True)):
        got, want = _run(tosa, inputs)
        assert all(np.array_equal(g, w) for g, w in zip(got, want))


def bool_output_read(reader: str, copied: bool) -> bytes:
    """Output 0 the mask m (through kiln's copy where `copied`), output 1 what `reader` makes of
    m: a select of x and y, an any along axis 0, or a select of the transposed mask."""
    g = Graph(mask_output=not copied)
    if copied:
        g.ser.addOutputTensor(g.tensors[g.copy(g.m)])
    if reader == "select":
        g.op("SELECT", [g.m, "x", "y"], SHAPE, ts.DType.INT8)
    elif reader == "any":
        g.op("REDUCE_ANY", [g.m], [1, *SHAPE[1:]], ts.DType.BOOL, 0)
    else:
        flipped = g.op("TRANSPOSE", [g.m], [2, 7, 5], ts.DType.BOOL, [0, 2, 1], output=False)
        a, b = (g.const(np.arange(70, dtype=np.int8).reshape(2, 7, 5) * sign, ts.DType.INT8) for sign in (1, -1))
        g.op("SELECT", [flipped, a, b], [2, 7, 5], ts.DType.INT8)
    return g.bytes()


@pytest.mark.parametrize("reader", ["select", "any", "transposed_select"])
def test_vela_rewrites_a_bool_output_in_place_under_its_other_readers(reader):
    """Vela's stream, not the model: the mask output is right, what another op makes of it is
    not (a select of x and y is x & 1 | y & ~1 where the mask holds); with the output a copy
    of its own both are right."""
    inputs = helpers.int8_inputs([SHAPE, SHAPE], 0)
    got, want = _run(bool_output_read(reader, copied=False), inputs)
    assert np.array_equal(got[0], want[0])
    assert np.count_nonzero(got[1] != want[1]) > 5
    if reader == "select":
        x, y = inputs
        m = x.astype(np.int32) > y
        assert np.array_equal(got[1], np.where(m, (x & 1) | (y & ~1), y).reshape(-1))
    got, want = _run(bool_output_read(reader, copied=True), inputs)
    assert all(np.array_equal(g, w) for g, w in zip(got, want))


def kilns_graph_on_the_model(fn, shapes) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(model's outputs, tosa_reference_model's) of kiln's TOSA graph of `fn` on seeded inputs
    of `shapes`, every op of it on the NPU."""
    module = Lambda(lambda m, *xs: fn(*xs))
    inputs = seeded(7, *shapes)
    _, g, parts = lower_module(module, inputs, [inputs, seeded(8, *shapes)], TARGET)
    assert [p.op.op_type for p in parts.placements if p.partition is None] == []
    (part,) = parts.partitions
    tosa = tosa_lowering.lower(part, boards.target(TARGET).npu)
    feeds = {id(v): quantize_input(x, v.qparams) for x, v in zip(inputs, g.inputs)}
    return _run(tosa, [feeds[id(v)] for v in part.inputs])


# name -> (function, input shapes): a select whose operand a RESHAPE also reads (the amax of all
# of x reshapes it to [5, 14], along the last dim to [10, 7]); the last one kept its any on the
# CPU under the rule `sole_reader_of_its_mask` (test_lowering_select.py's, moved here)
SELECTS_BESIDE_RESHAPES = {
    "where_plus_amax": (lambda x: torch.where(x > 0.1, x, 0.0) + x.amax(), [(2, 5, 7)]),
    "where_times_amax": (lambda x: torch.where(x > 0.1, x, 0.0) * x.amax(), [(2, 5, 7)]),
    "where_plus_row_amax": (lambda x: torch.where(x > 0.1, x, 0.0) + x.amax(-1, keepdim=True), [(2, 5, 7)]),
    "other_operand_reshaped": (lambda x: torch.where(x > 0.1, 0.0, x).reshape(5, 14) + x.reshape(5, 14), [(2, 5, 7)]),
    "mask_and_its_any": (
        lambda x, y: (lambda mask: (torch.where(mask, x, y * 0.5), mask.any(dim=1)))(x > y),
        [(1, 8, 6, 6), (1, 8, 6, 6)],
    ),
}


@pytest.mark.parametrize("name", SELECTS_BESIDE_RESHAPES)
def test_kilns_select_beside_a_reshape_of_its_operand_runs_right(name):
    got, want = kilns_graph_on_the_model(*SELECTS_BESIDE_RESHAPES[name])
    assert all(np.array_equal(g, w) for g, w in zip(got, want))


# name -> (function, input shapes): a mask the graph returns and also selects by or reduces
BOOL_OUTPUTS = {
    "mask_and_its_select": (lambda x, y: (lambda m: (torch.where(m, x, y), m))(x > y), [(2, 5, 7), (2, 5, 7)]),
    "reshaped_mask_and_its_select": (
        lambda x, y: (lambda m: (torch.where(m, x, y), m.reshape(5, 14)))(x > y),
        [(2, 5, 7), (2, 5, 7)],
    ),
    "mask_and_its_any": (lambda x: (lambda m: (m, m.any(dim=-1)))(x > 0.1), [(2, 5, 7)]),
    "nchw_mask_and_its_select": (lambda x, y: (lambda m: (torch.where(m, x, y), m))(x > y), [(1, 8, 6, 6)] * 2),
    "any_of_all_and_its_select": (lambda x: (lambda a: (torch.where(a, x, 0.0), a))((x > 0.5).any()), [(2, 5, 7)]),
}


@pytest.mark.parametrize("name", BOOL_OUTPUTS)
def test_kilns_bool_output_that_other_ops_read_runs_right(name):
    got, want = kilns_graph_on_the_model(*BOOL_OUTPUTS[name])
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
