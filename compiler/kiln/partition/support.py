"""What the NPU runs: per-target support rules.

Each rule is a small predicate on one op of kiln's graph; its text, filled in
with the op's facts, is the reason the report gives when the op stays on the
CPU. Rules are checked in the order listed; the first that fails decides.
Limits come from Vela's documented operator constraints
(ethosu/vela/tflite_supported_operators.py in ethos-u-vela 5.2.0) and from
what kiln's TOSA lowering covers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from kiln.families import (
    DMA_GATHERS,
    DMA_SCATTERS,
    HARDWARE_RESIZE,
    INT16_MATMUL,
    INT16_TRANSPOSE_CONV,
    MIN_AS_MAX,
    SELECTS,
    NpuFamily,
    Row,
)
from kiln.graph import Op, Value, pair
from kiln.partition import rescale, tables
from kiln.partition.rescale import ACCUMULATOR
from kiln.vocabulary import (
    CHECKED_INDEX,
    COMPARISON_OPS,
    DEQUANTIZE,
    GATHERS,
    INDEX_OPS,
    INDEXED,
    LOG_SOFTMAX_OPS,
    LOGICAL_OPS,
    LOWERED,
    MATMUL_OPS,
    QUANTIZE,
    SCATTERS,
    SOFTMAX_OPS,
    TABLE_OPS,
    VIEW_OPS,
    WEIGHT_AXIS,
    Kind,
    of_kind,
)

aten = torch.ops.aten
CONV_OPS = of_kind(Kind.CONV)
POOL_OPS = of_kind(Kind.AVG_POOL, Kind.MAX_POOL)
SPATIAL_OPS = (
    CONV_OPS
    | POOL_OPS
    | of_kind(Kind.ADAPTIVE_POOL, Kind.CONV_TRANSPOSE, Kind.UPSAMPLE_NEAREST, Kind.UPSAMPLE_BILINEAR)
)
SUMS = of_kind(Kind.SUM, Kind.MEAN)
INT32_MAX = 2**31 - 1
MAC_OPS = of_kind(Kind.CONV, Kind.LINEAR, Kind.CONV_TRANSPOSE, Kind.MATMUL)  # the NPU's MAC array computes them
PRODUCT_OPS = MAC_OPS | {aten.mul.Tensor}  # requantized by their operands' scales multiplied (rescale.product_factor)
TENSOR_DIM_MAX = 65535
DMA_SIZE_MAX = 65535  # the Ethos-U85 DMA's SIZE0 and SIZE1 registers: rows per plane, planes
STRIDE_MAX = 3
DILATED_HEIGHT_MAX = 64
DILATED_AREA_MAX = 64 * 64
KERNEL_HEIGHT_MAX = 256
KERNEL_AREA_MAX = 256 * 256
PADDED_POOL_KERNEL_MAX = 8
BILINEAR_FACTOR_MAX = 5  # larger factors need tap weights above int8's 127
RESIZE_SIDE_MAX = 1024  # TOSA's RESIZE scale numerator (2 * output side) is at most 2048
ALIGNED_SIZE_MAX = 128  # align_corners=True outputs up to 128 a side: taps in units of 1/127 fit int8
WEIGHT_SUM_MAX = 127 * 65536
SELECT_OPS = COMPARISON_OPS | LOGICAL_OPS | of_kind(Kind.WHERE)  # their bools may be on the NPU


@dataclass(frozen=True)
class Rule:
    name: str
    text: str  # the reason shown to users; {fields} come from facts(op)
    holds: Callable[[Op], bool]
    ops: frozenset | None = None  # the targets it checks; None: every op
    having: Row | None = None  # checked only on the NPU families that have this row of kiln.families
    lacking: Row | None = None  # checked only on those that lack it

    def checked_on(self, family: NpuFamily) -> bool:
        """Whether the rule applies on an NPU of `family`."""
        return (self.having is None or family.has(self.having)) and (
            self.lacking is None or not family.has(self.lacking)
        )


RULES: list[Rule] = []


def rule(text: str, ops=None, having: Row | None = None, lacking: Row | None = None):
    def register(fn):
        RULES.append(Rule(fn.__name__, text, fn, frozenset(ops) if ops is not None else None, having, lacking))
        return fn

    return register


def facts(op: Op) -> dict:
    """Everything a rule's text may mention about `op`."""
    f = {
        "op_type": op.op_type,
        "node": op.name,
        "shape": list(op.output.shape),
        "input_shape": list(op.inputs[0].shape) if op.inputs else [],
        "dtypes": ", ".join(sorted({v.dtype for v in op.inputs + op.outputs if not v.is_constant})),
    }
    f["operand_shapes"] = " and ".join(str(list(v.shape)) for v in op.inputs)
    for key in ("stride", "dilation", "kernel_size", "padding", "groups", "dim", "pad", "mode", "step"):
        try:
            f[key] = op.arg(key)
        except KeyError:
            pass
    if op.target in CONV_OPS | {aten.conv_transpose2d.input}:
        f["kernel_size"] = list(op.arg("weight").shape[2:])
    if op.target in PRODUCT_OPS and quantized_product(op):
        factor, f["rescale_bits"] = product_rescale(op)
        f["rescale_factor"] = f"{factor:.3g}"
    if op.target in TABLE_OPS and op.inputs[0].dtype == "int16" and op.inputs[0].qparams is not None:
        f["table_steps"] = tables.int16_steps(op)
    if op.target in INDEXED:
        f["index_shape"] = list(op.inputs[1].shape)
    return f


