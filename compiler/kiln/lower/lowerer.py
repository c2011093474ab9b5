"""The Lowerer: one TOSA graph under construction, and what every family of lowerings shares.

kiln.lower.tosa is the stage's entry (lower, lower_noting_choices); each family module
(conv, pool, elementwise, reduce, softmax, movement, resize, gather) registers its lowerings
here with @lowering. The layout contract and integer semantics are kiln.lower.tosa's.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import tosa_serializer as ts

from kiln.errors import KilnError, LoweringError
from kiln.families import (
    BOOL_OUTPUT_COPIES,
    CLAMP_COPIES,
    OFFSET_COPIES,
    RANK4_TRANSPOSES,
    SELECT_OPERAND_COPIES,
    SLICE_WIDEN_COPIES,
    NpuFamily,
    Row,
)
from kiln.frontend.permutes import reduced_permutation
from kiln.graph import QRANGE, Op, QParams, Value
from kiln.partition.partitioner import Partition
from kiln.partition.rescale import ACCUMULATOR, SHIFT_MIN, multiplier_and_shift, multiplier_bits  # noqa: F401

DT = {
    "int8": ts.DType.INT8,
    "int16": ts.DType.INT16,
    "int32": ts.DType.INT32,
    "int48": ts.DType.INT48,
    "bool": ts.DType.BOOL,
}
_NUMPY = {"int48": np.int64}  # dtypes numpy lacks: the numpy type their constants are built from
# TOSA ops whose int32/int48 result Vela 5.2.0 rescales in the op itself when a RESCALE
# follows (the elementwise ones as kiln lowers them, with widening RESCALEs on their
# operands); see Lowerer.placeable. Each is checked in tests/simulator/test_npu_concat_offsets.py.
_FOLDS_RESCALE = {"CONV2D", "DEPTHWISE_CONV2D", "ADD", "SUB", "MUL", "MINIMUM", "MAXIMUM", "REDUCE_SUM", "MATMUL"}


def channels_last(rank: int) -> tuple[int, ...]:
    """The permutation moving PyTorch dim 1 (channels) last: NCHW -> NHWC at rank 4, NCL -> NLC at 3."""
    return (0, *range(2, rank), 1)


def channels_first(rank: int) -> tuple[int, ...]:
    """channels_last's inverse."""
    return (0, rank - 1, *range(1, rank - 1))


NCHW_TO_NHWC = channels_last(4)
NHWC_TO_NCHW = channels_first(4)


def scale_to_multiplier(scale: float, bits: int = 32) -> tuple[int, int]:
    """(multiplier, shift) with multiplier * 2**-shift ~= scale, multiplier in
    [2**(bits-2), 2**(bits-1)) and shift in 2..62, as TOSA RESCALE needs (kiln.partition.rescale);
    a LoweringError where `scale` is too large (Lowerer.lower names the node)."""
    multiplier, shift = multiplier_and_shift(scale, bits)
    if shift < SHIFT_MIN:
        raise LoweringError(f"rescale factor {scale:g} is too large for TOSA RESCALE")
    return multiplier, shift


def tosa_shape(shape) -> list[int]:
    """A value's shape in the TOSA graph: a rank-0 value (a reduction to a scalar) is [1], as the
    serializer stores a 0-d constant, so that every op sees operands and results of one rank.
    The graph's inputs and outputs keep PyTorch's shapes: Lowerer.lower reshapes at the boundary."""
    return [int(d) for d in shape] or [1]


def _grouped(shape) -> list[int]:
    """`shape` without its leading unit dims: the shape as Vela groups it into NHWC."""
    dims = [int(d) for d in shape]
    while dims and dims[0] == 1:
        dims.pop(0)
    return dims


def attr(kind: str, *args) -> ts.TosaSerializerAttribute:
    attribute = ts.TosaSerializerAttribute()
    getattr(attribute, f"{kind}Attribute")(*args)
    return attribute


def op_attr(op: str, *args) -> ts.TosaSerializerAttribute:
    """The attribute of TOSA op `op` named as the op is (REDUCE_SUM -> ReduceSumAttribute)."""
    return attr(op.title().replace("_", ""), *args)


