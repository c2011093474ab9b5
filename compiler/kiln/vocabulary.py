"""kiln's operator vocabulary: every operator a normalised graph may hold, one row each.

A row (Operator) lists the op's overloads and what each stage makes of it:
- kind: what it computes (Kind), the group the stages' sets of ops are views of;
- quantized: how kiln's quantizer annotates it (Quantized; None: it stays in float);
- lowering: the module of kiln.lower that lowers it to TOSA (None: it runs on the CPU only);
- kernel: the module of kiln.program.kernels with its CPU kernel (None: no CPU kernel);
- weight_axis: the axis of its weight operand (the second) that indexes output channels;
- fuses: whether a relu, relu6, hardtanh or clamp right after it is fused (the NPU clamps its
  result in the same operation).

Every set of ops a stage uses is a view of these rows (TABLE_OPS, LOWERED, COMPARISON_OPS, ...;
of_kind() and annotated() for others). The lowering (kiln.lower.tosa.check_vocabulary) and the
CPU kernels (kiln.program.kernels.check_vocabulary) check, when imported, that they cover exactly
the rows that name their modules. Adding an operator starts with one row here
(docs/adding-an-operator.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 (defines quantized_decomposed's ops, as PT2E emits them)

aten = torch.ops.aten
qd = torch.ops.quantized_decomposed


def _checked_index(index: torch.Tensor, size: int) -> torch.Tensor:
    if index.numel() and not bool(((index >= 0) & (index < size)).all()):
        raise IndexError(f"an index is out of range 0..{size - 1}")
    return index.to(torch.int32)


# kiln's own operator: the indices of a gather or scatter checked against the size of the dim they
# index and narrowed to int32 (TOSA GATHER's and SCATTER's index type, and the NPU's). PyTorch's
# embedding, index_select and index_copy raise on an index out of range; this op's CPU kernel does,
# before the NPU could read past the table or write past the tensor.
_LIBRARY = torch.library.Library("kiln", "DEF")
_LIBRARY.define("checked_index(Tensor index, int size) -> Tensor")
_LIBRARY.impl("checked_index", _checked_index, "CompositeExplicitAutograd")
CHECKED_INDEX = torch.ops.kiln.checked_index.default


class Kind(Enum):
    """What an operator computes."""

    CONV = "2-D convolution"
    CONV1D = "1-D convolution (the front end makes it a conv2d)"
    LINEAR = "linear layer"
    CONV_TRANSPOSE = "transposed 2-D convolution"
    MATMUL = "matrix product"
    AVG_POOL = "average pool"
    MAX_POOL = "max pool"
    ADAPTIVE_POOL = "adaptive average pool"
    MEAN = "mean over dims"
    SUM = "sum over dims"
    CUMSUM = "cumulative sum"
    EXTREMUM = "max or min over dims"
    ARGMAX = "index of the largest value"
    ARGMIN = "index of the smallest value"
    BINARY = "add, sub or mul"
    DIV = "division"
    MINMAX = "elementwise minimum or maximum"
    ACTIVATION = "clamping activation"
    UNARY = "unary function of one value (one TABLE on the NPU)"
    SOFTMAX = "softmax"
    LOG_SOFTMAX = "log_softmax"
    COMPARISON = "comparison (bool result)"
    LOGICAL = "logical op of bools"
    BOOL_REDUCTION = "any or all of bools over dims"
    WHERE = "select by a bool condition"
    VIEW = "reshape or view"
    PERMUTE = "permutation of dims"
    CAT = "concatenation"
    PAD = "padding"
    SLICE = "slice"
    SELECT = "select of one index"
    EXPAND = "expand"
    FLIP = "flip"
    UPSAMPLE_NEAREST = "nearest upsampling"
    UPSAMPLE_BILINEAR = "bilinear upsampling"
    GATHER = "gather by an index tensor"
    SCATTER = "write of rows at an index tensor's positions"
    CHECKED_INDEX = "a gather's or scatter's indices checked and narrowed (kiln's own op)"
    SORT = "sort or top-k"
    CAST = "dtype conversion"
    QUANTIZE = "float to integers"
    DEQUANTIZE = "integers to float"
    DEQUANTIZE_CHANNEL = "per-channel weights to float (folded into constants by kiln.graph)"


class Quantized(Enum):
    """How kiln's quantizer (kiln.frontend.quantizer) annotates an op; the value is OPS.md's text."""

    MAC = "MAC: int8 per-channel weights, int32 bias; a following relu/hardtanh/clamp is fused"
    OWN_RANGE = "own output range (on the NPU: one 8-bit table)"
    INDEPENDENT = "every float input and the output observed independently"
    SHARED = "output shares the input's range"
    ONE_RANGE = "every input and the output share one range"
    PROBABILITY = "input observed; output in the fixed range [0, 1)"
    COMPARISON = "float operands observed as they are read and compared as integers; bool result"
    INDEX = "float operand observed as it is read; int64 indices"


@dataclass(frozen=True)
class Operator:
    overloads: tuple
    kind: Kind
    quantized: Quantized | None
    lowering: str | None  # a module of kiln.lower
    kernel: str | None  # a module of kiln.program.kernels
    weight_axis: int | None = None
    fuses: bool = False


K, Q = Kind, Quantized
OPERATORS = (
    # MAC ops and matrix products
    Operator((aten.conv2d.default,), K.CONV, Q.MAC, "conv", "nn", weight_axis=0, fuses=True),
    Operator((aten.conv1d.default,), K.CONV1D, Q.MAC, None, None, weight_axis=0, fuses=True),
    Operator((aten.linear.default,), K.LINEAR, Q.MAC, "conv", "nn", weight_axis=0, fuses=True),
    Operator((aten.conv_transpose2d.input,), K.CONV_TRANSPOSE, Q.MAC, "conv", "nn", weight_axis=1, fuses=True),
    Operator(
        (aten.matmul.default, aten.bmm.default, aten.mm.default), K.MATMUL, Q.INDEPENDENT, "conv", "nn", weight_axis=-1
    ),
    # pools and means
    Operator((aten.avg_pool2d.default,), K.AVG_POOL, Q.SHARED, "pool", "nn"),
    Operator((aten.max_pool2d.default,), K.MAX_POOL, Q.SHARED, "pool", "movement"),
    Operator((aten.adaptive_avg_pool2d.default,), K.ADAPTIVE_POOL, Q.SHARED, "pool", "nn"),
    Operator((aten._adaptive_avg_pool2d.default,), K.ADAPTIVE_POOL, None, None, "nn"),
    Operator((aten.mean.dim,), K.MEAN, Q.INDEPENDENT, "pool", "reduce"),
    # reductions
    Operator((aten.sum.dim_IntList,), K.SUM, Q.INDEPENDENT, "reduce", "reduce"),
    Operator((aten.cumsum.default,), K.CUMSUM, Q.INDEPENDENT, None, "reduce"),
    Operator((aten.amax.default, aten.amin.default), K.EXTREMUM, Q.SHARED, "reduce", "reduce"),
    Operator((aten.argmax.default,), K.ARGMAX, Q.INDEX, "reduce", "reduce"),
    Operator((aten.argmin.default,), K.ARGMIN, None, None, "reduce"),
    Operator((aten.any.dims, aten.all.dims), K.BOOL_REDUCTION, None, "reduce", "reduce"),
    # elementwise
    Operator(
        (aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor),
        K.BINARY,
        Q.INDEPENDENT,
        "elementwise",
        "elementwise",
        fuses=True,
    ),
    Operator((aten.div.Tensor,), K.DIV, Q.INDEPENDENT, None, "elementwise"),
    Operator((aten.div.Tensor_mode,), K.DIV, None, None, "elementwise"),
    Operator((aten.minimum.default, aten.maximum.default), K.MINMAX, Q.ONE_RANGE, "elementwise", "elementwise"),
    Operator(
        (aten.relu.default, aten.hardtanh.default, aten.clamp.default),
        K.ACTIVATION,
        Q.SHARED,
        "elementwise",
        "elementwise",
    ),
    Operator((aten.relu6.default,), K.ACTIVATION, Q.SHARED, "elementwise", None),
    Operator(
        (
            aten.sigmoid.default,
            aten.tanh.default,
            aten.hardswish.default,
            aten.hardsigmoid.default,
            aten.leaky_relu.default,
            aten.exp.default,
            aten.log.default,
            aten.reciprocal.default,
            aten.gelu.default,
            aten.silu.default,
            aten.elu.default,
            aten.selu.default,
            aten.celu.default,
            aten.softplus.default,
            aten.mish.default,
            aten.sqrt.default,
            aten.rsqrt.default,
            aten.sin.default,
            aten.cos.default,
            aten.erf.default,
            aten.abs.default,
            aten.neg.default,
            aten.floor.default,
            aten.ceil.default,
            aten.round.default,
            aten.trunc.default,
            aten.sign.default,
            aten.pow.Tensor_Scalar,
        ),
        K.UNARY,
        Q.OWN_RANGE,
        "elementwise",
        "elementwise",
    ),
    Operator(
        tuple(
            getattr(getattr(aten, name), overload)
            for name in ("eq", "ne", "gt", "ge", "lt", "le")
            for overload in ("Tensor", "Scalar")
        ),
        K.COMPARISON,
        Q.COMPARISON,
        "elementwise",
        "elementwise",
    ),
    Operator(
        (aten.logical_and.default, aten.logical_or.default, aten.logical_not.default),
        K.LOGICAL,
        None,
        "elementwise",
        "elementwise",
    ),
    Operator((aten.where.self,), K.WHERE, Q.ONE_RANGE, "elementwise", "elementwise"),
    # softmax and log_softmax
    Operator((aten.softmax.int, aten._softmax.default), K.SOFTMAX, Q.PROBABILITY, "softmax", "reduce"),
    Operator((aten.log_softmax.int, aten._log_softmax.default), K.LOG_SOFTMAX, Q.INDEPENDENT, "softmax", "reduce"),
    # data movement
    Operator(
        (
            aten.view.default,
            aten.reshape.default,
            aten.flatten.using_ints,
            aten.squeeze.dim,
            aten.squeeze.dims,
            aten.unsqueeze.default,
        ),
        K.VIEW,
        Q.SHARED,
        "movement",
        "movement",
    ),
    Operator((aten.squeeze.default,), K.VIEW, Q.SHARED, "movement", None),
    Operator((aten.clone.default, aten.alias.default), K.VIEW, None, "movement", None),
    Operator(
        (aten.view_copy.default, aten.squeeze_copy.dim, aten.squeeze_copy.dims, aten.unsqueeze_copy.default),
        K.VIEW,
        None,
        None,
        "movement",
    ),
    Operator((aten.permute.default, aten.transpose.int), K.PERMUTE, Q.SHARED, "movement", "movement"),
    Operator((aten.permute_copy.default, aten.transpose_copy.int), K.PERMUTE, None, None, "movement"),
    Operator((aten.cat.default,), K.CAT, Q.ONE_RANGE, "movement", "movement"),
    Operator((aten.concat.default,), K.CAT, Q.ONE_RANGE, None, None),
    Operator((aten.constant_pad_nd.default, aten.pad.default), K.PAD, Q.SHARED, "movement", "movement"),
    Operator(
        (
            aten.reflection_pad1d.default,
            aten.reflection_pad2d.default,
            aten.reflection_pad3d.default,
            aten.replication_pad1d.default,
            aten.replication_pad2d.default,
            aten.replication_pad3d.default,
        ),
        K.PAD,
        Q.SHARED,
        None,
        "movement",
    ),
    Operator((aten._pad_circular.default,), K.PAD, Q.SHARED, None, None),
    Operator((aten.slice.Tensor,), K.SLICE, Q.SHARED, "movement", "movement"),
    Operator((aten.slice_copy.Tensor,), K.SLICE, None, None, "movement"),
    Operator((aten.select.int,), K.SELECT, Q.SHARED, "movement", "movement"),
    Operator((aten.select_copy.int,), K.SELECT, None, None, "movement"),
    Operator((aten.expand.default,), K.EXPAND, Q.SHARED, "movement", "movement"),
    Operator((aten.expand_copy.default,), K.EXPAND, Q.SHARED, None, "movement"),
    Operator((aten.flip.default,), K.FLIP, Q.SHARED, None, "movement"),
    # resizing
    Operator(
        (aten.upsample_nearest2d.vec, aten.upsample_nearest2d.default),
        K.UPSAMPLE_NEAREST,
        Q.SHARED,
        "resize",
        "movement",
    ),
    Operator((aten.upsample_bilinear2d.vec,), K.UPSAMPLE_BILINEAR, Q.SHARED, "resize", "nn"),
    Operator((aten.upsample_bilinear2d.default,), K.UPSAMPLE_BILINEAR, Q.SHARED, "resize", None),
    # gathers
    Operator((aten.embedding.default, aten.index_select.default), K.GATHER, Q.SHARED, "gather", "movement"),
    Operator((aten.index_copy.default,), K.SCATTER, Q.ONE_RANGE, "gather", "movement"),
    Operator((CHECKED_INDEX,), K.CHECKED_INDEX, None, None, "movement"),
    # the CPU's own: sorting, casts, conversions
    Operator((aten.sort.default, aten.sort.stable, aten.topk.default), K.SORT, None, None, "sort"),
    Operator((aten._to_copy.default,), K.CAST, None, None, "movement"),
    Operator((qd.quantize_per_tensor.default, qd.quantize_per_tensor.tensor), K.QUANTIZE, None, None, "quantize"),
    Operator((qd.dequantize_per_tensor.default, qd.dequantize_per_tensor.tensor), K.DEQUANTIZE, None, None, "quantize"),
    Operator((qd.dequantize_per_channel.default,), K.DEQUANTIZE_CHANNEL, None, None, None),
)


def _overloads(rows) -> tuple:
    return tuple(op for row in rows for op in row.overloads)


def of_kind(*kinds: Kind) -> frozenset:
    """The ops of the rows of `kinds`."""
    return frozenset(_overloads(row for row in OPERATORS if row.kind in kinds))


def annotated(*classes: Quantized) -> frozenset:
    """The ops kiln's quantizer annotates as one of `classes`."""
    return frozenset(_overloads(row for row in OPERATORS if row.quantized in classes))