# ---- rules for every op --------------------------------------------------------------------------
@rule("stays in float: kiln's quantizer does not quantize {op_type}, and the NPU computes in integers")
def quantized(op: Op) -> bool:
    # an op on integer or bool tensors is never quantized: npu_activation_types names its types
    return op.quantized or any(v.dtype != "float32" for v in op.inputs + op.outputs if not v.is_constant)


@rule("kiln has no TOSA lowering for {op_type}")
def lowered(op: Op) -> bool:
    return op.target in LOWERED


@rule(
    "{op_type}: Vela 5.2.0 runs comparisons, logical ops (any, all) and selects on Ethos-U85, not on Ethos-U55 or U65",
    ops=SELECT_OPS,
    lacking=SELECTS,
)
def selects_on_u85(op: Op) -> bool:
    return False


@rule(
    "{op_type} of {dtypes} tensors: Vela 5.2.0 takes bool tensors on Ethos-U85 only (for its comparisons, "
    "logical ops and selects)",
    ops=VIEW_OPS,
    lacking=SELECTS,
)
def bool_views_on_u85(op: Op) -> bool:
    return all(v.dtype != "bool" for v in op.inputs + op.outputs)


def int32_multiply(op: Op) -> bool:
    """A product of int32 tensors (or an int32 tensor and an integer that fits int32): kiln's
    lowering computes it modulo 2^32, as PyTorch does."""
    if op.target is not aten.mul.Tensor or op.output.dtype != "int32":
        return False
    operands = (op.arg("self"), op.arg("other"))
    return all(
        v.dtype == "int32"
        if isinstance(v, Value)
        else isinstance(v, int) and not isinstance(v, bool) and -(2**31) <= v <= INT32_MAX
        for v in operands
    )


@rule(
    "{dtypes} tensors: kiln puts int8 and int16 activations on the NPU, bool ones as a comparison's result, "
    "a logical op's operands, a select's condition or a view of those, argmax's int32 indices and the indices a "
    "gather, a scatter or a comparison reads checked on the CPU, and int32 products (exact modulo 2^32, as "
    "PyTorch's); other integer and bool tensors stay on the CPU, whose integer arithmetic wraps as PyTorch's does "
    "(TOSA leaves int32 overflow unpredictable)"
)
def npu_activation_types(op: Op) -> bool:
    if int32_multiply(op):
        return True
    indices = [v for v in op.outputs if op.target in INDEX_OPS and v.dtype == "int32"]
    if op.target in INDEXED | COMPARISON_OPS:
        indices += [v for v in op.inputs if v.producer is not None and v.producer.target is CHECKED_INDEX]
    return all(
        v.dtype in ("int8", "int16") or (v.dtype == "bool" and op.target in SELECT_OPS | VIEW_OPS)
        for v in op.inputs + op.outputs
        if not v.is_constant and v not in indices
    )


