"""Ethos-U85 NPU_OP_ELEMENTWISE: MUL, ADD, SUB, MIN, MAX, SHL, SHR, LSR, DIV, CMP_EQ/NE/GE/GT,
AND, OR, XOR, AND_NOT (binary) and ABS, CLZ, NOT, LRELU (unary) on the IFM and IFM2.

Operands: a feature map read from memory, a chaining buffer (storage CHAINED: the OFM
of an earlier operation whose OFM region named that buffer), or OP_SCALAR (broadcast
mode SCALAR, the 32-bit payload read as the operand's signedness). IFM_BROADCAST and
IFM2_BROADCAST repeat an operand along H (bit 0), W (bit 1) and C (bit 2).
Each operand has its zero point subtracted and is rescaled by IFM_SCALE or IFM2_SCALE
(multiplier, shift and rounding mode of its own); the result is rescaled by OFM_SCALE.
LRELU rescales non-negative values by IFM_SCALE and negative ones by IFM2_SCALE (alpha).
SHR rounds by OFM_SCALE's rounding mode (NATURAL: half up; otherwise toward minus
infinity); SHL and LSR work on the IFM's width (SHL wraps, LSR shifts zeros in); DIV truncates
toward zero (a zero divisor is not modelled); a comparison gives -1 (all bits set) or 0, the
NPU's bool (Vela 5.2.0's graphir_optimiser.cpp: "The internal boolean representation is -1
(true) and 0 (false)"; its SELECT is AND and AND_NOT with that mask); the bitwise modes act
on the two's-complement values.
"""

from __future__ import annotations

import numpy as np

from kiln.errors import NotModelled
from kiln.simulator.npu.arithmetic import count_leading_zeros32, rescale, wrap
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.elementwise import mode_name, shift_right
from kiln.simulator.npu.output import scale_values
from kiln.simulator.npu.registers import FORMAT_NHCWB16, RegisterError
from kiln.simulator.npu.u85 import registers as u85
from kiln.simulator.npu.u85.output import store

MODES = {
    0: "MUL",
    1: "ADD",
    2: "SUB",
    3: "MIN",
    4: "MAX",
    5: "LRELU",
    6: "ABS",
    7: "CLZ",
    8: "SHR",
    9: "SHL",
    10: "LSR",
    11: "DIV",
    16: "CMP_EQ",
    17: "CMP_NE",
    18: "CMP_GE",
    19: "CMP_GT",
    33: "AND",
    34: "OR",
    35: "XOR",
    36: "NOT",
    42: "AND_NOT",
}
UNARY = {"LRELU", "ABS", "CLZ", "NOT"}
_COMPARE = {"CMP_EQ": np.equal, "CMP_NE": np.not_equal, "CMP_GE": np.greater_equal, "CMP_GT": np.greater}
_BITWISE = {
    "AND": np.bitwise_and,
    "OR": np.bitwise_or,
    "XOR": np.bitwise_xor,
    "AND_NOT": lambda a, b: np.bitwise_and(a, np.invert(b)),
}
_BROADCAST_AXES = ((1, 0, "H"), (2, 1, "W"), (4, 2, "C"))


