"""Lowers one NPU partition of kiln's graph to a TOSA 1.0 (INT profile) flatbuffer.

Layout contract: the TOSA graph's inputs and outputs have PyTorch's shapes and
element order (NCHW), so the program hands tensors to the delegate as they are;
inside, every rank-4 activation lives in NHWC, the layout TOSA's convolutions
and pools use, with a TRANSPOSE (or a RESHAPE where the two orders coincide)
at the edges and wherever a torch-order view is needed.

Integer semantics follow the PT2E reference: each quantized op's integer
result approximates quantize(op(dequantize(inputs))) with one rounding,
through TOSA RESCALE (single rounding) and CLAMP.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
import tosa_serializer as ts

from kiln.errors import InternalError, KilnError, LoweringError
from kiln.graph import QRANGE, Op, QParams, Value, clamp_range, pair
from kiln.partition import tables
from kiln.partition import vocabulary
from kiln.partition.partitioner import Partition
from kiln.partition.support import (KERNEL_AREA_MAX, KERNEL_HEIGHT_MAX, STRIDE_MAX, TENSOR_DIM_MAX, moving_stride,
                                   reduced_dims, whole_bilinear_factors)

aten = torch.ops.aten
DT = {"int8": ts.DType.INT8, "int16": ts.DType.INT16, "int32": ts.DType.INT32, "int48": ts.DType.INT48,
      "bool": ts.DType.BOOL}
# The accumulator of a MAC op (convolutions, matmul) per activation type (weights are int8).
ACCUMULATOR = {"int8": "int32", "int16": "int48"}
_NUMPY = {"int48": np.int64}  # dtypes numpy lacks: the numpy type their constants are built from
# TOSA ops whose int32/int48 result Vela 5.2.0 rescales in the op itself when a RESCALE
# follows (the elementwise ones as kiln lowers them, with widening RESCALEs on their
# operands); see Lowerer.placeable. Each is checked in tests/simulator/test_npu_concat_offsets.py.
_FOLDS_RESCALE = {"CONV2D", "DEPTHWISE_CONV2D", "ADD", "SUB", "MUL", "MINIMUM", "MAXIMUM", "REDUCE_SUM", "MATMUL"}
# NPU families where Vela 5.2.0 writes such an unfolded RESCALE's result at offset 0 of the larger
# tensor (Lowerer.placeable copies it); on Ethos-U85 it keeps the offset (the same test).
OFFSET_COPY_FAMILIES = ("ethos-u55", "ethos-u65")
# NPU families where Vela 5.2.0 rewrites widening RESCALEs of two slices of one tensor so that they read
# the whole tensor from its start (Lowerer.widen copies such slices first); on Ethos-U85 it reads them
# right (tests/simulator/test_npu_slice_offsets.py). A MATMUL reading a slice is copied on every family.
SLICE_WIDEN_COPY_FAMILIES = ("ethos-u55", "ethos-u65")
# NPU families where amin is lowered as ~max(~q) (_bitwise_not): Vela 5.2.0's REDUCE_MIN there is
# pivot - max(pivot - x), wrong when its result is reshaped onto other axes; on Ethos-U85 the NPU
# reduces by min itself and those graphs run right (tests/simulator/test_npu_reduce_min.py).
MIN_AS_MAX_FAMILIES = ("ethos-u55", "ethos-u65")
# NPU families where softmax's exps are summed into int16 (_softmax): kwt on ethos-u55-128 611,059 ->
# 583,951 NPU cycles, on ethos-u65-256 711,917 -> 687,779; on ethos-u85-256 (Dedicated_Sram_384KB) the
# int32 sum is cheaper (171,727 against 182,921).
INT16_EXP_FAMILIES = ("ethos-u55", "ethos-u65")
# NPU families where softmax's two exp TABLEs each read their own x - max (a SUB each, into which
# Vela fuses the TABLE), not one shared by both (two LUT passes of their own): kwt 138,145 -> 128,647
# NPU cycles on ethos-u85-256, 560,267 -> 555,611 on ethos-u55-128; on ethos-u65-256 the SUB costs
# more than the LUT pass it saves (681,301 -> 682,005). The first guess of the choice FUSED_EXPS.
FUSED_EXP_FAMILIES = ("ethos-u55", "ethos-u85")
# NPU families where an average pool with a stride beyond 3 is one AVG_POOL2D that Vela 5.2.0 decomposes
# itself (its constraints ask for it on every family), not kiln's _strided_pool: AvgPool2d(4, stride=4)
# of [1, 8, 16, 16], NPU cycles, ethos-u55-128 4,122 -> 3,280, ethos-u85-256 13,974 -> 6,682, where on
# ethos-u65-256 kiln's is cheaper (4,287 against 4,690). The first guess of the choice VELA_STRIDED_POOLS.
# Max pools stay kiln's everywhere (MaxPool2d(8, stride=8): 1,506 against 2,392 on ethos-u55-128).
VELA_STRIDED_POOL_FAMILIES = ("ethos-u55", "ethos-u85")
# NPU families where a strided slice's rows are first grouped as [1, 1, before * n, step * after] rather
# than [1, before, n, step * after] (_slice_op): x[..., ::2] of [1, 6, 16], NPU cycles, the first form
# against the second: ethos-u55-128 460 against 498, but ethos-u55-256 460 against 289, ethos-u65-256
# 1,703 against 1,204, ethos-u85-256 1,673 against 1,249. So none: the choice FLAT_STRIDED_SLICES.
FLAT_STRIDED_SLICE_FAMILIES = ()
RESIZE_NEAREST_FACTORS = (2, 4, 8)  # nearest upsampling Vela 5.2.0 runs as one RESIZE on Ethos-U55/U65 (both ways)
# NPU families whose hardware RESIZE Vela 5.2.0 uses for nearest upsampling by any whole factors (each
# axis its own): Ethos-U85 (ethos_u85.cpp maps Resize to NPU_OP_RESIZE).
RESIZE_ANY_FACTOR_FAMILIES = ("ethos-u85",)


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
    [2**(bits-2), 2**(bits-1)) and shift in 2..62, as TOSA RESCALE needs."""
    if scale <= 0:
        return 0, 2
    mantissa, exponent = math.frexp(scale)  # scale = mantissa * 2**exponent, mantissa in [0.5, 1)
    multiplier = round(mantissa * (1 << (bits - 1)))
    shift = bits - 1 - exponent
    if multiplier == 1 << (bits - 1):
        multiplier //= 2
        shift -= 1
    if shift > 62:
        multiplier >>= shift - 62
        shift = 62
    if shift < 2:
        raise LoweringError(f"rescale factor {scale:g} is too large for TOSA RESCALE")
    return multiplier, shift


def _attr(kind: str, *args) -> ts.TosaSerializerAttribute:
    attribute = ts.TosaSerializerAttribute()
    getattr(attribute, f"{kind}Attribute")(*args)
    return attribute


def _op_attr(op: str, *args) -> ts.TosaSerializerAttribute:
    """The attribute of TOSA op `op` named as the op is (REDUCE_SUM -> ReduceSumAttribute)."""
    return _attr(op.title().replace("_", ""), *args)


def _quantize_real(x: float, qp: QParams, dtype: str) -> int:
    """The integer for real value x under `qp`, saturated to dtype (infinities to the ends)."""
    lo, hi = QRANGE[dtype]
    if math.isinf(x):
        return lo if x < 0 else hi
    return int(min(max(round(x / qp.scale) + qp.zero_point, lo), hi))


def reduced_permutation(shape, perm) -> tuple[list[int], list[int]]:
    """(shape, perm) of the smallest transpose that moves the same elements as `perm` of `shape`:
    unit axes dropped, and axes next to each other in the input that stay next to each other in
    the output merged into one. E.g. [1, 50, 1, 3, 32] by (3, 1, 0, 2, 4) is [50, 3, 32] by (1, 0, 2)."""
    kept = [p for p in perm if shape[p] != 1]
    runs: list[list[int]] = []  # runs of input axes, in output order
    for p in kept:
        if runs and p == runs[-1][-1] + 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    order = sorted(range(len(runs)), key=lambda r: runs[r][0])  # the runs in input order
    dims = [int(np.prod([shape[a] for a in runs[r]])) for r in order]
    return dims, [order.index(r) for r in range(len(runs))]


# NPU families on which Vela 5.2.0 drops an identity RESCALE of int16 values (at int8 it keeps it as its
# own pass): there a 16-bit copy is a full-range CLAMP, which it keeps (a 16-bit q @ k.T of selects from
# one qkv tensor gave head 1 head 0's rows on ethos-u85-256 through the RESCALE; see sliced()).
CLAMP_COPY_FAMILIES = ("ethos-u85",)

# NPU families on which a global mean reads its input in place by a pool or a depthwise sum even where
# nothing else reads it: on Ethos-U85 Vela 5.2.0 transposes the REDUCE_SUM's input first (Vela's NPU
# cycles on ethos-u85-256, Sram_Only, REDUCE_SUM against in place: tiny_cnn 1,200 -> 962, ds_cnn
# 43,336 -> 39,800, resnet8 94,240 -> 91,932, mobilenet_v1_025 199,188 -> 197,366). This is only the
# first guess: the form is a CHOICE (see Lowerer.choices), as on ethos-u65-256 no shape rule predicts
# it. There the pool is cheaper for efficientnet_b0's 4x4x128 map (306,593 NPU cycles against
# 309,203) and dearer for a conv -> mean -> linear chain's (11,016 against 8,816): Vela's schedule
# around the two forms differs (after its REDUCE_SUM the next layer's weights load unhidden).
POOLED_MEAN_FAMILIES = ("ethos-u85",)

# Choices between equivalent graphs that Vela's scheduling, not the op's shape, makes cheaper or
# dearer. A lowering that meets one adds its name to Lowerer.choices; kiln.compile.fastest then
# lowers the partition again with it flipped (Lowerer(flipped=...)) and keeps the graph Vela
# estimates runs faster. Each is a Lowerer attribute whose first guess comes from its FAMILIES.
POOLED_MEANS = "pooled_means"
FUSED_EXPS = "fused_exps"
RANK4_TRANSPOSES = "rank4_transposes"
VELA_STRIDED_POOLS = "vela_strided_pools"
FLAT_STRIDED_SLICES = "flat_strided_slices"

# NPU families on which Vela runs a layout change (NCHW <-> NHWC) faster as the rank-4 TRANSPOSE it
# decomposes itself than as one 2-D TRANSPOSE of the swapped groups: measured in Vela's NPU cycles,
# unet_tiny 187,974 -> 138,621 on ethos-u65-256 and 162,326 -> 102,636 on ethos-u65-512, where on
# ethos-u55-128 and -256 the 2-D one wins (163,018 against 164,330; 108,432 against 113,872). On
# ethos-u85-256 the 2-D one costs about as many NPU cycles but waits on memory: Vela's total cycles
# (board default Dedicated_Sram_384KB) mobilenet_v2_035 20,241,221 -> 902,338, resnet18 4,133,640 ->
# 327,116, shufflenet_v2 3,987,956 -> 187,481 by the rank-4 TRANSPOSE (NPU cycles 691,839 -> 458,118,
# 357,207 -> 253,280, 252,067 -> 144,911). Only the first guess of the choice RANK4_TRANSPOSES: with
# unit axes the 2-D one can win on those families too (Conv1d's [1, 6, 1, 16] to channels last:
# conv1d on ethos-u85-256 2,134 -> 1,284 NPU cycles), and mobilenet_v2 on ethos-u65-256 runs in
# fewer NPU cycles with 2-D ones (3,886,204 -> 3,725,141).
RANK4_TRANSPOSE_FAMILIES = ("ethos-u65", "ethos-u85")

# NPU families on which a reflect, replicate or circular pad of a rank-4 value stored in PyTorch's
# order is made channels last first: their CONCATs along PyTorch's last axis (the channels to Vela)
# cost more there than the layout changes, measured in Vela's NPU cycles at the board's memory mode
# (F.pad reflect by [1, 2, 2, 1] of [1, 3, 8, 8]: ethos-u65-256 Dedicated_Sram 3,753 against 5,713,
# ethos-u85-256 Dedicated_Sram_384KB 4,865 against 6,556, where ethos-u55-128 Shared_Sram runs
# PyTorch's order faster, 2,408 against 3,073). Constant pads are one PAD in PyTorch's order everywhere.
CHANNELS_LAST_PAD_COPY_FAMILIES = ("ethos-u65", "ethos-u85")