@rule("argmax over all values (dim None) is not lowered: the NPU has no 0-dimensional result", ops=INDEX_OPS)
def argmax_along_a_dim(op: Op) -> bool:
    return op.arg("dim") is not None


@rule(
    "{op_type}: Vela 5.2.0 gathers (TOSA GATHER, the DMA's indexed mode) on Ethos-U85, not on Ethos-U55 or U65",
    ops=set(GATHERS),
    lacking=DMA_GATHERS,
)
def gathers_on_u85(op: Op) -> bool:
    return False


@rule(
    "index_select along dim {dim} of {input_shape}: kiln gathers along a dim with only size-1 dims before it",
    ops={aten.index_select.default},
)
def leading_gather_dim(op: Op) -> bool:
    x = op.inputs[0]
    return int(np.prod(x.shape[: op.arg("dim") % len(x.shape)], dtype=np.int64)) == 1


@rule(
    "{op_type}: Vela 5.2.0 scatters (TOSA SCATTER, the DMA's indexed mode) on Ethos-U85, not on Ethos-U55 or U65",
    ops=SCATTERS,
    lacking=DMA_SCATTERS,
)
def scatters_on_u85(op: Op) -> bool:
    return False


@rule(
    "{op_type} at indices of shape {index_shape}: TOSA SCATTER leaves a row written twice undefined, so the NPU "
    "takes one index computed at run time, or constant indices without repeats",
    ops=SCATTERS,
)
def distinct_scatter_indices(op: Op) -> bool:
    index = op.inputs[1]
    if index.is_constant:
        return len(np.unique(index.data)) == index.data.size
    return int(np.prod(index.shape, dtype=np.int64)) <= 1


@rule(
    "{op_type} at indices of shape {index_shape} along dim {dim} of {input_shape}: the NPU's DMA writes at most 65535 "
    "rows into each of at most 65535 planes (the elements of the dims before dim)",
    ops=SCATTERS,
)
def dma_scatter_sizes(op: Op) -> bool:
    x = op.inputs[0]
    planes = int(np.prod(x.shape[: op.arg("dim") % len(x.shape)], dtype=np.int64))
    return planes <= DMA_SIZE_MAX and int(np.prod(op.inputs[1].shape, dtype=np.int64)) <= DMA_SIZE_MAX


@rule("{op_type} of {dtypes} tensors: kiln runs logical ops of bool tensors on the NPU", ops=LOGICAL_OPS)
def bool_logic(op: Op) -> bool:
    return all(v.dtype == "bool" for v in op.inputs + op.outputs)


def checked_comparison(op: Op) -> bool:
    """A comparison of an index checked on the CPU (kiln.checked_index: kiln.graph compares it in
    place of the index a gather or scatter also reads) with an int32 constant or an integer."""
    a, b = op.arg("self"), op.arg("other")
    checked = [
        v for v in (a, b) if isinstance(v, Value) and v.producer is not None and v.producer.target is CHECKED_INDEX
    ]
    other = b if checked and checked[0] is a else a
    integer = (isinstance(other, Value) and other.is_constant and other.dtype == "int32") or (
        isinstance(other, int) and not isinstance(other, bool)
    )
    return len(checked) == 1 and integer


@rule(
    "{op_type} of {operand_shapes}: kiln compares tensors quantized per tensor, two int8 ones or two int16 ones of "
    "one scale (no bits are left beside 16-bit values for a ratio of scales), or one int8 or int16 tensor with a "
    "finite number, or a checked index with integers",
    ops=COMPARISON_OPS,
)
def quantized_comparison(op: Op) -> bool:
    if checked_comparison(op):
        return True
    other = op.arg("other")
    tensors = [op.arg("self")] + ([other] if isinstance(other, Value) else [])
    number = isinstance(other, Value) or (isinstance(other, (int, float)) and math.isfinite(other))
    per_tensor = all(v.dtype in ("int8", "int16") and v.qparams is not None and v.qparams.axis is None for v in tensors)
    if not (number and per_tensor) or len({v.dtype for v in tensors}) > 1:
        return False
    return tensors[0].dtype == "int8" or len({v.qparams.scale for v in tensors}) == 1


