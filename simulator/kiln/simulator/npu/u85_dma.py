"""Ethos-U85 NPU_OP_DMA_START: copies DMA0_LEN bytes from DMA0_SRC to DMA0_DST.

DMA0_SRC_REGION: region [2:0], region_mode [8] (1: internal), stride_mode [10:9] (1-D,
2-D, 3-D), idx_mode [11]; DMA0_DST_REGION: region [2:0], region_mode [8], idx_mode [11].
An internal destination is the LUT RAM (the address is its byte offset), where Vela
places activation tables. Modelled: 1-D copies from memory to memory or to the LUT RAM;
strided (2-D, 3-D) and indexed (gather/scatter) transfers are not (NotModelled).
"""

from __future__ import annotations

from kiln.errors import NotModelled
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.registers import RegisterError


def dma_start(ctx: Context) -> None:
    regs = ctx.registers
    src_value, dst_value = regs.param("DMA0_SRC_REGION"), regs.param("DMA0_DST_REGION")
    stride_mode = (src_value >> 9) & 3
    if stride_mode == 3:
        raise RegisterError(f"DMA0_SRC_REGION: reserved stride mode {stride_mode}")
    if stride_mode:
        raise NotModelled(f"NPU_OP_DMA_START: a {stride_mode + 1}-D strided transfer is not modelled")
    if (src_value | dst_value) & (1 << 11):
        raise NotModelled("NPU_OP_DMA_START: an indexed (gather/scatter) transfer is not modelled")
    if src_value & (1 << 8):
        raise RegisterError("DMA from the NPU's internal memory is not a transfer the NPU performs")
    ctx.coverage.hit("dma", "1-D")
    length = regs.address("DMA0_LEN")
    src_region, dst_region = src_value & 7, dst_value & 7
    data = ctx.read_region(src_region, regs.address("DMA0_SRC"), length, "DMA source read")
    dst = regs.address("DMA0_DST")
    if dst_value & (1 << 8):
        ctx.coverage.hit("dma", "to LUT RAM")
        if dst + length > len(ctx.shram):
            raise RegisterError(f"DMA to the LUT RAM 0x{dst:x}..0x{dst + length:x} is outside its "
                                f"{len(ctx.shram)} bytes")
        ctx.shram[dst:dst + length] = data
        return
    ctx.coverage.hit("dma", "to memory")
    ctx.region(dst_region, "DMA destination write").write(ctx.region_base(dst_region) + dst, data)
