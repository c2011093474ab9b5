"""A PMU cycle estimate for Ethos-U85 command streams, after Vela 5.2.0's U85 performance
model (ethos_u85_performance.cpp) with what the registers tell: operations and DMA
transfers one after another, memories timed as kiln.simulator.npu.cycles reads them from
Vela's vela.ini (region 0 const, 1 arena, 2 fast scratch).

MAC operations (CONV, DEPTHWISE, POOL) run in OFM blocks (OFM_BLK_*) of microblocks
(ACC_FORMAT's shape, its depth the configuration's, u85_weights.OFM_UBLOCK_DEPTH); per
block, per sub-kernel of at most 8x8 taps, a block costs
  pooling:        max(4, taps) * microblocks * ifm_bits / 2
  depthwise:      max(weight decode, 4 * microblocks_hw * ifm_bits / 8) * ceil(taps / 4) * microblocks_c
  depth-first:    max(weight decode, ifm_block_depth / 8 * microblocks_hw) * taps * microblocks_c * ifm_bits / 8
  part-kernel:    max(weight decode, 4 * microblocks_hw) * ceil(taps / (2 or 4)) * microblocks_c
                  * ceil(ifm_block_depth / 8)
(halved for 2:4 sparse weights; weight decode = 32 * microblock depth / (8 * cores)), plus
accumulator delays when a block is one microblock wide and high, times the IFM blocks of a
convolution. The output unit costs a per-element figure (OUTPUT_CYCLES, by OFM width;
activation, transpose and reverse ACTIVATION_CYCLES, the larger counts) per block; the
slower of the two units sets the pace, a quarter of their sum bounds it from below.
The output unit is also bounded by the time to fetch a block's scales (10 bytes a channel
at the scale memory's read latency / 256), the issue rate by the imbalance of reading an
IFM block and writing an OFM block; each command then waits once for its first IFM block
and its last OFM block (latency plus the block's bytes at the memory's bandwidth,
stretched by short bursts). Elementwise and RESIZE operations cost their output elements
times the output unit's figure (DIV 33 cycles), at least the issue rate of their blocks'
memory access. A DMA transfer takes the slower of its read and its write.

Not modelled: how Vela hides weight transfers under the previous operation, its channel
bandwidth limits (ChannelBW) and its weight decoder's fetch time. Against Vela's NPU cycles
on ethos-u85-256 (Dedicated_Sram_384KB, bench/npu.py): tiny_cnn 1.13, ds_cnn 1.21,
resnet8 1.11, mobilenet_v1_025 0.78, fc_autoencoder 1.02, mobilenet_v2_035 0.95, digits 0.57."""

from __future__ import annotations

import math

import numpy as np

from kiln.simulator.npu import u85_weights
from kiln.simulator.npu.commands import Command
from kiln.simulator.npu.config import NpuConfig
from kiln.simulator.npu.cycles import SHRAM, MemoryTiming, mem_to_mem, memories_for
from kiln.simulator.npu.registers import Registers

# Per configuration (MACs of all cores): output unit cycles per element for 8-, 16-, 32-,
# 64-bit OFMs, 32-bit-input binary elementwise to a narrow / 32-bit OFM; activation
# (plain, H<->W transpose or W reverse); resize at a low and a high ratio (8-, 16-bit).
OUTPUT_CYCLES = {128: (0.5, 0.5, 0.5, 1.0, 1.0, 1.0), 256: (0.25, 0.25, 0.25, 0.5, 0.5, 0.5),
                 512: (0.125, 0.125, 0.25, 0.5, 0.25, 0.25), 1024: (0.0625, 0.125, 0.25, 0.5, 0.125, 0.25),
                 2048: (0.03125, 0.0625, 0.125, 0.25, 0.0625, 0.125)}
ACTIVATION_CYCLES = {128: (0.5, 1.0), 256: (0.25, 0.5), 512: (0.125, 0.25), 1024: (0.0625, 0.125),
                     2048: (0.03125, 0.0625)}
RESIZE_LOW = {128: (0.5, 1.0), 256: (0.25, 0.5), 512: (0.125, 0.25), 1024: (0.125, 0.125), 2048: (0.0625, 0.0625)}
RESIZE_HIGH = {128: (0.5, 1.0), 256: (0.25, 0.5), 512: (0.125, 0.25), 1024: (0.0625, 0.125),
               2048: (0.03125, 0.0625)}
DIV_CYCLES = 33.0
SUBKERNEL = 8
_BINARY = {0, 1, 2, 3, 4, 8, 9, 10, 11, 16, 17, 18, 19, 33, 34, 35, 42}  # elementwise modes with an IFM2


def _bits(regs: Registers, prefix: str) -> int:
    dtype = regs.ofm_dtype()[0] if prefix == "OFM" else regs.ifm_dtype(prefix)[0]
    return 8 * np.dtype(dtype).itemsize


