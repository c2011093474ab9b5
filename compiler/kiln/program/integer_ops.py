"""Which quantized ops kept on the CPU run as integer cortex_m kernels, and with which arguments.

integer_call(op) gives the call of kiln.program.kernels.integer's kernel for a quantized graph op,
with the parameters ExecuTorch 1.5.1's Cortex-M passes derive (multipliers and shifts as
CMSIS-NN's requantize takes them, offsets as negated zero points), or the reason the op has none,
in which case the program builder runs it in float between a dequantize and a quantize. The
compile report lists each choice (kiln.program.builder.Program.cpu_kernels).

Each rule below states the arguments its kernel covers; an op outside them keeps the float path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from kiln.errors import HostError
from kiln.graph import Op, QParams, Value, dequantize_array
from kiln.program.kernels import INTEGER_KERNELS, KERNELS, Kernel, kernel_for
from kiln.program.kernels.core import argument
from kiln.program.kernels.integer import (
    ADD_LEFT_SHIFT,
    ADD_LEFT_SHIFT_S16,
    S16_EXP_RANGE,
    S16_MAX_INNER,
    S16_SOFTMAX_MAX_ROW,
    quantize_multiplier,
    softmax_s16_tables,
)
from kiln.program.kernels.integer_s16 import mean_count
from kiln.program.kernels.nn import pair
from kiln.program.kernels.quantize import quantize_array
from kiln.vocabulary import FUSIBLE_ACTIVATIONS, GATHERS, MATMUL_OPS, TABLE_OPS, VIEW_OPS, Kind, of_kind

PERMUTE_OPS = of_kind(Kind.PERMUTE)
MOVED_OPS = VIEW_OPS | GATHERS | of_kind(Kind.SLICE, Kind.SELECT, Kind.EXPAND, Kind.FLIP)

aten = torch.ops.aten
INT8, INT16 = (-128, 127), (-(2**15), 2**15 - 1)
SOFTMAX_SCALE, SOFTMAX_ZERO_POINT = 1.0 / 256, -128  # arm_softmax_s8's output
SOFTMAX_INPUT_BITS = 5  # arm_softmax_s8's Q5.26 differences


@dataclass
class IntegerCall:
    kernel: Kernel
    args: list  # the schema's arguments: Values (new constants among them), ints, int lists, None
    before: list  # calls to make first: (kernel, args, output Value), e.g. the pad of an avg_pool2d


def _per_tensor(v, dtype: str) -> bool:
    return isinstance(v, Value) and v.dtype == dtype and v.qparams is not None and v.qparams.axis is None


def _per_tensor_int8(v) -> bool:
    return _per_tensor(v, "int8")


def _quantized(x: float, qp: QParams, bounds=INT8) -> int:
    """Real value x as kiln's quantize kernel writes it for `qp` (int8, or int16 with INT16's bounds)."""
    code = 1 if bounds == INT8 else 2  # ScalarType Char, Short
    return int(quantize_array(np.array([x], np.float32), qp.scale, qp.zero_point, *bounds, code)[0])


def _activation_range(op: Op, bounds=INT8) -> tuple[int, int]:
    """The output's integer range narrowed by the op's fused activation (its real bounds quantized)."""
    qp = op.output.qparams
    low, high = max(qp.qmin, bounds[0]), min(qp.qmax, bounds[1])
    if op.activation is not None:  # bounds beyond the type's range (infinities) clipped to just past it
        past = ((bounds[0] - qp.zero_point - 1) * qp.scale, (bounds[1] - qp.zero_point + 1) * qp.scale)
        a, b = (float(np.clip(v, *past)) for v in op.activation)
        low, high = max(low, _quantized(a, qp, bounds)), min(high, _quantized(b, qp, bounds))
    return low, high


def _constant(op: Op, suffix: str, array: np.ndarray) -> Value:
    array = np.ascontiguousarray(array)
    return Value(f"{op.name}_{suffix}", tuple(array.shape), str(array.dtype), data=array)


def _multipliers(ratios) -> tuple[list[int], list[int]] | str:
    """Each ratio as CMSIS-NN's (multiplier, shift), or why not: a ratio of 1 or more (a left
    shift the int32 accumulator may not survive) or below 2^-31."""
    pairs = [quantize_multiplier(float(r)) for r in ratios]
    if any(not 0 < r < 1 for r in ratios) or any(s < -31 for _, s in pairs):
        return f"a requantization scale of {float(min(ratios)):.3g} to {float(max(ratios)):.3g} is outside (2^-31, 1)"
    return [m for m, _ in pairs], [s for _, s in pairs]


def _weighted(op: Op, axis: int = 0, activations: str = "int8") -> str | None:
    """Why a convolution or linear op has no integer kernel, or None: int8 activations per
    tensor, int8 constant weights symmetric per channel (along `axis`, the output channels'; 1
    for a transposed convolution) or per tensor, an int32 bias."""
    x, w, b = op.arg("input"), op.arg("weight"), op.arg("bias")
    if not (_per_tensor(x, activations) and _per_tensor(op.output, activations)):
        return f"its activations are not {activations} per tensor"
    if not (w.is_constant and w.dtype == "int8" and w.qparams is not None and w.qparams.axis in (None, axis)):
        return "its weight is not an int8 constant quantized per output channel"
    if w.qparams.zero_point != 0:
        return "its weight is quantized with a zero point"
    if b is not None and not (b.is_constant and b.dtype == "int32" and b.qparams is not None):
        return "its bias is not an int32 constant"
    if b is not None:
        product = float(x.qparams.scale) * _weight_scales(w, w.shape[axis])
        if not np.allclose(np.asarray(b.qparams.scale, np.float64).reshape(-1), product, rtol=1e-5, atol=0):
            return "its bias's scale is not its input's times its weight's"
    return None


def _weight_scales(w: Value, channels: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(w.qparams.scale, np.float64).reshape(-1), (channels,))


def _linear(op: Op) -> IntegerCall | str:
    x, y = op.arg("input"), op.output
    s16 = _per_tensor(x, "int16") and _per_tensor(y, "int16")
    if (why := _weighted(op, activations="int16" if s16 else "int8")) is not None:
        return why
    x, w, b, y = op.arg("input"), op.arg("weight"), op.arg("bias"), op.output
    ratios = float(x.qparams.scale) * _weight_scales(w, w.shape[0]) / float(y.qparams.scale)
    if isinstance(found := _multipliers(ratios), str):
        return found
    mults, shifts = found
    if len(set(zip(mults, shifts))) == 1:  # per tensor: ExecuTorch's own form
        mults, shifts = mults[:1], shifts[:1]
    if s16:
        return _linear_s16(op, mults, shifts)
    low, high = _activation_range(op)
    # ExecuTorch's MVE form: the kernel adds kernel_sum = bias + input offset x the sum of each
    # row's weights (mod 2^32) to sum x w, instead of summing each row's weights on every call.
    offset = -x.qparams.zero_point
    sums = w.data.astype(np.int64).sum(axis=1) * offset + (b.data.astype(np.int64) if b is not None else 0)
    kernel_sum = _constant(op, "kernel_sum", ((sums + 2**31) % 2**32 - 2**31).astype(np.int32))
    if len(mults) == 1:  # ExecuTorch's own operator: one multiplier and shift as IntLists
        args = [x, w, b, kernel_sum, offset, 0, y.qparams.zero_point, mults, shifts, high, low]
        return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_linear"], args, [])
    # kiln's per-channel form: the multipliers and shifts as constant Int tensors (the program's
    # constant data, flash) rather than IntLists of one boxed value each.
    tables = (_constant(op, name, np.array(v, np.int32)) for name, v in (("multipliers", mults), ("shifts", shifts)))
    args = [x, w, b, kernel_sum, offset, 0, y.qparams.zero_point, *tables, high, low]
    return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_linear_per_channel"], args, [])


def _linear_s16(op: Op, mults: list[int], shifts: list[int]) -> IntegerCall | str:
    """kiln's quantized_linear_s16 (arm_fully_connected_s16): zero points 0, the bias as int64."""
    x, w, b, y = op.arg("input"), op.arg("weight"), op.arg("bias"), op.output
    if x.qparams.zero_point or y.qparams.zero_point or max(shifts) > 14 or x.shape[-1] > S16_MAX_INNER:
        return "its int16 activations have zero points, or its scales or input size are beyond int64's sums"
    bias = None if b is None else _constant(op, "bias_s64", b.data.astype(np.int64))
    low, high = _activation_range(op, INT16)
    return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_linear_s16"], [x, w, bias, mults, shifts, high, low], [])


