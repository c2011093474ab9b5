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

from dataclasses import dataclass

import numpy as np

from kiln.errors import NotModelled
from kiln.simulator.npu.arithmetic import count_leading_zeros32, rescale, wrap
from kiln.simulator.npu.blockops import sample_bound
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.elementwise import mode_name, shift_right
from kiln.simulator.npu.featuremap import Plan
from kiln.simulator.npu.output import output_rounding
from kiln.simulator.npu.prepared import step
from kiln.simulator.npu.registers import FORMAT_NHCWB16, FeatureMap, RegisterError
from kiln.simulator.npu.u85 import registers as u85
from kiln.simulator.npu.u85.output import prepare_store

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


@dataclass(frozen=True)
class _Operand:
    """IFM or IFM2 as its registers give it: OP_SCALAR, a chaining buffer or a feature map in
    memory (kiln.simulator.npu.prepared)."""

    prefix: str  # "IFM" or "IFM2"
    fm: FeatureMap
    extent: tuple[int, int, int]  # the part of the OFM's shape it has (1 along a broadcast axis)
    scalar: np.ndarray | None  # OP_SCALAR minus the zero point, (1, 1, 1) int64, read-only
    chained: int | None  # the chaining buffer it is read from
    plan: Plan | None  # where memory holds it
    bound: int | None  # |value - zero point| at most, where the registers tell


def _prepare_operand(hits, ctx: Context, prefix: str, shape: tuple[int, int, int]) -> _Operand:
    regs = ctx.registers
    mode = regs.broadcast(prefix)
    fm = regs.feature_map(prefix)
    if mode == u85.BROADCAST_SCALAR:
        hits.hit("broadcast", f"{prefix} SCALAR")
        raw = regs.payload("OP_SCALAR")
        value = (raw - (1 << 32) if np.dtype(fm.dtype).kind == "i" and raw & (1 << 31) else raw) - fm.zero_point
        scalar = np.full((1, 1, 1), value, np.int64)
        scalar.flags.writeable = False
        return _Operand(prefix, fm, (1, 1, 1), scalar, None, None, abs(value))
    extent = list(shape)
    for bit, axis, name in _BROADCAST_AXES:
        if mode & bit:
            hits.hit("broadcast", f"{prefix} {name}")
            extent[axis] = 1
    storage = regs.storage(prefix)
    if storage == u85.STORAGE_CHAINED:
        hits.hit("chaining", f"{prefix} chained")
        return _Operand(prefix, fm, tuple(extent), None, regs.param(f"{prefix}_REGION") & 7, None, None)
    if storage == u85.STORAGE_TILE2X2:
        hits.hit("format", f"{prefix} NHCWB16" if fm.layout == FORMAT_NHCWB16 else f"{prefix} NHWC")
        plan = ctx.fm_plan(fm, range(extent[0]), range(extent[1]), range(extent[2]))
        return _Operand(prefix, fm, tuple(extent), None, None, plan, sample_bound(fm))
    raise NotModelled(f"{prefix}_PRECISION: {prefix} storage {u85.STORAGE_NAMES[storage]} is not modelled")


def _operand(ctx: Context, operand: _Operand) -> np.ndarray:
    """The operand minus its zero point, int64, broadcastable to the OFM's shape."""
    if operand.scalar is not None:
        return operand.scalar
    fm = operand.fm
    if operand.chained is not None:
        prefix = operand.prefix
        buffer = ctx.chained.get(operand.chained)
        if buffer is None:
            raise RegisterError(f"{prefix}: chaining buffer {operand.chained} holds no OFM")
        extent = operand.extent
        if any(have < want for have, want in zip(buffer.shape, extent)):
            raise RegisterError(f"{prefix}: chaining buffer of shape {buffer.shape} is smaller than {extent}")
        values = buffer[: extent[0], : extent[1], : extent[2]].astype(np.int64)  # a copy
    else:
        values = ctx.read_planned(fm, operand.plan, f"{operand.prefix} read", np.int64)
    ctx.coverage.hit("ifm_precision", fm.type_name)
    if fm.zero_point:
        values -= fm.zero_point
    return values


def _prepare_start(hits, ctx: Context, mode: int) -> tuple[str, tuple[int, int, int]]:
    """(the mode's name, the OFM's shape); refuses a reserved mode, an accumulator input and a
    disabled output."""
    regs = ctx.registers
    name = mode_name(hits, MODES, mode)
    acc, source, output, _ = regs.acc_format()
    if source != u85.ACC_INPUT_RESET or not output:
        raise NotModelled("NPU_OP_ELEMENTWISE: an accumulator input or disabled output is not modelled")
    return name, regs.ofm_shape()


def _prepare_scales(hits, ctx: Context, prefixes: tuple[str, ...]) -> tuple[tuple[int, int, int], ...]:
    """(multiplier, shift, rounding) of IFM_SCALE or IFM2_SCALE for each of `prefixes`, in order."""
    return tuple(ctx.registers.input_scale(prefix) for prefix in prefixes)


def _prepare_binary(hits, ctx: Context, name: str) -> int | None:
    """SHR's rounding (the OFM's), None for the other modes."""
    return ctx.registers.rounding() if name == "SHR" else None


