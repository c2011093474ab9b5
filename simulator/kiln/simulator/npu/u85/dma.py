"""Ethos-U85 NPU_OP_DMA_START: copies rows of DMA0_LEN bytes from DMA0_SRC to DMA0_DST.

DMA0_SRC_REGION: region [2:0], region_mode [8] (1: internal), stride_mode [10:9] (1-D,
2-D, 3-D), idx_mode [11]; DMA0_DST_REGION: region [2:0], region_mode [8], idx_mode [11].
An internal destination is the LUT RAM (the address is its byte offset), where Vela
places activation tables.
  1-D: one row.
  2-D: DMA0_SIZE0 rows; row r is read at SRC + r * SRC_STRIDE0 and written at
       DST + r * DST_STRIDE0.
  3-D: DMA0_SIZE1 planes of those rows, plane p SRC_STRIDE1 / DST_STRIDE1 further on.
  Indexed (gather: source idx_mode; scatter: destination idx_mode): row r's indexed side
       uses an int32 of the index table at DMA0_IDX in DMA0_IDX_REGION in place of r
       (Vela's GATHER and SCATTER: row stride = the row's bytes). The table is read in
       order, 4 bytes a row, and DMA0_IDX_SKIP1 bytes more after each plane of a 3-D
       transfer: row r of plane p takes the little-endian int32 at
       IDX + p * (4 * SIZE0 + IDX_SKIP1) + 4 * r, and the plane stride still applies to
       both sides. That is how Vela 5.2.0 drives it (regor's
       high_level_command_stream_generator.cpp, GenerateHLCDMACommands): a SCATTER of N > 1
       planes of [N, W] int32 indices with IDX_SKIP1 0, and int64 indices as int32 pairs
       with IDX_SKIP1 4 past each high word. An index outside [0, DMA0_IDX_MAX] is not
       modelled (kiln checks indices on the CPU before the NPU reads them).
"""

from __future__ import annotations

import numpy as np

from kiln.errors import NotModelled
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.registers import RegisterError

_MODE_NAMES = {0: "1-D", 1: "2-D", 2: "3-D"}
INDEX_BYTES = 4


def _rows(ctx: Context, mode: int, indexed: bool, stride0: int, stride1: int) -> np.ndarray:
    """Byte offset of every row of one side from its start address."""
    regs = ctx.registers
    if mode == 0:
        return _indices(ctx, 1, 1)[0] * stride0 if indexed else np.zeros(1, np.int64)
    size0 = regs.param("DMA0_SIZE0") or 1
    planes = (regs.param("DMA0_SIZE1") or 1) if mode == 2 else 1
    rows = (
        _indices(ctx, planes, size0) if indexed else np.broadcast_to(np.arange(size0, dtype=np.int64), (planes, size0))
    )
    return (np.arange(planes, dtype=np.int64)[:, None] * stride1 + rows * stride0).reshape(-1)


def _indices(ctx: Context, planes: int, count: int) -> np.ndarray:
    """[planes, count] indices: each plane's `count` int32s, IDX_SKIP1 bytes after the one before."""
    regs = ctx.registers
    region, start = regs.param("DMA0_IDX_REGION") & 7, regs.address("DMA0_IDX")
    pitch = count * INDEX_BYTES + (regs.address("DMA0_IDX_SKIP1") if planes > 1 else 0)
    raw = [ctx.read_region(region, start + p * pitch, count * INDEX_BYTES, "DMA index read") for p in range(planes)]
    index = np.frombuffer(b"".join(raw), "<i4").astype(np.int64).reshape(planes, count)
    limit = regs.payload("DMA0_IDX_MAX") & 0x7FFF_FFFF
    if ((index < 0) | (index > limit)).any():
        raise NotModelled(f"NPU_OP_DMA_START: an index outside [0, DMA0_IDX_MAX = {limit}] is not modelled")
    return index


def dma_start(ctx: Context) -> None:
    regs = ctx.registers
    src_value, dst_value = regs.param("DMA0_SRC_REGION"), regs.param("DMA0_DST_REGION")
    mode = (src_value >> 9) & 3
    if mode not in _MODE_NAMES:
        raise RegisterError(f"DMA0_SRC_REGION: reserved stride mode {mode}")
    gather, scatter = bool(src_value & (1 << 11)), bool(dst_value & (1 << 11))
    if gather and scatter:
        raise RegisterError("DMA0: source and destination cannot both be indexed")
    if src_value & (1 << 8):
        raise RegisterError("DMA from the NPU's internal memory is not a transfer the NPU performs")
    ctx.coverage.hit("dma", _MODE_NAMES[mode])
    if gather or scatter:
        ctx.coverage.hit("dma", "gather" if gather else "scatter")
    length = regs.address("DMA0_LEN")
    src_rows = _rows(ctx, mode, gather, regs.address("DMA0_SRC_STRIDE0"), regs.address("DMA0_SRC_STRIDE1"))
    dst_rows = _rows(ctx, mode, scatter, regs.address("DMA0_DST_STRIDE0"), regs.address("DMA0_DST_STRIDE1"))
    src_region, dst_region = src_value & 7, dst_value & 7
    src, dst = regs.address("DMA0_SRC"), regs.address("DMA0_DST")
    data = [ctx.read_region(src_region, src + int(o), length, "DMA source read") for o in src_rows]
    if dst_value & (1 << 8):
        ctx.coverage.hit("dma", "to LUT RAM")
        for o, chunk in zip(dst_rows, data):
            start = dst + int(o)
            if start < 0 or start + length > len(ctx.shram):
                raise RegisterError(
                    f"DMA to the LUT RAM 0x{start:x}..0x{start + length:x} is outside its {len(ctx.shram)} bytes"
                )
            ctx.shram[start : start + length] = chunk
        return
    ctx.coverage.hit("dma", "to memory")
    destination = ctx.region(dst_region, "DMA destination write")
    for o, chunk in zip(dst_rows, data):
        destination.write(ctx.region_base(dst_region) + dst + int(o), chunk)