class Lowerer:
    def __init__(self, partition: Partition, accelerator: str | None = None, flipped: frozenset[str] = frozenset()):
        self.partition = partition
        on = (accelerator or "").startswith  # on(FAMILIES): the target is of one of them
        taken = lambda families, choice: on(families) != (choice in flipped)  # noqa: E731 (its first guess, or not)
        self.grouped_transposes = not taken(RANK4_TRANSPOSE_FAMILIES, RANK4_TRANSPOSES)
        self.resize_any_factor = on(RESIZE_ANY_FACTOR_FAMILIES)
        self.pooled_means = taken(POOLED_MEAN_FAMILIES, POOLED_MEANS)
        self.choices: set[str] = set()  # the choices (POOLED_MEANS, ...) that shaped this graph
        self.clamp_copies = on(CLAMP_COPY_FAMILIES)
        self.channels_last_pad_copies = on(CHANNELS_LAST_PAD_COPY_FAMILIES)
        self.offset_copies = on(OFFSET_COPY_FAMILIES)
        self.slice_widen_copies = on(SLICE_WIDEN_COPY_FAMILIES)
        self.int16_exps = on(INT16_EXP_FAMILIES)
        self.min_as_max = on(MIN_AS_MAX_FAMILIES)
        self.flat_strided_slices = taken(FLAT_STRIDED_SLICE_FAMILIES, FLAT_STRIDED_SLICES)
        self.fused_exps = taken(FUSED_EXP_FAMILIES, FUSED_EXPS)
        self.vela_strided_pools = taken(VELA_STRIDED_POOL_FAMILIES, VELA_STRIDED_POOLS)
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
        self.count = 0

    # ---- tensors -----------------------------------------------------------------
    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def inter(self, shape, dtype: str) -> str:
        tensor = self.ser.addIntermediate(list(shape), DT[dtype])
        self.tensors[tensor.name] = tensor
        return tensor.name

    def const(self, array: np.ndarray, dtype: str, stem: str = "const") -> str:
        array = np.ascontiguousarray(array, dtype=_NUMPY.get(dtype, dtype))
        name = self.fresh(stem)
        self.ser.addConst(list(array.shape), DT[dtype], array, name=name)
        return name

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
        self.ser.addOperator(getattr(ts.Op, op), inputs, outputs, attribute)
        for name in outputs:
            self.producers[name] = (op, list(inputs))

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
        same tensor (see sliced()), on SLICE_WIDEN_COPY_FAMILIES."""
        sources = [self.slice_source(name) for name in names]
        shared = {s for s in sources if s is not None and sources.count(s) > 1} if self.slice_widen_copies else set()
        return [self.rescale(name, shape, v.dtype, "int32", scale, v.qparams.zero_point, 0, copy_slice=source in shared)
                for name, shape, v, scale, source in zip(names, shapes, values, scales, sources)]

    def copy(self, name: str) -> str:
        """An identity RESCALE of `name` in its own type, or at 16 bits on CLAMP_COPY_FAMILIES a
        full-range CLAMP: a copy Vela keeps as its own pass."""
        tensor = self.tensors[name]
        dtype = next(key for key, value in DT.items() if value == tensor.dtype)
        if dtype == "int16" and self.clamp_copies:
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
        (OFFSET_COPY_FAMILIES)."""
        if not self.offset_copies:
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
        2-D one as [1, 1, a, b], which Vela runs as one NPU op. On RANK4_TRANSPOSE_FAMILIES a
        swap of two runs keeps the given rank (Vela decomposes that faster there)."""
        out_shape = [shape[p] for p in perm]
        dims, order = reduced_permutation(shape, perm)
        if order == sorted(order):  # only unit dimensions move: the same element order, a free reshape
            return self.reshape(name, out_shape, dtype)
        if len(order) == 2:
            grouped = [1, 1, *dims], [0, 1, 3, 2]
            if grouped != (list(shape), list(perm)):
                self.choices.add(RANK4_TRANSPOSES)
            dims, order = grouped if self.grouped_transposes else (list(shape), list(perm))
        source = name if dims == list(shape) else self.reshape(name, dims, dtype)
        out = self.inter([dims[p] for p in order], dtype)
        self.emit("TRANSPOSE", [source], [out], _attr("Transpose", order))
        return out if [dims[p] for p in order] == out_shape else self.reshape(out, out_shape, dtype)

    def reshape(self, name: str, shape, dtype: str, own: bool = False) -> str:
        """`name` as `shape`: one RESHAPE per tensor and shape, however many ops ask (Vela copies
        a tensor that several RESHAPEs read: a Conv1d block's input, unsqueezed for its
        convolution and for its shortcut's); `own`: a tensor of its own (a graph output)."""
        key = (name, tuple(shape))
        if own or key not in self.reshaped:
            out = self.inter(shape, dtype)
            self.emit("RESHAPE", [name, self.shape_const(list(shape))], [out], _attr("Reshape"))
            if own:
                return out
            self.reshaped[key] = out
        return self.reshaped[key]

    def stored_channels_last(self, v: Value) -> bool:
        """Whether `v` is a non-constant value stored channels last (a constant takes any layout)."""
        return not v.is_constant and self.names[id(v)][1]

    def bind(self, v: Value, name: str, is_nhwc: bool):
        self.names[id(v)] = (name, is_nhwc)

    def result(self, v: Value, name: str, is_nhwc: bool = False):
        """Binds the op's output `v`, applying its fused activation clamp."""
        if v.producer is not None and v.producer.activation is not None:
            low, high = v.producer.activation
            lo, hi = _quantize_real(low, v.qparams, v.dtype), _quantize_real(high, v.qparams, v.dtype)
            if (lo, hi) != QRANGE[v.dtype]:
                name = self.clamp(name, self.shape_of(v, is_nhwc), v.dtype, lo, hi)
        self.bind(v, name, is_nhwc)

    @staticmethod
    def shape_of(v: Value, is_nhwc: bool):
        if is_nhwc:
            return tuple(v.shape[p] for p in channels_last(len(v.shape)))
        return v.shape

    # ---- arithmetic helpers ---------------------------------------------------------
    def rescale(self, name, shape, in_dtype, out_dtype, scale, in_zp=0, out_zp=0, copy_slice=True,
                as_copy=False) -> str:
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
            ones = [1] * len(shape)  # an int8 1 widened as the operand is: Vela folds both RESCALEs
            one = self.rescale(self.const(np.ones(ones), "int8", "one"), ones, "int8", "int32", 1.0, 0, 0)
            self.emit("MUL", [wide, one, self.const(np.array([0]), "int8", "shift")], [product], _attr("Mul"))
            return self.rescale(product, shape, "int32", "int8", scale, 0, out_zp)
        scales = np.atleast_1d(np.asarray(scale, np.float64)) if per_channel else [float(np.asarray(scale).flat[0])]
        scale32 = in_dtype != "int48"  # TOSA: a 48-bit input takes 16-bit multipliers
        pairs = [scale_to_multiplier(float(s), 32 if scale32 else 16) for s in scales]
        multipliers = self.const(np.array([m for m, _ in pairs]), "int32" if scale32 else "int16", "multiplier")
        shifts = self.const(np.array([s for _, s in pairs]), "int8", "shift")
        out = self.inter(shape, out_dtype)
        attribute = _attr("Rescale", scale32, ts.RoundingMode.SINGLE_ROUND, per_channel, False, False)
        self.emit("RESCALE", [name, multipliers, shifts, self.zp(in_zp, in_dtype), self.zp(out_zp, out_dtype)],
                  [out], attribute)
        return out

    def clamp(self, name, shape, dtype, lo, hi) -> str:
        out = self.inter(shape, dtype)
        as_bytes = lambda x: list(np.array([x], dtype).view(np.uint8))  # noqa: E731
        self.emit("CLAMP", [name], [out], _attr("Clamp", as_bytes(lo), as_bytes(hi), ts.NanPropagationMode.PROPAGATE))
        return out

    # ---- the graph ----------------------------------------------------------------------
    def lower(self) -> bytes:
        part = self.partition
        for v in part.inputs:
            tensor = ts.TosaSerializerTensor(self.fresh("input"), list(v.shape), DT[v.dtype])
            self.ser.addInputTensor(tensor)
            self.tensors[tensor.name] = tensor
            self.bind(v, tensor.name, False)
        for op in part.ops:
            try:
                LOWERINGS[op.target](self, op)
            except KilnError:
                raise
            except Exception as error:
                raise LoweringError(f"node {op.name} ({op.op_type}): TOSA lowering failed: {error}") from error
        taken = {self.names[id(v)][0] for v in part.inputs}
        for v in part.outputs:
            name = self.torch_order(v)
            if name in taken:  # a graph output must be its own tensor
                name = self.reshape(name, v.shape, v.dtype, own=True)
            taken.add(name)
            self.ser.addOutputTensor(self.tensors[name])
        return self.ser.serialize()


# ---- per-op lowerings: each binds the op's output ---------------------------------------------
LOWERINGS: dict[object, Callable[[Lowerer, Op], None]] = {}


def lowering(*targets):
    """Registers the decorated function as the lowering of `targets` (check_vocabulary, run
    when this module is imported, holds LOWERINGS to kiln.partition.vocabulary.LOWERED)."""
    def register(fn):
        for target in targets:
            LOWERINGS[target] = fn
        return fn

    return register


def conv_geometry(size: int, kernel: int, stride: int, dilation: int, pad: int, out: int) -> tuple[int, int, int]:
    """(pad_before, pad_after, crop): TOSA needs size - 1 + pads - (kernel-1)*dilation
    == (out-1)*stride exactly; PyTorch floors, so trailing padding shrinks and, where
    that is not enough, the input's last `crop` rows are cut."""
    after = (out - 1) * stride + (kernel - 1) * dilation + 1 - size - pad
    crop = max(0, -after)
    return pad, max(0, after), crop


def _spatial(lw: Lowerer, op: Op, x: Value, kernel, stride, dilation, padding, out_hw):
    """x as NHWC, cropped as needed, and TOSA's pad [top, bottom, left, right]."""
    n, c, h, w = x.shape
    ph = conv_geometry(h, kernel[0], stride[0], dilation[0], padding[0], out_hw[0])
    pw = conv_geometry(w, kernel[1], stride[1], dilation[1], padding[1], out_hw[1])
    return _crop(lw, lw.nhwc(x), [n, h, w, c], x.dtype, ph[2], pw[2]), [ph[0], ph[1], pw[0], pw[1]]


def _crop(lw: Lowerer, name: str, shape, dtype: str, rows: int, columns: int) -> str:
    """NHWC `name` without its last `rows` rows and `columns` columns."""
    if not rows and not columns:
        return name
    n, h, w, c = shape
    return _slice(lw, name, [0, 0, 0, 0], [n, h - rows, w - columns, c], dtype)


def _slice(lw: Lowerer, name: str, start, size, dtype: str) -> str:
    """A SLICE of `name`; of a SLICE's result, one SLICE of that one's input (Vela copies once)."""
    if name in lw.cuts:
        name, first = lw.cuts[name]
        start = [a + b for a, b in zip(first, start)]
    out = lw.inter(list(size), dtype)
    lw.emit("SLICE", [name, lw.shape_const(list(start)), lw.shape_const(list(size))], [out], _attr("Slice"))
    lw.cuts[out] = (name, list(start))
    return out


def _bias(lw: Lowerer, bias: Value | None, channels: int, acc: str) -> str:
    """The bias in the accumulator's type `acc` (PT2E's biases are int32 values)."""
    return lw.const(np.zeros(channels) if bias is None else bias.data, acc, "bias")


def _mac_rescale(lw: Lowerer, op: Op, acc: str, shape, x: Value, weight: Value, is_nhwc: bool):
    out = op.output
    scale = x.qparams.scale * np.asarray(weight.qparams.scale, np.float64) / out.qparams.scale
    name = lw.rescale(acc, shape, ACCUMULATOR[x.dtype], out.dtype, scale, 0, out.qparams.zero_point)
    lw.result(out, name, is_nhwc)


@lowering(aten.conv2d.default)
def _conv(lw: Lowerer, op: Op):
    x, weight, bias = op.arg("input"), op.arg("weight"), op.arg("bias")
    stride, dilation, groups = moving_stride(op), pair(op.arg("dilation")), int(op.arg("groups"))
    if max(stride) > STRIDE_MAX:
        _strided_conv(lw, op, stride)
        return
    n, cin, h, w = x.shape
    cout, cin_g, kh, kw = weight.shape
    oh, ow = op.output.shape[2:]
    name, pad = _spatial(lw, op, x, (kh, kw), stride, dilation, pair(op.arg("padding")), (oh, ow))
    acc_shape = [n, oh, ow, cout]
    acc_type = ACCUMULATOR[x.dtype]
    zero_points = [lw.zp(x.qparams.zero_point, x.dtype), lw.zp(0, "int8")]
    if groups == 1:
        acc = lw.inter(acc_shape, acc_type)
        w_ohwi = weight.data.transpose(0, 2, 3, 1)
        attribute = _attr("Conv2d", pad, list(stride), list(dilation), False, DT[acc_type])
        lw.emit("CONV2D", [name, lw.const(w_ohwi, "int8", "weight"), _bias(lw, bias, cout, acc_type), *zero_points],
                [acc], attribute)
    elif groups == cin and cin_g == 1:
        acc = lw.inter(acc_shape, acc_type)
        w_hwcm = weight.data.reshape(cin, cout // cin, kh, kw).transpose(2, 3, 0, 1)
        attribute = _attr("DepthwiseConv2d", pad, list(stride), list(dilation), False, DT[acc_type])
        lw.emit("DEPTHWISE_CONV2D", [name, lw.const(w_hwcm, "int8", "weight"), _bias(lw, bias, cout, acc_type),
                                     *zero_points], [acc], attribute)
    else:
        _grouped_conv(lw, op, name, pad, zero_points)
        return
    _mac_rescale(lw, op, acc, acc_shape, x, weight, True)


def _grouped_conv(lw: Lowerer, op: Op, name: str, pad, zero_points):
    """TOSA has no grouped convolution: slice the NHWC input `name`, convolve and
    requantize each group, concatenate."""
    x, weight, bias, out = op.arg("input"), op.arg("weight"), op.arg("bias"), op.output
    stride, dilation, groups = moving_stride(op), pair(op.arg("dilation")), int(op.arg("groups"))
    n, cin = x.shape[:2]
    cout = weight.shape[0]
    oh, ow = out.shape[2:]
    acc_type = ACCUMULATOR[x.dtype]
    scales = np.broadcast_to(x.qparams.scale * np.asarray(weight.qparams.scale, np.float64) / out.qparams.scale,
                             (cout,))
    bias_data = bias.data if bias is not None else np.zeros(cout, np.int32)
    cin_g, cout_g = cin // groups, cout // groups
    in_shape = lw.tensors[name].shape
    attribute = _attr("Conv2d", pad, list(stride), list(dilation), False, DT[acc_type])
    pieces = []
    for g in range(groups):
        channels = slice(g * cout_g, (g + 1) * cout_g)
        piece = _slice(lw, name, [0, 0, 0, g * cin_g], [n, in_shape[1], in_shape[2], cin_g], x.dtype)
        part = lw.inter([n, oh, ow, cout_g], acc_type)
        lw.emit("CONV2D", [piece, lw.const(weight.data[channels].transpose(0, 2, 3, 1), "int8", "weight"),
                           lw.const(bias_data[channels], acc_type, "bias"), *zero_points], [part], attribute)
        pieces.append(lw.rescale(part, [n, oh, ow, cout_g], acc_type, out.dtype, scales[channels], 0,
                                 out.qparams.zero_point))
    result = lw.inter([n, oh, ow, cout], out.dtype)
    lw.emit("CONCAT", pieces, [result], _attr("Concat", 3))
    lw.result(out, result, True)


# ---- strides beyond the NPU's 1..3: space to depth -----------------------------------------------------------
# Along an axis of stride s > 3, with x' the input padded and cut to s * (out - 1 + t) entries and
# X'[i][r] = x'[s*i + r] its phases (r < s) moved into channels, a window of extent E (the dilated
# kernel's) at stride s is one of t = ceil(E / s) taps at stride 1:
#     out[i] = sum_{u<E} x'[s*i + u] w[u] = sum_{q<t} sum_{r<s} X'[i + q][r] w[q*s + r],  w zero past E.
# The weights are the op's int8 weights rearranged (and zero-filled), with its bias and scales, so the
# integers are the strided convolution's. A pool whose windows do not overlap reduces each window.
def _pad_crop(lw: Lowerer, name: str, shape, dtype: str, pads, crops, value: int) -> tuple[str, list[int]]:
    """NHWC `name` without its last crops[0] rows and crops[1] columns, then padded by
    pads [top, bottom, left, right] with `value`; (result, its shape)."""
    n, h, w, c = shape
    name = _crop(lw, name, shape, dtype, *crops)
    shape = [n, h - crops[0], w - crops[1], c]
    if not any(pads):
        return name, shape
    padded = [n, shape[1] + pads[0] + pads[1], shape[2] + pads[2] + pads[3], c]
    out = lw.inter(padded, dtype)
    lw.emit("PAD", [name, lw.shape_const([0, 0, *pads, 0, 0]), lw.const(np.array([value]), dtype, "pad_value")],
            [out], _attr("Pad"))
    return out, padded


def _space_to_depth(lw: Lowerer, name: str, shape, dtype: str, factors) -> tuple[str, list[int]]:
    """NHWC `name` [1, H, W, C], H and W multiples of factors (fh, fw), as [1, H/fh, W/fw, fh*fw*C]
    whose channel (rh, rw, c) at (i, j) is x[fh*i + rh, fw*j + rw, c]. W's phases join the channels
    by a free reshape; H's take a transpose of [H/fh, fh, W/fw, fw*C] to [H/fh, W/fw, fh, fw*C]
    (N and H swapped with W: Vela runs it as one NPU operation)."""
    _, h, w, c = shape
    fh, fw = factors
    out = [1, h // fh, w // fw, fh * fw * c]
    if fh > 1:
        rows = [h // fh, fh, w // fw, fw * c]
        name = lw.to_layout(lw.reshape(name, rows, dtype), rows, dtype, (0, 2, 1, 3))
    return lw.reshape(name, out, dtype), out


def _strided_conv(lw: Lowerer, op: Op, stride):
    """A plain or depthwise convolution with a stride beyond 3 (see above). Axes of stride 1..3 keep
    it, their kernel, dilation and TOSA padding; the others are padded by a PAD of the input's zero
    point (which the convolution's input zero point makes 0) and folded into channels. A depthwise
    convolution stays depthwise over the phase channels, its phases then summed by an int32
    REDUCE_SUM (the bias in phase 0 only)."""
    x, weight, bias, out = op.arg("input"), op.arg("weight"), op.arg("bias"), op.output
    dilation, padding = pair(op.arg("dilation")), pair(op.arg("padding"))
    n, cin, h, w = x.shape
    cout, cin_g = weight.shape[:2]
    oh, ow = out.shape[2:]
    data = np.asarray(weight.data)
    axes = []  # per axis: (factor, kernel, stride, dilation) of the TOSA convolution
    tosa_pad, pads, crops = [], [], []
    for axis, (size, k, s, d, p, o) in enumerate(zip((h, w), weight.shape[2:], stride, dilation, padding, (oh, ow))):
        if s <= STRIDE_MAX:
            before, after, crop = conv_geometry(size, k, s, d, p, o)
            axes.append((1, k, s, d))
            tosa_pad += [before, after]
            pads += [0, 0]
            crops.append(crop)
            continue
        extent = (k - 1) * d + 1
        taps = -(-extent // s)
        after = s * (o - 1 + taps) - size - p
        axes.append((s, taps, 1, 1))
        tosa_pad += [0, 0]
        pads += [p, max(0, after)]
        crops.append(max(0, -after))
        dense = np.zeros(data.shape[:2 + axis] + (taps * s,) + data.shape[3 + axis:], data.dtype)
        index = [slice(None)] * 4
        index[2 + axis] = slice(0, extent, d)
        dense[tuple(index)] = data
        data = dense
    name, shape = _pad_crop(lw, lw.nhwc(x), [n, h, w, cin], x.dtype, pads, crops, x.qparams.zero_point)
    (fh, th, sh, dh), (fw, tw, sw, dw) = axes
    native_stride, native_dilation = [sh, sw], [dh, dw]
    name, shape = _space_to_depth(lw, name, shape, x.dtype, (fh, fw))
    phased = data.reshape(cout, cin_g, th, fh, tw, fw)  # [o][c][q_h][r_h][q_w][r_w]
    acc_type = ACCUMULATOR[x.dtype]
    zero_points = [lw.zp(x.qparams.zero_point, x.dtype), lw.zp(0, "int8")]
    acc_shape = [n, oh, ow, cout]
    if int(op.arg("groups")) == 1:
        w_ohwi = phased.transpose(0, 2, 4, 3, 5, 1).reshape(cout, th, tw, fh * fw * cin)
        acc = lw.inter(acc_shape, acc_type)
        attribute = _attr("Conv2d", tosa_pad, native_stride, native_dilation, False, DT[acc_type])
        lw.emit("CONV2D", [name, lw.const(w_ohwi, "int8", "weight"), _bias(lw, bias, cout, acc_type), *zero_points],
                [acc], attribute)
    else:  # depthwise (the support rule): output channel o = c*M + m reads input channel c
        phases = fh * fw
        w_hwcm = phased.reshape(cin, cout // cin, th, fh, tw, fw).transpose(2, 4, 3, 5, 0, 1)
        w_hwcm = w_hwcm.reshape(th, tw, phases * cin, cout // cin)
        bias_data = np.zeros(phases * cout, np.int64)
        if bias is not None:
            bias_data[:cout] = bias.data
        per_phase = lw.inter([n, oh, ow, phases * cout], acc_type)
        attribute = _attr("DepthwiseConv2d", tosa_pad, native_stride, native_dilation, False, DT[acc_type])
        lw.emit("DEPTHWISE_CONV2D", [name, lw.const(w_hwcm, "int8", "weight"), lw.const(bias_data, acc_type, "bias"),
                                     *zero_points], [per_phase], attribute)
        grouped = lw.reshape(per_phase, [oh * ow, phases, cout], acc_type)
        summed, _ = _reduce_axes(lw, grouped, [oh * ow, phases, cout], [1], "REDUCE_SUM", acc_type)
        acc = lw.reshape(summed, acc_shape, acc_type)
    _mac_rescale(lw, op, acc, acc_shape, x, weight, True)


@lowering(aten.linear.default)
def _linear(lw: Lowerer, op: Op):
    x, weight = op.arg("input"), op.arg("weight")
    out = op.output
    k = x.shape[-1]
    rows = int(np.prod(x.shape[:-1]))
    cout = weight.shape[0]
    name = lw.reshape(lw.torch_order(x), [rows, 1, 1, k], x.dtype)
    acc_type = ACCUMULATOR[x.dtype]
    acc = lw.inter([rows, 1, 1, cout], acc_type)
    attribute = _attr("Conv2d", [0, 0, 0, 0], [1, 1], [1, 1], False, DT[acc_type])
    lw.emit("CONV2D", [name, lw.const(weight.data.reshape(cout, 1, 1, k), "int8", "weight"),
                       _bias(lw, op.arg("bias"), cout, acc_type), lw.zp(x.qparams.zero_point, x.dtype),
                       lw.zp(0, "int8")], [acc], attribute)
    scale = x.qparams.scale * np.asarray(weight.qparams.scale, np.float64) / out.qparams.scale
    res = lw.rescale(acc, [rows, 1, 1, cout], acc_type, out.dtype, scale, 0, out.qparams.zero_point)
    flat = Value(out.name, (rows, 1, 1, cout), out.dtype, out.qparams, producer=op)
    lw.result(flat, res)
    lw.bind(out, lw.reshape(lw.names[id(flat)][0], out.shape, out.dtype), False)


def _pool_args(op: Op, x: Value):
    kernel = pair(op.arg("kernel_size"))
    stride = moving_stride(op)  # 1 along an axis of one window: the stride is irrelevant (and TOSA/Vela limit it)
    padding = pair(op.arg("padding"))
    out_hw = op.output.shape[2:]
    return kernel, stride, padding, out_hw


@lowering(aten.avg_pool2d.default)
def _avg_pool(lw: Lowerer, op: Op):
    x = op.arg("self")
    kernel, stride, padding, out_hw = _pool_args(op, x)
    if op.arg("divisor_override") is not None:
        raise LoweringError(f"node {op.name}: avg_pool2d divisor_override is not supported")
    n, c, h, w = x.shape
    if out_hw == (1, 1) and kernel == (h, w) and padding == (0, 0):
        lw.result(op.output, _global_mean(lw, x, op.output), True)
        return
    if _kiln_strides(lw, stride):
        _strided_pool(lw, op, "REDUCE_SUM", kernel, stride, padding)
        return
    name = lw.nhwc(x)
    if padding != (0, 0) and op.arg("count_include_pad"):
        # PyTorch divides by the whole window, padding included; TOSA by the valid count only.
        padded = [n, h + 2 * padding[0], w + 2 * padding[1], c]
        out = lw.inter(padded, x.dtype)
        lw.emit("PAD", [name, lw.shape_const([0, 0, padding[0], padding[0], padding[1], padding[1], 0, 0]),
                        lw.const(np.array([x.qparams.zero_point]), x.dtype, "pad_value")], [out], _attr("Pad"))
        name, (n, h, w, c), padding = out, padded, (0, 0)
    ph = conv_geometry(h, kernel[0], stride[0], 1, padding[0], out_hw[0])
    pw = conv_geometry(w, kernel[1], stride[1], 1, padding[1], out_hw[1])
    name = _crop(lw, name, [n, h, w, c], x.dtype, ph[2], pw[2])
    lw.result(op.output, _avg_pool_nhwc(lw, name, x, op.output, kernel, stride, [ph[0], ph[1], pw[0], pw[1]]), True)


def _kiln_strides(lw: Lowerer, stride) -> bool:
    """Whether an average pool of `stride` is lowered by _strided_pool: a stride beyond the NPU's
    1..3 where the choice VELA_STRIDED_POOLS leaves it to kiln (else one AVG_POOL2D that Vela
    decomposes itself)."""
    if max(stride) <= STRIDE_MAX:
        return False
    lw.choices.add(VELA_STRIDED_POOLS)
    return not lw.vela_strided_pools


def _avg_pool_nhwc(lw: Lowerer, name: str, x: Value, out: Value, kernel, stride, pad) -> str:
    """AVG_POOL2D of NHWC `name` into `out`'s quantization; returns the NHWC result."""
    n, c = x.shape[:2]
    shape = [n, out.shape[2] if len(out.shape) == 4 else 1, out.shape[3] if len(out.shape) == 4 else 1, c]
    same = out.qparams.scale == x.qparams.scale and out.dtype == x.dtype
    out_zp = out.qparams.zero_point if same else x.qparams.zero_point
    pooled = lw.inter(shape, x.dtype)
    attribute = _attr("AvgPool2d", list(kernel), list(stride), pad, ts.DType.INT32)
    lw.emit("AVG_POOL2D", [name, lw.zp(x.qparams.zero_point, x.dtype), lw.zp(out_zp, x.dtype)], [pooled], attribute)
    if same:
        return pooled
    return lw.rescale(pooled, shape, x.dtype, out.dtype, x.qparams.scale / out.qparams.scale, x.qparams.zero_point,
                      out.qparams.zero_point)


@lowering(aten.adaptive_avg_pool2d.default)
def _adaptive_avg_pool(lw: Lowerer, op: Op):
    x = op.arg("self")
    h, w = x.shape[2:]
    oh, ow = op.output.shape[2:]
    if (oh, ow) == (1, 1):
        lw.result(op.output, _global_mean(lw, x, op.output), True)
        return
    kernel = (h // oh, w // ow)  # the support rule requires an exact division
    stride = tuple(1 if o == 1 else k for k, o in zip(kernel, (oh, ow)))
    if _kiln_strides(lw, stride):
        _strided_pool(lw, op, "REDUCE_SUM", kernel, stride, (0, 0))
        return
    lw.result(op.output, _avg_pool_nhwc(lw, lw.nhwc(x), x, op.output, kernel, kernel, [0, 0, 0, 0]), True)


@lowering(aten.mean.dim)
def _mean(lw: Lowerer, op: Op):
    """Mean over any dims: an int32 sum, then one RESCALE by x's scale / (count x the output's);
    over H and W of a 4-D value, _global_mean (the same REDUCE_SUM, of NHWC [N, 1, H*W, C])."""
    x, out = op.arg("self"), op.output
    if len(x.shape) != 4 or reduced_dims(op) != [2, 3]:
        _reduction(lw, op, "REDUCE_SUM")
        return
    result = _global_mean(lw, x, out)
    if len(out.shape) == 4:
        lw.result(out, result, True)
    else:
        lw.result(out, lw.reshape(result, out.shape, out.dtype), False)


DEPTHWISE_SUM_HEIGHT_MAX, DEPTHWISE_SUM_AREA_MAX = 64, 64 * 64  # a depthwise kernel's limits on the NPU


def _global_mean(lw: Lowerer, x: Value, out: Value) -> str:
    """The mean over all of H and W as NHWC [N, 1, 1, C], summed exactly in the accumulator
    type and requantized by one RESCALE (one rounding). The sum is a REDUCE_SUM of H and W
    merged (a free reshape in NHWC) where x feeds nothing else: Vela estimates it below
    AVG_POOL2D and a depthwise sum for ds_cnn's 25x5 and resnet8's 8x8 pools (85,923 and
    191,802 NPU cycles on ethos-u55-128, against 93,923 and 195,564 by depthwise sum). Where
    x feeds other ops too (a squeeze-excitation block), Vela copies x for that reshape. Then an
    int8 x whose step is no coarser than the output's (an adaptive or global average pool,
    which shares its input's quantization) is read in place by one AVG_POOL2D of the whole
    map (with a RESCALE to the output's step where they differ: the pool's rounding to x's
    step stays within one of the output's; efficientnet_b0: 324,634 NPU cycles on
    ethos-u55-128, against 366,274 by a depthwise convolution of ones and 384,866 by the
    copy). Otherwise (a mean's finer step, int16) a depthwise convolution of ones within
    the NPU's kernel limits reads it in place, its sum exact in the accumulator."""
    n, c, h, w = x.shape
    scale = x.qparams.scale / (h * w * out.qparams.scale)
    readers = sum(1 for op in lw.partition.ops for v in op.inputs if v is x) + sum(v is x for v in lw.partition.outputs)
    coarse = out.qparams.scale >= x.qparams.scale  # the pool's rounding to x's step is then within one of out's
    pool = x.dtype == "int8" and coarse and h <= KERNEL_HEIGHT_MAX and h * w <= KERNEL_AREA_MAX
    depthwise = h <= DEPTHWISE_SUM_HEIGHT_MAX and h * w <= DEPTHWISE_SUM_AREA_MAX
    if readers == 1 and (pool or depthwise):
        lw.choices.add(POOLED_MEANS)
    in_place = readers > 1 or lw.pooled_means
    if in_place and pool:
        return _avg_pool_nhwc(lw, lw.nhwc(x), x, out, [h, w], [1, 1], [0, 0, 0, 0])
    if in_place and depthwise:
        acc_type = ACCUMULATOR[x.dtype]
        acc = lw.inter([n, 1, 1, c], acc_type)
        attribute = _attr("DepthwiseConv2d", [0, 0, 0, 0], [1, 1], [1, 1], False, DT[acc_type])
        lw.emit("DEPTHWISE_CONV2D", [lw.nhwc(x), lw.const(np.ones((h, w, c, 1)), "int8", "ones"),
                                     _bias(lw, None, c, acc_type), lw.zp(x.qparams.zero_point, x.dtype),
                                     lw.zp(0, "int8")], [acc], attribute)
        return lw.rescale(acc, [n, 1, 1, c], acc_type, out.dtype, scale, 0, out.qparams.zero_point)
    flat = lw.reshape(lw.nhwc(x), [n, 1, h * w, c], x.dtype)
    wide = lw.rescale(flat, [n, 1, h * w, c], x.dtype, "int32", 1.0, x.qparams.zero_point, 0)
    acc = lw.inter([n, 1, 1, c], "int32")
    lw.emit("REDUCE_SUM", [wide], [acc], _attr("ReduceSum", 2))
    return lw.rescale(acc, [n, 1, 1, c], "int32", out.dtype, scale, 0, out.qparams.zero_point)


@lowering(aten.max_pool2d.default)
def _max_pool(lw: Lowerer, op: Op):
    x = op.arg("self")
    kernel, stride, padding, out_hw = _pool_args(op, x)
    if max(stride) > STRIDE_MAX:
        _strided_pool(lw, op, "REDUCE_MAX", kernel, stride, padding)
        return
    n, c, h, w = x.shape
    name = lw.nhwc(x)
    ph = _max_pool_pad(h, kernel[0], stride[0], padding[0], out_hw[0])
    pw = _max_pool_pad(w, kernel[1], stride[1], padding[1], out_hw[1])
    name = _crop(lw, name, [n, h, w, c], x.dtype, ph[2], pw[2])
    out = lw.inter([n, out_hw[0], out_hw[1], c], x.dtype)
    attribute = _attr("MaxPool2d", list(kernel), list(stride), [ph[0], ph[1], pw[0], pw[1]],
                      ts.NanPropagationMode.PROPAGATE)
    lw.emit("MAX_POOL2D", [name], [out], attribute)
    lw.result(op.output, out, True)


def _max_pool_pad(size, kernel, stride, pad, out):
    """Like conv_geometry, but ceil_mode may need extra trailing padding, which max ignores."""
    after = (out - 1) * stride + kernel - size - pad
    return pad, max(0, after), max(0, -after)


def _strided_pool(lw: Lowerer, op: Op, kind: str, kernel, stride, padding):
    """A max or average pool with a stride beyond 3 whose windows do not overlap (the support
    rule): x padded and cut so each axis is out * stride (along an axis of one window, out *
    kernel), its rows grouped by window as [OH, SH, OW*SW*C] and then its columns as [OH*OW, SW, C]
    (free reshapes of NHWC), each group SLICEd to the kernel where it is narrower than the stride
    and reduced along that middle axis: REDUCE_MAX in x's type (padding of the type's least value,
    which a window that also holds an input value never takes), or for an average REDUCE_SUM in
    int32 without the zero point (padding of the zero point, count_include_pad) and one RESCALE by
    x's scale / (kh*kw * the output's): one rounding, as PT2E's float average then quantized."""
    x, out = op.arg("self"), op.output
    n, c, h, w = x.shape
    out_hw = out.shape[2:]
    groups, pads, crops = [], [], []
    for size, k, s, p, o in zip((h, w), kernel, stride, padding, out_hw):
        group = k if o == 1 else s
        after = group * o - size - p
        groups.append(group)
        pads += [p, max(0, after)]
        crops.append(max(0, -after))
    average = kind == "REDUCE_SUM"
    value = x.qparams.zero_point if average else QRANGE[x.dtype][0]
    name, _ = _pad_crop(lw, lw.nhwc(x), [n, h, w, c], x.dtype, pads, crops, value)
    (oh, ow), (gh, gw), (kh, kw) = out_hw, groups, kernel
    dtype = x.dtype
    rows = [oh, gh, ow * gw * c]
    name = lw.reshape(name, rows, dtype)
    if average:
        name, dtype = lw.rescale(name, rows, x.dtype, "int32", 1.0, x.qparams.zero_point, 0), "int32"
    name = _window_reduce(lw, name, rows, kh, kind, dtype)
    columns = [oh * ow, gw, c]
    name = _window_reduce(lw, lw.reshape(name, columns, dtype), columns, kw, kind, dtype)
    shape = [n, oh, ow, c]
    name = lw.reshape(name, shape, dtype)
    if average:
        scale = x.qparams.scale / (kh * kw * out.qparams.scale)
        name = lw.rescale(name, shape, "int32", out.dtype, scale, 0, out.qparams.zero_point)
    else:
        name = _same_quantization(lw, name, shape, x, out)
    lw.result(out, name, True)


def _window_reduce(lw: Lowerer, name: str, shape, kernel: int, kind: str, dtype: str) -> str:
    """Rank-3 `name` [A, G, B] reduced over its first `kernel` entries along G, kept as [A, 1, B]."""
    a, group, b = shape
    if kernel < group:
        name = _slice(lw, name, [0, 0, 0], [a, kernel, b], dtype)
    if kernel == 1:
        return name
    return _reduce_axes(lw, name, [a, kernel, b], [1], kind, dtype)[0]


def scalar_constant(c: float, dtype: str) -> Value:
    """Scalar operand `c` as a constant of one element (it broadcasts to any shape) whose
    integer is -1, 0 or 1 and whose scale is |c|: its real value is c itself, so the op
    computes with the exact scalar, as PT2E's reference does, whatever the other range."""
    lo, hi = QRANGE[dtype]
    return Value(f"scalar_{c:g}", (), dtype, QParams(abs(c) or 1.0, 0, None, lo, hi),
                 data=np.array(int(np.sign(c)), dtype))


def _two_operands(op: Op) -> list[Value]:
    """The operands of a binary elementwise op, a scalar as a constant (scalar_constant)."""
    a, b = op.arg("self"), op.arg("other")
    return [v if isinstance(v, Value) else scalar_constant(float(v), op.output.dtype) for v in (a, b)]


@lowering(aten.add.Tensor, aten.sub.Tensor)
def _add_sub(lw: Lowerer, op: Op):
    """Both operands (a constant one as a TOSA constant) widened to int32 in units of
    2 * (the larger scale) / 2^shift, added or subtracted, requantized (one rounding).

    A scalar operand c is a one-element tensor of scale |c| (scalar_constant), which Vela 5.2.0
    folds with both RESCALEs into one elementwise ADD (its operand scales then are 2^(shift-1)
    for the larger and less for the other), where c is exact and the tensor operand is rounded
    to half a unit of 2|c| / 2^shift if |c| is the larger scale. Where that rounding could
    reach 1/32 of an output step (an int16 operand far finer than c: x - 133 with x's step
    0.01 came 2 steps off; x near 133 minus 133, 17), c is instead an int32 constant in the
    units of the tensor alone, rounded to 2^-shift of its step, which Vela runs as int32
    arithmetic in passes of their own (x + 1.5 on [1, 6, 16], ethos-u55-128: 504 cycles
    against 144)."""
    if op.arg("alpha") not in (None, 1):
        raise LoweringError(f"node {op.name}: alpha != 1 is not supported")
    out = op.output
    shift = 20 if out.dtype == "int8" else 15
    operands = [op.arg("self"), op.arg("other")]
    tensors = [v for v in operands if isinstance(v, Value)]
    top = 2 * max(v.qparams.scale for v in tensors)
    scalars = [float(c) for c in operands if not isinstance(c, Value)]
    units = round(scalars[0] / top * (1 << shift)) if scalars else 0
    if scalars:
        constant = scalar_constant(scalars[0], out.dtype).qparams.scale
        loss = constant / ((1 << shift) * out.qparams.scale)  # the tensor's rounding, in output steps
        if constant <= tensors[0].qparams.scale or loss <= 1 / 32 or abs(units) >= 1 << 31:
            tensors = _two_operands(op)
            top = 2 * max(v.qparams.scale for v in tensors)
            scalars = []
    names, shape, nhwc = _broadcast_operands(lw, tensors, out)
    wide = lw.widen(names, shape, tensors, [v.qparams.scale / top * (1 << shift) for v in tensors])
    if scalars:
        constant = lw.const(np.full([1] * len(shape[0]), units), "int32", "scalar")
        wide = [wide[0], constant] if isinstance(operands[0], Value) else [constant, wide[0]]
    acc_shape = Lowerer.shape_of(out, nhwc)
    acc = lw.inter(acc_shape, "int32")
    kind = "Add" if op.target is aten.add.Tensor else "Sub"
    lw.emit(kind.upper(), wide, [acc], _attr(kind))
    result = lw.rescale(acc, acc_shape, "int32", out.dtype, top / ((1 << shift) * out.qparams.scale), 0,
                        out.qparams.zero_point)
    lw.result(out, result, nhwc)


@lowering(aten.mul.Tensor)
def _mul(lw: Lowerer, op: Op):
    a, b = op.arg("self"), op.arg("other")
    out = op.output
    if out.dtype == "int32":
        _mul_int32(lw, [v if isinstance(v, Value) else Value(f"scalar_{v}", (), "int32", data=np.array(v, np.int32))
                        for v in (a, b)], out)
        return
    if not isinstance(b, Value) and float(b) > 0:  # x * c, c > 0: a requantization
        name, is_nhwc = lw.bound(a, any_layout=True)
        scale = a.qparams.scale * float(b) / out.qparams.scale
        result = lw.rescale(name, Lowerer.shape_of(out, is_nhwc), a.dtype, out.dtype, scale, a.qparams.zero_point,
                            out.qparams.zero_point)
        lw.result(out, result, is_nhwc)
        return
    a, b = _two_operands(op)  # x * c, c <= 0: a MUL by the constant -1 or 0 of scale |c|
    names, shapes, nhwc = _broadcast_operands(lw, [a, b], out)
    wide = lw.widen(names, shapes, [a, b], [1.0, 1.0])
    acc_shape = Lowerer.shape_of(out, nhwc)
    acc = lw.inter(acc_shape, "int32")
    lw.emit("MUL", wide + [lw.const(np.array([0]), "int8", "shift")], [acc], _attr("Mul"))
    result = lw.rescale(acc, acc_shape, "int32", out.dtype, a.qparams.scale * b.qparams.scale / out.qparams.scale,
                        0, out.qparams.zero_point)
    lw.result(out, result, nhwc)


def _mul_int32(lw: Lowerer, operands: list[Value], out: Value):
    """a * b of int32 tensors modulo 2^32, as PyTorch computes it (the NPU's MUL saturates
    instead, and TOSA leaves int32 overflow unpredictable), in int32 steps none of which
    overflows: a = ah 2^16 + al with al in [0, 2^16), b = bh 2^16 + bl with bl in [-2^15, 2^15)
    (bh up to 2^15), so p = al bl, x = ah bl and y = al bh each fit int32, and
    a b = p + 2^16 (x + y) modulo 2^32 = 2^16 h + (p mod 2^16), where h = (p >> 16) + x + (y mod
    2^16) taken into [-2^15, 2^15): 28 elementwise ops on two tensors, fewer on constants
    (their limbs are computed here). Shifts are arithmetic right (floor) and left shifts of
    values whose result fits."""
    names, shapes, nhwc = _broadcast_operands(lw, operands, out)
    shape = dict(zip(names, map(tuple, shapes)))  # TOSA name -> its shape, for the broadcasts

    def const(value) -> str:
        data = np.array(value, np.int32)
        data = data.reshape((1,) * len(shapes[0])) if data.ndim == 0 else data
        name = lw.const(data, "int32", "int")
        shape[name] = data.shape
        return name

    def emit(kind: str, x: str, y: str, *attribute) -> str:
        shape_out = np.broadcast_shapes(shape[x], shape[y])
        result = lw.inter(list(shape_out), "int32")
        shape[result] = shape_out
        extra = [lw.const(np.array([0]), "int8", "shift")] if kind == "MUL" else []
        lw.emit(kind, [x, y, *extra], [result], _op_attr(kind, *attribute))
        return result

    shr = lambda x, n: emit("ARITHMETIC_RIGHT_SHIFT", x, const(n), False)  # noqa: E731 (floor)
    shl = lambda x, n: emit("LOGICAL_LEFT_SHIFT", x, const(n))  # noqa: E731
    add, sub, mul = (lambda x, y, k=k: emit(k, x, y) for k in ("ADD", "SUB", "MUL"))
    low = lambda x, high: sub(x, shl(high, 16))  # noqa: E731 (x - high 2^16)

    def limbs(v: Value, name: str, signed_low: bool) -> tuple[str, str]:
        if v.is_constant:
            rank = len(shapes[0])
            data = v.data.astype(np.int64).reshape((1,) * (rank - v.data.ndim) + v.data.shape)
            data = data.transpose(channels_last(rank)) if nhwc else data  # as _broadcast_operands lays it out
            high = data >> 16
            if signed_low:
                high += (data - (high << 16)) >= 2**15
            return const(high), const(data - (high << 16))
        high = shr(name, 16)
        low_part = low(name, high)  # [0, 2^16)
        if not signed_low:
            return high, low_part
        carry = shr(add(low_part, const(2**15)), 16)  # 1 where the low limb is 2^15 or more
        return add(high, carry), sub(low_part, shl(carry, 16))

    (ah, al), (bh, bl) = limbs(operands[0], names[0], False), limbs(operands[1], names[1], True)
    p, x, y = mul(al, bl), mul(ah, bl), mul(al, bh)
    p_high = shr(p, 16)
    s = add(add(p_high, x), low(y, shr(y, 16)))
    h = sub(s, shl(shr(add(s, const(2**15)), 16), 16))
    lw.result(out, add(shl(h, 16), low(p, p_high)), nhwc)


def _broadcast_operands(lw: Lowerer, values: list[Value], out: Value):
    """The operands at the output's rank, with their TOSA shapes and the layout's flag: channels
    last where an operand of that rank is so stored (a convolution's result), else PyTorch's
    order (an elementwise op needs no layout of its own: on the program's NCHW inputs it would
    only add TRANSPOSEs); a constant one (a parameter, a buffer, a scalar) becomes a TOSA
    constant of that shape and layout."""
    rank = len(out.shape)
    tensors = [v for v in values if not v.is_constant]
    # A 4-D slice's op stays NHWC: in PyTorch's order Vela 5.2.0 misreads a strided slice of x
    # beside x[..., :3, :4] (tests/simulator/test_npu_strided_slice.py: 38 steps off).
    sliced = rank == 4 and any(lw.slice_source(lw.names[id(v)][0]) is not None for v in tensors)
    nhwc = rank >= 3 and (sliced or any(len(v.shape) == rank and lw.stored_channels_last(v) for v in tensors))
    names, shapes = [], []
    for v in values:
        shape = (1,) * (rank - len(v.shape)) + tuple(v.shape)
        if v.is_constant:
            data = v.data.reshape(shape)
            name = lw.const(data.transpose(channels_last(rank)) if nhwc else data, v.dtype)
        elif len(v.shape) == rank:
            name = lw.nhwc(v) if nhwc else lw.torch_order(v)
        else:
            name = lw.reshape(lw.torch_order(v), shape, v.dtype)
            if nhwc:
                view = Value(v.name + "_b", shape, v.dtype, v.qparams)
                lw.bind(view, name, False)
                name = lw.nhwc(view)
        names.append(name)
        shapes.append(Lowerer.shape_of(Value("", shape, v.dtype), nhwc))
    return names, shapes, nhwc


@lowering(aten.relu.default, aten.relu6.default, aten.hardtanh.default, aten.clamp.default)
def _clamp(lw: Lowerer, op: Op):
    x = op.inputs[0]
    out = op.output
    name, is_nhwc = lw.bound(x, any_layout=True)
    low, high = clamp_range(op.target, op.arg)
    shape = Lowerer.shape_of(out, is_nhwc)
    if out.qparams != x.qparams:
        name = lw.rescale(name, shape, x.dtype, out.dtype, x.qparams.scale / out.qparams.scale,
                          x.qparams.zero_point, out.qparams.zero_point)
    lo, hi = _quantize_real(low, out.qparams, out.dtype), _quantize_real(high, out.qparams, out.dtype)
    lw.result(out, lw.clamp(name, shape, out.dtype, lo, hi), is_nhwc)


# Unary functions a TABLE computes (kiln.partition.tables): exactly at 8 bits; at 16 bits where the
# interpolated table stays within a step (a support rule).
TABLE_FUNCTIONS = dict.fromkeys(vocabulary.TABLE_OPS)


@lowering(*TABLE_FUNCTIONS)
def _table(lw: Lowerer, op: Op):
    """A TABLE; neg of a value whose output shares its scale (min/max observers give -x the
    same range width) is a NEGATE, exact then: -(x - zp_in) + zp_out, saturated, which
    needs no table load (neg_2d on ethos-u65-256: 1,517 NPU cycles by TABLE); abs is
    |x - zp_in| requantized by one RESCALE (one rounding, half up where PT2E rounds half to
    even: within a step), which Vela folds into the ABS: fewer NPU cycles than a TABLE at every
    size measured (ethos-u55-128, [1, 32, 32, 64]: 32,768 against 66,816; [1, 4, 8]: 16
    against 440; ethos-u65-256 and -u85-256 alike)."""
    x, out = op.inputs[0], op.output
    name, is_nhwc = lw.bound(x, any_layout=True)
    shape = Lowerer.shape_of(out, is_nhwc)
    if op.target is aten.abs.default:
        wide = lw.rescale(name, shape, x.dtype, "int32", 1.0, x.qparams.zero_point, 0)
        magnitude = lw.inter(shape, "int32")
        lw.emit("ABS", [wide], [magnitude], _attr("Abs"))
        result = lw.rescale(magnitude, shape, "int32", out.dtype, x.qparams.scale / out.qparams.scale, 0,
                            out.qparams.zero_point)
        lw.result(out, result, is_nhwc)
        return
    if op.target is aten.neg.default and x.qparams.scale == out.qparams.scale and x.dtype == out.dtype:
        result = lw.inter(shape, out.dtype)
        lw.emit("NEGATE", [name, lw.zp(x.qparams.zero_point, x.dtype), lw.zp(out.qparams.zero_point, out.dtype)],
                [result], _attr("Negate"))
        lw.result(out, result, is_nhwc)
        return
    if x.dtype == "int8":
        result = lw.inter(shape, "int8")
        lw.emit("TABLE", [name, lw.const(tables.int8_table(op), "int8", "table")], [result], _attr("Table"))
    else:  # int16 in, int32 out (the interpolation in 2^-7 units), back to int16
        wide = lw.inter(shape, "int32")
        lw.emit("TABLE", [name, lw.const(tables.int16_table(op), "int16", "table")], [wide], _attr("Table"))
        result = lw.rescale(wide, shape, "int32", out.dtype, 2.0 ** -tables.INT16_STEP_BITS)
    lw.result(out, result, is_nhwc)


@lowering(aten.minimum.default, aten.maximum.default)
def _min_max(lw: Lowerer, op: Op):
    """Elementwise MINIMUM/MAXIMUM of two tensors broadcast to the output, in int32 (TOSA's
    integer MINIMUM/MAXIMUM): each input widened without its zero point, in the output's scale,
    compared, then narrowed with the output's zero point. The quantizer gives both inputs the
    output's range, and then the integers compare as the reals do (exact); an input of another
    range is requantized to the output's scale (one rounding) as it is widened."""
    a, b, out = op.arg("self"), op.arg("other"), op.output
    names, shapes, nhwc = _broadcast_operands(lw, [a, b], out)
    wide = lw.widen(names, shapes, [a, b], [v.qparams.scale / out.qparams.scale for v in (a, b)])
    shape = Lowerer.shape_of(out, nhwc)
    acc = lw.inter(shape, "int32")
    kind = "Minimum" if op.target is aten.minimum.default else "Maximum"
    lw.emit(kind.upper(), wide, [acc], _attr(kind, ts.NanPropagationMode.PROPAGATE))
    lw.result(out, lw.rescale(acc, shape, "int32", out.dtype, 1.0, 0, out.qparams.zero_point), nhwc)


# ---- comparisons and select (Ethos-U85) ------------------------------------------------------------
# op -> (TOSA comparison, operands swapped, result negated): lt/le are gt/ge of the swapped operands,
# ne the LOGICAL_NOT of eq.
COMPARISONS = {"eq": ("EQUAL", False, False), "ne": ("EQUAL", False, True), "gt": ("GREATER", False, False),
               "ge": ("GREATER_EQUAL", False, False), "lt": ("GREATER", True, False),
               "le": ("GREATER_EQUAL", True, False)}
# An int8 operand minus its zero point (9 bits) times up to 2^20: TOSA's RESCALE takes a value below
# 2^(shift - 1) in magnitude, and 2^20 is multiplier 2^30 with shift 10.
COMPARE_BITS = 20


def comparison_multipliers(scale_a: float, scale_b: float) -> tuple[int, int]:
    """Integers (Ma, Mb) with Ma / Mb as close to scale_a / scale_b as 2^COMPARE_BITS allows: the
    larger scale's is 2^COMPARE_BITS. (a - za) * Ma against (b - zb) * Mb then orders the real
    values as PT2E's float32 dequantizations do, up to the float32 rounding of the reference."""
    big = max(scale_a, scale_b)
    return tuple(max(1, round(2**COMPARE_BITS * s / big)) for s in (scale_a, scale_b))


def scalar_threshold(op: Op, x: Value, other: float) -> np.ndarray:
    """Which int8 values of x the comparison with the number `other` holds for, as PT2E's
    reference computes it (x dequantized in float32, then compared): a bool per value -128..127."""
    values = torch.arange(-128, 128, dtype=torch.int8)
    qp = x.qparams
    real = torch.ops.quantized_decomposed.dequantize_per_tensor(values, qp.scale, qp.zero_point, qp.qmin, qp.qmax,
                                                                 torch.int8)
    return op.target(real, other).numpy()


@lowering(*vocabulary.COMPARISON_OPS)
def _compare(lw: Lowerer, op: Op):
    """An int8 comparison as one TOSA comparison of int32 operands (a support rule keeps it to
    Ethos-U85, where Vela runs it). Two tensors: each minus its zero point times its integer
    multiplier (comparison_multipliers), by an exact RESCALE. A number: x's int8 values for which
    PT2E's reference comparison holds are worked out on the host (scalar_threshold) and the op
    compares x with the bound of that set: exact."""
    kind, swapped, negated = COMPARISONS[op.target.__name__.split(".")[0]]
    a, b, out = op.arg("self"), op.arg("other"), op.output
    if isinstance(b, Value):
        names, shapes, nhwc = _broadcast_operands(lw, [a, b], out)
        multipliers = comparison_multipliers(a.qparams.scale, b.qparams.scale)
        wide = [lw.rescale(n, sh, v.dtype, "int32", float(m), v.qparams.zero_point, 0)
                for n, sh, v, m in zip(names, shapes, (a, b), multipliers)]
    else:
        kind, swapped, negated, bound = threshold_test(scalar_threshold(op, a, float(b)))
        names, shapes, nhwc = _broadcast_operands(lw, [a], out)
        names.append(lw.const(np.full([1] * len(shapes[0]), bound), "int8", "bound"))
        # both widened alike (Vela folds these RESCALEs into the comparison)
        wide = [lw.rescale(n, sh, "int8", "int32", 1.0) for n, sh in zip(names, [shapes[0], [1] * len(shapes[0])])]
    shape = Lowerer.shape_of(out, nhwc)
    result = lw.inter(shape, "bool")
    lw.emit(kind, wide[::-1] if swapped else wide, [result], _op_attr(kind))
    if negated:
        flipped = lw.inter(shape, "bool")
        lw.emit("LOGICAL_NOT", [result], [flipped], _attr("LogicalNot"))
        result = flipped
    lw.result(out, result, nhwc)


def threshold_test(holds: np.ndarray) -> tuple[str, bool, bool, int]:
    """(TOSA comparison, operands swapped, negated, int8 bound) testing x against the bound for
    the set `holds` of x's int8 values (-128..127): x >= bound for an upper run (every value:
    bound -128), bound >= x for a lower run, x == bound for one value, its negation for all but
    one, and -128 > x for none."""
    values = np.arange(-128, 128)
    if not holds.any():
        return "GREATER", True, False, -128
    if holds[-1] and holds[holds.argmax():].all():
        return "GREATER_EQUAL", False, False, int(values[holds][0])
    if holds[0] and not holds[holds.argmin():].any():
        return "GREATER_EQUAL", True, False, int(values[holds][-1])
    if holds.sum() == 1:
        return "EQUAL", False, False, int(values[holds][0])
    if (~holds).sum() == 1:
        return "EQUAL", False, True, int(values[~holds][0])
    raise LoweringError("a comparison with a number that holds for no run of int8 values")


@lowering(*vocabulary.INDEX_OPS)
def _argmax(lw: Lowerer, op: Op):
    """ARGMAX along one dim (a support rule) of x's integers, which order as its real values do:
    int32 indices of the first largest value, as PyTorch's. A 4-D value stored NHWC is read so
    along C; along another dim, in PyTorch's order."""
    x, out = op.arg("self"), op.output
    name, axis, nhwc = _layout_axis(lw, x, op.arg("dim"))
    if nhwc and op.arg("dim") % 4 != 1:
        name, axis, nhwc = lw.torch_order(x), op.arg("dim") % 4, False
    shape = list(Lowerer.shape_of(x, nhwc))
    del shape[axis]
    indices = lw.inter(shape, "int32")
    lw.emit("ARGMAX", [name], [indices], _attr("ArgMax", axis, ts.NanPropagationMode.PROPAGATE))
    lw.result(out, lw.reshape(indices, out.shape, "int32") if list(out.shape) != shape else indices, False)


@lowering(aten.embedding.default, aten.index_select.default)
def _gather(lw: Lowerer, op: Op):
    """One GATHER of a [1, K, C] table by [1, W] int32 indices: embedding's rows, or index_select's
    entries along a dim with only size-1 dims before it (a support rule). The indices come checked
    against K and narrowed on the CPU (kiln.graph.CHECKED_INDEX), so the NPU reads no row past the
    table; the result is the table's integers, requantized once if the output's quantization differs."""
    values, index = op.inputs[0], op.inputs[1]
    out = op.output
    dim = 0 if op.target is aten.embedding.default else op.arg("dim") % len(values.shape)
    k, c = values.shape[dim], int(np.prod(values.shape[dim + 1:], dtype=np.int64))
    w = int(np.prod(index.shape, dtype=np.int64))
    def as_shape(name: str, shape, want, dtype: str) -> str:  # a RESHAPE only where the shape changes
        return name if list(shape) == list(want) else lw.reshape(name, want, dtype)

    if values.is_constant:
        table = lw.const(values.data.reshape(1, k, c), values.dtype, "table")
    else:
        table = as_shape(lw.torch_order(values), values.shape, [1, k, c], values.dtype)
    indices = (lw.const(index.data.reshape(1, w), "int32", "indices") if index.is_constant
               else as_shape(lw.torch_order(index), index.shape, [1, w], "int32"))
    gathered = lw.inter([1, w, c], values.dtype)
    lw.emit("GATHER", [table, indices], [gathered], _attr("Gather"))
    name = as_shape(gathered, [1, w, c], out.shape, values.dtype)
    lw.result(out, _same_quantization(lw, name, out.shape, values, out), False)


@lowering(*(vocabulary.LOGICAL_OPS - vocabulary.BOOL_REDUCTIONS))
def _logical(lw: Lowerer, op: Op):
    """LOGICAL_AND / LOGICAL_OR of two bool tensors broadcast to the output, LOGICAL_NOT of one
    (a support rule keeps them to bools)."""
    kind = {aten.logical_and.default: "LOGICAL_AND", aten.logical_or.default: "LOGICAL_OR",
            aten.logical_not.default: "LOGICAL_NOT"}[op.target]
    names, shapes, nhwc = _broadcast_operands(lw, op.inputs, op.output)
    result = lw.inter(Lowerer.shape_of(op.output, nhwc), "bool")
    lw.emit(kind, names, [result], _op_attr(kind))
    lw.result(op.output, result, nhwc)


@lowering(aten.where.self)
def _where(lw: Lowerer, op: Op):
    """SELECT between the two operands, each requantized to the output's quantization where it
    differs (one rounding), broadcast to the output."""
    cond, a, b, out = op.arg("condition"), op.arg("self"), op.arg("other"), op.output
    names, shapes, nhwc = _broadcast_operands(lw, [cond, a, b], out)
    for i, v in ((1, a), (2, b)):
        if v.qparams != out.qparams:
            names[i] = lw.rescale(names[i], shapes[i], v.dtype, out.dtype, v.qparams.scale / out.qparams.scale,
                                  v.qparams.zero_point, out.qparams.zero_point)
    shape = Lowerer.shape_of(out, nhwc)
    result = lw.inter(shape, out.dtype)
    lw.emit("SELECT", names, [result], _attr("Select"))
    lw.result(out, result, nhwc)


def _layout_axis(lw: Lowerer, v: Value, dim: int) -> tuple[str, int, bool]:
    """(name, axis, is_nhwc): `v` as bound, and torch dim `dim` as an axis of that layout."""
    name, is_nhwc = lw.bound(v)
    dim %= len(v.shape)
    return name, (NCHW_TO_NHWC.index(dim) if is_nhwc else dim), is_nhwc


# ---- reductions over any set of dims -------------------------------------------------------------
# TOSA reduces one axis at a time (REDUCE_SUM/MAX/MIN keep it as 1). Vela 5.2.0 places each on
# Ethos-U55/U65/U85 along any axis of rank 1..5 for int8 and int16 (REDUCE_MAX/MIN) and int32
# (REDUCE_SUM), but not an int32 REDUCE_MAX on Ethos-U55 ("Non-passthrough operation (ReduceMax)
# could not run on NPU"): max and min run in the input's own type, which their output shares.
# Its estimates on ethos-u55-128 shape the graph: reducing the last axis costs REDUCE_MAX/MIN
# 3-5x more than reducing another one (1,572 against 531 cycles with the transpose below for
# [1, 4, 6, 10] over its last dim, 1,050,715 against 237,872 for [1, 512, 512]), and reducing a
# long axis in two steps less than in one (21,829 cycles for 4,096 values, 2,802 as 256 x 16),
# while REDUCE_SUM is cheapest along the last axis.
UNORDERED_REDUCTIONS = ("REDUCE_SUM", "REDUCE_ANY", "REDUCE_ALL")  # no NaN mode
MAX_MIN_SPLIT = 16  # a whole max/min over K values: K as (K / b, b), b a divisor of K up to this


def _reduce_axes(lw: Lowerer, name: str, shape, axes, kind: str, dtype: str) -> tuple[str, list[int]]:
    """REDUCE_`kind` of `name` (of `shape`) along each of `axes` in turn; (result, its shape)."""
    shape = list(shape)
    for axis in axes:
        shape[axis] = 1
        out = lw.inter(shape, dtype)
        attribute = (_op_attr(kind, axis) if kind in UNORDERED_REDUCTIONS
                     else _op_attr(kind, axis, ts.NanPropagationMode.PROPAGATE))
        lw.emit(kind, [name], [out], attribute)
        name = out
    return name, list(shape)


def _reduce_last_axis(lw: Lowerer, name: str, shape, kind: str, dtype: str) -> tuple[str, list[int]]:
    """REDUCE_MAX/MIN of `name` along its last axis, whose other axes are all kept: the M kept
    values of each of the K entries made rows (a transpose of [1, M, K], one NPU op) and reduced
    along that non-last axis; with nothing kept (M = 1), the K values reduced as (K / b, b)."""
    k, m = shape[-1], int(np.prod(shape[:-1], dtype=np.int64))
    if m > 1:
        rows = lw.to_layout(lw.reshape(name, [1, m, k], dtype), [1, m, k], dtype, (0, 2, 1))
        return _reduce_axes(lw, rows, [1, k, m], [1], kind, dtype)
    b = next((b for b in range(min(MAX_MIN_SPLIT, k // 2), 1, -1) if k % b == 0), None)
    if b is None:
        return _reduce_axes(lw, lw.reshape(name, [k], dtype), [k], [0], kind, dtype)
    return _reduce_axes(lw, lw.reshape(name, [k // b, b], dtype), [k // b, b], [0, 1], kind, dtype)


def _bitwise_not(lw: Lowerer, name: str, shape) -> str:
    """~q = -1 - q of int8 `name`: one 8-bit TABLE, an order-reversing bijection of -128..127,
    so min(q) = ~max(~q) exactly. amin is lowered so on MIN_AS_MAX_FAMILIES, where Vela 5.2.0
    builds REDUCE_MIN as pivot - max(pivot - x), and when the result is reshaped onto other
    NHWC axes (NHWC [1, 1, 1, C] to [1, C, 1, 1]) its last SUB broadcasts the max's first
    element to every output (tests/simulator/test_npu_reduce_min.py pins it), while
    REDUCE_MAX so reshaped is right; Vela places TABLE as the lookup of the neighbouring
    operation."""
    out = lw.inter(shape, "int8")
    lw.emit("TABLE", [name, lw.const((-1 - np.arange(-128, 128)).astype(np.int8), "int8", "table")], [out],
            _attr("Table"))
    return out


def _reduction(lw: Lowerer, op: Op, kind: str):
    """sum, mean, amax, amin, any or all of x over reduced_dims(op), with or without keepdim.

    In x's layout (channels last for a value so bound), each run of adjacent reduced axes and of
    adjacent kept ones is merged by a free RESHAPE (axes of size 1 dropped), then each merged
    reduced axis is reduced in turn. A sum or mean is widened to int32 without the zero point
    first, and one RESCALE after the last REDUCE_SUM requantizes it (x's scale over the
    output's, divided by the count for a mean: one rounding, as PT2E's float mean of the
    dequantized values then quantized). Max and min run in x's type, any and all in bool, each
    merged axis in turn. The result, the input
    with each reduced dim 1, is then reshaped to the output (through PyTorch's order unless it
    keeps its rank and so its layout)."""
    x, out = op.arg("self"), op.output
    name, is_nhwc = lw.bound(x, any_layout=True)
    shape = list(Lowerer.shape_of(x, is_nhwc))
    dims = reduced_dims(op)
    layout = channels_last(len(x.shape))
    axes = {layout.index(d) if is_nhwc else d for d in dims}
    groups: list[list] = []  # [size, reduced] per merged axis
    for axis, size in enumerate(shape):
        if size > 1:
            if groups and groups[-1][1] == (axis in axes):
                groups[-1][0] *= size
            else:
                groups.append([size, axis in axes])
    reduced = [i for i, (_, is_reduced) in enumerate(groups) if is_reduced]
    dtype = x.dtype
    summing = kind == "REDUCE_SUM"
    if reduced:
        if summing:
            name, dtype = lw.rescale(name, shape, x.dtype, "int32", 1.0, x.qparams.zero_point, 0), "int32"
        merged = [size for size, _ in groups]
        if merged != shape:
            name = lw.reshape(name, merged, dtype)
        flipped = kind == "REDUCE_MIN" and lw.min_as_max  # min(q) = ~max(~q), see _bitwise_not
        if flipped:
            name, kind = _bitwise_not(lw, name, merged), "REDUCE_MAX"
        if summing:
            name, shape = _reduce_axes(lw, name, merged, reversed(reduced), kind, dtype)
        elif kind in ("REDUCE_ANY", "REDUCE_ALL"):
            name, shape = _reduce_axes(lw, name, merged, reduced, kind, dtype)
        elif reduced[-1] == len(groups) - 1:  # the last axis last, after the others shrank the tensor
            name, shape = _reduce_axes(lw, name, merged, reduced[:-1], kind, dtype)
            name, shape = _reduce_last_axis(lw, name, shape, kind, dtype)
        else:
            name, shape = _reduce_axes(lw, name, merged, reduced, kind, dtype)
        if flipped:
            name = _bitwise_not(lw, name, shape)
    if summing:
        count = int(np.prod([x.shape[d] for d in dims], dtype=np.int64)) if op.target is aten.mean.dim else 1
        scale = x.qparams.scale / (count * out.qparams.scale)
        in_zp = 0 if reduced else x.qparams.zero_point
        name = lw.rescale(name, shape, dtype, out.dtype, scale, in_zp, out.qparams.zero_point)
        dtype = out.dtype
    kept = [1 if d in dims else size for d, size in enumerate(x.shape)]  # torch's keepdim shape
    if is_nhwc:
        kept_nhwc = [kept[p] for p in layout]
        if shape != kept_nhwc:
            name = lw.reshape(name, kept_nhwc, dtype)
        shape = kept_nhwc
        if len(out.shape) == len(x.shape):  # keepdim: the result stays channels last
            lw.result(out, _same_quantization(lw, name, shape, x, out) if not summing else name, True)
            return
        view = Value(out.name + "_kept", tuple(kept), dtype, out.qparams if summing else x.qparams)
        lw.bind(view, name, True)
        name = lw.torch_order(view)
        shape = kept
    if list(shape) != list(out.shape):
        name = lw.reshape(name, out.shape, dtype)
    lw.result(out, name if summing else _same_quantization(lw, name, out.shape, x, out), False)


@lowering(aten.amax.default, aten.amin.default)
def _amax(lw: Lowerer, op: Op):
    """Max or min over any dims: the output shares the input's qparams (the quantizer's choice)."""
    _reduction(lw, op, "REDUCE_MAX" if op.target is aten.amax.default else "REDUCE_MIN")


@lowering(*vocabulary.BOOL_REDUCTIONS)
def _any_all(lw: Lowerer, op: Op):
    """any or all of a bool tensor over any dims (REDUCE_ANY / REDUCE_ALL, Ethos-U85: a support rule)."""
    _reduction(lw, op, "REDUCE_ANY" if op.target is aten.any.dims else "REDUCE_ALL")


@lowering(aten.sum.dim_IntList)
def _sum(lw: Lowerer, op: Op):
    """Sum over any dims: widened to int32 without the zero point, summed, requantized (one rounding)."""
    _reduction(lw, op, "REDUCE_SUM")


# ---- softmax and log_softmax: exp in Q14, normalisation in 32 bits ------------------------------
# With x int8, d = x - max(x) along the dim is an integer in [-255, 0], so d + 127 is an int8
# that indexes two 8-bit TABLEs exactly: the high and the low 7 bits of exp(scale * d) in Q13
# (Vela runs a 16-bit TABLE on Ethos-U55 as three LUT passes, about 2,200 cycles each on
# ethos-u55-128; an 8-bit one as one). The row sum S of those is exact in int32. CLZ normalises
# it: S << (clz(S) - 1) = m * 2^31 with m in [0.5, 1). Softmax multiplies e by 1/m from two
# Newton-Raphson steps (relative error below 2^-16) shifted by the row's clz; log_softmax
# subtracts ln m (an interpolated 16-bit table, about 2^-20) and the row's octaves of ln 2
# from scale * d. Each result is requantized once: within half a step and a few 2^-16 of the
# exact value. The PT2E reference applies float softmax to the dequantized input.
SOFTMAX_OPS = {aten.softmax.int, aten._softmax.default}
LOG_SOFTMAX_OPS = {aten.log_softmax.int, aten._log_softmax.default}
EXP_BITS = 13  # Q13: 1.0 = 64 * 128, so the high 7 bits fit int8
EXP_INDEX_OFFSET = 127  # the table index is d + 127
EXP_CLZ_MAX = 31 - EXP_BITS  # the clz of a sum of 1.0 (exp(0)), the least a row sum can be
RECIPROCAL_BITS = 29  # 1/m in (1, 2] in Q29
LN_BITS = 15  # ln m table entries in Q15 (ln 0.5 = -22713)
LOG_FRACTION_BITS = 16  # log_softmax's int32 fixed point, where it fits


def softmax_exp_tables(scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(high, low) int8 tables: at the position of d + 127 (d in [-255, 0]), E = exp(scale * d)
    in Q13 as high * 128 + low."""
    d = np.arange(256, dtype=np.float64) - 255
    e = np.round(np.exp(scale * d) * 2.0 ** EXP_BITS).astype(np.int64)
    return (e >> 7).astype(np.int8), (e & 127).astype(np.int8)


def ln_table() -> np.ndarray:
    """Entry j of a 16-bit TABLE read at t = (m - 0.75) * 2^17, i.e. m = 0.5 + j / 1024: ln m in Q15."""
    return np.round(np.log(0.5 + np.arange(513, dtype=np.float64) / 1024) * 2.0 ** LN_BITS).astype(np.int16)


@lowering(*SOFTMAX_OPS, *LOG_SOFTMAX_OPS)
def _softmax(lw: Lowerer, op: Op):
    """Softmax or log_softmax of int8 `x` along `dim` (support rules: int8, at most 65535 values)."""
    x, out = op.inputs[0], op.output
    name, axis, is_nhwc = _layout_axis(lw, x, op.arg("dim"))
    shape = Lowerer.shape_of(x, is_nhwc)
    row = list(shape)
    row[axis] = 1
    scalar = lambda value: lw.const(np.full([1] * len(shape), value), "int32", "scalar")  # noqa: E731

    def binary(kind: str, a: str, b: str, result_shape, shift: int | None = None) -> str:
        result = lw.inter(result_shape, "int32")
        if kind == "MUL":
            lw.emit(kind, [a, b, lw.const(np.array([shift]), "int8", "shift")], [result], _attr("Mul"))
        elif kind == "ARITHMETIC_RIGHT_SHIFT":
            lw.emit(kind, [a, b], [result], _attr("ArithmeticRightShift", True))
        else:
            lw.emit(kind, [a, b], [result], _attr("".join(w.capitalize() for w in kind.split("_"))))
        return result

    def table(values: str, entries: np.ndarray, result_shape, dtype: str) -> str:
        result = lw.inter(result_shape, dtype)
        lw.emit("TABLE", [values, lw.const(entries, entries.dtype.name, "table")], [result], _attr("Table"))
        return result

    if axis == len(shape) - 1:  # as amax's: kwt on ethos-u85-256 162,229 -> 128,647 NPU cycles
        top = lw.reshape(_reduce_last_axis(lw, name, shape, "REDUCE_MAX", x.dtype)[0], row, x.dtype)
    else:
        top = lw.inter(row, x.dtype)
        lw.emit("REDUCE_MAX", [name], [top], _attr("ReduceMax", axis, ts.NanPropagationMode.PROPAGATE))
    difference = lambda: binary("SUB", lw.rescale(name, shape, x.dtype, "int32", 1.0),  # noqa: E731
                                lw.rescale(top, row, x.dtype, "int32", 1.0), shape)  # TOSA subtracts int32 only
    index = lambda d: lw.rescale(d, shape, "int32", "int8", 1.0, 0, EXP_INDEX_OFFSET)  # noqa: E731
    lw.choices.add(FUSED_EXPS)
    d = difference()
    first = index(d)
    high_entries, low_entries = softmax_exp_tables(x.qparams.scale)
    high = table(first, high_entries, shape, "int8")
    low = table(index(difference()) if lw.fused_exps else first, low_entries, shape, "int8")
    # exp(scale d) in Q13, high * 128 + low, at most 2^13
    if lw.int16_exps:
        # the operands widened by 2^19 and 2^12 and the sum narrowed by 2^-12 to int16 (exact): Vela
        # 5.2.0 runs it as one ADD pass with its operand scalings and widens e back to int32 inside the
        # REDUCE_SUM (each consumer widens its own), where an int32 sum costs two passes per operand
        e16 = lw.rescale(binary("ADD", lw.rescale(high, shape, "int8", "int32", 2.0 ** 19),
                                lw.rescale(low, shape, "int8", "int32", 2.0 ** 12), shape), shape, "int32", "int16",
                         2.0 ** -12)
        widened = lambda: lw.rescale(e16, shape, "int16", "int32", 1.0)  # noqa: E731
    else:
        e32 = binary("ADD", lw.rescale(high, shape, "int8", "int32", 128.0),
                     lw.rescale(low, shape, "int8", "int32", 1.0), shape)
        widened = lambda: e32  # noqa: E731
    e = widened()
    total = lw.inter(row, "int32")
    lw.emit("REDUCE_SUM", [e], [total], _attr("ReduceSum", axis))
    clz = lw.inter(row, "int32")
    lw.emit("CLZ", [total], [clz], _attr("Clz"))
    normalised = binary("LOGICAL_LEFT_SHIFT", total, binary("SUB", clz, scalar(1), row), row)  # m * 2^31
    if op.target in LOG_SOFTMAX_OPS:
        # ln(sum in reals) = ln m + (EXP_CLZ_MAX + 1 - clz) ln 2, in 2^-f units
        f = min(LOG_FRACTION_BITS, 30 - math.ceil(math.log2(x.qparams.scale * 255 + 32 * math.log(2) + 1)))
        t = lw.rescale(binary("SUB", normalised, scalar(3 << 29), row), row, "int32", "int16", 2.0 ** -14)
        ln_m = lw.rescale(table(t, ln_table(), row, "int32"), row, "int32", "int32", 2.0 ** (f - LN_BITS - 7))
        octaves = binary("SUB", scalar(EXP_CLZ_MAX + 1), clz, row)
        ln_sum = binary("ADD", ln_m, binary("MUL", octaves, scalar(round(math.log(2) * 2 ** f)), row, 0), row)
        shifted = lw.rescale(d, shape, "int32", "int32", x.qparams.scale * 2.0 ** f)  # scale d in 2^-f
        result, unit = binary("SUB", shifted, ln_sum, shape), 2.0 ** -f
    else:
        # 1/m in Q29: x0 = 48/17 - 32/17 m (error at most 1/17), then x += x (1 - m x) twice
        one = 1 << RECIPROCAL_BITS
        slope = binary("MUL", normalised, scalar(round(32 / 17 * one)), row, 31)
        inverse = binary("SUB", scalar(round(48 / 17 * one)), slope, row)
        for _ in range(2):
            error = binary("SUB", scalar(one), binary("MUL", normalised, inverse, row, 31), row)
            inverse = binary("ADD", inverse, binary("MUL", inverse, error, row, RECIPROCAL_BITS), row)
        # e / sum = e (1/m) 2^(clz - 32); with 1/m shifted right by EXP_CLZ_MAX + EXP_BITS - clz (its
        # rounding moves the result by at most e / 2 units of 2^-30, below 2^-18: 1/1024 of an 8-bit
        # softmax's step), e * that is the result * 2^30 and fits int32: a MUL without a shift, into
        # which Vela folds the requantization after it (by a power of two: kwt on ethos-u85-256
        # Sram_Only 193,642 -> 165,624 NPU cycles, ExecuTorch 176,094)
        shift = binary("SUB", scalar(EXP_CLZ_MAX + EXP_BITS), clz, row)
        inverse = binary("ARITHMETIC_RIGHT_SHIFT", inverse, shift, row)
        result, unit = binary("MUL", widened(), inverse, shape, 0), 2.0 ** -30
    lw.result(out, lw.rescale(result, shape, "int32", out.dtype, unit / out.qparams.scale, 0, out.qparams.zero_point),
              is_nhwc)


@lowering(aten.view.default, aten.reshape.default, aten.flatten.using_ints, aten.squeeze.dim, aten.squeeze.dims,
          aten.squeeze.default, aten.unsqueeze.default, aten.clone.default, aten.alias.default)
def _reshape(lw: Lowerer, op: Op):
    x, out = op.inputs[0], op.output
    if x.shape == out.shape:
        lw.names[id(out)] = lw.names[id(x)]
        return
    name, is_nhwc = lw.names[id(x)]
    spatial = lambda shape: [d for d in shape[2:] if d != 1]  # noqa: E731
    if is_nhwc and len(out.shape) in (3, 4) and out.shape[:2] == x.shape[:2] and spatial(out.shape) == spatial(x.shape):
        # only unit spatial dims come or go (a Conv1d's squeeze and unsqueeze): channels last stays, for free
        lw.bind(out, lw.reshape(name, Lowerer.shape_of(out, True), out.dtype), True)
        return
    lw.bind(out, lw.reshape(lw.torch_order(x), out.shape, out.dtype), False)


@lowering(aten.permute.default, aten.transpose.int)
def _permute(lw: Lowerer, op: Op):
    x, out = op.inputs[0], op.output
    rank = len(x.shape)
    if op.target is aten.permute.default:
        perm = [d % rank for d in op.arg("dims")]
    else:
        perm = list(range(rank))
        d0, d1 = op.arg("dim0") % rank, op.arg("dim1") % rank
        perm[d0], perm[d1] = perm[d1], perm[d0]
    name, is_nhwc = lw.bound(x)
    if is_nhwc:  # compose with NHWC -> NCHW so one TRANSPOSE does both
        perm = [NHWC_TO_NCHW[p] for p in perm]
        shape = Lowerer.shape_of(x, True)
    else:
        shape = x.shape
    lw.bind(out, lw.to_layout(name, shape, x.dtype, perm), False)


@lowering(aten.cat.default)
def _cat(lw: Lowerer, op: Op):
    """One CONCAT of rank-4 values channels last, or in PyTorch's order when no operand is
    stored channels last and the axis is not the last (a stack of 3-D values along dim 1 then
    needs no transposes; along the last dim Vela writes one channel at a time, slower than
    through channels last: stack of [1, 6, 8] along -1 on ethos-u55-128, 996 cycles against
    662); each operand requantized to the output's quantization where it differs."""
    tensors, out = op.arg("tensors"), op.output
    rank = len(out.shape)
    axis = op.arg("dim") % rank
    nhwc = rank == 4 and (axis == 3 or any(lw.stored_channels_last(t) for t in tensors))
    if nhwc:
        names = [lw.nhwc(t) for t in tensors]
        axis = NCHW_TO_NHWC.index(axis)
    else:
        names = [lw.torch_order(t) for t in tensors]
    names = [n if t.qparams == out.qparams else lw.rescale(n, Lowerer.shape_of(t, nhwc), t.dtype, out.dtype,
                                                             t.qparams.scale / out.qparams.scale,
                                                             t.qparams.zero_point, out.qparams.zero_point)
             for n, t in zip(names, tensors)]
    result = lw.inter(Lowerer.shape_of(out, nhwc), out.dtype)
    lw.emit("CONCAT", names, [result], _attr("Concat", axis))
    lw.result(out, result, nhwc)


# ---- slice and select (the movement agent's region) ------------------------------------------------
def slice_range(size: int, start, end) -> tuple[int, int]:
    """(first, count) of PyTorch's slice with step 1: None bounds are the ends, negative ones
    count from the end, both clamped to [0, size] (Python's slice rule)."""
    kept = range(size)[slice(start, end)]
    return kept.start, len(kept)


def _slice_in_layout(lw: Lowerer, x: Value, dim: int, first: int, count: int) -> tuple[str, bool]:
    """`count` entries of x from `first` along PyTorch dim `dim`, in the layout x is bound in
    (a 4-D value's NHWC stays NHWC); (name, is_nhwc)."""
    name, is_nhwc = lw.bound(x)
    shape = list(Lowerer.shape_of(x, is_nhwc))
    axis = NCHW_TO_NHWC.index(dim) if is_nhwc else dim
    if first == 0 and count == shape[axis]:
        return name, is_nhwc
    begin, size = [0] * len(shape), list(shape)
    begin[axis], size[axis] = first, count
    return _slice(lw, name, begin, size, x.dtype), is_nhwc


def _same_quantization(lw: Lowerer, name: str, shape, x: Value, out: Value) -> str:
    """`name` (x's values, of `shape`) in out's quantization: itself when they share it."""
    if x.qparams == out.qparams:
        return name
    return lw.rescale(name, shape, x.dtype, out.dtype, x.qparams.scale / out.qparams.scale, x.qparams.zero_point,
                      out.qparams.zero_point)


@lowering(aten.slice.Tensor)
def _slice_op(lw: Lowerer, op: Op):
    """A SLICE along one dim, in the input's layout. With a step s above 1, the n kept entries
    are every s-th of n * s consecutive ones (the last group padded with the zero point where
    the input ends first): RESHAPE to rows of s * after in one batch (Vela runs a copy per
    batch; [1, 6, 16] ::2 on ethos-u55-128 1,272 -> 498 NPU cycles), [1, before, n, s * after]
    or [1, 1, before * n, s * after] (the choice FLAT_STRIDED_SLICES), either where it has no
    dim beyond the NPU's; else [before, n, s, after]. SLICE the first `after` of each row, RESHAPE."""
    x, out = op.inputs[0], op.output
    dim = op.arg("dim") % len(x.shape)
    step = op.arg("step") or 1
    kept = range(x.shape[dim])[slice(op.arg("start"), op.arg("end"), step)]
    if step == 1:
        name, is_nhwc = _slice_in_layout(lw, x, dim, kept.start, len(kept))
        lw.result(out, _same_quantization(lw, name, Lowerer.shape_of(out, is_nhwc), x, out), is_nhwc)
        return
    n = len(kept)
    taken = min(x.shape[dim] - kept.start, n * step)
    name, is_nhwc = _slice_in_layout(lw, x, dim, kept.start, taken)
    shape = list(Lowerer.shape_of(x, is_nhwc))
    axis = NCHW_TO_NHWC.index(dim) if is_nhwc else dim
    shape[axis] = taken
    if taken < n * step:
        pads = [0] * (2 * len(shape))
        pads[2 * axis + 1] = n * step - taken
        shape[axis] = n * step
        padded = lw.inter(shape, x.dtype)
        lw.emit("PAD", [name, lw.shape_const(pads), lw.const(np.array([x.qparams.zero_point]), x.dtype, "pad_value")],
                [padded], _attr("Pad"))
        name = padded
    before, after = int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis + 1:], dtype=np.int64))
    forms = [([1, 1, before * n, step * after], [1, 1, before * n, after]),
             ([1, before, n, step * after], [1, before, n, after]), ([before, n, step, after], [before, n, 1, after])]
    fitting = [f for f in forms[:-1] if max(f[0]) <= TENSOR_DIM_MAX]
    if len(fitting) == 2 and before > 1:
        lw.choices.add(FLAT_STRIDED_SLICES)
        if not lw.flat_strided_slices:
            fitting.reverse()
    groups, firsts = (fitting or forms[-1:])[0]
    firsts = _slice(lw, lw.reshape(name, groups, x.dtype), [0, 0, 0, 0], firsts, x.dtype)
    shape[axis] = n
    name = lw.reshape(firsts, shape, x.dtype)
    lw.result(out, _same_quantization(lw, name, Lowerer.shape_of(out, is_nhwc), x, out), is_nhwc)


@lowering(aten.select.int)
def _select_op(lw: Lowerer, op: Op):
    """select(dim, index) = a SLICE of one entry, then a RESHAPE without that dim (in PyTorch's order)."""
    x, out = op.inputs[0], op.output
    dim = op.arg("dim") % len(x.shape)
    index = op.arg("index") % x.shape[dim]
    name, is_nhwc = _slice_in_layout(lw, x, dim, index, 1)
    kept = list(x.shape)
    kept[dim] = 1
    one = Value(out.name + "_kept", tuple(kept), x.dtype, x.qparams)
    lw.bind(one, name, is_nhwc)
    name = lw.reshape(lw.torch_order(one), out.shape, x.dtype)
    lw.result(out, _same_quantization(lw, name, out.shape, x, out), False)


def _in_tosa_layout(lw: Lowerer, x: Value) -> tuple[str, bool]:
    """x as expand takes it: NHWC when 4-D, else in PyTorch's order; (name, is_nhwc)."""
    return (lw.nhwc(x), True) if len(x.shape) == 4 else (lw.torch_order(x), False)


@lowering(aten.expand.default)
def _expand_op(lw: Lowerer, op: Op):
    """A RESHAPE to the output's rank (new leading dims of 1), then a TILE repeating each dim of 1."""
    x, out = op.inputs[0], op.output
    if len(x.shape) == len(out.shape):
        name, is_nhwc = _in_tosa_layout(lw, x)
    else:
        ones = (1,) * (len(out.shape) - len(x.shape)) + tuple(x.shape)
        name, is_nhwc = lw.reshape(lw.torch_order(x), ones, x.dtype), False
        x = Value(x.name + "_ranked", ones, x.dtype, x.qparams)
    shape, out_shape = Lowerer.shape_of(x, is_nhwc), Lowerer.shape_of(out, is_nhwc)
    tiled = lw.inter(out_shape, x.dtype)
    lw.emit("TILE", [name, lw.shape_const([o // i for o, i in zip(out_shape, shape)])], [tiled], _attr("Tile"))
    lw.result(out, _same_quantization(lw, tiled, out_shape, x, out), is_nhwc)


@lowering(aten.constant_pad_nd.default, aten.pad.default)
def _pad(lw: Lowerer, op: Op):
    """Constant padding is one PAD; reflect, replicate and circular padding copy samples of
    the input (the output shares its quantization), so they are SLICEs and CONCATs, one
    dimension at a time: each mode is separable, as PyTorch defines it. A rank-4 input is
    padded in PyTorch's order (no layout changes: [1, 4, 6, 6] padded by [1, 1, 2, 2] on
    ethos-u55-128, 4,212 -> 3,408 NPU cycles) unless it is stored channels last, padded along
    its batch, or padded by copies on CHANNELS_LAST_PAD_COPY_FAMILIES."""
    x, out = op.inputs[0], op.output
    pads = list(op.arg("pad"))
    mode = op.arg("mode") if op.target is aten.pad.default else "constant"
    rank = len(x.shape)
    before_after = [[0, 0] for _ in range(rank)]
    for i in range(len(pads) // 2):  # PyTorch lists the last dimension first
        before_after[rank - 1 - i] = [pads[2 * i], pads[2 * i + 1]]
    nhwc = rank == 4 and (lw.stored_channels_last(x) or before_after[0] != [0, 0]
                          or (mode != "constant" and lw.channels_last_pad_copies))
    if nhwc:
        name = lw.nhwc(x)
        before_after = [before_after[p] for p in NCHW_TO_NHWC]
    else:
        name = lw.torch_order(x)
    shape = list(Lowerer.shape_of(x, nhwc))
    if mode != "constant":
        for dim, (before, after) in enumerate(before_after):
            if before or after:
                name, shape = _pad_by_copies(lw, name, shape, dim, before, after, mode, x.dtype)
        lw.result(out, name, nhwc)
        return
    pad_value = _quantize_real(float(op.arg("value") or 0.0), x.qparams, x.dtype)
    result = lw.inter(Lowerer.shape_of(out, nhwc), out.dtype)
    lw.emit("PAD", [name, lw.shape_const([p for pair in before_after for p in pair]),
                    lw.const(np.array([pad_value]), x.dtype, "pad_value")], [result], _attr("Pad"))
    lw.result(out, result, nhwc)


def _pad_by_copies(lw: Lowerer, name: str, shape: list[int], dim: int, before: int, after: int, mode: str,
                   dtype: str) -> tuple[str, list[int]]:
    """`name` (of `shape`) padded along `dim` by `before` and `after` samples copied as
    `mode` says (the support rules keep the pads within what the mode allows):
    reflect: x[before], ..., x[1] | x | x[n-2], ..., x[n-1-after];
    replicate: x[0] repeated | x | x[n-1] repeated; circular: x[n-before:] | x | x[:after]."""
    n = shape[dim]

    def rows(start: int, count: int) -> str:
        begin, size = [0] * len(shape), list(shape)
        begin[dim], size[dim] = start, count
        return _slice(lw, name, begin, size, dtype)

    if mode == "circular":
        pieces = ([rows(n - before, before)] if before else []) + [name] + ([rows(0, after)] if after else [])
    else:
        first = [before - i for i in range(before)] if mode == "reflect" else [0] * before
        last = [n - 2 - i for i in range(after)] if mode == "reflect" else [n - 1] * after
        pieces = [rows(i, 1) for i in first] + [name] + [rows(i, 1) for i in last]
    padded = list(shape)
    padded[dim] = n + before + after
    result = lw.inter(padded, dtype)
    lw.emit("CONCAT", pieces, [result], _attr("Concat", dim))
    return result, padded


@lowering(aten.upsample_nearest2d.vec, aten.upsample_nearest2d.default)
def _upsample_nearest(lw: Lowerer, op: Op):
    """Nearest upsampling by whole factors (a support rule): each value repeated fy x fx
    times. By 2, 4 or 8 both ways, one TOSA RESIZE, which Vela 5.2.0 runs on Ethos-U55/U65
    as one upscaling pool (other factors it refuses there), and by any factors on the
    families of RESIZE_ANY_FACTOR_FAMILIES; otherwise CONCATs of copies and RESHAPEs. The
    RESIZE's scale is 2f / 2 with offset 1 - f and border f - 1: the source
    row of output row y is then (2y + 1 - f) / 2f rounded half up = floor(y / f), PyTorch's
    nearest index (scale f / 1 with offset 0 is the same index, but Vela refuses it)."""
    x, out = op.inputs[0], op.output
    fy, fx = out.shape[2] // x.shape[2], out.shape[3] // x.shape[3]
    name = lw.nhwc(x)
    if lw.resize_any_factor or (fy == fx and fy in RESIZE_NEAREST_FACTORS):
        resized = lw.inter(Lowerer.shape_of(out, True), out.dtype)
        lw.emit("RESIZE", [name, lw.shape_const([2 * fy, 2, 2 * fx, 2]), lw.shape_const([1 - fy, 1 - fx]),
                           lw.shape_const([fy - 1, fx - 1])], [resized], _attr("Resize", ts.ResizeMode.NEAREST))
        lw.result(out, resized, True)
        return
    lw.result(out, _interleave(lw, [[name] * fx] * fy, x.shape, x.dtype), True)


def _interleave(lw: Lowerer, phases: list[list[str]], shape, dtype: str) -> str:
    """NHWC [N, H*fy, W*fx, C] whose pixel (y*fy + py, x*fx + px) is pixel (y, x) of
    phases[py][px] (each NHWC [N, H, W, C]): CONCATs and free RESHAPEs only."""
    n, c, h, w = shape
    fy, fx = len(phases), len(phases[0])
    rows = []
    for row in phases:
        parts = [lw.reshape(p, [n * h, w, 1, c], dtype) for p in row]
        if fx > 1:
            wide = lw.inter([n * h, w, fx, c], dtype)
            lw.emit("CONCAT", parts, [wide], _attr("Concat", 2))
            parts = [wide]
        rows.append(lw.reshape(parts[0], [n * h, 1, w * fx * c], dtype))
    if fy > 1:
        tall = lw.inter([n * h, fy, w * fx * c], dtype)
        lw.emit("CONCAT", rows, [tall], _attr("Concat", 1))
        rows = [tall]
    return lw.reshape(rows[0], [n, h * fy, w * fx, c], dtype)


def bilinear_taps(factor: int) -> np.ndarray:
    """[factor, 3] integer weights, in units of 1 / (2 * factor), of input samples
    (i - 1, i, i + 1) for output sample factor * i + p (align_corners=False: the source
    coordinate is i + (2p + 1 - factor) / (2 * factor), edges clamped)."""
    taps = np.zeros((factor, 3), np.int64)
    for p in range(factor):
        f = 2 * p + 1 - factor
        taps[p] = [-f, 2 * factor + f, 0] if f < 0 else [0, 2 * factor - f, f]
    return taps


@lowering(aten.upsample_bilinear2d.vec, aten.upsample_bilinear2d.default)
def _upsample_bilinear(lw: Lowerer, op: Op):
    """Bilinear upsampling by whole factors without align_corners (a support rule): the
    input padded by replicating its edges, one 3x3 depthwise convolution per output phase
    with the exact integer weights, one RESCALE each (one rounding), then interleaved. With
    align_corners: _bilinear_aligned. On RESIZE_ANY_FACTOR_FAMILIES, and for other sizes, one
    RESIZE (_bilinear_resize: Ethos-U85-256, Sram_Only, [1, 4, 6, 6] by 2: 9,476 -> 4,486
    NPU cycles)."""
    x, out = op.inputs[0], op.output
    if op.arg("align_corners"):
        _bilinear_aligned(lw, x, out)
        return
    if lw.resize_any_factor or not whole_bilinear_factors(x.shape, out.shape):
        _bilinear_resize(lw, x, out)
        return
    n, c, h, w = x.shape
    fy, fx = out.shape[2] // h, out.shape[3] // w
    padded = _replicate_pad(lw, lw.nhwc(x), [n, h, w, c], x.dtype)
    scale = x.qparams.scale / (4 * fy * fx * out.qparams.scale)
    acc_type = ACCUMULATOR[x.dtype]
    attribute = _attr("DepthwiseConv2d", [0, 0, 0, 0], [1, 1], [1, 1], False, DT[acc_type])
    phases = []
    for ty in bilinear_taps(fy):
        row = []
        for tx in bilinear_taps(fx):
            weights = np.broadcast_to(np.outer(ty, tx)[:, :, None, None], (3, 3, c, 1))
            acc = lw.inter([n, h, w, c], acc_type)
            lw.emit("DEPTHWISE_CONV2D", [padded, lw.const(weights, "int8", "taps"), _bias(lw, None, c, acc_type),
                                         lw.zp(x.qparams.zero_point, x.dtype), lw.zp(0, "int8")], [acc], attribute)
            row.append(lw.rescale(acc, [n, h, w, c], acc_type, out.dtype, scale, 0, out.qparams.zero_point))
        phases.append(row)
    lw.result(out, _interleave(lw, phases, x.shape, out.dtype), True)


def _bilinear_resize(lw: Lowerer, x: Value, out: Value):
    """Bilinear resizing to any size without align_corners as one TOSA RESIZE (Ethos-U85, a
    support rule). PyTorch's source row of output row y is (y + 0.5) * ih / oh - 0.5, clamped
    at 0: in units of 1 / (2 oh) that is y * 2 ih + (ih - oh), so scale 2 oh / 2 ih, offset
    ih - oh and border oh - ih, each axis then reduced to its smallest units (fewer weights, a
    power of two more often); TOSA clamps the taps at the edges as PyTorch does. The RESIZE
    weighs raw integers by weights totalling y_n * x_n, so the zero point is weighed too: where
    the output has x's scale it is x's zero point in the int32 sums of int8 x, taken off by the
    output's zero point; otherwise x minus its zero point is widened to int16 first (exact) and
    resized to int48 sums. Requantized once."""
    n, c, h, w = x.shape
    oh, ow = out.shape[2:]
    scale, offset, border = [], [], []
    for size, out_size in ((h, oh), (w, ow)):
        g = math.gcd(2 * out_size, 2 * size, size - out_size)
        scale += [2 * out_size // g, 2 * size // g]
        offset.append((size - out_size) // g)
        border.append((out_size - size) // g)
    shift = out.qparams.zero_point - x.qparams.zero_point
    if x.dtype == "int8" and x.qparams.scale == out.qparams.scale and -128 <= shift <= 127:
        source, sums_type, out_zp = lw.nhwc(x), "int32", shift
    else:
        source = lw.rescale(lw.nhwc(x), [n, h, w, c], x.dtype, "int16", 1.0, x.qparams.zero_point, 0)
        sums_type, out_zp = "int48", out.qparams.zero_point
    sums = lw.inter([n, oh, ow, c], sums_type)
    lw.emit("RESIZE", [source, lw.shape_const(scale), lw.shape_const(offset), lw.shape_const(border)], [sums],
            _attr("Resize", ts.ResizeMode.BILINEAR))
    requant = x.qparams.scale / (scale[0] * scale[2] * out.qparams.scale)
    lw.result(out, lw.rescale(sums, [n, oh, ow, c], sums_type, out.dtype, requant, 0, out_zp), True)


def aligned_taps(size: int, out_size: int) -> np.ndarray:
    """[out_size, size] integer weights, in units of 1 / max(out_size - 1, 1), of the input
    samples making each output sample of align_corners=True interpolation (PyTorch's source
    coordinate i * (size - 1) / (out_size - 1); 0 for one output sample)."""
    d = max(out_size - 1, 1)
    taps = np.zeros((out_size, size), np.int64)
    for i in range(out_size):
        j, r = divmod(i * (size - 1), d) if out_size > 1 else (0, 0)
        taps[i, j] += d - r
        if r:
            taps[i, j + 1] += r
    return taps


def _bilinear_aligned(lw: Lowerer, x: Value, out: Value):
    """Bilinear resizing with align_corners (int8, output sides up to 128, so that the taps'
    unit 1/(side - 1) leaves them within int8: a support rule), separably and exactly: along W
    a 1x1 CONV2D of each row [.., W] by the integer taps (aligned_taps, in units of 1/dw),
    whose int32 sums (at most dw * 255) are exact in int16; along H a 1x1 CONV2D of that int16
    by the H taps into int48; one RESCALE by x's scale / (dw * dh * the output's). Transposes
    bring W, then H, innermost. Also on Ethos-U85, where one RESIZE (scale 2 (oh - 1) / 2 (h - 1))
    leaves a RESCALE of int32 by 1 / (4 (oh - 1) (ow - 1)) that Vela cannot fold: unet_tiny,
    ethos-u85-256 Dedicated_Sram_384KB, 130,027 NPU cycles this way against 135,741."""
    n, c, h, w = x.shape
    oh, ow = out.shape[2:]
    rows = lw.to_layout(lw.nhwc(x), [n, h, w, c], x.dtype, (0, 1, 3, 2))  # [n, h, c, w]

    def along_last(name: str, count: int, size: int, taps: np.ndarray, dtype: str, zp: int) -> str:
        acc_type = ACCUMULATOR[dtype]
        flat = lw.reshape(name, [1, count, 1, size], dtype)
        acc = lw.inter([1, count, 1, len(taps)], acc_type)
        lw.emit("CONV2D", [flat, lw.const(taps[:, None, None, :], "int8", "taps"), _bias(lw, None, len(taps), acc_type),
                           lw.zp(zp, dtype), lw.zp(0, "int8")], [acc],
                _attr("Conv2d", [0, 0, 0, 0], [1, 1], [1, 1], False, DT[acc_type]))
        return acc

    wide = along_last(rows, n * h * c, w, aligned_taps(w, ow), x.dtype, x.qparams.zero_point)
    wide = lw.rescale(wide, [1, n * h * c, 1, ow], "int32", "int16", 1.0)  # exact: |sum| <= 127 * 255
    columns = lw.to_layout(lw.reshape(wide, [n, h, c, ow], "int16"), [n, h, c, ow], "int16", (0, 2, 3, 1))
    tall = along_last(columns, n * c * ow, h, aligned_taps(h, oh), "int16", 0)  # [1, n*c*ow, 1, oh] int48
    scale = x.qparams.scale / (max(ow - 1, 1) * max(oh - 1, 1) * out.qparams.scale)
    result = lw.rescale(tall, [1, n * c * ow, 1, oh], "int48", out.dtype, scale, 0, out.qparams.zero_point)
    nhwc = lw.to_layout(lw.reshape(result, [n, c, ow, oh], out.dtype), [n, c, ow, oh], out.dtype, (0, 3, 2, 1))
    lw.result(out, nhwc, True)


def _replicate_pad(lw: Lowerer, name: str, shape, dtype: str) -> str:
    """NHWC `name` with one more row above and below and one more column left and right,
    copies of the edge samples."""
    n, h, w, c = shape
    top, bottom = (_slice(lw, name, [0, r, 0, 0], [n, 1, w, c], dtype) for r in (0, h - 1))
    tall = lw.inter([n, h + 2, w, c], dtype)
    lw.emit("CONCAT", [top, name, bottom], [tall], _attr("Concat", 1))
    left, right = (_slice(lw, tall, [0, 0, col, 0], [n, h + 2, 1, c], dtype) for col in (0, w - 1))
    out = lw.inter([n, h + 2, w + 2, c], dtype)
    lw.emit("CONCAT", [left, tall, right], [out], _attr("Concat", 2))
    return out


@lowering(aten.conv_transpose2d.input)
def _conv_transpose(lw: Lowerer, op: Op):
    x, weight, out = op.arg("input"), op.arg("weight"), op.output
    stride, padding = pair(op.arg("stride")), pair(op.arg("padding"))
    output_padding = pair(op.arg("output_padding"))
    cin, cout, kh, kw = weight.shape
    w_ohwi = weight.data.transpose(1, 2, 3, 0)
    out_pad = [-padding[0], -padding[0] + output_padding[0], -padding[1], -padding[1] + output_padding[1]]
    n, oh, ow = out.shape[0], out.shape[2], out.shape[3]
    acc_type = ACCUMULATOR[x.dtype]
    acc = lw.inter([n, oh, ow, cout], acc_type)
    attribute = _attr("TransposeConv2d", out_pad, list(stride), False, DT[acc_type])
    lw.emit("TRANSPOSE_CONV2D", [lw.nhwc(x), lw.const(w_ohwi, "int8", "weight"),
                                 _bias(lw, op.arg("bias"), cout, acc_type),
                                 lw.zp(x.qparams.zero_point, x.dtype), lw.zp(0, "int8")], [acc], attribute)
    _mac_rescale(lw, op, acc, [n, oh, ow, cout], x, weight, True)


@lowering(aten.matmul.default, aten.bmm.default, aten.mm.default)
def _matmul(lw: Lowerer, op: Op):
    """MATMUL of [batch, m, k] and [batch, k, n], requantized once. A constant operand (x @ W,
    W a parameter) is a TOSA constant, repeated over the batch it broadcasts to; a constant
    right operand shared by the whole batch multiplies all batch * m rows in one MATMUL."""
    a, b = op.inputs[0], op.inputs[1]
    out = op.output
    batch = int(np.prod(out.shape[:-2], dtype=np.int64)) if len(out.shape) > 2 else 1
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    if b.is_constant and not a.is_constant and int(np.prod(b.shape[:-2], dtype=np.int64)) == 1:
        batch, m = 1, batch * m

    def operand(v: Value, shape) -> str:
        if v.is_constant:
            data = np.broadcast_to(v.data, (*out.shape[:-2], *v.shape[-2:])) if shape[0] > 1 else v.data
            return lw.const(data.reshape(shape), v.dtype)
        return lw.reshape(lw.torch_order(v), shape, v.dtype)

    an, bn = operand(a, [batch, m, k]), operand(b, [batch, k, n])
    acc_type = ACCUMULATOR[a.dtype]
    acc = lw.inter([batch, m, n], acc_type)
    lw.emit("MATMUL", [an, bn, lw.zp(a.qparams.zero_point, a.dtype), lw.zp(b.qparams.zero_point, b.dtype)], [acc],
            _attr("MatMul"))
    res = lw.rescale(acc, [batch, m, n], acc_type, out.dtype, a.qparams.scale * b.qparams.scale / out.qparams.scale,
                     0, out.qparams.zero_point)
    flat = Value(out.name, (batch, m, n), out.dtype, out.qparams, producer=op)
    lw.result(flat, res)
    lw.bind(out, lw.reshape(lw.names[id(flat)][0], out.shape, out.dtype), False)


def check_vocabulary(lowered, tables) -> None:
    """The partition stage decides what reaches this stage from kiln.partition.vocabulary:
    raises InternalError unless the ops with a lowering (`lowered`) are exactly its LOWERED
    and the ops with a table function (`tables`) exactly its TABLE_OPS."""
    problems = []
    for what, ours, name in (("lowering", set(lowered), "LOWERED"), ("table function", set(tables), "TABLE_OPS")):
        theirs = getattr(vocabulary, name)
        if ours - theirs:
            problems.append(f"a {what} for {sorted(map(str, ours - theirs))}, not in vocabulary.{name}")
        if theirs - ours:
            problems.append(f"no {what} for {sorted(map(str, theirs - ours))}, in vocabulary.{name}")
    if problems:
        raise InternalError("kiln.lower.tosa and kiln.partition.vocabulary disagree: " + "; ".join(problems))


check_vocabulary(LOWERINGS, TABLE_FUNCTIONS)


def lower(partition: Partition, accelerator: str | None = None, flipped: frozenset[str] = frozenset()) -> bytes:
    """The partition as a TOSA 1.0 flatbuffer; its inputs and outputs in the partition's order.
    `accelerator` (e.g. ethos-u65-256) picks among equivalent graphs the one Vela runs faster
    there (RANK4_TRANSPOSE_FAMILIES); `flipped` names choices (POOLED_MEANS) to take the other
    way from the target's default. The results are the same."""
    return Lowerer(partition, accelerator, flipped).lower()


def lower_noting_choices(partition: Partition, accelerator: str | None = None) -> tuple[bytes, frozenset[str]]:
    """lower()'s graph, and the choices (POOLED_MEANS, ...) the lowering met: flipping one of
    them gives another equivalent graph (kiln.compile.fastest compiles them)."""
    lowerer = Lowerer(partition, accelerator)
    return lowerer.lower(), frozenset(lowerer.choices)
