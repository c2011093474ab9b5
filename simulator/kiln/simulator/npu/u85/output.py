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

from dataclasses import dataclass

import numpy as np

from kiln.errors import NotModelled
from kiln.simulator.npu.arithmetic import clamp, rescale, saturate
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.output import LUT16_ENTRIES, LUT16_STEP_BITS, interpolate16
from kiln.simulator.npu.prepared import step
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
    prepare_store(ctx, values.shape)(ctx, values)


@dataclass(frozen=True)
class _Lut:
    """An activation LUT: function, table and where the LUT RAM holds its entries."""

    function: int
    start: int  # bytes into the LUT RAM
    size: int  # bytes
    index_dtype: type | None  # 8-bit LUTs: the type the index saturates to
    entry_dtype: np.dtype | None  # 8-bit LUTs: the entries' type
    rounding: int | None = None  # LUT_S16_S16: the rounding of its result back to 16 bits


def _prepare_lut(hits, ctx: Context, function: int, table: int) -> _Lut:
    """The LUT of `function` and `table`; refuses a 16-bit LUT not in table 0, a function not
    modelled, a table outside the LUT RAM and (LUT_S16_S16) an OFM rounding not modelled."""
    if function in (LUT_S16_S16, LUT_S16_S32):
        if table:
            raise RegisterError(f"ACTIVATION: a 16-bit LUT fills the LUT RAM; table {table} is not 0")
        rounding = ctx.registers.rounding() if function == LUT_S16_S16 else None
        return _Lut(function, 0, LUT16_ENTRIES * 4, None, None, rounding)
    if function not in _LUT8:
        raise NotModelled(f"ACTIVATION: function {FUNCTION_NAMES[function]} is not modelled")
    index_dtype, entry = _LUT8[function]
    entry_dtype = np.dtype(entry) if entry else np.dtype(np.uint8 if function == LUT_U8_U8 else np.int8)
    size = 256 * entry_dtype.itemsize
    start = table * size
    if start + size > len(ctx.shram):
        raise RegisterError(f"ACTIVATION: table {table} of {size} bytes lies outside the {len(ctx.shram)}-byte LUT RAM")
    return _Lut(function, start, size, index_dtype, entry_dtype)


@dataclass(frozen=True)
class _Output:
    """Where the values go once in the OFM's type: storage, transposition and reversal, and
    the plan of the OFM write (kiln.simulator.npu.featuremap)."""

    storage: int
    chained: int  # storage CHAINED: the chaining buffer
    transpose: tuple[int, int, int] | None  # axes, or None: HWC as the values are
    reverse: int | None  # the axis flipped, or None
    plan: object  # storage TILE2X2: featuremap.Plan of the write


def _prepare_output(hits, ctx: Context, ofm, shape: tuple[int, ...]) -> _Output:
    regs = ctx.registers
    storage = regs.storage("OFM")
    hits.hit("ofm_storage", u85.STORAGE_NAMES[storage])
    if storage == u85.STORAGE_NONE:
        return _Output(storage, 0, None, None, None)
    transpose, reverse = regs.transpose()
    if storage == u85.STORAGE_CHAINED:
        if transpose or reverse:
            raise RegisterError("OFM_PRECISION: a chained OFM is neither transposed nor reversed")
        return _Output(storage, regs.param("OFM_REGION") & 7, None, None, None)
    if storage == u85.STORAGE_TILE3X1:
        raise NotModelled("OFM_PRECISION: OFM storage TILE3X1 is not modelled")
    hits.hit("ofm_transpose", u85.TRANSPOSE_NAMES[transpose])
    hits.hit("ofm_reverse", u85.REVERSE_NAMES[reverse])
    axes = u85.TRANSPOSES[transpose] if transpose else None  # 0: HWC, as the values are
    h, w, c = (shape[a] for a in axes) if axes else shape
    hits.hit("format", "OFM NHCWB16" if ofm.layout == FORMAT_NHCWB16 else "OFM NHWC")
    hits.hit("tiles", "1 tile" if ofm.height0 >= h and ofm.width0 >= w else "2+ tiles")
    plan = ctx.fm_plan(ofm, range(h), range(w), range(c))
    return _Output(storage, 0, axes, u85.REVERSE_AXES[reverse], plan)