def _prepare_output(hits, ctx: Context) -> tuple[int, int, int]:
    """(multiplier, shift, rounding) of the OFM's scale; refuses per-channel scaling."""
    regs = ctx.registers
    if not regs.global_scale():
        raise NotModelled("NPU_OP_ELEMENTWISE: per-channel scaling is not modelled")
    multiplier, shift = regs.ofm_scale()
    return multiplier, shift, output_rounding(hits, regs)


def prepare(ctx: Context, mode: int) -> _Elementwise:
    """NPU_OP_ELEMENTWISE of `mode` prepared with the registers of `ctx`
    (kiln.simulator.npu.prepared): a callable run(ctx)."""
    return _Elementwise(ctx, mode)


class _Elementwise:
    """One NPU_OP_ELEMENTWISE prepared: its stages (kiln.simulator.npu.prepared.Step) in the
    order the operation reaches them, each refusing there what its registers ask that is not
    modelled."""

    def __init__(self, ctx: Context, mode: int):
        self.start, started = step(_prepare_start, ctx, mode)
        if started is None:
            return
        self.name, self.shape = started
        self.a_step, self.a = step(_prepare_operand, ctx, "IFM", self.shape)
        if self.name not in UNARY:
            self.b_step, self.b = step(_prepare_operand, ctx, "IFM2", self.shape)
            self.bits = 8 * ctx.registers.feature_map("IFM").elem_size if self.a is not None else 0
            self.binary_step, self.shr_rounding = step(_prepare_binary, ctx, self.name)
        prefixes = ("IFM2", "IFM") if self.name == "LRELU" else ("IFM",) if self.name in UNARY else ("IFM", "IFM2")
        self.scales_step, self.scales = step(_prepare_scales, ctx, prefixes)
        self.output_step, self.output = step(_prepare_output, ctx)
        self.result_bound = self._result_bound()
        self.store = prepare_store(ctx, self.shape)

    def _result_bound(self) -> int | None:
        """A bound of |result| before OFM_SCALE, from the operands' bounds and scales; None
        where the mode or an operand leaves it open (rescale then works it out)."""
        if self.a is None or self.scales is None:
            return None
        if self.name in UNARY:
            return _scaled_bound(self.a.bound, *self.scales[-1]) if self.name == "ABS" else None
        combine = _BOUNDED.get(self.name)
        if combine is None or self.b is None:
            return None
        a, b = _scaled_bound(self.a.bound, *self.scales[0]), _scaled_bound(self.b.bound, *self.scales[1])
        return None if a is None or b is None else combine(a, b)

    def __call__(self, ctx: Context) -> None:
        coverage = ctx.coverage
        self.start.enter(coverage)
        self.a_step.enter(coverage)
        a = _operand(ctx, self.a)
        name = self.name
        if name in UNARY:
            self.scales_step.enter(coverage)
            scaled = rescale(a, *self.scales[-1], self.a.bound)
            if name == "LRELU":
                result = np.where(a < 0, rescale(a, *self.scales[0], self.a.bound), scaled)
            elif name == "NOT":
                result = np.invert(scaled)
            else:
                result = np.abs(scaled) if name == "ABS" else count_leading_zeros32(scaled)
        else:
            self.b_step.enter(coverage)
            b = _operand(ctx, self.b)
            self.scales_step.enter(coverage)
            a = rescale(a, *self.scales[0], self.a.bound)
            b = rescale(b, *self.scales[1], self.b.bound)
            self.binary_step.enter(coverage)
            result = _binary(name, a, b, self.bits, self.shr_rounding)
        self.output_step.enter(coverage)
        result = rescale(result, *self.output, self.result_bound)
        self.store(ctx, result if result.shape == self.shape else np.broadcast_to(result, self.shape))


# A bound of |a op b| from bounds of |a| and |b|, for the binary modes whose result it bounds.
_BOUNDED = {
    "ADD": lambda a, b: a + b,
    "SUB": lambda a, b: a + b,
    "MUL": lambda a, b: a * b,
    "MIN": max,
    "MAX": max,
    "CMP_EQ": lambda a, b: 1,
    "CMP_NE": lambda a, b: 1,
    "CMP_GE": lambda a, b: 1,
    "CMP_GT": lambda a, b: 1,
}


def _scaled_bound(bound: int | None, multiplier, shift, rounding: int) -> int | None:
    """A bound of |rescale(x, multiplier, shift, rounding)| for |x| <= bound, whatever the
    rounding (+2: rounding up, and TFL's further 2^30 for shifts past 31); None where `bound`
    is, or the scale is not one scalar (rescale's object path)."""
    if bound is None or not (isinstance(multiplier, int) and isinstance(shift, int) and 0 <= shift < 63):
        return None
    return ((bound * abs(multiplier)) >> shift) + 2


def _binary(name: str, a: np.ndarray, b: np.ndarray, bits: int, shr_rounding: int | None) -> np.ndarray:
    """The binary mode `name` of a and b (broadcast against each other), IFM elements of `bits`."""
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
    return shift_right(a, b, shr_rounding)
