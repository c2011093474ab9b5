"""Ethos-U55/U65 NPU_OP_ELEMENTWISE: binary (MUL, ADD, SUB, MIN, MAX, SHR, SHL) and unary (LRELU, ABS,
CLZ) operations on the IFM (and IFM2, a tensor or a scalar, optionally broadcast).

Operands have their zero points subtracted. ADD/SUB on 8/16-bit operands scale the
operands first (IFM_SCALE_MODE 16BIT: each by its 16-bit OPA/OPB multiplier; OPA_32BIT /
OPB_32BIT: that operand by its 32-bit multiplier and shift, the other unscaled). The
result is scaled by OFM_SCALE when OFM_PRECISION selects global scaling (MUL, ADD, SUB,
ABS), LRELU scales only negative values, the others are not scaled.
"""

from __future__ import annotations

import numpy as np

from kiln.simulator.npu.arithmetic import count_leading_zeros32, rescale, wrap
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.elementwise import mode_name, shift_right
from kiln.simulator.npu.output import scale_values
from kiln.simulator.npu.registers import FORMAT_NHCWB16, RegisterError, signed16
from kiln.simulator.npu.u55.output import store
from kiln.simulator.npu.u55.registers import IFM_SCALE_16BIT, IFM_SCALE_OPA_32BIT, IFM_SCALE_OPB_32BIT

MODES = {0: "MUL", 1: "ADD", 2: "SUB", 3: "MIN", 4: "MAX", 5: "LRELU", 6: "ABS", 7: "CLZ", 8: "SHR", 9: "SHL"}
UNARY = {"LRELU", "ABS", "CLZ"}
UNSCALED_SHIFT = {8: 19, 16: 14}  # bits of the IFM -> alignment of the unscaled operand
_SCALE_MODES = {IFM_SCALE_16BIT: "16BIT", IFM_SCALE_OPA_32BIT: "OPA_32BIT", IFM_SCALE_OPB_32BIT: "OPB_32BIT"}


def _read(ctx: Context, prefix: str, shape: tuple[int, int, int]) -> np.ndarray:
    fm = ctx.registers.feature_map(prefix)
    ctx.coverage.hit("format", f"{prefix} NHCWB16" if fm.layout == FORMAT_NHCWB16 else f"{prefix} NHWC")
    ctx.coverage.hit("ifm_precision", fm.type_name)
    h, w, c = shape
    values = ctx.read_fm(fm, range(h), range(w), range(c), f"{prefix} read")
    return values.astype(np.int64) - fm.zero_point


def _ifm2(ctx: Context, shape: tuple[int, int, int]) -> tuple[np.ndarray, bool]:
    """(IFM2 minus zero point, broadcastable to shape; whether operands are reversed)."""
    regs = ctx.registers
    flags = regs.param("IFM2_BROADCAST")
    reversed_order = bool(flags & (1 << 6))
    if reversed_order:
        ctx.coverage.hit("ifm2", "reversed operands")
    if flags & (1 << 7):
        ctx.coverage.hit("ifm2", "scalar")
        dtype, _ = regs.ifm_dtype("IFM2")
        raw = regs.param("IFM2_SCALAR")
        value = raw if dtype.kind == "u" else signed16(raw)
        zero_point = regs.feature_map("IFM2").zero_point
        return np.full((1, 1, 1), value - zero_point, np.int64), reversed_order
    ctx.coverage.hit("ifm2", "tensor")
    h, w, c = shape
    for bit, axis in ((0, "H"), (1, "W"), (2, "C")):
        if flags & (1 << bit):
            ctx.coverage.hit("ifm2", f"broadcast {axis}")
    ifm2_shape = (1 if flags & 1 else h, 1 if flags & 2 else w, 1 if flags & 4 else c)
    return _read(ctx, "IFM2", ifm2_shape), reversed_order


def _input_scaling(ctx: Context, a: np.ndarray, b: np.ndarray, bits: int):
    regs = ctx.registers
    mode = regs.ifm_scale_mode()
    if mode not in _SCALE_MODES:
        raise RegisterError(f"IFM_PRECISION: reserved scale mode {mode}")
    if bits == 32:
        return a, b
    ctx.coverage.hit("ifm_scale_mode", _SCALE_MODES[mode])
    opa, opa_shift = regs.payload("OPA_SCALE"), regs.param("OPA_SCALE") & 0x3F
    if mode == IFM_SCALE_16BIT:
        return a * (opa & 0xFFFF), b * (regs.payload("OPB_SCALE") & 0xFFFF)
    # 32-bit mode: OPA_SCALE scales the selected operand; the other one is aligned to the
    # same fixed point, 2^(UNSCALED_SHIFT[bits]).
    rounding = (regs.param("IFM_PRECISION") >> 14) & 3
    aligned = UNSCALED_SHIFT[bits]
    if mode == IFM_SCALE_OPA_32BIT:
        return rescale(a, opa, opa_shift, rounding), b << aligned
    return a << aligned, rescale(b, opa, opa_shift, rounding)


def elementwise(ctx: Context, mode: int) -> None:
    regs = ctx.registers
    name = mode_name(ctx.coverage, MODES, mode)
    shape = regs.ofm_shape()
    a = _read(ctx, "IFM", shape)
    bits = 8 * regs.feature_map("IFM").elem_size
    global_scale = regs.global_scale()
    ctx.coverage.hit("ofm_scaling", "global" if global_scale else "per-channel")
    if name in UNARY:
        result = _unary(ctx, name, a, global_scale)
    else:
        b, reversed_order = _ifm2(ctx, shape)
        if reversed_order:
            a, b = b, a
        a, b = np.broadcast_arrays(a, b)
        result = _binary(ctx, name, a, b, bits, global_scale)
    store(ctx, np.broadcast_to(result, shape))


def _unary(ctx: Context, name: str, a: np.ndarray, global_scale: bool) -> np.ndarray:
    regs = ctx.registers
    multiplier, shift = regs.ofm_scale()
    if name == "CLZ":
        return count_leading_zeros32(a)
    if name == "ABS":
        result = np.abs(a)
        return scale_values(ctx, result, multiplier, shift) if global_scale else result
    # LRELU: non-negative values pass, negative ones are multiplied by OFM_SCALE (alpha)
    return np.where(a < 0, scale_values(ctx, a, multiplier, shift), a)


def _binary(ctx: Context, name: str, a: np.ndarray, b: np.ndarray, bits: int, global_scale: bool) -> np.ndarray:
    regs = ctx.registers
    if name in ("ADD", "SUB"):
        a, b = _input_scaling(ctx, a, b, bits)
        result = a + b if name == "ADD" else a - b
    elif name == "MUL":
        result = a * b
    elif name == "MIN":
        result = np.minimum(a, b)
    elif name == "MAX":
        result = np.maximum(a, b)
    elif name == "SHL":
        result = wrap(a << np.clip(b, 0, 31), 32)
    else:  # SHR
        result = shift_right(a, b, regs.rounding())
    if global_scale and name in ("ADD", "SUB", "MUL"):
        multiplier, shift = regs.ofm_scale()
        return scale_values(ctx, result, multiplier, shift)
    return result
