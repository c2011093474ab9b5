"""A first-order PMU cycle count for Ethos-U85 command streams (not Vela's U85
performance model, and not calibrated against it): each MAC operation takes its MACs
over the configuration's MACs per cycle, each pooling or elementwise operation its OFM
elements over an eighth of them, each DMA its bytes at 16 bytes per cycle; operations
run one after another. It gives the PMU's registers a plausible, monotone value."""

from __future__ import annotations

import math

from kiln.simulator.npu.commands import Command
from kiln.simulator.npu.config import NpuConfig
from kiln.simulator.npu.registers import Registers

DMA_BYTES_PER_CYCLE = 16


class U85CycleModel:
    def __init__(self, config: NpuConfig):
        self.config = config
        self.cycles = 0
        self.mac_cycles = 0
        self.macs = 0
        self.dma_bytes = 0
        self.block_ops = 0

    def account(self, command: Command, regs: Registers) -> None:
        name = command.name
        if name == "NPU_OP_DMA_START":
            length = regs.address("DMA0_LEN")
            self.dma_bytes += length
            self.cycles += math.ceil(length / DMA_BYTES_PER_CYCLE)
            return
        if name not in ("NPU_OP_CONV", "NPU_OP_DEPTHWISE", "NPU_OP_POOL", "NPU_OP_ELEMENTWISE", "NPU_OP_RESIZE"):
            return
        h, w, c = regs.ofm_shape()
        self.block_ops += 1
        taps = (regs.param("KERNEL_WIDTH_M1") + 1) * (regs.param("KERNEL_HEIGHT_M1") + 1)
        if name == "NPU_OP_CONV":
            macs = h * w * c * taps * (regs.param("IFM_DEPTH_M1") + 1)
        elif name == "NPU_OP_DEPTHWISE":
            macs = h * w * c * taps
        else:
            self.cycles += math.ceil(h * w * c * 8 / self.config.total_macs)
            return
        cycles = math.ceil(macs / self.config.total_macs)
        self.macs += macs
        self.mac_cycles += cycles
        self.cycles += cycles

    def counters(self) -> dict[str, int]:
        return {"cycles": self.cycles, "mac_active": self.mac_cycles, "macs": self.macs, "dma_bytes": self.dma_bytes,
                "block_ops": self.block_ops}