def quantize_real(x: float, qp: QParams, dtype: str) -> int:
    """The integer for real value x under `qp`, saturated to dtype (infinities to the ends)."""
    lo, hi = QRANGE[dtype]
    if math.isinf(x):
        return lo if x < 0 else hi
    return int(min(max(round(x / qp.scale) + qp.zero_point, lo), hi))


class Lowerer:
    """One partition's TOSA graph under construction for one NPU family: the lowerings (LOWERINGS)
    add its operators; `family` says which workarounds and first guesses apply (kiln.families),
    `flipped` names the choices taken against the family's first guess."""

    def __init__(self, partition: Partition, family: NpuFamily, flipped: frozenset[str] = frozenset()):
        self.partition = partition
        self.family = family
        self.flipped = flipped
        self.choices: set[str] = set()  # the choices (kiln.families.CHOICES) that shaped this graph
        self.ser = ts.TosaSerializer("", targetMinor=0, targetDraft=False)
        # value id -> (TOSA name, stored channels last): NHWC at rank 4 (where the NPU's ops work),
        # and at rank 3 NLC where a squeeze of an NHWC map made it (a Conv1d network's values,
        # which then reach the next convolution without two TRANSPOSEs); see bound().
        self.names: dict[int, tuple[str, bool]] = {}
        self.reshaped: dict[tuple[str, tuple[int, ...]], str] = {}  # (tensor, shape) -> its RESHAPE
        self.transposed: dict[tuple[str, tuple[int, ...]], str] = {}  # (tensor, perm) -> its layout change
        self.tensors: dict[str, ts.TosaSerializerTensor] = {}  # non-constant tensors by name
        self.producers: dict[str, tuple[str, list[str]]] = {}  # tensor name -> (TOSA op, its inputs)
        self.cuts: dict[str, tuple[str, list[int]]] = {}  # a SLICE's result -> (its input, its start)
        self.readers: dict[str, list[tuple[str, str]]] = {}  # tensor name -> (TOSA op, its output) of each reader
        self.apart_copies: dict[str, str] = {}  # tensor name -> the copy apart() gave a SELECT or a RESHAPE
        self.tables: dict[tuple[str, tuple[int, ...]], tuple[np.ndarray, str]] = {}  # see table()
        self.count = 0

    def choose(self, choice: Row) -> bool:
        """Whether this graph takes `choice` (a kiln.families CHOICE row), noted among the choices
        it met: the family's first guess unless flipped. kiln.compile.fastest lowers the
        partition again with each met choice flipped and keeps the graph Vela estimates faster."""
        self.choices.add(choice.name)
        return self.family.takes(choice, self.flipped)

    # ---- tensors -----------------------------------------------------------------
    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def inter(self, shape, dtype: str) -> str:
        tensor = self.ser.addIntermediate(tosa_shape(shape), DT[dtype])
        self.tensors[tensor.name] = tensor
        return tensor.name

    def const(self, array: np.ndarray, dtype: str, stem: str = "const") -> str:
        array = np.ascontiguousarray(array, dtype=_NUMPY.get(dtype, dtype)).reshape(tosa_shape(np.shape(array)))
        name = self.fresh(stem)
        self.ser.addConst(list(array.shape), DT[dtype], array, name=name)
        return name

    def table(self, v: Value, shape) -> str:
        """The TOSA constant of constant `v`'s integers as `shape`, one per graph for the constant that
        several ops read as that shape (a tied embedding table, which a GATHER and the head's MATMUL
        read: Vela then holds it once among its weights)."""
        key = (v.name, tuple(shape))
        if key not in self.tables or not np.array_equal(self.tables[key][0], v.data):
            self.tables[key] = (v.data, self.const(v.data.reshape(shape), v.dtype, "table"))
        return self.tables[key][1]

    def shape_const(self, values) -> str:
        name = self.fresh("shape")
        self.ser.addConst([len(values)], ts.DType.SHAPE, np.array(values, np.int64), name=name)
        return name

    def emit(self, op: str, inputs: list[str], outputs: list[str], attribute):
        if op == "CONCAT":  # the first operand lands at offset 0, where Vela's slip does no harm
            inputs = inputs[:1] + [self.placeable(name) for name in inputs[1:]]
        elif op == "PAD":
            inputs = [self.placeable(inputs[0]), *inputs[1:]]
        elif op == "MATMUL":  # see sliced(): MATMUL loses a folded slice's offset too
            inputs = [self.unsliced(name) if i < 2 else name for i, name in enumerate(inputs)]
        elif op in ("SELECT", "RESHAPE") and self.family.has(SELECT_OPERAND_COPIES):
            inputs = self.apart(op, inputs, outputs[0])
        self.ser.addOperator(getattr(ts.Op, op), inputs, outputs, attribute)
        for name in outputs:
            self.producers[name] = (op, list(inputs))
        for name in inputs:
            self.readers.setdefault(name, []).append((op, outputs[0] if outputs else ""))

    def apart(self, op: str, inputs: list[str], output: str) -> list[str]:
        """The operands of a SELECT or a RESHAPE (of result `output`), one read through a copy
        where a SELECT and a RESHAPE into another shape would read one tensor (the later of
        the two takes the copy; kiln.families.SELECT_OPERAND_COPIES).

        Vela 5.2.0 (regor) then reads the SELECT's operand in the RESHAPE's shape: in
        where(x > 0.1, x, 0.0) + x.amax() on x [2, 5, 7], reshaped to [5, 14] for the amax, the
        AND of the select reads x as [1, 1, 5, 14] broadcast over H against the [1, 2, 5, 7]
        mask, so row w takes x's elements from 14 w on (its register listing; kiln's NPU model
        runs the stream as written); the condition or the other operand alike. A SELECT of a
        reshaped view, or a RESHAPE that only adds leading unit dims, it reads right
        (tests/simulator/test_npu_select_readers.py)."""
        if op == "SELECT":
            return [self.apart_copy(name) if self.regrouped(name) else name for name in inputs]
        source = inputs[0]
        selected = any(kind == "SELECT" for kind, _ in self.readers.get(source, ()))
        return [self.apart_copy(source), *inputs[1:]] if selected and self.regroups(source, output) else inputs

    def regroups(self, name: str, output: str) -> bool:
        """Whether a RESHAPE of `name` into `output` changes its shape beyond leading unit dims."""
        if name not in self.tensors or output not in self.tensors:
            return False
        return _grouped(self.tensors[name].shape) != _grouped(self.tensors[output].shape)

    def regrouped(self, name: str) -> bool:
        """Whether a RESHAPE reads `name` into another shape (regroups)."""
        return any(kind == "RESHAPE" and self.regroups(name, out) for kind, out in self.readers.get(name, ()))

    def read_elsewhere(self, name: str) -> bool:
        """Whether an op reads `name`, or a tensor `name` is a RESHAPE of (the same bytes to
        Vela) other than by that RESHAPE."""
        if name in self.readers:
            return True
        while self.producers.get(name, ("",))[0] == "RESHAPE":
            name = self.producers[name][1][0]
            if len(self.readers.get(name, ())) > 1:
                return True
        return False

    def apart_copy(self, name: str) -> str:
        """One copy() of `name` for apart(), however many readers ask."""
        if name not in self.apart_copies:
            self.apart_copies[name] = self.copy(name)
        return self.apart_copies[name]

    def sliced(self, name: str) -> bool:
        """Whether `name` is a SLICE's result (through RESHAPEs), which a MATMUL, or a widening
        RESCALE beside another slice of the same tensor (slice_source), must not read directly:
        Vela 5.2.0 folds the SLICE into that op's read and then emits a command stream that
        reads the wrong bytes (traced in its register listing; the NPU model runs it as written,
        tests/simulator/test_npu_slice_offsets.py). Two RESCALEs int8 -> int32 of folded slices
        of one tensor, as the operands of one elementwise op, it rewrites (RewriteRescale) as an
        ADD widening the whole input and MULs that read that copy from its first byte, without
        the slice's offset, and write the whole input's area into the slice-sized tensor
        (x[:, 2] + x[:, 0] on [1, 4, 6]: 228 steps off, or a write past the scratch area); a
        slice beside a constant, a table's result or a slice of another tensor it reads right
        (measured on the NPU model: an LSTM's and a GRU's gate slices, x[..., :32] + c). A
        MATMUL reading a select in place keeps IFM_BASE0 at batch 0's rows for every batch
        while IFM2 and OFM step on (x[0] @ x[1] on [3, 2, 4, 4]: batch 1 is x[0, 0] @ x[1, 1];
        attention's q @ k.T of selects from one qkv tensor: 255 steps off). tosa_reference_model
        reads both right. Those ops read an identity copy of the narrow type instead
        (unsliced()), which Vela keeps as its own pass."""
        return self.traced(name, ("RESHAPE",))[1][0] == "SLICE"

    def traced(self, name: str, through: tuple[str, ...]) -> tuple[str, tuple[str, list[str]]]:
        """(tensor, its producer (op, inputs), ("", []) for none) reached from `name` back
        through producers of the kinds `through` (ops Vela folds away or fuses)."""
        producer = self.producers.get(name, ("", []))
        while producer[0] in through:
            name = producer[1][0]
            producer = self.producers.get(name, ("", []))
        return name, producer

    def slice_source(self, name: str) -> str | None:
        """The tensor a SLICE cut `name` from, through RESHAPEs and CLAMPs (which Vela folds
        into the read or fuses into the producer), itself traced back through RESHAPEs (the
        same bytes to Vela: a strided slice's SLICE of a reshaped x and x[..., :3] share x), or
        None."""
        _, producer = self.traced(name, ("RESHAPE", "CLAMP"))
        return self.traced(producer[1][0], ("RESHAPE",))[0] if producer[0] == "SLICE" else None

    def unsliced(self, name: str) -> str:
        """`name`, or an identity copy of it when it is a SLICE's result (see sliced())."""
        return self.copy(name) if self.sliced(name) else name

    def widen(self, names: list[str], shapes, values: list[Value], scales: list[float]) -> list[str]:
        """The operands of one elementwise op RESCALEd to int32 without their zero points, each
        by its scale; a slice read through a copy only where another operand is a slice of the
        same tensor (see sliced()), where the family needs it (kiln.families.SLICE_WIDEN_COPIES)."""
        sources = [self.slice_source(name) for name in names]
        shared = (
            {s for s in sources if s is not None and sources.count(s) > 1}
            if self.family.has(SLICE_WIDEN_COPIES)
            else set()
        )
        return [
            self.rescale(name, shape, v.dtype, "int32", scale, v.qparams.zero_point, 0, copy_slice=source in shared)
            for name, shape, v, scale, source in zip(names, shapes, values, scales, sources)
        ]

    def copy(self, name: str) -> str:
        """An identity RESCALE of `name` in its own type, or at 16 bits where the family needs it
        (kiln.families.CLAMP_COPIES) a full-range CLAMP, or of a bool its LOGICAL_AND with itself:
        a copy Vela keeps as its own pass."""
        tensor = self.tensors[name]
        dtype = next(key for key, value in DT.items() if value == tensor.dtype)
        if dtype == "bool":
            out = self.inter(list(tensor.shape), dtype)
            self.emit("LOGICAL_AND", [name, name], [out], op_attr("LOGICAL_AND"))
            return out
        if dtype == "int16" and self.family.has(CLAMP_COPIES):
            return self.clamp(name, list(tensor.shape), dtype, *QRANGE[dtype])
        return self.rescale(name, list(tensor.shape), dtype, dtype, 1.0, as_copy=True)

    def placeable(self, name: str) -> str:
        """`name`, or an identity copy of it, fit to be written at an offset inside a larger
        tensor (a CONCAT operand after the first, a PAD input).

        Vela 5.2.0 (regor) writes such an operand straight into the larger tensor through
        its producer's output slice. A RESCALE from 32 or 48 bits that it cannot fold into
        its producer (on Ethos-U55/U65: TRANSPOSE_CONV2D's, which takes only unit output
        scales) it rewrites into elementwise MULs by the multipliers (GraphIrOptimiser::
        RewriteRescale), and that rewrite replaces the output slice with the channel range
        of each MUL, dropping the operand's offset: the command stream writes it at offset 0,
        over the first operand, and leaves its own place unwritten (measured: unet_tiny's
        up-convolution, concatenated after its skip connection). An identity RESCALE of the
        narrow type between the two is a copy Vela keeps (the NPU runs 8/16-bit rescales
        natively), and that copy writes the slice at its offset. Ethos-U85 needs no copy
        (kiln.families.OFFSET_COPIES)."""
        if not self.family.has(OFFSET_COPIES):
            return name
        _, through = self.traced(name, ("CLAMP",))  # a clamp Vela fuses into the MUL
        if through[0] != "RESCALE":
            return name
        wide = self.tensors.get(through[1][0])
        if wide is None or wide.dtype not in (ts.DType.INT32, ts.DType.INT48):
            return name
        if self.producers.get(through[1][0], ("",))[0] in _FOLDS_RESCALE:
            return name
        return self.copy(name)

    def zp(self, value: int, dtype: str) -> str:
        return self.const(np.array([value]), dtype, "zp")

    def nhwc(self, v: Value) -> str:
        """`v` (rank 4, or 3) channels last: NHWC (NLC); a constant: its data so laid out."""
        perm = channels_last(len(v.shape))
        if v.is_constant:
            return self.const(np.ascontiguousarray(v.data.transpose(perm)), v.dtype)
        name, is_nhwc = self.names[id(v)]
        if is_nhwc:
            return name
        return self.to_layout(name, v.shape, v.dtype, perm)

    def torch_order(self, v: Value) -> str:
        """`v` with PyTorch's shape and element order (a constant: its data)."""
        if v.is_constant:
            return self.const(np.ascontiguousarray(v.data), v.dtype)
        name, is_nhwc = self.names[id(v)]
        if not is_nhwc:
            return name
        return self.to_layout(name, self.shape_of(v, True), v.dtype, channels_first(len(v.shape)))

    def bound(self, v: Value, any_layout: bool = False) -> tuple[str, bool]:
        """(name, stored channels last) of non-constant `v`. Lowerings that index dims take a
        value of another rank than 4 in PyTorch's order (a channels-last rank-3 value goes back
        through torch_order()); `any_layout`: an elementwise lowering that keeps any layout."""
        name, is_nhwc = self.names[id(v)]
        if is_nhwc and len(v.shape) != 4 and not any_layout:
            return self.torch_order(v), False
        return name, is_nhwc

    def to_layout(self, name: str, shape, dtype: str, perm) -> str:
        """`name` (of `shape`) permuted by `perm`, once per tensor and permutation however many
        ops ask (an input that feeds a convolution and a shortcut is transposed once)."""
        key = (name, tuple(perm))
        if key not in self.transposed:
            self.transposed[key] = self._permuted(name, shape, dtype, perm)
        return self.transposed[key]

    def _permuted(self, name: str, shape, dtype: str, perm) -> str:
        """One TRANSPOSE of the reduced permutation (reduced_permutation) between free RESHAPEs; a
        2-D one as [1, 1, a, b], which Vela runs as one NPU op, unless the choice
        kiln.families.RANK4_TRANSPOSES keeps a swap of two runs at the given rank."""
        out_shape = [shape[p] for p in perm]
        dims, order = reduced_permutation(shape, perm)
        if order == sorted(order):  # only unit dimensions move: the same element order, a free reshape
            return self.reshape(name, out_shape, dtype)
        if len(order) == 2:
            grouped, ranked = ([1, 1, *dims], [0, 1, 3, 2]), (list(shape), list(perm))
            dims, order = ranked if grouped != ranked and self.choose(RANK4_TRANSPOSES) else grouped
        source = name if dims == list(shape) else self.reshape(name, dims, dtype)
        out = self.inter([dims[p] for p in order], dtype)
        self.emit("TRANSPOSE", [source], [out], attr("Transpose", order))
        return out if [dims[p] for p in order] == out_shape else self.reshape(out, out_shape, dtype)

    def reshape(self, name: str, shape, dtype: str, own: bool = False) -> str:
        """`name` as `shape`: one RESHAPE per tensor and shape, however many ops ask (Vela copies
        a tensor that several RESHAPEs read: a Conv1d block's input, unsqueezed for its
        convolution and for its shortcut's); `own`: a tensor of its own (a graph output). A
        RESHAPE's result is reshaped from that RESHAPE's input (the input itself where the shapes
        agree): Vela 5.2.0 drops a graph output made by a RESHAPE that a RESHAPE reads (a KV cache's
        SCATTER reshaped to the cache's shape, returned, and reshaped back for attention;
        tests/compiler/test_lowering_scatter.py)."""
        producer, operands = self.producers.get(name, ("", []))
        if producer == "RESHAPE" and operands[0] in self.tensors:
            name = operands[0]
            if not own and list(self.tensors[name].shape) == tosa_shape(shape):
                return name
        key = (name, tuple(shape))
        if own or key not in self.reshaped:
            out = self.inter(shape, dtype)
            self.emit("RESHAPE", [name, self.shape_const(tosa_shape(shape))], [out], attr("Reshape"))
            if own:
                return out
            self.reshaped[key] = out
        return self.reshaped[key]

    def rank0(self, name: str, dtype: str) -> str:
        """[1] tensor `name` as a rank-0 one of its own: a graph output of a rank-0 value, which
        keeps PyTorch's shape at the partition's boundary (inside, tosa_shape makes it [1])."""
        tensor = self.ser.addIntermediate([], DT[dtype])
        self.tensors[tensor.name] = tensor
        self.emit("RESHAPE", [name, self.shape_const([])], [tensor.name], attr("Reshape"))
        return tensor.name

    def stored_channels_last(self, v: Value) -> bool:
        """Whether `v` is a non-constant value stored channels last (a constant takes any layout)."""
        return not v.is_constant and self.names[id(v)][1]

    def bind(self, v: Value, name: str, is_nhwc: bool):
        self.names[id(v)] = (name, is_nhwc)

    def result(self, v: Value, name: str, is_nhwc: bool = False):
        """Binds the op's output `v`, applying its fused activation clamp."""
        if v.producer is not None and v.producer.activation is not None:
            low, high = v.producer.activation
            lo, hi = quantize_real(low, v.qparams, v.dtype), quantize_real(high, v.qparams, v.dtype)
            if (lo, hi) != QRANGE[v.dtype]:
                name = self.clamp(name, self.shape_of(v, is_nhwc), v.dtype, lo, hi)
        self.bind(v, name, is_nhwc)

    @staticmethod
    def shape_of(v: Value, is_nhwc: bool):
        if is_nhwc:
            return tuple(v.shape[p] for p in channels_last(len(v.shape)))
        return v.shape

    # ---- arithmetic helpers ---------------------------------------------------------
    def int32_one(self, rank: int) -> str:
        """An int8 1 of `rank` unit dims widened to int32: a MUL by it without a shift is a pass
        into which Vela 5.2.0 folds the RESCALEs on either side (where a lone RESCALE costs a pass
        of its own)."""
        ones = [1] * rank
        return self.rescale(self.const(np.ones(ones), "int8", "one"), ones, "int8", "int32", 1.0, 0, 0)

    def rescale(
        self, name, shape, in_dtype, out_dtype, scale, in_zp=0, out_zp=0, copy_slice=True, as_copy=False
    ) -> str:
        """RESCALE with single rounding; `scale` a float or a per-channel (last axis) array. A
        widening one reads a slice through a copy (see sliced()) unless `copy_slice` is False.
        An 8-bit one (int8 to int8, another scale or zero point) is RESCALE to int32 (exact: the
        zero point off), MUL by 1 and RESCALE to int8 (the one rounding), which Vela 5.2.0 runs
        as one MUL with its scalings, where a lone RESCALE costs 2 to 5 times as much (x * 2 of
        [1, 10, 16], ethos-u85-256 Sram_Only: 194 against 40 cycles; x * 2 then sin of
        [1, 3, 8, 8], ethos-u55-128: 416 against 192); unless it is `as_copy` (copy(): a pass of
        its own, which that MUL would not be)."""
        if out_dtype in ("int32", "int48") and copy_slice:
            name = self.unsliced(name)
        per_channel = isinstance(scale, np.ndarray) and scale.size > 1
        if in_dtype == out_dtype == "int8" and not per_channel and not as_copy:
            wide = self.rescale(name, shape, "int8", "int32", 1.0, in_zp, 0, copy_slice=False)  # beside a constant
            product = self.inter(shape, "int32")
            self.emit(
                "MUL",
                [wide, self.int32_one(len(shape)), self.const(np.array([0]), "int8", "shift")],
                [product],
                attr("Mul"),
            )
            return self.rescale(product, shape, "int32", "int8", scale, 0, out_zp)
        scales = np.atleast_1d(np.asarray(scale, np.float64)) if per_channel else [float(np.asarray(scale).flat[0])]
        bits = multiplier_bits(in_dtype)
        scale32 = bits == 32
        pairs = [scale_to_multiplier(float(s), bits) for s in scales]
        multipliers = self.const(np.array([m for m, _ in pairs]), "int32" if scale32 else "int16", "multiplier")
        shifts = self.const(np.array([s for _, s in pairs]), "int8", "shift")
        out = self.inter(shape, out_dtype)
        attribute = attr("Rescale", scale32, ts.RoundingMode.SINGLE_ROUND, per_channel, False, False)
        self.emit(
            "RESCALE",
            [name, multipliers, shifts, self.zp(in_zp, in_dtype), self.zp(out_zp, out_dtype)],
            [out],
            attribute,
        )
        return out

    def clamp(self, name, shape, dtype, lo, hi) -> str:
        out = self.inter(shape, dtype)
        as_bytes = lambda x: list(np.array([x], dtype).view(np.uint8))  # noqa: E731
        self.emit("CLAMP", [name], [out], attr("Clamp", as_bytes(lo), as_bytes(hi), ts.NanPropagationMode.PROPAGATE))
        return out

    # ---- the graph ----------------------------------------------------------------------
    def lower(self) -> bytes:
        part = self.partition
        for v in part.inputs:  # in PyTorch's shapes; a rank-0 one reshaped to [1] (tosa_shape)
            tensor = ts.TosaSerializerTensor(self.fresh("input"), list(v.shape), DT[v.dtype])
            self.ser.addInputTensor(tensor)
            self.tensors[tensor.name] = tensor
            self.bind(v, tensor.name if v.shape else self.reshape(tensor.name, (1,), v.dtype), False)
        for op in part.ops:
            try:
                LOWERINGS[op.target](self, op)
            except LoweringError as error:
                if op.name in str(error):
                    raise
                raise LoweringError(f"node {op.name} ({op.op_type}) on {self.family.name}: {error}") from error
            except KilnError:
                raise
            except Exception as error:
                raise LoweringError(
                    f"node {op.name} ({op.op_type}) on {self.family.name}: TOSA lowering failed: {error}"
                ) from error
        taken = {self.names[id(v)][0] for v in part.inputs}
        for v in part.outputs:  # in PyTorch's shapes
            name = self.torch_order(v)
            if v.dtype == "bool" and self.family.has(BOOL_OUTPUT_COPIES) and self.read_elsewhere(name):
                name = self.copy(name)  # Vela rewrites a bool output in place under its other readers
            # a graph output must be its own tensor; and Vela 5.2.0 drops one made by a RESHAPE that
            # another op reads (a KV cache's SCATTER reshaped to the cache's shape, which a max reads;
            # tests/compiler/test_lowering_scatter.py): that output is a RESHAPE of its own
            reshaped_and_read = self.producers.get(name, ("",))[0] == "RESHAPE" and name in self.readers
            if not v.shape:
                name = self.rank0(name, v.dtype)
            elif name in taken or reshaped_and_read:
                name = self.reshape(name, v.shape, v.dtype, own=True)
            taken.add(name)
            self.ser.addOutputTensor(self.tensors[name])
        return self.ser.serialize()