class U85CycleModel:
    def __init__(self, config: NpuConfig):
        self.config = config
        self.memories = memories_for(config)
        self.macs_total = config.total_macs
        self.cycles = 0.0
        self.mac_cycles = 0.0
        self.macs = 0
        self.dma_bytes = 0
        self.block_ops = 0

    def account(self, command: Command, regs: Registers) -> None:
        """Adds `command` (an NPU_OP_*) run with the register state `regs`."""
        name = command.name
        if name == "NPU_OP_DMA_START":
            src, dst = regs.param("DMA0_SRC_REGION"), regs.param("DMA0_DST_REGION")
            rows = 1 if not (src >> 9) & 3 else max(1, regs.param("DMA0_SIZE0"))
            rows *= max(1, regs.param("DMA0_SIZE1")) if (src >> 9) & 3 == 2 else 1
            size = regs.address("DMA0_LEN") * rows
            self.dma_bytes += size
            self.cycles += mem_to_mem(SHRAM if dst & (1 << 8) else self._memory(dst), self._memory(src), size)
        elif name in ("NPU_OP_CONV", "NPU_OP_DEPTHWISE", "NPU_OP_POOL"):
            self.block_ops += 1
            self.cycles += self._mac_operation(name, command.param & 7, regs)
        elif name in ("NPU_OP_ELEMENTWISE", "NPU_OP_RESIZE"):
            self.block_ops += 1
            self.cycles += self._elementwise(name, command.param, regs)

    def _memory(self, region: int) -> MemoryTiming:
        region &= 7
        return self.memories[region] if region < len(self.memories) else self.memories[1]

    def _block_transfer(self, regs: Registers, prefix: str, block: tuple[int, int, int], read: bool) -> int:
        """Cycles to read (IFM, IFM2) or write (OFM) one block: latency, then its bytes at the
        memory's bandwidth, stretched by bursts shorter than the memory's longest."""
        memory = self._memory(regs.param(f"{prefix}_REGION"))
        bits = _bits(regs, prefix)
        h, w, c = block
        nhcwb16 = (regs.param(f"{prefix}_PRECISION") >> 6) & 3
        shape_depth = (regs.param("OFM_DEPTH_M1") if prefix == "OFM" else regs.param("IFM_DEPTH_M1")) + 1
        if nhcwb16:
            burst = 16 * bits * w
        elif read:
            burst = bits * w * c if shape_depth == c else bits * c
        else:
            burst = bits * w * c if c <= 16 and shape_depth == c else min(64 * 8, 16 * bits, c * bits)
        burst_bytes = max(1, min(memory.burst, burst // 8))
        transfer = (h * w * c * bits // 8) * memory.burst // burst_bytes
        latency = memory.read_latency if read else memory.write_latency
        return latency + int(transfer / memory.bandwidth)

    def _output_per_element(self, regs: Registers, elementwise_mode: int | None = None) -> float:
        ifm_bits, ofm_bits = _bits(regs, "IFM"), _bits(regs, "OFM")
        table = OUTPUT_CYCLES[self.macs_total]
        if ofm_bits == 64:
            figure = table[3]
        elif elementwise_mode in _BINARY and ifm_bits == 32:
            figure = table[5] if ofm_bits == 32 else table[4]
        else:
            figure = table[{8: 0, 16: 1, 32: 2}[ofm_bits]]
        function = regs.param("ACTIVATION") & 0x1F
        transpose, reverse = (regs.param("OFM_PRECISION") >> 11) & 7, (regs.param("OFM_PRECISION") >> 9) & 3
        if function or transpose or reverse:
            slow = transpose in (1, 3, 7) or reverse == 2  # H<->W transposes, W reverse: half rate
            figure = max(figure, ACTIVATION_CYCLES[self.macs_total][int(slow)])
        return figure

    def _elementwise(self, name: str, param: int, regs: Registers) -> float:
        h, w, c = regs.ofm_shape()
        if (regs.param("OFM_PRECISION") >> 6) & 3:
            c = -(-c // 16) * 16
        if name == "NPU_OP_RESIZE":
            in_h, in_w = regs.param("KERNEL_HEIGHT_M1") + 1, regs.param("KERNEL_WIDTH_M1") + 1
            ratio = min((w + in_w // 2) // in_w, (h + in_h // 2) // in_h)
            figures = RESIZE_HIGH if ratio >= self.macs_total // 512 else RESIZE_LOW
            per_element = figures[self.macs_total][0 if _bits(regs, "IFM") == 8 else 1]
        elif param & 0x3F == 11:
            per_element = DIV_CYCLES
        else:
            per_element = self._output_per_element(regs, param & 0x3F)
        block = tuple(min(o, regs.param(f"OFM_BLK_{axis}_M1") + 1)
                      for o, axis in zip((h, w, c), ("HEIGHT", "WIDTH", "DEPTH")))
        reads = [self._block_transfer(regs, p, block, True) for p in ("IFM", "IFM2")
                 if p == "IFM" or (name == "NPU_OP_ELEMENTWISE" and param & 0x3F in _BINARY
                                   and regs.param("IFM2_BROADCAST") & 0xF != 8)]
        block_cycles = max([self._block_transfer(regs, "OFM", block, False)] + reads)
        issue = (block_cycles / (block[0] * block[1] * block[2]) + per_element) / 4
        return math.ceil(max(issue, per_element) * h * w * c)

    def _mac_operation(self, name: str, mode: int, regs: Registers) -> float:
        out = regs.ofm_shape()
        block = tuple(min(o, regs.param(f"OFM_BLK_{axis}_M1") + 1)
                      for o, axis in zip(out, ("HEIGHT", "WIDTH", "DEPTH")))
        (uh, uw) = regs.acc_format()[3]
        ud = u85_weights.OFM_UBLOCK_DEPTH.get(self.macs_total, {}).get((uh, uw), 8)
        ublocks = (-(-block[0] // uh), -(-block[1] // uw), -(-block[2] // ud))
        k = regs.kernel()
        ifm_bits = _bits(regs, "IFM")
        ifm_depth = regs.param("IFM_DEPTH_M1") + 1
        sparse = bool((regs.param("WEIGHT_FORMAT") >> 4) & 1)
        conv = name == "NPU_OP_CONV" or (name == "NPU_OP_POOL" and mode == 2)  # REDUCE_SUM runs as one
        if conv:
            ifm_block = min(ifm_depth, u85_weights.ifm_block_depth(self.macs_total, ud, ifm_bits,
                                                                  k.part_kernel_first, sparse))
        else:
            ifm_block = block[2]
        mac = self._mac_block(name, conv, k, ublocks, ud, ifm_bits, ifm_block, sparse, regs)
        if conv:
            mac *= -(-ifm_depth // ifm_block)
        per_block = (-(-out[0] // uh) * -(-out[1] // uw) * -(-out[2] // ud))
        blocks = per_block / (ublocks[0] * ublocks[1] * ublocks[2])
        ao = math.ceil(self._output_per_element(regs) * block[0] * block[1] * block[2])
        if name != "NPU_OP_POOL" and regs.address("SCALE_LENGTH"):
            ao = max(ao, 10 * block[2] * self._memory(regs.param("SCALE_REGION")).read_latency / 256)
        ifm_block = (min((block[0] - 1) * k.stride_y + (k.height - 1) * k.dilation_y + 1, out[0] * k.stride_y + k.height),
                     min((block[1] - 1) * k.stride_x + (k.width - 1) * k.dilation_x + 1, out[1] * k.stride_x + k.width),
                     ifm_block if conv else block[2])
        ifm_cycles = self._block_transfer(regs, "IFM", ifm_block, True)
        ofm_cycles = self._block_transfer(regs, "OFM", block, False)
        imbalance = abs(ofm_cycles - ifm_cycles) if per_block > ublocks[0] * ublocks[1] * ublocks[2] else 0
        issue = (imbalance + mac + ao) / 4
        mac_paced, ao_paced = max(mac, issue), max(ao, issue)
        total = mac_paced * blocks + ao_paced if mac_paced > ao_paced else ao_paced * blocks + mac_paced
        total += ifm_cycles + ofm_cycles
        macs = k.width * k.height * out[0] * out[1] * out[2] * (ifm_depth if name == "NPU_OP_CONV" else 1)
        self.macs += macs
        self.mac_cycles += mac * blocks
        return int(total)

    def _mac_block(self, name, conv, k, ublocks, ud, ifm_bits, ifm_block, sparse, regs) -> int:
        hw, depth = ublocks[0] * ublocks[1], ublocks[2]
        decode = 32 * ud // (8 * self.config.cores)
        acc48 = regs.acc_format()[0] == 1
        delay = 3 if acc48 and self.macs_total <= 128 else 2
        part_kernel = conv and name == "NPU_OP_CONV" and k.part_kernel_first
        total = 0
        for x in range(0, k.width, SUBKERNEL):
            for y in range(0, k.height, SUBKERNEL):
                taps = min(k.height - y, SUBKERNEL) * min(k.width - x, SUBKERNEL)
                if name == "NPU_OP_POOL" and not conv:
                    steps, cycles = 1, max(4, taps) * hw * depth * (ifm_bits // 2)
                elif name == "NPU_OP_DEPTHWISE":
                    steps = -(-taps // 4)
                    cycles = max(decode, 4 * hw * (ifm_bits // 8)) * steps * depth
                elif not part_kernel:
                    steps = taps
                    cycles = max(decode, ifm_block // 8 * hw) * steps * depth * (ifm_bits // 8)
                    cycles //= 2 if sparse else 1
                else:
                    steps = -(-taps // (2 if ifm_bits == 16 else 4))
                    cycles = max(decode, 4 * hw) * steps * depth * -(-ifm_block // 8)
                    cycles //= 2 if sparse else 1
                stall = 0
                if hw == 1:
                    if depth == 1:
                        stall = delay * steps
                    elif steps > 1:
                        stall = delay * (steps - 1) * depth
                if part_kernel:
                    stall *= -(-ifm_block // 8)
                total += cycles + stall
        return total

    def counters(self) -> dict[str, int]:
        return {"cycles": int(math.ceil(self.cycles)), "mac_active": int(math.ceil(self.mac_cycles)),
                "macs": self.macs, "dma_bytes": self.dma_bytes, "block_ops": self.block_ops}