@rule("a tensor of shape {shape} has a dimension above the NPU's limit of 65535")
def tensor_dims(op: Op) -> bool:
    return all(d <= TENSOR_DIM_MAX for v in op.inputs + op.outputs for d in v.shape)


@rule("{op_type} on a tensor of shape {input_shape}: kiln lowers it for 4-D (N, C, H, W) input", ops=SPATIAL_OPS)
def four_dimensional(op: Op) -> bool:
    return len(op.inputs[0].shape) == 4


@rule("batch {input_shape[0]}: the NPU's convolutions and pools take batch 1", ops=SPATIAL_OPS)
def batch_one(op: Op) -> bool:
    return op.inputs[0].shape[0] == 1


# ---- strides beyond the NPU's 1..3 (kiln.lower.conv._strided_conv, kiln.lower.pool._strided_pool) -----
def moving_stride(op: Op) -> tuple[int, int]:
    """A convolution's or pool's stride along H and W, 1 along an axis of one output position
    (there the stride moves no window, and TOSA's geometry does not depend on it)."""
    stride = pair(op.arg("stride") or op.arg("kernel_size"))
    return tuple(1 if o == 1 else s for s, o in zip(stride, op.output.shape[2:]))


def far_strided(op: Op) -> bool:
    """Whether a stride is beyond the NPU's 1..3: kiln then lowers the op by space to depth."""
    return max(moving_stride(op)) > STRIDE_MAX


@rule(
    "{op_type} with stride {stride} and groups {groups}: kiln runs a stride beyond the NPU's 1..3 as a "
    "stride-1 convolution of the input's phases moved into channels (space to depth), which it does for plain "
    "convolutions and 8-bit depthwise ones, not for grouped or 16-bit depthwise ones",
    ops=CONV_OPS,
)
def strided_conv_groups(op: Op) -> bool:
    groups, x, weight = int(op.arg("groups")), op.inputs[0], op.inputs[1]
    if groups == 1 or not far_strided(op):
        return True
    # depthwise: the phases are summed by an int32 REDUCE_SUM, and 16-bit convolutions accumulate in 48 bits
    return groups == x.shape[1] and weight.shape[1] == 1 and x.dtype == "int8"


@rule(
    "{op_type} with stride {stride} on {input_shape}: moving the strided axes into channels (space to depth, "
    "kiln's way past the NPU's strides 1..3) makes more than the NPU's 65535 channels",
    ops=CONV_OPS,
)
def space_to_depth_channels(op: Op) -> bool:
    stride = moving_stride(op)
    if max(stride) <= STRIDE_MAX:
        return True
    phases = math.prod(s for s in stride if s > STRIDE_MAX)
    return phases * op.inputs[0].shape[1] <= TENSOR_DIM_MAX


@rule(
    "{op_type} with kernel {kernel_size} and stride {stride}: kiln runs a stride beyond the NPU's 1..3 as "
    "reductions over separate windows, and these overlap (a kernel above its stride)",
    ops=POOL_OPS,
)
def strided_pool_windows(op: Op) -> bool:
    if not far_strided(op):
        return True
    kernel = pair(op.arg("kernel_size"))
    stride = pair(op.arg("stride") or op.arg("kernel_size"))
    return all(k <= s or o == 1 for k, s, o in zip(kernel, stride, op.output.shape[2:]))


@rule(
    "average pooling with stride {stride} and padding {padding} without count_include_pad: kiln runs a stride "
    "beyond the NPU's 1..3 as window sums divided by the window's size, and the windows at the edges hold fewer "
    "values",
    ops={aten.avg_pool2d.default},
)
def strided_avg_pool_count(op: Op) -> bool:
    return not far_strided(op) or pair(op.arg("padding")) == (0, 0) or bool(op.arg("count_include_pad"))