# ---- the registry: each family module's lowerings bind the op's output ---------------------------
LOWERINGS: dict[object, Callable[[Lowerer, Op], None]] = {}


def lowering(*targets):
    """Registers the decorated function as the lowering of `targets` (kiln.lower.tosa.check_vocabulary
    holds LOWERINGS to the kiln.vocabulary rows that name the function's module)."""

    def register(fn):
        for target in targets:
            LOWERINGS[target] = fn
        return fn

    return register


# ---- helpers the families share ------------------------------------------------------------------
def conv_geometry(size: int, kernel: int, stride: int, dilation: int, pad: int, out: int) -> tuple[int, int, int]:
    """(pad_before, pad_after, crop): TOSA needs size - 1 + pads - (kernel-1)*dilation
    == (out-1)*stride exactly; PyTorch floors, so trailing padding shrinks and, where
    that is not enough, the input's last `crop` rows are cut."""
    after = (out - 1) * stride + (kernel - 1) * dilation + 1 - size - pad
    crop = max(0, -after)
    return pad, max(0, after), crop


def cropped(lw: Lowerer, name: str, shape, dtype: str, rows: int, columns: int) -> str:
    """NHWC `name` without its last `rows` rows and `columns` columns."""
    if not rows and not columns:
        return name
    n, h, w, c = shape
    return slice_of(lw, name, [0, 0, 0, 0], [n, h - rows, w - columns, c], dtype)


