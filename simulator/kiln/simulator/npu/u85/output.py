"""The Ethos-U85's output stage: zero point, LUT activation, clipping, OFM transpose and
reverse, and the store (to memory, to a chaining buffer, or nowhere).

ACTIVATION's function (activation_function): LUT_NONE; LUT_U8_U8 and LUT_S8_S8 (256
entries of the OFM's type at table * 256 in the 2 KiB LUT RAM, indexed by the value
saturated to 8 bits); LUT_S8_S16 (256 int16 entries, table * 512) and LUT_S8_S32 (256
int32 entries, table * 1024); LUT_S16_S16 and LUT_S16_S32 (the whole LUT RAM: 512
interpolating entries as on the Ethos-U55/U65, kiln.simulator.npu.output.interpolate16;
S16 rounds the 128-times result back by OFM_SCALE's rounding mode, S32 keeps it). The
TANH/SIGMOID functions are not modelled (NotModelled). Clipping (clip_range B16) bounds the value
by ACTIVATION_MIN/MAX, read as 16-bit values of the OFM's signedness, before the LUT: Vela
derives those bounds from the type the LUT reads (its ethos_u85_register_cs_generator takes
the fused activation's IFM type), so a LUT_S16_S32 pass clips its 16-bit index and not its
32-bit result. The OFM's type then saturates the result.

The OFM registers give the shape before transposition; OFM_PRECISION's transpose writes
the values in the axis order it names (e.g. WHC: the OFM's rows are the input's
columns), its reverse mirrors one axis. Storage CHAINED keeps the output in chaining
buffer OFM_REGION for a later operation whose IFM or IFM2 storage is CHAINED with that
region; storage NONE writes nothing.
"""

from __future__ import annotations

import numpy as np

from kiln.errors import NotModelled
from kiln.simulator.npu.arithmetic import clamp, rescale, saturate
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.output import LUT16_ENTRIES, LUT16_STEP_BITS, interpolate16
from kiln.simulator.npu.registers import FORMAT_NHCWB16, RegisterError
from kiln.simulator.npu.u85 import registers as u85

LUT_NONE, LUT_U8_U8, LUT_S8_S8, LUT_S8_S16, LUT_S8_S32, LUT_S16_S16, LUT_S16_S32 = 0, 1, 4, 5, 7, 8, 9
FUNCTION_NAMES = {
    0: "LUT_NONE",
    1: "LUT_U8_U8",
    4: "LUT_S8_S8",
    5: "LUT_S8_S16",
    7: "LUT_S8_S32",
    8: "LUT_S16_S16",
    9: "LUT_S16_S32",
    10: "LUT_TANH",
    11: "LUT_SIGMOID",
}
_LUT8 = {
    LUT_U8_U8: (np.uint8, None),
    LUT_S8_S8: (np.int8, None),
    LUT_S8_S16: (np.int8, "<i2"),
    LUT_S8_S32: (np.int8, "<i4"),
}


def store(ctx: Context, values: np.ndarray) -> None:
    """values: (H, W, C) int64, scaled, before the OFM zero point (the shape the OFM
    registers give, before transposition)."""
    regs = ctx.registers
    ofm = regs.feature_map("OFM")
    ctx.coverage.hit("ofm_precision", ofm.type_name)
    function, table, clip, lo, hi = regs.activation()
    if function not in FUNCTION_NAMES:
        raise RegisterError(f"ACTIVATION: reserved function {function}")
    ctx.coverage.hit("activation", FUNCTION_NAMES[function])
    if ofm.zero_point:
        values = values + ofm.zero_point
    if clip:
        values = clamp(values, lo, hi)
    if function != LUT_NONE:
        values = _lut(ctx, values, function, table)
    out = saturate(values, ofm.dtype).astype(ofm.dtype)
    storage = regs.storage("OFM")
    ctx.coverage.hit("ofm_storage", u85.STORAGE_NAMES[storage])
    if storage == u85.STORAGE_NONE:
        return
    transpose, reverse = regs.transpose()
    if storage == u85.STORAGE_CHAINED:
        if transpose or reverse:
            raise RegisterError("OFM_PRECISION: a chained OFM is neither transposed nor reversed")
        ctx.chained[regs.param("OFM_REGION") & 7] = out
        return
    if storage == u85.STORAGE_TILE3X1:
        raise NotModelled("OFM_PRECISION: OFM storage TILE3X1 is not modelled")
    ctx.coverage.hit("ofm_transpose", u85.TRANSPOSE_NAMES[transpose])
    ctx.coverage.hit("ofm_reverse", u85.REVERSE_NAMES[reverse])
    if transpose:  # 0: HWC, as the values are
        out = np.transpose(out, u85.TRANSPOSES[transpose])
    if u85.REVERSE_AXES[reverse] is not None:
        out = np.flip(out, u85.REVERSE_AXES[reverse])
    ctx.coverage.hit("format", "OFM NHCWB16" if ofm.layout == FORMAT_NHCWB16 else "OFM NHWC")
    h, w, c = out.shape
    ctx.coverage.hit("tiles", "1 tile" if ofm.height0 >= h and ofm.width0 >= w else "2+ tiles")
    ctx.write_fm(ofm, range(h), range(w), range(c), np.ascontiguousarray(out))


def _lut(ctx: Context, values: np.ndarray, function: int, table: int) -> np.ndarray:
    if function in (LUT_S16_S16, LUT_S16_S32):
        if table:
            raise RegisterError(f"ACTIVATION: a 16-bit LUT fills the LUT RAM; table {table} is not 0")
        interpolated = interpolate16(values, bytes(ctx.shram[: LUT16_ENTRIES * 4]))
        if function == LUT_S16_S32:
            return interpolated
        return rescale(interpolated, 1, LUT16_STEP_BITS, ctx.registers.rounding())
    if function not in _LUT8:
        raise NotModelled(f"ACTIVATION: function {FUNCTION_NAMES[function]} is not modelled")
    index_dtype, entry = _LUT8[function]
    entry_dtype = np.dtype(entry) if entry else np.dtype(np.uint8 if function == LUT_U8_U8 else np.int8)
    size = 256 * entry_dtype.itemsize
    start = table * size
    if start + size > len(ctx.shram):
        raise RegisterError(f"ACTIVATION: table {table} of {size} bytes lies outside the {len(ctx.shram)}-byte LUT RAM")
    lut = np.frombuffer(bytes(ctx.shram[start : start + size]), entry_dtype).astype(np.int64)
    index = saturate(values, index_dtype) - np.iinfo(index_dtype).min
    return lut[index]