def ceil_windows(op: Op) -> tuple[int, int]:
    """Per axis (H, W), the windows ceil_mode adds to an average pool's output beyond floor
    division's (0 or 1): a last window that starts within the input or its leading padding and
    runs past the trailing padding. Where both are 0, ceil_mode changes nothing."""
    kernel, padding = pair(op.arg("kernel_size")), pair(op.arg("padding"))
    stride = pair(op.arg("stride") or op.arg("kernel_size"))
    sizes = zip(op.inputs[0].shape[2:], kernel, stride, padding, op.output.shape[2:])
    return tuple(out - ((size + 2 * pad - k) // s + 1) for size, k, s, pad, out in sizes)


@rule(
    "average pooling with kernel {kernel_size} and ceil_mode on {input_shape}: kiln runs a stride beyond the NPU's "
    "1..3 as window sums divided by the window's size, and ceil_mode adds windows at the edges that hold fewer values",
    ops={aten.avg_pool2d.default},
)
def strided_avg_pool_ceil(op: Op) -> bool:
    return not far_strided(op) or not any(ceil_windows(op))


# ---- convolution ---------------------------------------------------------------------------------------


@rule("kernel {kernel_size} with dilation {dilation} spans more than the NPU's 64 rows or 64x64 area", ops=CONV_OPS)
def dilated_kernel(op: Op) -> bool:
    kh, kw = op.arg("weight").shape[2:]
    dh, dw = pair(op.arg("dilation"))
    height, width = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    return height <= DILATED_HEIGHT_MAX and height * width <= DILATED_AREA_MAX


@rule("the weights of one output channel sum to more than the NPU's limit of 127*65536", ops=MAC_OPS)
def weight_sum(op: Op) -> bool:
    weight = op.inputs[1]
    if not weight.is_constant:
        return True
    axis = WEIGHT_AXIS[op.target]  # the output-channel axis: a matmul's constant right operand is [..., k, n]
    per_channel = np.abs(np.moveaxis(weight.data, axis, 0).astype(np.int64)).reshape(weight.shape[axis], -1).sum(1)
    return int(per_channel.max(initial=0)) <= WEIGHT_SUM_MAX


@rule("conv_transpose2d with groups or dilation is not lowered", ops={aten.conv_transpose2d.input})
def plain_transpose_conv(op: Op) -> bool:
    return int(op.arg("groups")) == 1 and pair(op.arg("dilation")) == (1, 1)


# ---- pooling ----------------------------------------------------------------------------------------------
@rule("pooling kernel {kernel_size} is beyond the NPU's 256 rows / 256x256 area", ops=POOL_OPS)
def pool_kernel(op: Op) -> bool:
    kh, kw = pair(op.arg("kernel_size"))
    return kh <= KERNEL_HEIGHT_MAX and kh * kw <= KERNEL_AREA_MAX


@rule("padded average pooling with kernel {kernel_size}: the NPU pads kernels up to 8x8", ops={aten.avg_pool2d.default})
def padded_avg_pool(op: Op) -> bool:
    """Padding here includes the trailing padding of a window ceil_mode adds (ceil_windows)."""
    kh, kw = pair(op.arg("kernel_size"))
    if far_strided(op):
        return True  # padded by a TOSA PAD before the window sums
    padded = pair(op.arg("padding")) != (0, 0) or any(ceil_windows(op))
    return not padded or (kh <= PADDED_POOL_KERNEL_MAX and kw <= PADDED_POOL_KERNEL_MAX)


@rule("average pooling with divisor_override is not lowered", ops={aten.avg_pool2d.default})
def plain_avg_pool(op: Op) -> bool:
    return op.arg("divisor_override") is None


@rule(
    "{mode} padding {pad} of shape {input_shape}: kiln copies reflect, replicate and circular padding from the "
    "input, so each pad must be 0 or more, below the padded size for reflect and at most it for circular",
    ops={aten.pad.default},
)
def padding_by_copies(op: Op) -> bool:
    mode, pads, shape = op.arg("mode"), list(op.arg("pad")), op.inputs[0].shape
    if mode == "constant":
        return True
    if mode not in ("reflect", "replicate", "circular"):
        return False
    for i in range(len(pads) // 2):  # PyTorch lists the last dimension first
        size, pad = shape[-1 - i], pads[2 * i : 2 * i + 2]
        if min(pad) < 0 or (mode == "reflect" and max(pad) >= size) or (mode == "circular" and max(pad) > size):
            return False
    return True


@rule("max pooling with dilation {dilation} is not supported by the NPU", ops={aten.max_pool2d.default})
def undilated_max_pool(op: Op) -> bool:
    return pair(op.arg("dilation")) == (1, 1)


@rule("adaptive pooling to {shape} does not split the input into equal windows", ops={aten.adaptive_avg_pool2d.default})
def adaptive_whole_windows(op: Op) -> bool:
    (h, w), (oh, ow) = op.inputs[0].shape[2:], op.output.shape[2:]
    return h % oh == 0 and w % ow == 0 and (h // oh) * (w // ow) <= KERNEL_AREA_MAX


# ---- the rest ---------------------------------------------------------------------------------------------
@rule("nearest upsampling from {input_shape} needs whole scale factors", ops=of_kind(Kind.UPSAMPLE_NEAREST))
def whole_upsampling(op: Op) -> bool:
    (h, w), (oh, ow) = op.inputs[0].shape[2:], op.output.shape[2:]
    return oh % h == 0 and ow % w == 0


BILINEAR_OPS = of_kind(Kind.UPSAMPLE_BILINEAR)


def whole_bilinear_factors(shape, out_shape) -> bool:
    """Whether bilinear resizing from `shape` to `out_shape` (NCHW) is by whole factors up to
    BILINEAR_FACTOR_MAX (kiln's depthwise-convolution lowering, on every family)."""
    (h, w), (oh, ow) = shape[2:], out_shape[2:]
    return oh % h == 0 and ow % w == 0 and oh // h <= BILINEAR_FACTOR_MAX and ow // w <= BILINEAR_FACTOR_MAX


def aligned_bilinear(op: Op) -> bool:
    (oh, ow) = op.output.shape[2:]
    return op.inputs[0].dtype == "int8" and max(oh, ow) <= ALIGNED_SIZE_MAX


@rule(
    "bilinear upsampling from {input_shape} to {shape}: kiln lowers whole scale factors up to 5 without "
    "align_corners, and int8 align_corners=True to sizes up to 128 a side (on Ethos-U85 also any size)",
    ops=BILINEAR_OPS,
    lacking=HARDWARE_RESIZE,
)
def plain_bilinear(op: Op) -> bool:
    if op.arg("align_corners"):
        return aligned_bilinear(op)
    return whole_bilinear_factors(op.inputs[0].shape, op.output.shape)


@rule(
    "bilinear resizing from {input_shape} to {shape}: kiln lowers any size up to 1024 a side without "
    "align_corners (one RESIZE), and int8 align_corners=True to sizes up to 128 a side",
    ops=BILINEAR_OPS,
    having=HARDWARE_RESIZE,
)
def bilinear_on_u85(op: Op) -> bool:
    if op.arg("align_corners"):
        return aligned_bilinear(op)
    return max(op.output.shape[2:]) <= RESIZE_SIDE_MAX


@rule(
    "{op_type} to shape {shape}: the NPU has no empty or 0-dimensional tensors",
    ops={aten.slice.Tensor, aten.select.int},
)
def nonempty_slice(op: Op) -> bool:
    return len(op.output.shape) >= 1 and all(op.output.shape)


BINARY_ELEMENTWISE = of_kind(Kind.BINARY)


@rule(
    "{op_type} with a constant operand that is not an int8 or int16 tensor quantized per tensor is not lowered",
    ops=BINARY_ELEMENTWISE | MATMUL_OPS | of_kind(Kind.MINMAX),
)
def quantized_constants(op: Op) -> bool:
    # a parameter or buffer operand is a TOSA constant with its own scale and zero point
    return int32_multiply(op) or all(
        v.dtype in ("int8", "int16") and v.qparams is not None and v.qparams.axis is None
        for v in op.inputs
        if v.is_constant
    )


@rule("{op_type} with a scalar operand that is not a finite number is not lowered", ops=BINARY_ELEMENTWISE)
def finite_scalars(op: Op) -> bool:
    # a scalar operand is a one-element TOSA constant of scale |c|
    scalars = [a for a in (op.arg("self"), op.arg("other")) if not isinstance(a, Value)]
    return all(isinstance(c, (int, float)) and math.isfinite(c) for c in scalars)


@rule(
    "{op_type} of shapes {operand_shapes}: kiln lowers matrix products whose non-constant operands have the "
    "output's batch shape",
    ops=MATMUL_OPS,
)
def plain_matmul(op: Op) -> bool:
    a, b = op.inputs[0], op.inputs[1]
    if min(len(a.shape), len(b.shape)) < 2 or a.shape[-1] != b.shape[-2]:
        return False
    return all(v.is_constant or tuple(v.shape[:-2]) == tuple(op.output.shape[:-2]) for v in (a, b))


@rule("{op_type} with alpha other than 1 is not lowered", ops={aten.add.Tensor, aten.sub.Tensor})
def unit_alpha(op: Op) -> bool:
    return op.arg("alpha") in (None, 1)


def product_operands(op: Op) -> tuple:
    """The two factors of a product op (mul or a MAC op): Values, or a Python scalar."""
    if op.target in MAC_OPS:
        return op.inputs[0], op.inputs[1]
    return op.arg("self"), op.arg("other")


def quantized_product(op: Op) -> bool:
    """Whether product op `op` is quantized, operands and result (an int32 one is exact)."""
    operands = [v for v in product_operands(op) if isinstance(v, Value)]
    return op.output.qparams is not None and all(v.qparams is not None for v in operands)


def product_rescale(op: Op) -> tuple[float, int]:
    """(the largest requantization factor of product op `op`, its RESCALE's multiplier bits)."""
    a, b = product_operands(op)
    accumulator = ACCUMULATOR[a.dtype] if op.target in MAC_OPS else "int32"
    return float(np.max(rescale.product_factor(a, b, op.output))), rescale.multiplier_bits(accumulator)


@rule(
    "{op_type}: requantizing its product takes a factor of {rescale_factor} (its operands' scales "
    "multiplied, over its output's scale), too large for TOSA RESCALE ({rescale_bits}-bit multipliers): "
    "its output's calibrated range is tiny next to its operands'",
    ops=PRODUCT_OPS,
)
def representable_rescale(op: Op) -> bool:
    if not quantized_product(op):
        return True
    factor, bits = product_rescale(op)
    return rescale.fits(factor, bits)


def reduced_dims(op: Op) -> list[int]:
    """The dims of its input a sum, mean, amax or amin reduces, from 0, sorted (None or []: all)."""
    rank = len(op.inputs[0].shape)
    dims = op.arg("dim")
    return sorted({d % rank for d in dims} if dims else set(range(rank)))


@rule(
    "{op_type} over dims {dim} of shape {input_shape}: the NPU sums in int32, and that many values of up "
    "to 255 (int8) or 32768 (int16) steps each could pass 2^31 - 1",
    ops=SUMS,
)
def int32_sum(op: Op) -> bool:
    x = op.inputs[0]
    if x.qparams is None:
        return True  # not quantized: another rule refuses it
    count = int(np.prod([x.shape[d] for d in reduced_dims(op)], dtype=np.int64))
    largest = max(x.qparams.qmax - x.qparams.zero_point, x.qparams.zero_point - x.qparams.qmin)
    return count * largest <= INT32_MAX


@rule(
    "16-bit amin: on Ethos-U55 and U65 Vela 5.2.0's REDUCE_MIN gives wrong results when its output is reshaped "
    "across axes, and kiln's min as ~max(~x) there takes an exact 8-bit table (int8 input)",
    ops={aten.amin.default},
    having=MIN_AS_MAX,
)
def int8_amin(op: Op) -> bool:
    return op.inputs[0].dtype == "int8"


# ---- where Ethos-U55/U65 and U85 differ (kiln.families) ----------------------------------------------
@rule(
    "16-bit {op_type}: Ethos-U55 and U65 have no 16-bit matrix multiply (Ethos-U85 has)",
    ops=MATMUL_OPS,
    lacking=INT16_MATMUL,
)
def int8_matmul_on_u55(op: Op) -> bool:
    return op.inputs[0].dtype == "int8"


@rule(
    "16-bit conv_transpose2d: Vela cannot place a 16-bit transpose convolution on Ethos-U55 or U65 "
    "(it can on Ethos-U85)",
    ops={aten.conv_transpose2d.input},
    lacking=INT16_TRANSPOSE_CONV,
)
def int8_transpose_conv_on_u55(op: Op) -> bool:
    return op.inputs[0].dtype == "int8"


SOFTMAXES = SOFTMAX_OPS | LOG_SOFTMAX_OPS
SOFTMAX_LENGTH_MAX = 65535  # the row sum of 16-bit exps must fit int32 with 8 fraction bits


@rule(
    "{op_type} on 16-bit values: kiln lowers log_softmax of int8 input (its exp table is indexed by x - max(x))",
    ops=LOG_SOFTMAX_OPS,
)
def int8_log_softmax(op: Op) -> bool:
    return op.inputs[0].dtype == op.output.dtype == "int8"


@rule("{op_type} from {dtypes} values: kiln lowers softmax from int8 to int8 and int16 to int16", ops=SOFTMAX_OPS)
def one_width_softmax(op: Op) -> bool:
    return op.inputs[0].dtype == op.output.dtype


SOFTMAX16_STEP_MAX = 0.5  # the row's largest exp then stays at least 2^14 (kiln.lower.softmax.EXP16_KEPT_BITS)


@rule("16-bit {op_type} of input steps above 0.5: kiln's 16-bit exp table is built for finer ones", ops=SOFTMAX_OPS)
def fine_16_bit_softmax(op: Op) -> bool:
    x = op.inputs[0]
    return x.dtype != "int16" or x.qparams.scale <= SOFTMAX16_STEP_MAX


@rule("{op_type} over {input_shape} along dim {dim}: more than 65535 values to normalise", ops=SOFTMAXES)
def softmax_length(op: Op) -> bool:
    return op.inputs[0].shape[op.arg("dim") % len(op.inputs[0].shape)] <= SOFTMAX_LENGTH_MAX


@rule(
    "16-bit {op_type}: TOSA's interpolated 16-bit table is {table_steps} steps from PT2E's reference in this "
    "input's range (kiln takes it within 1 step; an 8-bit table is exact)",
    ops=TABLE_OPS,
)
def table_within_a_step(op: Op) -> bool:
    """Only a quantized input is a table's (other rules keep plain integers off the NPU); rsqrt
    from int16 to int16 reads a table of rsqrt over [0.25, 1) at its normalised input: within a step."""
    x = op.inputs[0]
    return x.dtype == "int8" or x.qparams is None or tables.normalised_rsqrt(op) or tables.int16_steps(op) <= 1


def reason(op: Op, family: NpuFamily) -> str | None:
    """Why `op` cannot run on an NPU of `family`, or None if it can."""
    if op.target in QUANTIZE or op.target in DEQUANTIZE:
        return "converts between the program's float values and int8 (a CPU kernel)"
    source = op.inputs[0].producer if op.target is aten._to_copy.default and op.inputs else None
    if source is not None and source.target in INDEX_OPS:
        return "widens argmax's int32 indices (the NPU's) to PyTorch's int64 (a CPU kernel)"
    if op.target is CHECKED_INDEX and any(user.target in SCATTERS for user in op.output.users):
        return (
            "checks a scatter's indices against the size of the dim it writes and narrows them to int32 (a CPU kernel)"
        )
    if op.target is CHECKED_INDEX:
        return "checks a gather's indices against its table and narrows them to int32 (a CPU kernel)"
    for r in RULES:
        if r.ops is not None and op.target not in r.ops:
            continue
        if not r.checked_on(family):
            continue
        if not r.holds(op):
            try:
                return r.text.format(**facts(op))
            except (KeyError, IndexError):
                return r.text
    return None


def macs(op: Op) -> int:
    """Multiply-accumulates the op performs (0 for ops without a MAC array workload)."""
    out = op.output.shape
    if op.target in CONV_OPS:
        weight = op.inputs[1].shape
        return int(np.prod(out, dtype=np.int64)) * int(np.prod(weight[1:], dtype=np.int64))
    if op.target is aten.linear.default:
        return int(np.prod(out, dtype=np.int64)) * op.inputs[0].shape[-1]
    if op.target is aten.conv_transpose2d.input:
        x, weight = op.inputs[0].shape, op.inputs[1].shape
        return int(np.prod(x, dtype=np.int64)) * int(np.prod(weight[1:], dtype=np.int64))
    if op.target in MATMUL_OPS:
        return int(np.prod(out, dtype=np.int64)) * op.inputs[0].shape[-1]
    return 0