def _prepare_stage(hits, ctx: Context):
    """(OFM, zero point, activation): the OFM's feature map and the ACTIVATION register,
    refusing a reserved function."""
    regs = ctx.registers
    ofm = regs.feature_map("OFM")
    hits.hit("ofm_precision", ofm.type_name)
    activation = regs.activation()
    function = activation[0]
    if function not in FUNCTION_NAMES:
        raise RegisterError(f"ACTIVATION: reserved function {function}")
    hits.hit("activation", FUNCTION_NAMES[function])
    return ofm, activation


class _Store:
    """The output stage prepared (kiln.simulator.npu.prepared): store() of values of one shape."""

    def __init__(self, ctx: Context, shape: tuple[int, ...]):
        self.start, stage = step(_prepare_stage, ctx)
        if stage is None:
            return
        self.ofm, (function, table, clip, lo, hi) = stage
        self.clip = (lo, hi) if clip else None
        self.lut_step, self.lut = step(_prepare_lut, ctx, function, table) if function != LUT_NONE else (None, None)
        self.output_step, self.output = step(_prepare_output, ctx, self.ofm, shape)
        self.bounds = _bounds(self.clip, self.ofm.dtype) if function == LUT_NONE else None

    def __call__(self, ctx: Context, values: np.ndarray) -> None:
        self.start.enter(ctx.coverage)
        ofm = self.ofm
        if ofm.zero_point:
            values = values + ofm.zero_point
        if self.bounds is not None:
            out = clamp(values, *self.bounds).astype(ofm.dtype)
        else:
            if self.clip is not None:
                values = clamp(values, *self.clip)
            if self.lut_step is not None:
                self.lut_step.enter(ctx.coverage)
                values = self._lut(ctx, values)
            out = saturate(values, ofm.dtype).astype(ofm.dtype)
        self.output_step.enter(ctx.coverage)
        output = self.output
        if output.storage == u85.STORAGE_NONE:
            return
        if output.storage == u85.STORAGE_CHAINED:
            ctx.chained[output.chained] = out
            return
        if output.transpose is not None:
            out = np.transpose(out, output.transpose)
        if output.reverse is not None:
            out = np.flip(out, output.reverse)
        ctx.write_planned(ofm, output.plan, np.ascontiguousarray(out), "OFM write")

    def _lut(self, ctx: Context, values: np.ndarray) -> np.ndarray:
        lut = self.lut
        if lut.index_dtype is None:  # 16-bit
            interpolated = interpolate16(values, bytes(ctx.shram[: lut.size]))
            if lut.function == LUT_S16_S32:
                return interpolated
            return rescale(interpolated, 1, LUT16_STEP_BITS, lut.rounding)
        table = np.frombuffer(bytes(ctx.shram[lut.start : lut.start + lut.size]), lut.entry_dtype).astype(np.int64)
        index = saturate(values, lut.index_dtype) - np.iinfo(lut.index_dtype).min
        return table[index]


def _bounds(clip: tuple[int, int] | None, dtype) -> tuple[int, int] | None:
    """The one clamp that equals clipping to `clip` (None: no clipping) and then saturating to
    `dtype`: onto their ranges' intersection; None where they do not meet."""
    info = np.iinfo(dtype)
    lo, hi = clip or (int(info.min), int(info.max))
    low, high = max(lo, int(info.min)), min(hi, int(info.max))
    return (low, high) if low <= high else None


def prepare_store(ctx: Context, shape: tuple[int, ...]) -> _Store:
    """store() prepared for values of `shape` (kiln.simulator.npu.prepared): a callable
    (ctx, values)."""
    return _Store(ctx, shape)
