"""An estimate of the NPU's compute cycles for a command stream, not a timing simulation.

Its target is Vela's own figure for the same stream (VelaResult.npu_cycles, the sum of
Vela's per-operation "NPU" cycles, which leaves out memory-transfer time); bench/npu.py
and tests/simulator/test_npu_cycles.py compare the two on the zoo models. It is built
from the block structure the registers describe and a few throughput figures:

* A block operation (CONV, DEPTHWISE, POOL) runs its OFM in blocks of OFM_BLK_HEIGHT x
  WIDTH x DEPTH. Each block passes through two pipelined stages, the MAC array and the
  output stage, so an operation of n blocks costs max(mac, out) x n + min(mac, out).
* MAC stage, per block: the block's OFM microblocks (1x1x4 on U55-32, 1x1x8 on U55-64,
  1x2x8 on U55-128, 2x2x8 otherwise) take MAC_CYCLES_PER_UBLOCK cycles per kernel step
  and per IFM_BLOCK_DEPTH input channels, but a kernel step over one microblock depth
  never takes less than the weight fetch (4 cycles per OFM microblock channel).
  Depthwise steps cover 4 kernel taps, part-kernel-first convolution steps cover 4 taps
  of 8 channels, pooling costs max(4, taps) cycles per microblock (x4 for 8/16-bit data
  on the wider arrays). A block of a single microblock waits on the accumulator
  pipeline (ACC_DELAY cycles per step). U65-512's two cores split the MAC stage.
* Output stage, per block: OFM elements x a cycles-per-element rate that depends on the
  operation (OUTPUT_RATES, in cycles at 64 MACs per cycle, scaled with the array), at
  least the time to fetch the block's scales (a memory latency per product, the
  latency of the memory Vela's default system configuration keeps weights in).
* Each block also issues its IFM reads and OFM write: a quarter of (two SRAM latencies
  plus both stages) bounds either stage from below.
* ELEMENTWISE: OFM elements (depth rounded to 16 for NHCWB16) x the operation's rate,
  or more for small blocks, where the block's memory latency dominates.
DMA transfers overlap computation and are not counted.
"""

from __future__ import annotations

import math

from kiln.simulator.npu.commands import Command
from kiln.simulator.npu.config import PRODUCT_U65, NpuConfig
from kiln.simulator.npu.registers import Registers

IFM_BLOCK_DEPTH = 32  # IFM channels a convolution block consumes per MAC pass
MAC_CYCLES_PER_UBLOCK = 4  # cycles per OFM microblock, kernel step and IFM_BLOCK_DEPTH channels
WEIGHT_FETCH_CYCLES_PER_CHANNEL = 4  # per OFM microblock channel and kernel step
DEPTHWISE_TAPS_PER_STEP = 4
SRAM_LATENCY = 32  # cycles
SRAM_BYTES_PER_CYCLE = {0: 8, PRODUCT_U65: 16}  # by NpuConfig.product
# Read/write latency in cycles of the memory behind each region (0: weights, 1: scratch,
# 2: fast scratch), by product, as Vela's default system configuration and memory mode
# place weights: off-chip flash on U55 (Ethos_U55_High_End_Embedded), DRAM on U65
# (Ethos_U65_High_End); feature maps count as SRAM (region 1 on U65 is DRAM in
# Dedicated_Sram, but Vela does not charge its latency to the NPU stages).
REGION_LATENCY = {0: {0: 64, 1: SRAM_LATENCY}, PRODUCT_U65: {0: 500, 1: SRAM_LATENCY}}
# Output-stage cycles per OFM element at 64 MACs per cycle.
OUTPUT_RATES = {"default": 1.0, "acc40": 1.5, "mul": 1.5, "addsub": 3.0, "maxpool": 0.5, "ew32": 1.5}
LUT_ACTIVATION_RATE = 1.0  # cycles per element of a sigmoid/tanh/LUT activation, per core

ACC_FORMAT_INT40 = 1
POOL_MAX, POOL_REDUCE_SUM = 0, 2
ELEMENTWISE_MUL, ELEMENTWISE_ADD, ELEMENTWISE_SUB = 0, 1, 2
FORMAT_NHCWB16 = 1
MAC_OPERATIONS = ("NPU_OP_CONV", "NPU_OP_DEPTHWISE", "NPU_OP_POOL")


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


def _bits(precision: int, shift: int) -> int:
    """Element bits of a *_PRECISION register's size field at bit `shift` (8 if reserved)."""
    return {0: 8, 1: 16, 2: 32}.get((precision >> shift) & 3, 8)


