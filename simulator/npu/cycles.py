"""An estimate of the NPU's compute cycles for a command stream, not a timing simulation.

It follows the block structure the registers describe and targets Vela's own figure
(VelaResult.npu_cycles, which leaves out memory-transfer time). Each block operation runs
its OFM in blocks of OFM_BLK_HEIGHT x WIDTH x DEPTH; a block costs
  MAC work:   microblocks in the block (OFM microblock: 1x1x4 on U55-32, 1x1x8 on U55-64,
              2x1x8 on U55-128, 2x2x8 otherwise) x kernel taps x IFM microblocks of 8
              channels (convolution; one for depthwise and pooling);
  elementwise: ELEMENTWISE_CYCLES_PER_UNIT per OFM element and elementwise unit;
and a MAC operation costs max(its blocks' MAC work, the output stage at units/2 OFM
elements per cycle, weight decoding at WEIGHTS_PER_CYCLE) plus BLOCK_OVERHEAD per block
and OP_OVERHEAD. U65-512's two cores split the MAC work, not the output stage or weight decoding. DMA transfers overlap computation
and are not counted. bench/npu.py compares the estimate with Vela's on the zoo.
"""

from __future__ import annotations

import math

from kiln.simulator.npu.commands import Command
from kiln.simulator.npu.config import NpuConfig
from kiln.simulator.npu.registers import Registers

OP_OVERHEAD = 8  # cycles to start a block operation
BLOCK_OVERHEAD = 16  # cycles between OFM blocks
WEIGHTS_PER_CYCLE = 6.0  # weight decoder throughput, decoded weights per cycle
IFM_UBLOCK_DEPTH = 8
ELEMENTWISE_CYCLES_PER_UNIT = 6.0  # cycles per OFM element per elementwise unit


def _elementwise_units(config: NpuConfig) -> int:
    """Elements the output stage handles in parallel: 1 (U55-32) to 8 (256 MACs)."""
    return max(1, config.macs // 32)


def _ublock(config: NpuConfig) -> tuple[int, int, int]:
    """OFM microblock (height, width, depth) of a configuration's MAC array."""
    if config.macs == 32:
        return 1, 1, 4
    if config.macs == 64:
        return 1, 1, 8
    if config.macs == 128:
        return 1, 2, 8
    return 2, 2, 8


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


class CycleModel:
    def __init__(self, config: NpuConfig):
        self.config = config
        self.total = 0.0
        self.mac_cycles = 0.0
        self.macs = 0
        self.dma_bytes = 0
        self.block_ops = 0

    def account(self, command: Command, regs: Registers) -> None:
        name = command.name
        if name in ("NPU_OP_CONV", "NPU_OP_DEPTHWISE", "NPU_OP_POOL", "NPU_OP_ELEMENTWISE"):
            self.block_ops += 1
            self.total += self._block_op(name, regs) + OP_OVERHEAD
        elif name == "NPU_OP_DMA_START":
            rows = max(1, regs.param("DMA0_SIZE0")) if (regs.param("DMA0_DST_REGION") >> 9) & 3 else 1
            self.dma_bytes += regs.address("DMA0_LEN") * rows

    def _block_op(self, name: str, regs: Registers) -> float:
        h, w, c = regs.ofm_shape()
        cores = self.config.cores
        c_core = _ceil(c, cores)  # MAC work splits between cores; the output stage does not
        units = _elementwise_units(self.config)
        if name == "NPU_OP_ELEMENTWISE":
            return h * w * c * ELEMENTWISE_CYCLES_PER_UNIT / units
        bh = regs.param("OFM_BLK_HEIGHT_M1") + 1
        bw = regs.param("OFM_BLK_WIDTH_M1") + 1
        bd = max(1, (regs.param("OFM_BLK_DEPTH_M1") + 1) // cores)
        uh, uw, ud = _ublock(self.config)
        k = regs.kernel()
        taps = k.width * k.height
        ifm_depth = regs.param("IFM_DEPTH_M1") + 1
        depth_steps = _ceil(ifm_depth, IFM_UBLOCK_DEPTH) if name == "NPU_OP_CONV" else 1
        blocks = _ceil(h, bh) * _ceil(w, bw) * _ceil(c_core, bd)
        per_block = _ceil(bh, uh) * _ceil(bw, uw) * _ceil(bd, ud) * taps * depth_steps
        mac = blocks * per_block
        self.macs += h * w * c * taps * (ifm_depth if name == "NPU_OP_CONV" else 1)
        self.mac_cycles += mac
        weights = 0
        if name in ("NPU_OP_CONV", "NPU_OP_DEPTHWISE"):
            weights = c * taps * (ifm_depth if name == "NPU_OP_CONV" else 1)
        output = h * w * c * 2 / units  # the output stage: units / 2 elements per cycle
        return max(mac, output, weights / WEIGHTS_PER_CYCLE) + blocks * BLOCK_OVERHEAD

    def counters(self) -> dict[str, int]:
        return {"cycles": int(math.ceil(self.total)), "mac_active": int(math.ceil(self.mac_cycles)),
                "macs": self.macs, "dma_bytes": self.dma_bytes, "block_ops": self.block_ops}
