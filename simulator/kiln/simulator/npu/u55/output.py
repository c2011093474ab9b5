"""The Ethos-U55/U65's output stage: zero point, activation (TANH, SIGMOID or a LUT from the
SHRAM), clipping, and the store of the OFM."""

from __future__ import annotations

import numpy as np

from kiln.errors import NotModelled
from kiln.simulator.npu import activation
from kiln.simulator.npu.arithmetic import rescale, saturate
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.output import LUT16_ENTRIES, LUT16_STEP_BITS, interpolate16
from kiln.simulator.npu.registers import FORMAT_NHCWB16, RegisterError

ACT_NONE, ACT_TANH, ACT_SIGMOID = 0, 3, 4
ACT_LUT_FIRST, ACT_LUT_LAST = 16, 23
CLIP_OFM, CLIP_UINT8, CLIP_INT8, CLIP_INT16 = 0, 2, 3, 5
_CLIP_DTYPES = {CLIP_UINT8: np.uint8, CLIP_INT8: np.int8, CLIP_INT16: np.int16}


def store(ctx: Context, values: np.ndarray) -> None:
    """values: (H, W, C) int64, already scaled (before the OFM zero point)."""
    regs = ctx.registers
    ofm = regs.feature_map("OFM")
    ctx.coverage.hit("ofm_precision", ofm.type_name)
    ctx.coverage.hit("format", "OFM NHCWB16" if ofm.layout == FORMAT_NHCWB16 else "OFM NHWC")
    function, clip_range, lo, hi = regs.activation()
    values = values + ofm.zero_point
    if function == ACT_NONE:
        ctx.coverage.hit("activation", "NONE")
        out = saturate(values, ofm.dtype)
        if np.dtype(ofm.dtype).itemsize < 4:
            out = np.clip(out, lo, hi)
    elif ACT_LUT_FIRST <= function <= ACT_LUT_LAST:
        out = _lut(ctx, values, function - ACT_LUT_FIRST, clip_range, ofm.dtype)
        out = saturate(np.clip(out, lo, hi), ofm.dtype)
    elif function in (ACT_TANH, ACT_SIGMOID):
        out = saturate(np.clip(_builtin(ctx, function, values, ofm), lo, hi), ofm.dtype)
    else:
        raise RegisterError(f"ACTIVATION: reserved function {function}")
    h, w, c = values.shape
    ctx.coverage.hit("tiles", "1 tile" if ofm.height0 >= h and ofm.width0 >= w else "2+ tiles")
    ctx.write_fm(ofm, range(h), range(w), range(c), out.astype(ofm.dtype))


def _builtin(ctx: Context, function: int, values: np.ndarray, ofm) -> np.ndarray:
    """TANH or SIGMOID (kiln.simulator.npu.activation). Modelled for what Vela emits, an
    int16 OFM with zero point 0; anything else faults rather than guess."""
    name = "TANH" if function == ACT_TANH else "SIGMOID"
    ctx.coverage.hit("activation", name)
    if np.dtype(ofm.dtype) != np.int16 or ofm.zero_point != 0:
        raise NotModelled(
            f"built-in activation {name} is modelled for an int16 OFM with zero point 0, "
            f"not {ofm.type_name} with zero point {ofm.zero_point}"
        )
    return activation.tanh(values) if function == ACT_TANH else activation.sigmoid(values)


def _lut(ctx: Context, values: np.ndarray, slot: int, clip_range: int, ofm_dtype) -> np.ndarray:
    bits = 8 * np.dtype(ofm_dtype).itemsize
    index_dtype = _CLIP_DTYPES.get(clip_range, ofm_dtype)
    if clip_range not in (CLIP_OFM,) and clip_range not in _CLIP_DTYPES:
        raise RegisterError(f"ACTIVATION: reserved clip range {clip_range}")
    if np.dtype(index_dtype).itemsize == 1 or bits == 32:
        ctx.coverage.hit("activation", "LUT8")
        index_dtype = index_dtype if np.dtype(index_dtype).itemsize == 1 else np.int8
        v = saturate(values, index_dtype)
        index = v - np.iinfo(index_dtype).min
        table = np.frombuffer(ctx.lut_bytes(slot, 256), dtype=np.dtype(index_dtype))
        return table[index].astype(np.int64)
    ctx.coverage.hit("activation", "LUT16")
    interpolated = interpolate16(values, ctx.lut_bytes(0, 4 * LUT16_ENTRIES))
    return rescale(interpolated, 1, LUT16_STEP_BITS, ctx.registers.rounding())
