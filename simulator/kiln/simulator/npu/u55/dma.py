"""Ethos-U55/U65 NPU_OP_DMA_START: copies DMA0_LEN bytes per row from source to destination.

DMA0_SRC_REGION / DMA0_DST_REGION: bits 7..0 region, bit 8 internal (the destination is
the NPU's SHRAM, where activation LUTs live; the address is a SHRAM byte offset),
bits 10..9 stride mode (1-D, 2-D, 3-D). A strided side walks SIZE0 rows of LEN bytes,
rows SKIP0 bytes apart after each row, and (3-D) SIZE1 planes, planes SKIP1 bytes
apart after each plane of SIZE0 * LEN bytes; the other side is contiguous.
"""

from __future__ import annotations

import numpy as np

from kiln.simulator.npu.context import Context
from kiln.simulator.npu.registers import RegisterError

STRIDE_1D, STRIDE_2D, STRIDE_3D = 0, 1, 2
_MODE_NAMES = {STRIDE_1D: "1-D", STRIDE_2D: "2-D", STRIDE_3D: "3-D"}


def _side(ctx: Context, prefix: str):
    """(internal, stride mode, address) of the DMA source or destination."""
    regs = ctx.registers
    value = regs.param(f"DMA0_{prefix}_REGION")
    internal = bool(value & (1 << 8))
    mode = (value >> 9) & 3
    if mode not in _MODE_NAMES:
        raise RegisterError(f"DMA0_{prefix}_REGION: reserved stride mode {mode}")
    offset = regs.address(f"DMA0_{prefix}")
    address = offset if internal else ctx.region_base(value & 0xFF) + offset
    return internal, mode, address


def _row_offsets(mode: int, length: int, size0: int, skip0: int, size1: int, skip1: int) -> np.ndarray:
    """Byte offset of every row of a strided (2-D or 3-D) side from its start address."""
    planes = size1 if mode == STRIDE_3D else 1
    plane_stride = size0 * length + skip1
    row = np.arange(size0, dtype=np.int64) * (length + skip0)
    return (np.arange(planes, dtype=np.int64)[:, None] * plane_stride + row[None, :]).reshape(-1)


def dma_start(ctx: Context) -> None:
    regs = ctx.registers
    src_internal, src_mode, src = _side(ctx, "SRC")
    dst_internal, dst_mode, dst = _side(ctx, "DST")
    if src_internal:
        raise RegisterError("DMA from SHRAM is not a transfer the NPU performs")
    length = regs.address("DMA0_LEN")
    size0 = regs.param("DMA0_SIZE0") or 1
    size1 = regs.param("DMA0_SIZE1") or 1
    skip0, skip1 = regs.address("DMA0_SKIP0"), regs.address("DMA0_SKIP1")
    mode = max(src_mode, dst_mode)
    ctx.coverage.hit("dma", _MODE_NAMES[mode])
    rows = 1 if mode == STRIDE_1D else size0 * (size1 if mode == STRIDE_3D else 1)
    contiguous = np.arange(rows, dtype=np.int64) * length
    src_rows = contiguous if src_mode == STRIDE_1D else _row_offsets(src_mode, length, size0, skip0, size1, skip1)
    dst_rows = contiguous if dst_mode == STRIDE_1D else _row_offsets(dst_mode, length, size0, skip0, size1, skip1)
    source = ctx.region(regs.param("DMA0_SRC_REGION") & 0xFF, "DMA source read")
    data = [bytes(source.read(src + int(o), length)) for o in src_rows]
    if dst_internal:
        ctx.coverage.hit("dma", "to SHRAM (LUT)")
        for o, chunk in zip(dst_rows, data):
            start = dst + int(o)
            if start + length > len(ctx.shram):
                raise RegisterError(
                    f"DMA to SHRAM 0x{start:x}..0x{start + length:x} is outside its {len(ctx.shram)} bytes"
                )
            ctx.shram[start : start + length] = chunk
    else:
        ctx.coverage.hit("dma", "to memory")
        destination = ctx.region(regs.param("DMA0_DST_REGION") & 0xFF, "DMA destination write")
        for o, chunk in zip(dst_rows, data):
            destination.write(dst + int(o), chunk)
