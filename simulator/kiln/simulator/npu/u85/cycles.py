"""A PMU cycle estimate for Ethos-U85 command streams: Vela 5.2.0's "NPU cycles" (regor's
ethos_u85_performance.cpp and network_performance.cpp) evaluated on what the registers
tell, per Vela operation, with memories timed as kiln.simulator.npu.cycles reads them from
Vela's vela.ini (region 0 const, 1 arena, 2 fast scratch).

Operations. Consecutive commands that slice one operation in depth (same kind and kernel;
each OFM, unless chained, starting at the channel after the one before, the IFM the same
or for depthwise and pooling starting so too) count as one operation of their summed
depth, as Vela costs it; each command adds what it changes of that operation's figure. So do the stripes of a cascade,
interleaved with other operations' stripes: commands that run the buffered weights their
operation's first stripe had DMAed (same kernel, IFM and OFM widths and depths, weight and
scale addresses; until a DMA overwrites those) count as one operation of their summed
height. An elementwise command whose IFM comes from a chaining buffer belongs to the
operation that filled the buffer (a MAC or elementwise operation, each of whose slices
chains the same): it adds its output unit's per-element figure to that operation's.

An operation's own cycles (Vela's opCycles). Vela sees a transposed OFM in its transposed
shape. MAC operations (CONV, DEPTHWISE, POOL) run in OFM blocks (OFM_BLK_*) of microblocks
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
activation, transpose and reverse ACTIVATION_CYCLES, the larger counts; a chain the sum of
its operations' figures) per block; the slower of the two units sets the pace, a quarter
of their sum bounds it from below. The output unit is also bounded by the time to fetch a
block's scales (10 bytes a channel at the read latency / 256 of the weights' memory, where
Vela takes the scales to be), the issue rate by the imbalance of reading an IFM block and
writing an OFM block; the operation then waits once for its first IFM block and its last
OFM block (latency plus the block's bytes at the memory's bandwidth, stretched by short
bursts). Elementwise and RESIZE operations cost their output elements times the output
unit's figure (DIV 33 cycles), at least the issue rate of their blocks' memory access.

Weights and LUTs. DMA commands cost nothing themselves. An operation whose weights Vela
buffered into the fast scratch (WEIGHT_REGION in another memory than region 0) costs
  max(W_all - S_prev + S, own cycles + max(W_first - S_prev, 0))
where W_all and W_first are the DMA times of all its weights and scales and of its first
command's (a memory-to-memory copy: the slower of reading at the Mem2Mem channel's
bandwidth and writing at the write channel's, each after its latency; ChannelBW limits a
channel by its outstanding transactions and read buffers, CHANNEL_READ_BUFFERS), S_prev
the slack of the operation before and S its own: the cycles Vela's scheduler estimated
for the operation (its last depth slice if sliced) while every feature map was still in
the arena, which is what Vela measures slack with: unbuffered, as if its weights were not
2:4 sparse; buffered and writing a transposed OFM, over the transposed OFM's height and
width but the untransposed depth. A LUT loaded into the NPU before an operation that is a
lookup alone (a 1x1 pooling) adds its DMA time, less the slack of the operation before
unless the operation's weights are buffered; Vela charges nothing for a LUT that activates
another operation's output.

Not modelled: a sliced operation's weights are as many bytes as its slices' streams (Vela
times the full-depth encoding, a little smaller); stripes of operations whose weights are
not buffered count as operations of their own.

Against Vela's NPU cycles (bench/npu.py, each board's default system config and memory
mode: Ethos_U85_SYS_DRAM_Mid, Dedicated_Sram_384KB), estimate / Vela:
  ethos-u85-256:  tiny_cnn, ds_cnn, resnet8, mobilenet_v1_025, fc_autoencoder, digits 1.000
                  (equal), mobilenet_v2_035 1.000 (+14 cycles), mobilenet_v2 1.000 (-729)
  ethos-u85-128, -512: every zoo model within 0.2 %
  ethos-u85-2048: within 0.3 % but mobilenet_v2 0.991
Architecture models (kiln.models.ARCHITECTURES) at u85-256: within 0.1 % but vit_tiny
0.983, kwt 0.909 and unet_tiny 0.887 (Vela costs each phase of a transposed convolution
over the whole OFM, and some poolings at the 32-bit width of the tensor they rescale where
the command reads 8 bits); with 16-bit activations within 0.1 % but unet_tiny 0.906.
Per operation (operations()) the figures equal Vela's per-layer NPU cycles
(--verbose-performance) or come within 2 % (mobilenet_v2's 55 at u85-256), but for
depthwise operations sliced in depth on u85-2048 (+5 %, the weights' size)."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np

from kiln.simulator.npu.commands import Command
from kiln.simulator.npu.config import NpuConfig
from kiln.simulator.npu.cycles import MemoryTiming, memories_for
from kiln.simulator.npu.registers import Registers
from kiln.simulator.npu.u85 import weights as u85_weights
from kiln.simulator.npu.u85.registers import STORAGE_CHAINED, TRANSPOSES

# Per configuration (MACs of all cores): output unit cycles per element for 8-, 16-, 32-,
# 64-bit OFMs, 32-bit-input binary elementwise to a narrow / 32-bit OFM (the first of these
# also for a 32-bit write to a chaining buffer); activation (plain, H<->W transpose or W
# reverse); resize at a low and a high ratio (8-, 16-bit).
OUTPUT_CYCLES = {
    128: (0.5, 0.5, 0.5, 1.0, 1.0, 1.0),
    256: (0.25, 0.25, 0.25, 0.5, 0.5, 0.5),
    512: (0.125, 0.125, 0.25, 0.5, 0.25, 0.25),
    1024: (0.0625, 0.125, 0.25, 0.5, 0.125, 0.25),
    2048: (0.03125, 0.0625, 0.125, 0.25, 0.0625, 0.125),
}
ACTIVATION_CYCLES = {
    128: (0.5, 1.0),
    256: (0.25, 0.5),
    512: (0.125, 0.25),
    1024: (0.0625, 0.125),
    2048: (0.03125, 0.0625),
}
RESIZE_LOW = {128: (0.5, 1.0), 256: (0.25, 0.5), 512: (0.125, 0.25), 1024: (0.125, 0.125), 2048: (0.0625, 0.0625)}
RESIZE_HIGH = {128: (0.5, 1.0), 256: (0.25, 0.5), 512: (0.125, 0.25), 1024: (0.0625, 0.125), 2048: (0.03125, 0.0625)}
# Read buffers of the Mem2Mem, IFM-stream, weight, fast-weight, IFM and scale channels.
CHANNEL_READ_BUFFERS = {
    128: (64, 64, 128, 128, 104, 16),
    256: (104, 104, 128, 128, 128, 16),
    512: (128, 128, 256, 256, 128, 16),
    1024: (256, 256, 416, 208, 256, 16),
    2048: (256, 256, 512, 256, 256, 16),
}
MEM2MEM_CHANNEL = 0
# IFM allocation units (height, width, 128-bit words deep) by OFM microblock (height, width),
# for IFM blocks up to 128, 256 and more bits deep.
_AU_A = ((2, 2, 1), (1, 2, 2), (1, 1, 4))
_AU_B = ((1, 4, 1), (1, 2, 2), (1, 1, 4))
IFM_ALLOCATION_UNITS = {
    128: {(1, 2): ((1, 2, 1), (1, 1, 2), (1, 1, 2)), (1, 1): ((1, 2, 1), (1, 1, 2), (1, 1, 2))},
    256: {(2, 2): _AU_A, (1, 2): _AU_A, (1, 4): _AU_B},
    512: {(2, 2): _AU_A, (1, 4): _AU_B},
    1024: {
        (2, 2): ((2, 4, 1), (2, 2, 2), (1, 2, 4)),
        (2, 4): ((2, 4, 1), (2, 2, 2), (1, 2, 4)),
        (1, 4): ((2, 4, 1), (1, 4, 2), (1, 2, 4)),
    },
    2048: {
        (2, 2): ((4, 4, 1), (2, 4, 2), (2, 2, 4)),
        (4, 4): ((4, 4, 1), (2, 4, 2), (2, 2, 4)),
        (1, 4): ((4, 4, 1), (2, 4, 2), (1, 4, 4)),
    },
}
# The NPU's LUT RAM as a DMA destination, as regor rates it.
LUT_RAM = MemoryTiming(
    bandwidth=1.0, burst=1, read_latency=0, write_latency=0, ports=1, max_reads=1000, max_writes=1000
)
DIV_CYCLES = 33.0
SUBKERNEL = 8
_BINARY = {0, 1, 2, 3, 4, 8, 9, 10, 11, 16, 17, 18, 19, 33, 34, 35, 42}  # elementwise modes with an IFM2
MAC_COMMANDS = ("NPU_OP_CONV", "NPU_OP_DEPTHWISE", "NPU_OP_POOL")
DMA_INTERNAL = 1 << 8  # DMA0_*_REGION: the side is inside the NPU (the LUT RAM)


def _bits(regs: Registers, prefix: str) -> int:
    dtype = regs.ofm_dtype()[0] if prefix == "OFM" else regs.ifm_dtype(prefix)[0]
    return 8 * np.dtype(dtype).itemsize


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def channel_bandwidth(memory: MemoryTiming, read_buffers: int | None) -> float:
    """Bytes per cycle of one memory channel: a read channel with `read_buffers` buffers,
    or (None) the write channel; at most the memory's bandwidth, less when its outstanding
    transactions cannot cover its latency."""
    if read_buffers is None:
        outstanding, latency, buffer_limit = memory.max_writes, memory.write_latency, math.inf
    else:
        outstanding, latency = memory.max_reads, memory.read_latency
        buffer_limit = read_buffers / max(memory.burst // 16, 1)
    if latency == 0:
        return memory.bandwidth
    transactions = min(buffer_limit, outstanding * memory.ports * 0.8)
    return min(memory.bandwidth, memory.burst * transactions / latency * 0.8)


def _shape_transfer(memory: MemoryTiming, nhcwb16: bool, bits: int, block, shape, read: bool) -> int:
    """Cycles to read (IFM) or write (OFM) the first block of a feature map of `shape`:
    latency, then its bytes at the memory's bandwidth, stretched by bursts shorter than the
    memory's longest. `block` is the unclipped block, as it sets the burst."""
    _, w, c = block
    if nhcwb16:
        burst = bits * w * c if shape[1] * bits * 16 // 8 == c else 16 * bits * w
    else:
        x_stride = shape[2] * bits // 8
        if read:
            burst = bits * w * c if x_stride == c else bits * c
        elif c <= 16 and x_stride == c:
            burst = bits * w * c
        else:
            burst = min(64 * 8, 16 * bits, c * bits)
    burst_bytes = max(1, min(memory.burst, burst // 8))
    elements = math.prod(min(s, b) for s, b in zip(shape, block))
    transfer = (elements * bits // 8) * memory.burst // burst_bytes
    latency = memory.read_latency if read else memory.write_latency
    return latency + int(transfer / memory.bandwidth)


@dataclass
class _Operation:
    """One operation as Vela costs it: one command, consecutive depth slices of one, or the
    stripes of one in a cascade."""

    key: tuple | None  # what a later command must share to be a slice of it (None: nothing may)
    regs: Registers  # the last command's registers
    regs_first: Registers  # the first command's
    name: str
    mode: int
    depth: int  # OFM depth of all its commands (before any transpose)
    last_depth: int
    height: int  # OFM height of all its commands (before any transpose)
    commands: int
    buffered: bool  # weights DMAed into another memory than region 0's
    weight_bytes: int  # weights and scales of all its commands
    first_weight_bytes: int
    previous: _Operation | None  # the operation before
    lut: int  # cycles of the LUT DMA before it
    slices: int = 1  # depth slices
    parts: int = 1  # its block commands (depth slices or stripes)
    chained: dict = field(default_factory=dict)  # part -> output figure of the elementwise commands chained to it
    counted: float = 0.0  # cycles its commands have added so far
    slack: float = 0.0
    index: int = 0  # its position in U85CycleModel.operations()

    @property
    def chain_figure(self) -> float:
        """Output-unit cycles per element of the elementwise operations chained to it (each
        part chains the same ones)."""
        return max(self.chained.values(), default=0.0)


class U85CycleModel:
    """The Ethos-U85's estimate over one run of a stream (the interface of
    kiln.simulator.npu.cycles.CycleModel)."""

    def __init__(self, config: NpuConfig):
        self.config = config
        self.memories = memories_for(config)
        self.macs_total = config.total_macs
        self.estimate = 0.0  # the sum of the operations' figures
        self.mac_cycles = 0.0
        self.macs = 0
        self.dma_bytes = 0
        self.block_ops = 0
        self._operation: _Operation | None = None  # the one the last block command was costed in
        self._costed: int | None = None  # costed_in()'s answer
        self._operations: list[_Operation] = []
        self._striped: dict[tuple, _Operation] = {}  # operations later stripes may continue, by their weights
        self._lut = 0  # cycles of LUT DMAs not yet charged to an operation

    def account(self, command: Command, regs: Registers) -> float:
        """Adds `command` (an NPU_OP_*) run with the register state `regs`; returns the
        cycles it added to the estimate: 0 for DMA and wait commands; a command that slices
        an operation or chains to it adds what it changes of that operation's figure, which
        may be negative (an operation of one slice waits for its first IFM block in Vela's
        slack, one of several does not). operations() gives the per-operation figures."""
        name = command.name
        added = 0.0
        self._costed = None
        if name == "NPU_OP_DMA_START":
            self._dma(regs)
        elif name in MAC_COMMANDS:
            self.block_ops += 1
            added = self._mac_command(name, command.param & 7, regs)
            self._costed = self._operation.index
        elif name in ("NPU_OP_ELEMENTWISE", "NPU_OP_RESIZE"):
            self.block_ops += 1
            added = self._elementwise_command(name, command.param, regs)
            self._costed = self._operation.index
        self.estimate += added
        return float(added)  # an operation's figure may be a whole number

    # ---- memories ------------------------------------------------------------------------

    def _memory(self, region: int) -> MemoryTiming:
        region &= 7
        return self.memories[region] if region < len(self.memories) else self.memories[1]

    def mem_to_mem(self, dst: MemoryTiming, src: MemoryTiming, size: int) -> int:
        """Cycles of a DMA copy of `size` bytes, as Vela's MemToMemCycles rates it."""
        read_bw = channel_bandwidth(src, CHANNEL_READ_BUFFERS[self.macs_total][MEM2MEM_CHANNEL])
        read = int(size / read_bw) + src.read_latency
        write = int(size / channel_bandwidth(dst, None)) + dst.write_latency
        return max(read, write)

    def _dma(self, regs: Registers) -> None:
        src, dst = regs.param("DMA0_SRC_REGION"), regs.param("DMA0_DST_REGION")
        rows = 1 if not (src >> 9) & 3 else max(1, regs.param("DMA0_SIZE0"))
        rows *= max(1, regs.param("DMA0_SIZE1")) if (src >> 9) & 3 == 2 else 1
        size = regs.address("DMA0_LEN") * rows
        self.dma_bytes += size
        if dst & DMA_INTERNAL:
            self._lut += self.mem_to_mem(LUT_RAM, self._memory(src), size)
            return
        start = regs.address("DMA0_DST")
        for key, operation in list(self._striped.items()):
            regs_first = operation.regs_first
            if (regs_first.param("WEIGHT_REGION") & 7) == (dst & 7) and any(
                start < regs_first.address(f"{what}_BASE") + regs_first.address(f"{what}_LENGTH")
                and regs_first.address(f"{what}_BASE") < start + size
                for what in ("WEIGHT", "SCALE")
            ):
                del self._striped[key]

    # ---- operations ------------------------------------------------------------------------

    def _start(self, key, regs: Registers, name: str, mode: int, buffered: bool, weight_bytes: int) -> _Operation:
        # Vela charges a LUT's DMA to an operation that is a LUT lookup alone (a 1x1 pooling
        # here); one that follows another operation in its group is charged nothing.
        lookup = (
            name == "NPU_OP_POOL"
            and mode != 2
            and regs.param("KERNEL_HEIGHT_M1") == 0
            and regs.param("KERNEL_WIDTH_M1") == 0
        )
        lut = self._lut if lookup else 0
        snapshot = _snapshot(regs)
        operation = _Operation(
            key,
            snapshot,
            snapshot,
            name,
            mode,
            regs.param("OFM_DEPTH_M1") + 1,
            regs.param("OFM_DEPTH_M1") + 1,
            regs.param("OFM_HEIGHT_M1") + 1,
            1,
            buffered,
            weight_bytes,
            weight_bytes,
            self._operation,
            lut,
        )
        self._lut = 0
        self._operation = operation
        operation.index = len(self._operations)
        self._operations.append(operation)
        return operation

    def _mac_command(self, name: str, mode: int, regs: Registers) -> float:
        # A depth slice of a convolution reads all of the IFM; one of a depthwise convolution
        # or pooling the IFM channels of its OFM channels.
        whole_ifm = name == "NPU_OP_CONV" or (name == "NPU_OP_POOL" and mode == 2)
        key = (
            name,
            mode,
            regs.param("IFM_REGION"),
            regs.param("IFM_HEIGHT0_M1"),
            regs.param("IFM_WIDTH0_M1"),
            regs.address("IFM_STRIDE_Y"),
            regs.param("KERNEL_HEIGHT_M1"),
            regs.param("KERNEL_WIDTH_M1"),
            regs.param("KERNEL_STRIDE"),
            regs.param("OFM_REGION"),
            regs.param("OFM_HEIGHT_M1"),
            regs.param("OFM_WIDTH_M1"),
            regs.param("OFM_PRECISION"),
            regs.address("OFM_STRIDE_Y"),
        )
        if whole_ifm:
            key += (regs.address("IFM_BASE0"), regs.param("IFM_DEPTH_M1"))
        weighted = _weighted(name, mode)
        weight_bytes = self._weight_bytes(regs) if weighted else 0
        buffered = weighted and self._memory(regs.param("WEIGHT_REGION")) is not self.memories[0]
        # A stripe of a cascade runs the weights its operation's first stripe had DMAed.
        stripe_key = (
            (
                name,
                mode,
                regs.param("KERNEL_HEIGHT_M1"),
                regs.param("KERNEL_WIDTH_M1"),
                regs.param("KERNEL_STRIDE"),
                regs.param("IFM_DEPTH_M1"),
                regs.param("IFM_WIDTH0_M1"),
                regs.param("OFM_WIDTH_M1"),
                regs.param("OFM_DEPTH_M1"),
                regs.param("OFM_PRECISION"),
                regs.param("WEIGHT_REGION"),
                regs.address("WEIGHT_BASE"),
                regs.address("WEIGHT_LENGTH"),
                regs.address("SCALE_BASE"),
                regs.address("SCALE_LENGTH"),
            )
            if buffered
            else None
        )
        operation = self._operation
        striped = self._striped.get(stripe_key)
        if operation and operation.key == key and _follows(operation, regs, whole_ifm):
            depth = regs.param("OFM_DEPTH_M1") + 1
            operation.depth += depth
            operation.last_depth = depth
            operation.commands += 1
            operation.parts += 1
            operation.slices += 1
            operation.weight_bytes += weight_bytes
            operation.regs = _snapshot(regs)
        elif striped is not None:
            operation = striped
            operation.height += regs.param("OFM_HEIGHT_M1") + 1
            operation.commands += 1
            operation.parts += 1
            operation.regs = _snapshot(regs)
            operation.key = None
            self._operation = operation
        else:
            operation = self._start(key, regs, name, mode, buffered, weight_bytes)
            if stripe_key is not None:
                self._striped[stripe_key] = operation
        own = self._mac_cycles(operation, regs.param("OFM_DEPTH_M1") + 1, account=True)
        self.mac_cycles += own
        return self._charge(operation)

    def _elementwise_command(self, name: str, param: int, regs: Registers) -> float:
        producer = self._operation
        chained = name == "NPU_OP_ELEMENTWISE" and STORAGE_CHAINED in (
            (regs.param("IFM_PRECISION") >> 14) & 3,
            (regs.param("IFM2_PRECISION") >> 14) & 3,
        )
        if chained and producer is not None and producer.name != "NPU_OP_RESIZE":
            producer.chained[producer.parts] = producer.chained.get(producer.parts, 0.0) + self._output_per_element(
                regs, param & 0x3F
            )
            producer.commands += 1
            return self._charge(producer)
        operation = self._start(None, regs, name, param, False, 0)
        return self._charge(operation)

    def _charge(self, operation: _Operation) -> float:
        """Updates `operation`'s figure and slack; returns what its figure grew by."""
        if operation.name in MAC_COMMANDS:
            own = self._mac_cycles(operation, operation.depth)
        else:
            own = self._elementwise_cycles(operation)
        prev_slack = operation.previous.slack if operation.previous else 0.0
        if operation.buffered:
            staging = self._memory(operation.regs.param("WEIGHT_REGION"))
            all_weights = self.mem_to_mem(staging, self.memories[0], operation.weight_bytes)
            first_weights = self.mem_to_mem(staging, self.memories[0], operation.first_weight_bytes)
            operation.slack = self._mac_cycles(
                operation, operation.last_depth, reference=True, first=operation.slices == 1, sliced=True
            )
            figure = (
                max(all_weights - prev_slack + operation.slack, own + max(first_weights - prev_slack, 0))
                + operation.lut
            )
        else:
            if operation.name in MAC_COMMANDS:
                operation.slack = self._mac_cycles(operation, operation.depth, reference=True, dense=True)
            else:
                operation.slack = self._elementwise_cycles(operation, reference=True)
            figure = own + max(operation.lut - prev_slack, 0)
        added = figure - operation.counted
        operation.counted = figure
        return added

    def _weight_bytes(self, regs: Registers) -> int:
        lengths = ["WEIGHT_LENGTH"] + [f"WEIGHT{core}_LENGTH" for core in range(1, self.config.cores)]
        scales = ["SCALE_LENGTH"] + (["SCALE1_LENGTH"] if self.config.cores > 1 else [])
        return sum(regs.address(name) for name in lengths + scales)

    # ---- cycle formulas --------------------------------------------------------------------

    def _output_per_element(self, regs: Registers, elementwise_mode: int | None = None) -> float:
        ifm_bits, ofm_bits = _bits(regs, "IFM"), _bits(regs, "OFM")
        table = OUTPUT_CYCLES[self.macs_total]
        to_chain = (regs.param("OFM_PRECISION") >> 14) & 3 == STORAGE_CHAINED
        if to_chain and (ofm_bits == 32 or ifm_bits == 32):
            figure = table[4]
        elif ofm_bits == 64:
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

    def _ofm_shape(self, regs: Registers, height: int, depth: int) -> tuple[int, int, int]:
        """The OFM shape Vela costs: the registers' width, `height` and `depth`, transposed
        as written."""
        permutation = TRANSPOSES.get((regs.param("OFM_PRECISION") >> 11) & 7, (0, 1, 2))
        shape = (height, regs.param("OFM_WIDTH_M1") + 1, depth)
        return tuple(shape[axis] for axis in permutation)

    def _ofm_side(self, operation: _Operation, reference: bool) -> tuple[MemoryTiming, bool, int]:
        """(memory, NHCWB16, bits) of the OFM; Vela leaves a chaining buffer in the arena."""
        regs = operation.regs
        chained = (regs.param("OFM_PRECISION") >> 14) & 3 == STORAGE_CHAINED
        memory = self.memories[1] if reference or chained else self._memory(regs.param("OFM_REGION"))
        return memory, bool((regs.param("OFM_PRECISION") >> 6) & 3), _bits(regs, "OFM")

    def _elementwise_cycles(self, operation: _Operation, reference: bool = False) -> float:
        regs, name, param = operation.regs, operation.name, operation.mode
        shape = self._ofm_shape(regs, operation.height, operation.depth)
        ofm_memory, ofm_nhcwb16, ofm_bits = self._ofm_side(operation, reference)
        h, w, c = shape
        if ofm_nhcwb16:
            c = _ceil(c, 16) * 16
        if name == "NPU_OP_RESIZE":
            in_h, in_w = regs.param("KERNEL_HEIGHT_M1") + 1, regs.param("KERNEL_WIDTH_M1") + 1
            ratio = min((w + in_w // 2) // in_w, (h + in_h // 2) // in_h)
            figures = RESIZE_HIGH if ratio >= self.macs_total // 512 else RESIZE_LOW
            per_element = figures[self.macs_total][0 if _bits(regs, "IFM") == 8 else 1]
        elif param & 0x3F == 11:
            per_element = DIV_CYCLES
        else:
            per_element = self._output_per_element(regs, param & 0x3F)
        per_element += operation.chain_figure
        block = (
            regs.param("OFM_BLK_HEIGHT_M1") + 1,
            regs.param("OFM_BLK_WIDTH_M1") + 1,
            regs.param("OFM_BLK_DEPTH_M1") + 1,
        )
        transfers = [_shape_transfer(ofm_memory, ofm_nhcwb16, ofm_bits, block, shape, False)]
        ifm_shape = (regs.param("IFM_HEIGHT0_M1") + 1, regs.param("IFM_WIDTH0_M1") + 1, regs.param("IFM_DEPTH_M1") + 1)
        for prefix in ("IFM", "IFM2"):
            if prefix == "IFM2" and not (
                name == "NPU_OP_ELEMENTWISE" and param & 0x3F in _BINARY and regs.param("IFM2_BROADCAST") & 0xF != 8
            ):
                continue
            memory = self.memories[1] if reference else self._memory(regs.param(f"{prefix}_REGION"))
            nhcwb16 = bool((regs.param(f"{prefix}_PRECISION") >> 6) & 3)
            transfers.append(_shape_transfer(memory, nhcwb16, _bits(regs, prefix), block, ifm_shape, True))
        elements = h * w * c
        issue = math.ceil((max(transfers) / math.prod(block) + per_element) / 4 * elements)
        return max(issue, math.ceil(per_element * elements))

    def _mac_cycles(
        self,
        operation: _Operation,
        depth: int,
        reference: bool = False,
        first: bool = True,
        sliced: bool = False,
        dense: bool = False,
        account: bool = False,
    ) -> float:
        """Vela's cycles of `operation` with OFM depth `depth`: with the memories its feature
        maps are in, or (`reference`) with every feature map in the arena; `first`: it waits
        for its first IFM block; `sliced`: shaped as Vela's scheduler shapes a slice (the
        transposed OFM's height and width, the untransposed depth); `dense`: as if its
        weights were not 2:4 sparse (Vela's scheduler costs an unbuffered operation's
        slack so). `account`: counts the
        command's MACs and returns its MAC-array cycles instead."""
        regs, name, mode = operation.regs, operation.name, operation.mode
        height = regs.param("OFM_HEIGHT_M1") + 1 if account else operation.height
        out = self._ofm_shape(regs, height, depth)
        if sliced:
            out = (out[0], out[1], depth)
        block_regs = (
            regs.param("OFM_BLK_HEIGHT_M1") + 1,
            regs.param("OFM_BLK_WIDTH_M1") + 1,
            regs.param("OFM_BLK_DEPTH_M1") + 1,
        )
        block = tuple(min(o, b) for o, b in zip(out, block_regs))
        (uh, uw) = regs.acc_format()[3]
        ud = u85_weights.OFM_UBLOCK_DEPTH.get(self.macs_total, {}).get((uh, uw), 8)
        ublocks = (_ceil(block[0], uh), _ceil(block[1], uw), _ceil(block[2], ud))
        k = regs.kernel()
        ifm_bits = _bits(regs, "IFM")
        ifm_depth = regs.param("IFM_DEPTH_M1") + 1
        sparse = bool((regs.param("WEIGHT_FORMAT") >> 4) & 1)
        conv = name == "NPU_OP_CONV" or (name == "NPU_OP_POOL" and mode == 2)  # REDUCE_SUM runs as one
        if conv:
            block_depth = u85_weights.ifm_block_depth(self.macs_total, ud, ifm_bits, k.part_kernel_first, sparse)
            ifm_block_depth = min(ifm_depth, block_depth)
        else:
            block_depth = ifm_block_depth = block_regs[2]
        mac = self._mac_block(name, conv, k, ublocks, ud, ifm_bits, ifm_block_depth, sparse and not dense, regs)
        if conv:
            mac *= _ceil(ifm_depth, ifm_block_depth)
        in_blocks = _ceil(out[0], uh) * _ceil(out[1], uw) * _ceil(out[2], ud)
        blocks = in_blocks / (ublocks[0] * ublocks[1] * ublocks[2])
        if account:
            h, w, c = regs.ofm_shape()
            self.macs += k.width * k.height * h * w * c * (ifm_depth if name == "NPU_OP_CONV" else 1)
            return mac * blocks
        figure = operation.chain_figure + self._output_per_element(regs)
        ao = math.ceil(figure * block[0] * block[1] * block[2])
        if _weighted(name, mode) and regs.address("SCALE_LENGTH"):
            ao = max(ao, 10 * block[2] * self._memory(regs.param("WEIGHT_REGION")).read_latency / 256)
        # The IFM block that feeds an OFM block (before any transpose of the OFM), in whole
        # allocation units.
        au_h, au_w, au_d = _ifm_allocation_unit(self.macs_total, (uh, uw), block_depth * ifm_bits, ifm_bits)
        taps_h = min((k.height - 1) * k.dilation_y + 1, SUBKERNEL)
        taps_w = min((k.width - 1) * k.dilation_x + 1, SUBKERNEL)
        ifm_block = (
            _ceil((block_regs[0] - 1) * k.stride_y + taps_h, au_h) * au_h,
            _ceil((block_regs[1] - 1) * k.stride_x + taps_w, au_w) * au_w,
            _ceil(block_depth, au_d) * au_d,
        )
        ifm_shape = (regs.param("IFM_HEIGHT0_M1") + 1, regs.param("IFM_WIDTH0_M1") + 1, ifm_depth if conv else depth)
        ifm_memory = self.memories[1] if reference else self._memory(regs.param("IFM_REGION"))
        ifm_cycles = _shape_transfer(
            ifm_memory, bool((regs.param("IFM_PRECISION") >> 6) & 3), ifm_bits, ifm_block, ifm_shape, True
        )
        ofm_memory, ofm_nhcwb16, ofm_bits = self._ofm_side(operation, reference)
        ofm_cycles = _shape_transfer(ofm_memory, ofm_nhcwb16, ofm_bits, block_regs, out, False)
        imbalance = abs(ofm_cycles - ifm_cycles) if blocks > 1 else 0
        issue = (imbalance + mac + ao) / 4
        mac_paced, ao_paced = max(mac, issue), max(ao, issue)
        if mac_paced > ao_paced:
            total = int(int(mac_paced * blocks) + ao_paced)
        else:
            total = int(ao_paced * blocks + mac_paced)
        return total + ofm_cycles + (ifm_cycles if first else 0)

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

    def costed_in(self) -> int | None:
        """Index in operations() of the operation the last command was costed in if it was a
        block command (CONV, DEPTHWISE, POOL, ELEMENTWISE, RESIZE); None for a DMA or wait."""
        return self._costed

    def operations(self) -> list[tuple[str, int, float]]:
        """Per operation as Vela costs it, in stream order: (its first command's name, its
        commands, its cycles); the cycles sum to the estimate. A chained elementwise command
        counts with its producer's operation."""
        return [(op.name, op.commands, float(op.counted)) for op in self._operations]

    def counters(self) -> dict[str, int]:
        return {
            "cycles": int(math.ceil(self.estimate)),
            "mac_active": int(math.ceil(self.mac_cycles)),
            "macs": self.macs,
            "dma_bytes": self.dma_bytes,
            "block_ops": self.block_ops,
        }


def _ifm_allocation_unit(macs: int, microblock: tuple[int, int], depth_bits: int, bits: int) -> tuple[int, int, int]:
    """(height, width, depth) of the unit the IFM buffer is allocated in, for an IFM block
    `depth_bits` deep."""
    units = IFM_ALLOCATION_UNITS[macs]
    size = 0 if depth_bits <= 128 else 1 if depth_bits <= 256 else 2
    h, w, d = units.get(microblock, next(iter(units.values())))[size]
    return h, w, d * 128 // bits


def _weighted(name: str, mode: int) -> bool:
    """Whether a MAC command reads weights and scales (not a pooling, nor a convolution
    whose weights are IFM2: Vela's MATMUL)."""
    return name == "NPU_OP_DEPTHWISE" or (name == "NPU_OP_CONV" and not mode & 1)


def _follows(operation: _Operation, regs: Registers, whole_ifm: bool) -> bool:
    """Whether the command of `regs` is the next depth slice of `operation`: its OFM (unless
    chained) and unless it reads the whole IFM its IFM start at the channel after the
    operation's."""
    first = operation.regs_first
    chained = (regs.param("OFM_PRECISION") >> 14) & 3 == STORAGE_CHAINED  # its OFM base is no address
    for prefix in () if chained and whole_ifm else ("IFM",) if chained else ("OFM",) if whole_ifm else ("OFM", "IFM"):
        offset = regs.address(f"{prefix}_BASE0") - first.address(f"{prefix}_BASE0")
        precision = regs.param(f"{prefix}_PRECISION")
        if (precision >> 6) & 3:  # NHCWB16: 16-channel bricks stride_c apart
            expected = operation.depth // 16 * regs.address(f"{prefix}_STRIDE_C") if operation.depth % 16 == 0 else -1
        else:  # NHWC: and the rows dense (not one phase of a strided write)
            dense = regs.address(f"{prefix}_STRIDE_Y") == (
                regs.param(f"{prefix}_WIDTH0_M1" if prefix == "IFM" else "OFM_WIDTH_M1") + 1
            ) * regs.address(f"{prefix}_STRIDE_X")
            expected = operation.depth * _bits(regs, prefix) // 8 if dense else -1
        if offset != expected:
            return False
    return True


def _snapshot(regs: Registers) -> Registers:
    """A copy of `regs` later commands do not change."""
    copied = copy.copy(regs)
    copied.values = dict(regs.values)
    copied.payloads = dict(regs.payloads)
    return copied
