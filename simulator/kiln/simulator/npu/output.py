"""What the output stage of both families shares: the rescale by the OFM's rounding mode
(recorded in the coverage) and the 16-bit interpolating LUT. Each family's store, which
applies the zero point, activation and clipping and writes the OFM, is its own
(kiln.simulator.npu.u55.output, kiln.simulator.npu.u85.output)."""

from __future__ import annotations

import numpy as np

from kiln.simulator.npu.arithmetic import rescale, saturate
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.registers import ROUND_FLOOR, ROUNDING_NAMES

_RESCALE_NAMES = {**ROUNDING_NAMES, ROUND_FLOOR: "FLOOR"}

LUT16_ENTRIES = 512
LUT16_STEP_BITS = 7  # 65536 inputs / 512 entries = 128 inputs per entry


def scale_values(ctx: Context, values: np.ndarray, multiplier, shift) -> np.ndarray:
    return rescale(values, multiplier, shift, output_rounding(ctx.coverage, ctx.registers))


def output_rounding(coverage, registers) -> int:
    """The rounding of the OFM's rescale (recorded in `coverage`, anything with Coverage's hit())."""
    rounding = registers.rounding()
    coverage.hit("rounding", _RESCALE_NAMES[rounding])
    return rounding


def interpolate16(values: np.ndarray, table: bytes) -> np.ndarray:
    """The 16-bit interpolating LUT: `values` saturated to int16 select one of 512 32-bit
    entries (base in bits 15..0, slope in bits 31..16, both signed) by their top 9 bits;
    the result, base * 128 + slope * (low 7 bits), is 128 times the interpolated value."""
    v = saturate(values, np.int16) + 32768
    entries = np.frombuffer(table, dtype="<u4").astype(np.int64)
    entry = entries[v >> LUT16_STEP_BITS]
    base = (entry & 0xFFFF) - ((entry & 0x8000) << 1)
    slope = (entry >> 16) - ((entry >> 16 & 0x8000) << 1)
    frac = v & ((1 << LUT16_STEP_BITS) - 1)
    return (base << LUT16_STEP_BITS) + slope * frac