def _conv_multipliers(op: Op, activations: str) -> tuple[list[int], list[int]] | str:
    """A 2-D convolution's multipliers and shifts (_multipliers of each output channel's ratio),
    or why it has no integer kernel."""
    if (why := _weighted(op, activations=activations)) is not None:
        return why
    x, w, y = op.arg("input"), op.arg("weight"), op.output
    if len(x.shape) != 4 or isinstance(op.arg("padding"), str):
        return "it is not a 2-D convolution of a 4-D input with numeric padding"
    ratios = float(x.qparams.scale) * _weight_scales(w, w.shape[0]) / float(y.qparams.scale)
    return _multipliers(ratios)


def _conv(op: Op) -> IntegerCall | str:
    if _per_tensor(op.arg("input"), "int16"):
        return _conv_s16(op)
    if isinstance(found := _conv_multipliers(op, "int8"), str):
        return found
    x, w, b, y = op.arg("input"), op.arg("weight"), op.arg("bias"), op.output
    groups, channels, out_channels = op.arg("groups"), x.shape[1], w.shape[0]
    mults, shifts = (_constant(op, name, np.array(v, np.int32)) for name, v in zip(("multipliers", "shifts"), found))
    geometry = [list(pair(op.arg(a))) for a in ("stride", "padding", "dilation")]
    offsets = [-x.qparams.zero_point, y.qparams.zero_point]
    scratch = _constant(op, "scratch", np.zeros(0, np.int8))
    low, high = _activation_range(op)
    if groups == channels > 1 and out_channels % channels == 0:  # depthwise: weight IHWO
        weight = _constant(op, "weight_ihwo", w.data.transpose(1, 2, 3, 0))
        args = [x, weight, b, *geometry, out_channels // channels, *offsets, mults, shifts, low, high, scratch]
        return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_depthwise_conv2d"], args, [])
    weight = _constant(op, "weight_ohwi", w.data.transpose(0, 2, 3, 1))
    args = [x, weight, b, *geometry, *offsets, mults, shifts, low, high, scratch]
    return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_conv2d"], args, [])


def _conv_s16(op: Op) -> IntegerCall | str:
    """kiln's quantized_conv2d_s16 or quantized_depthwise_conv2d_s16 (arm_convolve_s16,
    arm_depthwise_conv_s16): int16 activations of zero point 0, the bias as int64, the
    multipliers and shifts IntLists."""
    if isinstance(found := _conv_multipliers(op, "int16"), str):
        return found
    x, w, b, y = op.arg("input"), op.arg("weight"), op.arg("bias"), op.output
    groups, channels, out_channels = op.arg("groups"), x.shape[1], w.shape[0]
    mults, shifts = found
    if x.qparams.zero_point or y.qparams.zero_point or max(shifts) > 14 or math.prod(w.shape[1:]) > S16_MAX_INNER:
        return "its int16 activations have zero points, or its scales or windows are beyond int64's sums"
    bias = None if b is None else _constant(op, "bias_s64", b.data.astype(np.int64))
    geometry = [list(pair(op.arg(a))) for a in ("stride", "padding", "dilation")]
    requantization = [mults, shifts, *_activation_range(op, INT16)]
    if groups == channels > 1 and out_channels % channels == 0:  # depthwise: weight IHWO
        weight = _constant(op, "weight_ihwo", w.data.transpose(1, 2, 3, 0))
        args = [x, weight, bias, *geometry, out_channels // channels, *requantization]
        return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_depthwise_conv2d_s16"], args, [])
    weight = _constant(op, "weight_ohwi", w.data.transpose(0, 2, 3, 1))
    args = [x, weight, bias, *geometry, *requantization]
    return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_conv2d_s16"], args, [])


def _add(op: Op) -> IntegerCall | str:
    """ExecuTorch's quantized_add parameters: each operand scaled by scale / (2 max scale) after
    its << 20, the sum by 2 max scale / (output scale 2^20); sub negates the second multiplier.
    int16 operands and result of zero point 0: kiln's quantized_add_s16, the same with << 15
    (arm_elementwise_add_s16)."""
    a, b, y = op.arg("self"), op.arg("other"), op.output
    s16 = all(_per_tensor(v, "int16") and v.qparams.zero_point == 0 for v in (a, b, y))
    if not (s16 or all(_per_tensor_int8(v) for v in (a, b, y))):
        return "its operands or result are not int8 tensors quantized per tensor (or int16 of zero point 0)"
    if a.shape != b.shape or op.arg("alpha") != 1:
        return "its operands differ in shape (broadcast) or it has an alpha"
    left_shift = ADD_LEFT_SHIFT_S16 if s16 else ADD_LEFT_SHIFT
    s1, s2, s_out = float(a.qparams.scale), float(b.qparams.scale), float(y.qparams.scale)
    twice = 2 * max(s1, s2)
    (m1, sh1), (m2, sh2) = quantize_multiplier(s1 / twice), quantize_multiplier(s2 / twice)
    m_out, sh_out = quantize_multiplier(twice / (s_out * (1 << left_shift)))
    spans = [(q.qmin - q.zero_point, q.qmax - q.zero_point) for q in (a.qparams, b.qparams)]
    worst = max(abs(d1 * s1 + d2 * s2) for d1 in spans[0] for d2 in spans[1]) * (1 << left_shift) / twice
    if not -31 <= sh_out <= 31 or worst * 2.0**sh_out >= 2**31:
        return f"its output scale {s_out:.3g} against operand scales {s1:.3g}, {s2:.3g} overflows the int32 sum"
    if op.target == aten.sub.Tensor:
        m2 = -m2
    if s16:
        args = [a, m1, sh1, b, m2, sh2, m_out, sh_out, *_activation_range(op, INT16)]
        return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_add_s16"], args, [])
    low, high = _activation_range(op)
    args = [a, a.qparams.zero_point, m1, sh1, b, b.qparams.zero_point, m2, sh2]
    args += [y.qparams.zero_point, m_out, sh_out, low, high]
    return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_add"], args, [])


def _same_quantization(op: Op, x) -> bool:
    return _per_tensor_int8(x) and _per_tensor_int8(op.output) and x.qparams == op.output.qparams


def _same_s16(op: Op, x) -> bool:
    """int16 input and output of one quantization, zero point 0 (CMSIS-NN's s16 pooling)."""
    y = op.output
    return _per_tensor(x, "int16") and _per_tensor(y, "int16") and x.qparams == y.qparams and not x.qparams.zero_point


def _pad_call(op: Op, x: Value, widths: list[int], value: float) -> tuple[Kernel, list, Value] | str:
    """cortex_m::pad of x by PyTorch's pad list (last dim first, (before, after) pairs), the
    value quantized as kiln's quantize kernel does."""
    if len(x.shape) > 4 or len(widths) % 2 or len(widths) > 2 * len(x.shape) or min(widths, default=0) < 0:
        return "it pads more than 4 dims, or crops"
    pre, post = [0] * 4, [0] * 4
    for i in range(len(widths) // 2):
        pre[3 - i], post[3 - i] = widths[2 * i], widths[2 * i + 1]
    qp: QParams = x.qparams
    fill = _quantized(value, qp)
    shape = list(x.shape)
    for d in range(len(shape)):
        shape[d] += pre[4 - len(shape) + d] + post[4 - len(shape) + d]
    padded = Value(f"{op.name}_padded", tuple(shape), "int8", qp)
    return INTEGER_KERNELS["cortex_m::pad"], [x, pre, post, fill], padded


def _pad(op: Op) -> IntegerCall | str:
    x = op.arg("self")
    if not _same_quantization(op, x):
        return "its input and output are not int8 of one quantization"
    if op.target == aten.pad.default and op.arg("mode") != "constant":
        return f"its mode is {op.arg('mode')!r}, not constant"
    value = op.arg("value")
    call = _pad_call(op, x, list(op.arg("pad")), float(value or 0.0))
    if isinstance(call, str):
        return call
    kernel, args, _ = call
    return IntegerCall(kernel, args, [])


def _pool(op: Op, x: Value, kernel, stride, padding, ceil_mode: bool, count_include_pad: bool) -> IntegerCall | str:
    (kh, kw), (sh, sw), (ph, pw) = pair(kernel), pair(stride or kernel), pair(padding)
    if x.dtype == "int16":  # kiln's quantized_avg_pool2d_s16 (arm_avgpool_s16)
        if count_include_pad and (ph or pw):
            return "it counts padding into the windows of an int16 input"
        args = [x, [kh, kw], [sh, sw], [ph, pw], bool(ceil_mode), *_activation_range(op, INT16)]
        return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_avg_pool2d_s16"], args, [])
    before = []
    if count_include_pad and (ph or pw):  # the padding's zero points count: pad first (ExecuTorch's form)
        if ceil_mode:
            return "it counts padding into a ceil-mode window"
        call = _pad_call(op, x, [pw, pw, ph, ph], 0.0)
        if isinstance(call, str):
            return call
        before, x, ph, pw = [call], call[2], 0, 0
    qp = x.qparams
    multiplier, shift = quantize_multiplier(float(qp.scale))
    scratch = _constant(op, "scratch", np.zeros(0, np.int8))
    args = [x, [kh, kw], [sh, sw], [ph, pw], bool(ceil_mode), qp.zero_point, multiplier, shift, scratch]
    return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_avg_pool2d"], args, before)


def _avg_pool(op: Op) -> IntegerCall | str:
    x = op.arg("self")
    if not (_same_quantization(op, x) or _same_s16(op, x)) or len(x.shape) != 4:
        return "its input is not a 4-D int8 (or int16 of zero point 0) tensor of the output's quantization"
    if op.arg("divisor_override") is not None:
        return "it has a divisor_override"
    return _pool(
        op,
        x,
        op.arg("kernel_size"),
        op.arg("stride"),
        op.arg("padding"),
        op.arg("ceil_mode"),
        op.arg("count_include_pad"),
    )


def _adaptive_avg_pool(op: Op) -> IntegerCall | str:
    x = op.arg("self")
    if not (_same_quantization(op, x) or _same_s16(op, x)) or len(x.shape) != 4:
        return "its input is not a 4-D int8 (or int16 of zero point 0) tensor of the output's quantization"
    (h, w), (oh, ow) = x.shape[2:], pair(op.arg("output_size"))
    if h % oh or w % ow:
        return f"its {oh}x{ow} windows of a {h}x{w} input differ in size"
    return _pool(op, x, [h // oh, w // ow], [h // oh, w // ow], [0, 0], False, False)


def softmax_parameters(scale: float) -> tuple[int, int, int]:
    """arm_softmax_s8's (multiplier, shift, diff_min) for an input scale, as ExecuTorch's pass
    derives them: the scale in Q5.26, and the lowest difference whose exponential counts."""
    multiplier, shift = quantize_multiplier(min(scale * 2.0 ** (31 - SOFTMAX_INPUT_BITS), 2.0**31 - 1))
    diff_min = -math.floor((2**SOFTMAX_INPUT_BITS - 1) * 2.0 ** (31 - SOFTMAX_INPUT_BITS) / 2.0**shift)
    return multiplier, shift, diff_min


def _softmax_s16(op: Op) -> IntegerCall | str:
    """kiln's softmax_s16 (arm_softmax_s16): the input scale in steps of 10 / 65535, the tables
    of exp and 1 / (1 + x) as constants."""
    x, y = op.arg("self"), op.output
    if op.arg("dim") not in (-1, len(x.shape) - 1) or x.shape[-1] > S16_SOFTMAX_MAX_ROW:
        return "it is not along the last dim, or its rows are longer than 2^16"
    if not (math.isclose(y.qparams.scale, 1.0 / 32768, abs_tol=1e-12) and y.qparams.zero_point == 0):
        return "its int16 output is not quantized with scale 1/32768 and zero point 0"
    multiplier, shift = quantize_multiplier(float(x.qparams.scale) * 65535 / S16_EXP_RANGE)
    if not -31 <= shift <= 15:
        return f"its input scale {float(x.qparams.scale):.3g} is beyond the s16 tables' range"
    exp, one_by_one = (_constant(op, n, t) for n, t in zip(("exp_lut", "one_by_one_lut"), softmax_s16_tables()))
    return IntegerCall(INTEGER_KERNELS["cortex_m::softmax_s16"], [x, -1, multiplier, shift, exp, one_by_one], [])


def _softmax(op: Op) -> IntegerCall | str:
    x, y = op.arg("self"), op.output
    if _per_tensor(x, "int16") and _per_tensor(y, "int16"):
        return _softmax_s16(op)
    if not (_per_tensor_int8(x) and _per_tensor_int8(y)):
        return "its input or output is not int8 per tensor"
    if op.arg("dim") not in (-1, len(x.shape) - 1):
        return "it is not along the last dim"
    if not (math.isclose(y.qparams.scale, SOFTMAX_SCALE, abs_tol=1e-12) and y.qparams.zero_point == SOFTMAX_ZERO_POINT):
        return "its output is not quantized with scale 1/256 and zero point -128"
    multiplier, shift, diff_min = softmax_parameters(float(x.qparams.scale))
    if not 0 <= shift <= 30:
        return f"its input scale {float(x.qparams.scale):.3g} is beyond the Q5.26 range"
    args = [x, -1, x.qparams.zero_point, SOFTMAX_ZERO_POINT, multiplier, shift, diff_min]
    return IntegerCall(INTEGER_KERNELS["cortex_m::softmax"], args, [])


def _moved(op: Op) -> IntegerCall | str:
    """A reshape, slice, select, expand, flip or gather (embedding, index_select) moves values and
    computes none: its movement kernel (aten::view_copy, slice_copy, ..., which copy elements of any
    type) on the integers; a gather's indices pass as they are."""
    x, kernel = op.inputs[0], kernel_for(op)
    moved = _per_tensor_int8(x) and x.qparams == op.output.qparams
    if not moved or kernel is None or any(v.qparams is not None for v in op.inputs[1:]):
        return "its input and output are not int8 of one quantization"
    return IntegerCall(kernel, [argument(op, a) for a in kernel.schema_args], [])


def _transpose_conv(op: Op) -> IntegerCall | str:
    """ExecuTorch's parameters: weight [C_in, C_out, kh, kw] as OHWI, one multiplier and shift
    per output channel (input scale times weight scale over output scale)."""
    if (why := _weighted(op, axis=1)) is not None:
        return why
    x, w, b, y = op.arg("input"), op.arg("weight"), op.arg("bias"), op.output
    if len(x.shape) != 4 or op.arg("groups") != 1:
        return "it is not a 2-D transposed convolution of one group"
    out_channels = w.shape[1]
    ratios = float(x.qparams.scale) * _weight_scales(w, out_channels) / float(y.qparams.scale)
    if isinstance(found := _multipliers(ratios), str):
        return found
    mults, shifts = (_constant(op, name, np.array(v, np.int32)) for name, v in zip(("multipliers", "shifts"), found))
    geometry = [list(pair(op.arg(a))) for a in ("stride", "padding", "output_padding", "dilation")]
    weight = _constant(op, "weight_ohwi", w.data.transpose(1, 2, 3, 0))
    scratch = _constant(op, "scratch", np.zeros(0, np.int8))
    low, high = _activation_range(op)
    args = [x, weight, b, *geometry, -x.qparams.zero_point, y.qparams.zero_point, mults, shifts, low, high]
    return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_transpose_conv2d"], [*args, scratch, scratch], [])


def _max_pool(op: Op) -> IntegerCall | str:
    x = op.arg("self")
    if not (_same_quantization(op, x) or _same_s16(op, x)) or len(x.shape) != 4:
        return "its input is not a 4-D int8 (or int16 of zero point 0) tensor of the output's quantization"
    kernel = list(pair(op.arg("kernel_size")))
    stride = list(pair(op.arg("stride"))) if op.arg("stride") else kernel
    geometry = [
        kernel,
        stride,
        list(pair(op.arg("padding"))),
        list(pair(op.arg("dilation"))),
        bool(op.arg("ceil_mode")),
    ]
    if x.dtype == "int16":  # kiln's quantized_max_pool2d_s16 (arm_max_pool_s16)
        args = [x, *geometry, *_activation_range(op, INT16)]
        return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_max_pool2d_s16"], args, [])
    zp = x.qparams.zero_point
    return IntegerCall(
        INTEGER_KERNELS["cortex_m::quantized_max_pool2d"], [x, *geometry, zp, zp, *_activation_range(op)], []
    )


def _extremum(op: Op) -> IntegerCall | str:
    """minimum and maximum of integers where operands and result share one quantization (as
    kiln's quantizer makes them): the quantize is monotone, so it commutes."""
    a, b = op.arg("self"), op.arg("other")
    if not (isinstance(b, Value) and _same_quantization(op, a) and _same_quantization(op, b)):
        return "its operands and result are not int8 tensors of one quantization"
    if op.activation is not None:
        return "it has a fused activation"
    name = "cortex_m::minimum" if op.target == aten.minimum.default else "cortex_m::maximum"
    return IntegerCall(INTEGER_KERNELS[name], [a, b], [])


def _where(op: Op) -> IntegerCall | str:
    """A select by a bool condition between operands of the output's quantization (as kiln's
    quantizer makes them) computes nothing: aten::where on the integers, int8 or int16."""
    a, b, y, kernel = op.arg("self"), op.arg("other"), op.output, kernel_for(op)
    same = all(_per_tensor(v, y.dtype) and v.qparams == y.qparams for v in (a, b))
    if not (same and y.dtype in ("int8", "int16")) or kernel is None:
        return "its operands and result are not int8 (or int16) tensors of one quantization"
    return IntegerCall(kernel, [argument(op, n) for n in kernel.schema_args], [])


def _transpose(op: Op) -> IntegerCall | str:
    """permute and transpose, which move values and compute none: the permutation of their
    movement kernel's arguments."""
    x, kernel = op.arg("self"), kernel_for(op)
    if not _same_quantization(op, x) or kernel is None:
        return "its input and output are not int8 of one quantization"
    dims = [argument(op, a) for a in kernel.schema_args][1]
    return IntegerCall(INTEGER_KERNELS["cortex_m::transpose"], [x, [d % len(x.shape) for d in dims]], [])


def _rescale(s_in: float, s_out: float, headroom: int) -> tuple[int, int] | None:
    """(multiplier, shift) for s_in / s_out applied to integers of `headroom` bits (an int8
    difference: 9), or None when the shifted integer could pass int32 or the ratio is below 2^-31."""
    multiplier, shift = quantize_multiplier(s_in / s_out)
    return (multiplier, shift) if -31 <= shift <= 31 - headroom else None


def _mul(op: Op) -> IntegerCall | str:
    """ExecuTorch's quantized_mul: the product of the operands less their zero points, scaled by
    the operands' scales over the output's."""
    a, b, y = op.arg("self"), op.arg("other"), op.output
    if all(_per_tensor(v, "int16") and not v.qparams.zero_point for v in (a, b, y)):
        return _mul_s16(op)
    if not all(_per_tensor_int8(v) for v in (a, b, y)):
        return "its operands or result are not int8 tensors quantized per tensor (or one is a number)"
    if op.activation is not None:
        return "it has a fused activation, which quantized_mul does not clamp"
    found = _rescale(float(a.qparams.scale) * float(b.qparams.scale), float(y.qparams.scale), 17)
    if found is None:
        return "its operand scales' product over its output scale overflows the int32 product"
    args = [a, a.qparams.zero_point, b, b.qparams.zero_point, y.qparams.zero_point, *found]
    return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_mul"], args, [])


def _mul_s16(op: Op) -> IntegerCall | str:
    """kiln's quantized_mul_s16 (arm_elementwise_mul_s16): one multiplier, the operands' scales
    over the output's, on the int16 product (within 2^30: no left shift), clamped to the fused
    activation's range."""
    a, b, y = op.arg("self"), op.arg("other"), op.output
    found = _rescale(float(a.qparams.scale) * float(b.qparams.scale), float(y.qparams.scale), 31)
    if found is None:
        return "its operand scales' product over its output scale is 1 or more, or below 2^-31"
    return IntegerCall(
        INTEGER_KERNELS["cortex_m::quantized_mul_s16"], [a, b, *found, *_activation_range(op, INT16)], []
    )


def _mean(op: Op) -> IntegerCall | str:
    """kiln's quantized_mean: int8 (or int16) input and output per tensor, over trailing dims of
    at most 2^15 values; the input scale over the output scale times the count as a multiplier
    and shift whose product with the sum rounds once."""
    x, y = op.arg("self"), op.output
    dtype = x.dtype if x.dtype in ("int8", "int16") else None
    if not (dtype and _per_tensor(x, dtype) and _per_tensor(y, dtype)) or op.arg("dtype") is not None:
        return "its input or output is not int8 (or int16) per tensor, or it has a dtype"
    dims = op.arg("dim")
    dims = list(range(len(x.shape))) if dims is None or dims == [] else list(dims)
    try:
        reduced = mean_count(x.shape, dims)
    except HostError as error:
        return f"it is not a mean over the trailing dims of at most 2^15 values ({error})"
    count = math.prod(x.shape[len(x.shape) - reduced :])
    multiplier, shift = quantize_multiplier(float(x.qparams.scale) / (float(y.qparams.scale) * count))
    if not 1 <= 31 - shift <= 62:
        return "its input scale over its output scale times its count is beyond 2^30 or below 2^-31"
    args = [x, dims, bool(op.arg("keepdim")), x.qparams.zero_point, y.qparams.zero_point, multiplier, shift]
    return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_mean"], args, [])


def _cat(op: Op) -> IntegerCall | str:
    """kiln's quantized_cat: each input rescaled from its quantization to the output's."""
    tensors, y = list(op.arg("tensors")), op.output
    if not all(_per_tensor_int8(v) for v in (*tensors, y)):
        return "its inputs or result are not int8 tensors quantized per tensor"
    if op.activation is not None:
        return "it has a fused activation"
    found = [_rescale(float(t.qparams.scale), float(y.qparams.scale), 9) for t in tensors]
    if None in found:
        return "an input's scale over the output's is beyond 2^22 or below 2^-31"
    zero_points = [t.qparams.zero_point for t in tensors]
    args = [tensors, op.arg("dim"), zero_points, [m for m, _ in found], [s for _, s in found], y.qparams.zero_point]
    return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_cat"], args, [])


def _matmul(op: Op) -> IntegerCall | str:
    """ExecuTorch's quantized_batch_matmul of two int8 operands of equal leading dims (kiln's
    quantized_batch_matmul_s16 for int16 ones, CMSIS-NN's s16 form: zero points 0), the right
    one transposed first (cortex_m::transpose; a constant's transposition is a constant)."""
    a, b, y = op.inputs[0], op.inputs[1], op.output
    dtype = y.dtype if y.dtype in ("int8", "int16") else None
    if not all(isinstance(v, Value) and v.dtype == dtype and v.qparams and v.qparams.axis is None for v in (a, b, y)):
        return "its operands or result are not int8 (or int16) tensors quantized per tensor"
    if len(a.shape) < 2 or len(a.shape) != len(b.shape) or a.shape[:-2] != b.shape[:-2]:
        return "its operands are not matrices of the same leading dims (a vector, or batch broadcasting)"
    ratio = float(a.qparams.scale) * float(b.qparams.scale) / float(y.qparams.scale)
    if isinstance(found := _multipliers([ratio]), str):
        return found
    (multiplier,), (shift,) = found
    if dtype == "int16" and (any(v.qparams.zero_point for v in (a, b, y)) or shift > 14 or a.shape[-1] > S16_MAX_INNER):
        return "its int16 operands have zero points, or their product's scale or inner size is beyond int64's sums"
    perm = [*range(len(b.shape) - 2), len(b.shape) - 1, len(b.shape) - 2]
    transposed = (*b.shape[:-2], b.shape[-1], b.shape[-2])
    data = np.ascontiguousarray(b.data.transpose(perm)) if b.is_constant else None
    b_t = Value(f"{op.name}_rhs_transposed", transposed, dtype, b.qparams, data=data)
    before = [] if b.is_constant else [(INTEGER_KERNELS["cortex_m::transpose"], [b, perm], b_t)]
    scratch = _constant(op, "scratch", np.zeros(0, np.int8))
    if dtype == "int16":
        low, high = max(y.qparams.qmin, -(2**15)), min(y.qparams.qmax, 2**15 - 1)
        args = [a, b_t, multiplier, shift, low, high, scratch]
        return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_batch_matmul_s16"], args, before)
    args = [a, -a.qparams.zero_point, b_t, -b.qparams.zero_point, y.qparams.zero_point, multiplier, shift, scratch]
    return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_batch_matmul"], args, before)


def _table(op: Op) -> IntegerCall | str:
    """A unary function of one int8 value as ExecuTorch's quantized_activation: its 256-entry
    table is the float path itself (dequantize, the op's float kernel, its fused activation,
    quantize: kiln's kernels, as the program builder would call them) on every int8 value."""
    x, y, kernel = op.inputs[0], op.output, kernel_for(op)
    if not (_per_tensor_int8(x) and _per_tensor_int8(y)) or len(op.inputs) != 1:
        return "its input or output is not int8 per tensor"
    if kernel is None:
        return "kiln has no float kernel to build its table from"
    values = np.arange(-128, 128, dtype=np.int8)
    real = dequantize_array(values, x.qparams)
    args = [real if argument(op, a) is x else argument(op, a) for a in kernel.schema_args]
    with np.errstate(all="ignore"):  # log of a negative: NaN, which the quantize makes 0 as at run time
        result = kernel.run(*args, *([np.float32] if kernel.out_dtype else []))
        if op.activation is not None:
            low, high = op.activation
            result = KERNELS[aten.hardtanh.default].run(result, float(max(low, -3.0e38)), float(min(high, 3.0e38)))
        qp = y.qparams
        lut = quantize_array(np.asarray(result, np.float32), qp.scale, qp.zero_point, qp.qmin, qp.qmax, 1)
    return IntegerCall(INTEGER_KERNELS["cortex_m::quantized_activation"], [x, _constant(op, "lut", lut)], [])


RULES = {
    **{t: _moved for t in MOVED_OPS},
    aten.linear.default: _linear,
    aten.conv2d.default: _conv,
    aten.add.Tensor: _add,
    aten.sub.Tensor: _add,
    aten.avg_pool2d.default: _avg_pool,
    aten.adaptive_avg_pool2d.default: _adaptive_avg_pool,
    aten._adaptive_avg_pool2d.default: _adaptive_avg_pool,
    aten.softmax.int: _softmax,
    aten._softmax.default: _softmax,
    aten.constant_pad_nd.default: _pad,
    aten.pad.default: _pad,
    aten.conv_transpose2d.input: _transpose_conv,
    aten.max_pool2d.default: _max_pool,
    aten.where.self: _where,
    aten.minimum.default: _extremum,
    aten.maximum.default: _extremum,
    **{t: _transpose for t in PERMUTE_OPS},
    aten.mul.Tensor: _mul,
    aten.mean.dim: _mean,
    aten.cat.default: _cat,
    **{t: _matmul for t in MATMUL_OPS},
    **{t: _table for t in TABLE_OPS | FUSIBLE_ACTIVATIONS},
}


def integer_call(op: Op) -> IntegerCall | str:
    """The integer kernel call for quantized op `op`, or why it has none."""
    rule = RULES.get(op.target)
    if rule is None:
        return "kiln has no integer kernel for it"
    return rule(op)