class CycleModel:
    """Accumulates the estimate over one run_stream; counters() reads it out."""

    def __init__(self, config: NpuConfig):
        self.config = config
        self.total = 0.0
        self.mac_cycles = 0.0
        self.macs = 0
        self.dma_bytes = 0
        self.block_ops = 0
        # cycles per OFM element of the output stage scale inversely with the array
        self.rate_scale = 64 / (config.macs * config.cores)

    def account(self, command: Command, regs: Registers) -> None:
        """Adds `command` (an NPU_OP_*) run with the register state `regs`."""
        name = command.name
        if name in MAC_OPERATIONS:
            self.block_ops += 1
            self.total += self._mac_operation(name, command.param, regs)
        elif name == "NPU_OP_ELEMENTWISE":
            self.block_ops += 1
            self.total += self._elementwise(command.param, regs)
        elif name == "NPU_OP_DMA_START":
            rows = max(1, regs.param("DMA0_SIZE0")) if (regs.param("DMA0_DST_REGION") >> 9) & 3 else 1
            self.dma_bytes += regs.address("DMA0_LEN") * rows

    # ---- output stage ------------------------------------------------------------------

    def _output_rate(self, name: str, mode: int, regs: Registers) -> float:
        """Output-stage cycles per OFM element."""
        ifm_bits = _bits(regs.param("IFM_PRECISION"), 2)
        ofm_bits = _bits(regs.param("OFM_PRECISION"), 1)
        if name == "NPU_OP_ELEMENTWISE":
            if ifm_bits == 32:
                kind = "ew32"
            elif mode == ELEMENTWISE_MUL:
                kind = "mul" if ofm_bits < 32 else "acc40"
            elif mode in (ELEMENTWISE_ADD, ELEMENTWISE_SUB):
                kind = "addsub"
            else:
                kind = "default"
        elif regs.param("ACC_FORMAT") == ACC_FORMAT_INT40:
            kind = "acc40"
        elif name == "NPU_OP_POOL" and mode == POOL_MAX:
            kind = "maxpool"
        else:
            kind = "default"
        rate = OUTPUT_RATES[kind] * self.rate_scale
        if regs.param("ACTIVATION") & 0xFFF >= 3:  # tanh, sigmoid or a LUT
            rate = max(rate, LUT_ACTIVATION_RATE / self.config.cores)
        return rate

    def _block_traffic(self, block_elems: int, ifm_elems: int, regs: Registers) -> float:
        """Cycles a block's IFM read and OFM write take on SRAM, latencies included."""
        ifm_bytes = ifm_elems * _bits(regs.param("IFM_PRECISION"), 2) // 8
        ofm_bytes = block_elems * _bits(regs.param("OFM_PRECISION"), 1) // 8
        latency = self._latency(regs.param("IFM_REGION")) + self._latency(regs.param("OFM_REGION"))
        return latency + (ifm_bytes + ofm_bytes) / SRAM_BYTES_PER_CYCLE[self.config.product]

    def _latency(self, region: int) -> int:
        return REGION_LATENCY[self.config.product].get(region & 7, SRAM_LATENCY)

    # ---- operations --------------------------------------------------------------------

    def _block(self, regs: Registers) -> tuple[int, int, int]:
        h, w, c = regs.ofm_shape()
        return (min(h, regs.param("OFM_BLK_HEIGHT_M1") + 1), min(w, regs.param("OFM_BLK_WIDTH_M1") + 1),
                min(c, regs.param("OFM_BLK_DEPTH_M1") + 1))

    def _elementwise(self, mode: int, regs: Registers) -> float:
        h, w, c = regs.ofm_shape()
        if (regs.param("OFM_PRECISION") >> 6) & 3 == FORMAT_NHCWB16:
            c = _ceil(c, 16) * 16
        bh, bw, bd = self._block(regs)
        block_elems = bh * bw * bd
        rate = self._output_rate("NPU_OP_ELEMENTWISE", mode, regs)
        operands = 1 if (regs.param("IFM2_BROADCAST") >> 7) & 1 else 2  # bit 7: IFM2 is a scalar
        traffic = self._block_traffic(block_elems, operands * block_elems, regs)
        per_element = max(rate, (traffic / block_elems + rate) / 4)
        return h * w * c * per_element

    def _mac_operation(self, name: str, mode: int, regs: Registers) -> float:
        h, w, c = regs.ofm_shape()
        bh, bw, bd = self._block(regs)
        blocks = _ceil(h, bh) * _ceil(w, bw) * _ceil(c, bd)
        k = regs.kernel()
        ifm_depth = regs.param("IFM_DEPTH_M1") + 1
        reduce_sum = name == "NPU_OP_POOL" and mode == POOL_REDUCE_SUM
        if name == "NPU_OP_POOL" and not reduce_sum and k.width * k.height == 1:
            return self._move(h * w * c, regs)
        mac = self._mac_stage(name, reduce_sum, regs, (h, w), (bh, bw, bd), k, ifm_depth)
        elems = bh * bw * bd
        out = elems * self._output_rate(name, mode, regs)
        if name != "NPU_OP_POOL":
            out = max(out, 10 * bd * self._latency(0) / 256)  # scales, wherever DMA put them, count from their home region 0
        ifm_h = (bh - 1) * k.stride_y + (k.height - 1) * k.dilation_y + 1
        ifm_w = (bw - 1) * k.stride_x + (k.width - 1) * k.dilation_x + 1
        ifm_c = min(ifm_depth, IFM_BLOCK_DEPTH) if name == "NPU_OP_CONV" or reduce_sum else bd
        issue = (self._block_traffic(elems, ifm_h * ifm_w * ifm_c, regs) + out + mac) / 4
        mac, out = max(mac, issue), max(out, issue)
        self.mac_cycles += mac * blocks
        taps = k.width * k.height
        self.macs += h * w * c * taps * (ifm_depth if name == "NPU_OP_CONV" or reduce_sum else 1)
        return max(mac, out) * blocks + min(mac, out)

    def _move(self, elems: int, regs: Registers) -> float:
        """A 1x1 pooling copies its IFM to the OFM at SRAM speed."""
        return self._block_traffic(0, elems, regs) - self._latency(regs.param("OFM_REGION"))

    def _mac_stage(self, name, reduce_sum, regs, ofm_hw, block, k, ifm_depth) -> float:
        """MAC-array cycles of one OFM block."""
        bh, bw, bd = block
        uh, uw, ud = _ublock(self.config)
        if (uh == 2 and name == "NPU_OP_CONV" and ofm_hw[0] == 1 and ofm_hw[1] % 2 == 0 and k.height == 1):
            uh, uw, bh = 1, 4, 1  # a one-row OFM uses a 1x4 microblock
        n_xy = _ceil(bh, uh) * _ceil(bw, uw)
        n_z = _ceil(bd, ud)
        bits = _bits(regs.param("IFM_PRECISION"), 2)
        weight_fetch = WEIGHT_FETCH_CYCLES_PER_CHANNEL * ud
        pass_cycles = MAC_CYCLES_PER_UBLOCK * n_xy
        taps = k.width * k.height
        ifm_passes = 1
        if name == "NPU_OP_POOL" and not reduce_sum:
            steps = 1
            cycles = max(4, taps) * n_xy * n_z * (bits // 2 if self.config.macs > 32 else 1)
        elif name == "NPU_OP_DEPTHWISE":
            steps = taps / DEPTHWISE_TAPS_PER_STEP
            cycles = max(weight_fetch, pass_cycles * bits // 8) * steps * n_z
        elif k.part_kernel_first and name == "NPU_OP_CONV":
            steps = _ceil(taps, 4 if bits == 8 else 2)
            channel_groups = _ceil(min(ifm_depth, IFM_BLOCK_DEPTH), 8)
            cycles = max(weight_fetch, pass_cycles) * steps * n_z * channel_groups
            ifm_passes = _ceil(ifm_depth, IFM_BLOCK_DEPTH)
        else:
            steps = taps
            cycles = max(weight_fetch, pass_cycles) * steps * n_z
            ifm_passes = _ceil(ifm_depth, IFM_BLOCK_DEPTH)
        cycles += self._accumulator_delay(regs, n_xy, n_z, steps)
        return cycles * ifm_passes / self.config.cores

    def _accumulator_delay(self, regs: Registers, n_xy: int, n_z: int, steps: int) -> int:
        """Pipeline stalls of a block whose kernel steps each cover one microblock."""
        if n_xy != 1:
            return 0
        acc40 = regs.param("ACC_FORMAT") == ACC_FORMAT_INT40
        if self.config.macs == 32:
            delay = 7 if acc40 else 3
        else:
            delay = 3 if acc40 and self.config.macs <= 128 else 2
        return delay * steps if n_z == 1 else delay * (steps - 1) * n_z

    def counters(self) -> dict[str, int]:
        return {"cycles": int(math.ceil(self.total)), "mac_active": int(math.ceil(self.mac_cycles)),
                "macs": self.macs, "dma_bytes": self.dma_bytes, "block_ops": self.block_ops}