def slice_of(lw: Lowerer, name: str, start, size, dtype: str) -> str:
    """A SLICE of `name`; of a SLICE's result, one SLICE of that one's input (Vela copies once)."""
    if name in lw.cuts:
        name, first = lw.cuts[name]
        start = [a + b for a, b in zip(first, start)]
    out = lw.inter(list(size), dtype)
    lw.emit("SLICE", [name, lw.shape_const(list(start)), lw.shape_const(list(size))], [out], attr("Slice"))
    lw.cuts[out] = (name, list(start))
    return out


def biases(lw: Lowerer, bias: Value | None, channels: int, acc: str) -> str:
    """The bias in the accumulator's type `acc` (PT2E's biases are int32 values)."""
    return lw.const(np.zeros(channels) if bias is None else bias.data, acc, "bias")


def pad_crop(lw: Lowerer, name: str, shape, dtype: str, pads, crops, value: int) -> tuple[str, list[int]]:
    """NHWC `name` without its last crops[0] rows and crops[1] columns, then padded by
    pads [top, bottom, left, right] with `value`; (result, its shape)."""
    n, h, w, c = shape
    name = cropped(lw, name, shape, dtype, *crops)
    shape = [n, h - crops[0], w - crops[1], c]
    if not any(pads):
        return name, shape
    padded = [n, shape[1] + pads[0] + pads[1], shape[2] + pads[2] + pads[3], c]
    out = lw.inter(padded, dtype)
    lw.emit(
        "PAD",
        [name, lw.shape_const([0, 0, *pads, 0, 0]), lw.const(np.array([value]), dtype, "pad_value")],
        [out],
        attr("Pad"),
    )
    return out, padded


def same_quantization(lw: Lowerer, name: str, shape, x: Value, out: Value) -> str:
    """`name` (x's values, of `shape`) in out's quantization: itself when they share it."""
    if x.qparams == out.qparams:
        return name
    return lw.rescale(
        name,
        shape,
        x.dtype,
        out.dtype,
        x.qparams.scale / out.qparams.scale,
        x.qparams.zero_point,
        out.qparams.zero_point,
    )


def layout_axis(lw: Lowerer, v: Value, dim: int) -> tuple[str, int, bool]:
    """(name, axis, is_nhwc): `v` as bound, and torch dim `dim` as an axis of that layout."""
    name, is_nhwc = lw.bound(v)
    dim %= len(v.shape)
    return name, (NCHW_TO_NHWC.index(dim) if is_nhwc else dim), is_nhwc