def operand(ctx: Context, prefix: str, shape: tuple[int, int, int]) -> np.ndarray:
    """IFM or IFM2 minus its zero point, int64, broadcastable to `shape`."""
    regs = ctx.registers
    mode = regs.broadcast(prefix)
    fm = regs.feature_map(prefix)
    if mode == u85.BROADCAST_SCALAR:
        ctx.coverage.hit("broadcast", f"{prefix} SCALAR")
        raw = regs.payload("OP_SCALAR")
        value = raw - (1 << 32) if np.dtype(fm.dtype).kind == "i" and raw & (1 << 31) else raw
        return np.full((1, 1, 1), value - fm.zero_point, np.int64)
    extent = list(shape)
    for bit, axis, name in _BROADCAST_AXES:
        if mode & bit:
            ctx.coverage.hit("broadcast", f"{prefix} {name}")
            extent[axis] = 1
    storage = regs.storage(prefix)
    if storage == u85.STORAGE_CHAINED:
        ctx.coverage.hit("chaining", f"{prefix} chained")
        buffer = ctx.chained.get(regs.param(f"{prefix}_REGION") & 7)
        if buffer is None:
            raise RegisterError(f"{prefix}: chaining buffer {regs.param(f'{prefix}_REGION') & 7} holds no OFM")
        if any(have < want for have, want in zip(buffer.shape, extent)):
            raise RegisterError(f"{prefix}: chaining buffer of shape {buffer.shape} is smaller than {tuple(extent)}")
        values = buffer[: extent[0], : extent[1], : extent[2]]
    elif storage == u85.STORAGE_TILE2X2:
        ctx.coverage.hit("format", f"{prefix} NHCWB16" if fm.layout == FORMAT_NHCWB16 else f"{prefix} NHWC")
        values = ctx.read_fm(fm, range(extent[0]), range(extent[1]), range(extent[2]), f"{prefix} read")
    else:
        raise NotModelled(f"{prefix}_PRECISION: {prefix} storage {u85.STORAGE_NAMES[storage]} is not modelled")
    ctx.coverage.hit("ifm_precision", fm.type_name)
    return values.astype(np.int64) - fm.zero_point


def _scaled(ctx: Context, prefix: str, values: np.ndarray) -> np.ndarray:
    multiplier, shift, rounding = ctx.registers.input_scale(prefix)
    return rescale(values, multiplier, shift, rounding)


def elementwise(ctx: Context, mode: int) -> None:
    regs = ctx.registers
    name = mode_name(ctx, MODES, mode)
    acc, source, output, _ = regs.acc_format()
    if source != u85.ACC_INPUT_RESET or not output:
        raise NotModelled("NPU_OP_ELEMENTWISE: an accumulator input or disabled output is not modelled")
    shape = regs.ofm_shape()
    a = operand(ctx, "IFM", shape)
    if name == "LRELU":
        result = np.where(a < 0, _scaled(ctx, "IFM2", a), _scaled(ctx, "IFM", a))
    elif name == "NOT":
        result = np.invert(_scaled(ctx, "IFM", a))
    elif name in UNARY:
        a = _scaled(ctx, "IFM", a)
        result = np.abs(a) if name == "ABS" else count_leading_zeros32(a)
    else:
        b = operand(ctx, "IFM2", shape)
        a, b = np.broadcast_arrays(_scaled(ctx, "IFM", a), _scaled(ctx, "IFM2", b))
        bits = 8 * regs.feature_map("IFM").elem_size
        result = _binary(ctx, name, a, b, bits)
    if not regs.global_scale():
        raise NotModelled("NPU_OP_ELEMENTWISE: per-channel scaling is not modelled")
    multiplier, shift = regs.ofm_scale()
    store(ctx, np.broadcast_to(scale_values(ctx, result, multiplier, shift), shape))


def _binary(ctx: Context, name: str, a: np.ndarray, b: np.ndarray, bits: int) -> np.ndarray:
    if name in _COMPARE:
        return -_COMPARE[name](a, b).astype(np.int64)
    if name in _BITWISE:
        return _BITWISE[name](a, b)
    if name == "DIV":
        if (b == 0).any():
            raise NotModelled("NPU_OP_ELEMENTWISE: DIV by zero is not modelled")
        quotient = np.abs(a) // np.abs(b)
        return np.where((a < 0) != (b < 0), -quotient, quotient)
    if name == "LSR":
        return wrap((a & ((1 << bits) - 1)) >> np.clip(b, 0, bits - 1), bits)
    if name == "ADD":
        return a + b
    if name == "SUB":
        return a - b
    if name == "MUL":
        return a * b
    if name == "MIN":
        return np.minimum(a, b)
    if name == "MAX":
        return np.maximum(a, b)
    if name == "SHL":
        return wrap(a << np.clip(b, 0, bits - 1), bits)
    return shift_right(a, b, ctx.registers.rounding())