def lowered_by(module: str) -> frozenset:
    """The ops module `module` of kiln.lower lowers."""
    return frozenset(_overloads(row for row in OPERATORS if row.lowering == module))


def kernels_in(module: str) -> frozenset:
    """The ops whose CPU kernel module `module` of kiln.program.kernels defines."""
    return frozenset(_overloads(row for row in OPERATORS if row.kernel == module))


# ---- the views the stages share -----------------------------------------------------------------
LOWERED = frozenset(_overloads(row for row in OPERATORS if row.lowering is not None))  # ops with a TOSA lowering
TABLE_OPS = of_kind(K.UNARY)  # unary functions an int8 TABLE computes: quantize(f(dequantize(q))) per entry
COMPARISON_OPS = of_kind(K.COMPARISON)
BOOL_REDUCTIONS = of_kind(K.BOOL_REDUCTION)
LOGICAL_OPS = of_kind(K.LOGICAL, K.BOOL_REDUCTION)  # ops of bool tensors (masks), never observed
INDEX_OPS = of_kind(K.ARGMAX)  # indices of quantized values
VIEW_OPS = of_kind(K.VIEW)  # reshapes, which move no value: of bools (a mask), integer work too
SOFTMAX_OPS = of_kind(K.SOFTMAX)  # probabilities: an output in the fixed range [0, 1)
LOG_SOFTMAX_OPS = of_kind(K.LOG_SOFTMAX)
FUSIBLE_ACTIVATIONS = of_kind(K.ACTIVATION)  # the clamps the NPU applies in the op producing their input
FUSING_PRODUCERS = frozenset(_overloads(row for row in OPERATORS if row.fuses))
MATMUL_OPS = of_kind(K.MATMUL)
GATHERS = of_kind(K.GATHER)  # gathers of quantized values by an index tensor
SCATTERS = of_kind(K.SCATTER)  # writes of quantized rows at an index tensor's positions
INDEXED = GATHERS | SCATTERS  # their indices come through CHECKED_INDEX (kiln.graph)
WEIGHT_AXIS = {op: row.weight_axis for row in OPERATORS if row.weight_axis is not None for op in row.overloads}
QUANTIZE = _overloads(row for row in OPERATORS if row.kind is K.QUANTIZE)
DEQUANTIZE = _overloads(row for row in OPERATORS if row.kind is K.DEQUANTIZE)
DEQUANTIZE_CHANNEL = _overloads(row for row in OPERATORS if row.kind is K.DEQUANTIZE_CHANNEL)


def index_argument(target) -> int:
    """The position of a gather's or scatter's index tensor among its arguments (embedding's
    `indices`, index_select's and index_copy's `index`)."""
    return next(i for i, a in enumerate(target._schema.arguments) if a.name in ("indices", "index"))


def annotation_table() -> dict:
    """op -> how the quantizer annotates it (for OPS.md)."""
    return {op: row.quantized.value for row in OPERATORS if row.quantized is not None for op in row.overloads}
