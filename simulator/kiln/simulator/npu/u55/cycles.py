"""An estimate of the NPU's cycles for a command stream, not a timing simulation.

Its target is Vela's own figure for the same stream (VelaResult.npu_cycles, the sum of
Vela's per-operation "NPU" cycles); bench/npu.py and tests/simulator/test_npu_cycles.py
compare the two on the zoo models. It evaluates the performance model of Vela 5.2's back
end (regor's Ethos-U55/U65 estimator, public in the ethos-u-vela repository) on what the
registers of each command say, and runs the operations and DMA transfers on a timeline:

* Memories. Every region is in a memory of the system the stream was compiled for
  (NpuConfig.system_config and memory_mode, as Vela's own parser reads them from its
  vela.ini): region 0 (weights, scales, constants) in const_mem_area, region 1 (scratch)
  in arena_mem_area, region 2 (fast scratch) in cache_mem_area; other regions count as
  the scratch's. A memory moves `bandwidth` bytes per NPU cycle (the AXI port's 8 bytes on
  U55, 16 on U65, times the memory's clock scale); an access waits its read or write
  latency first (kiln.simulator.npu.cycles); transfers in bursts shorter than the memory's
  longest cost as if every burst were the longest (_transfer_bytes).
* CONV, DEPTHWISE, POOL run the OFM in blocks of OFM_BLK_HEIGHT x WIDTH x DEPTH; blocks
  are counted in microblocks (1x1x4 on U55-32, 1x1x8 on U55-64, 1x2x8 on U55-128, 2x2x8
  otherwise; 1x4x8 for a one-row OFM of a 1-row kernel), so a partial block counts as its
  fraction. Per block, the MAC array takes _mac_block cycles (4 per microblock, kernel step
  and IFM block depth, at least the weight fetch of 4 cycles per microblock channel; 8x8
  sub-kernels; accumulator stalls for single-microblock blocks; U65-512's two cores share
  it) and the output stage OUTPUT_CYCLES cycles per element, at least the time to fetch
  the block's scales (10 bytes a channel at the scale region's read latency per 256).
  Both stages are pipelined (max x blocks + min) and bounded below by the command issue
  rate, a quarter of the block's stages and the imbalance of its IFM read and OFM write.
  Every command then waits once for its first IFM block to arrive and its last OFM
  block to leave (latency plus transfer): for small operations this is most of the cost.
  Vela counts this once per operation: a CONV or DEPTHWISE command that is a further depth
  slice of the one before (_depth_slice) does not wait again; one split in stripes pays it
  per command here.
* ELEMENTWISE: OFM elements (depth rounded to 16 for NHCWB16) x the output stage's
  cycles per element, or the issue rate of blocks whose IFM or OFM access dominates.
* A 1x1 POOL that permutes axes (a transpose; its strides are not in NHWC order) costs the
  slower of reading its IFM and writing its OFM (_transpose).
* The timeline. The command processor issues an operation once fewer than
  MAX_OUTSTANDING_KERNELS are unfinished, and it starts when the one before ends. A
  DMA_START is issued once fewer than MAX_OUTSTANDING_DMA transfers are unfinished and
  runs, after the transfer before it, alongside the operations issued before it, taking
  the slower of its read and write side (into the SHRAM, a byte per cycle). DMA_WAIT and
  KERNEL_WAIT hold the command processor until the transfer or operation they name is
  done. The count is the time the last operation or transfer ends.

Vela charges a weight transfer against the previous operation's time in its reference
schedule, where every feature map is in the arena. When the fast scratch is a faster
memory than the arena (U65, Dedicated_Sram) its figure for an operation that waits for
weights is therefore larger than this timeline's (tiny_cnn's second convolution on
ethos-u65-512: Vela 648 cycles, here 240).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kiln.simulator.npu.commands import Command
from kiln.simulator.npu.config import NpuConfig
from kiln.simulator.npu.cycles import MemoryTiming, memories_for
from kiln.simulator.npu.registers import FORMAT_NHCWB16, UPSCALE_NONE, Kernel, Registers

# The SHRAM as a DMA destination (activation LUTs), as regor rates it.
SHRAM = MemoryTiming(bandwidth=1.0, burst=1, read_latency=0, write_latency=0)

# Output-stage cycles per OFM element, regor's table per (MACs per core, cores), indexed by
# the OUT_* kinds below; U65-256 has U55-256's figures.
OUTPUT_CYCLES = {
    (32, 1): (2.0, 3.0, 3.0, 3.0, 4.0, 6.0, 1.0, 2.0),
    (64, 1): (1.0, 1.5, 1.5, 1.5, 2.0, 3.0, 0.5, 1.0),
    (128, 1): (0.75, 1.25, 0.75, 0.75, 1.0, 1.5, 0.25, 0.5),
    (256, 1): (0.625, 1.125, 0.5, 0.375, 0.5, 0.75, 0.125, 0.25),
    (256, 2): (0.3125, 0.5625, 0.25, 0.1875, 0.25, 0.375, 0.0625, 0.125),
}
OUT_EW32_UNARY, OUT_EW32_BINARY, OUT_MUL32, OUT_MUL_ACC40, OUT_ADDSUB = 0, 1, 2, 3, 5
OUT_MAXPOOL, OUT_DEFAULT = 6, 7
# Cycles per element of a tanh, sigmoid or LUT activation, by (MACs per core, cores); the
# stage runs at the slower of this and its OUTPUT_CYCLES.
LUT_ACTIVATION_CYCLES = {(32, 1): 1.0, (64, 1): 1.0, (128, 1): 1.0, (256, 1): 1.0, (256, 2): 0.5}
# Operations and DMA transfers the command processor may have issued and not finished
# (Vela's max_outstanding_kernels and max_outstanding_dma, by product).
MAX_OUTSTANDING_KERNELS = 2
MAX_OUTSTANDING_DMA = {0: 1, 1: 2}

SUBKERNEL = 8  # kernels larger than 8x8 run as 8x8 sub-kernels
IFM_BLOCK_DEPTH = 32  # most IFM channels an (8-bit) block holds
MAC_CYCLES_PER_UBLOCK = 4  # per OFM microblock and kernel step
WEIGHT_FETCH_CYCLES = 4  # per OFM microblock channel and kernel step
DEPTHWISE_TAPS_PER_STEP = 4
SCALE_BYTES_PER_CHANNEL = 10
ISSUE_PARALLELISM = 4  # the command issue rate: a quarter of a block's work

ACC_FORMAT_INT40 = 1
ACTIVATION_TANH = 3  # and above: sigmoid, LUTs
POOL_MAX, POOL_REDUCE_SUM = 0, 2
ELEMENTWISE_MUL, ELEMENTWISE_ADD, ELEMENTWISE_SUB = 0, 1, 2
UNARY_ELEMENTWISE = (5, 6, 7)  # LRELU, ABS, CLZ
MAC_OPERATIONS = ("NPU_OP_CONV", "NPU_OP_DEPTHWISE", "NPU_OP_POOL")
DMA_REGION_INTERNAL = 1 << 8  # DMA0_*_REGION: the side is the SHRAM
STRIDE_1D, STRIDE_3D = 0, 2


@dataclass(frozen=True)
class Access:
    """One feature-map side of an operation as the estimate sees it."""

    memory: MemoryTiming
    nhcwb16: bool
    bits: int
    shape: tuple[int, int, int]  # the whole feature map (H, W, C)
    block: tuple[int, int, int]  # the block the hardware moves (H, W, C)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _ceil(a, b) * b


def _clip(shape, block) -> tuple[int, ...]:
    return tuple(min(s, b) for s, b in zip(shape, block))


def _count(shape, unit) -> int:
    """Units (whole or partial) covering `shape`."""
    return math.prod(_ceil(s, u) for s, u in zip(shape, unit))


def _bits(precision: int, shift: int) -> int:
    """Element bits of a *_PRECISION register's size field at bit `shift` (8 if reserved)."""
    return {0: 8, 1: 16, 2: 32}.get((precision >> shift) & 3, 8)


def _transfer_bytes(side: Access, elements: int, read: bool, cores: int) -> int:
    """Bytes' worth of memory time to move `elements` of a block: bursts shorter than the
    memory's longest cost a whole longest burst each."""
    bits, (_, block_w, block_d) = side.bits, side.block
    if side.nhcwb16:
        brick_stride = side.shape[1] * bits * 16 // 8
        if brick_stride == block_d:
            burst_bits = bits * block_w * block_d
        else:
            burst_bits = 16 * bits * block_w * (1 if read else cores)
    else:
        x_stride = side.shape[2] * bits // 8
        if read:
            burst_bits = bits * block_w * block_d if x_stride == block_d else bits * block_d
        elif block_d <= 16 and x_stride == block_d:
            burst_bits = bits * block_w * block_d
        else:
            burst_bits = min(64 * 8, 16 * bits * cores, block_d * bits)
    burst = max(1, min(side.memory.burst, burst_bits // 8))
    return elements * bits // 8 * side.memory.burst // burst


def _block_access_cycles(side: Access, read: bool, cores: int) -> int:
    """Cycles to read (or write) the first (last) block of a feature map, latency included."""
    elements = math.prod(_clip(side.shape, side.block))
    cycles = int(_transfer_bytes(side, elements, read, cores) / side.memory.bandwidth)
    return cycles + (side.memory.read_latency if read else side.memory.write_latency)


def mem_to_mem(dst: MemoryTiming, src: MemoryTiming, size: int) -> int:
    """Cycles of a DMA copy of `size` bytes: the slower of its read and its write."""
    return max(int(size / src.bandwidth) + src.read_latency, int(size / dst.bandwidth) + dst.write_latency)


def _ifm_extent(out: int, taps: int, stride: int, dilation: int, before: int, after: int, upscale: int) -> int:
    """IFM samples (before upscaling) an operation reads along one axis, padding excluded."""
    upscaled = (out - 1) * stride + (taps - 1) * dilation + 1 - before - after
    return max(1, _ceil(upscaled, upscale))


def _transposes(regs: Registers, prefix: str, shape: tuple[int, int, int]) -> bool:
    """Whether an NHWC feature map's strides step its axes out of NHWC order."""
    if (regs.param(f"{prefix}_PRECISION") >> 6) & 3 == FORMAT_NHCWB16:
        return False
    h, w, c = shape
    sy, sx, sc = (regs.address(f"{prefix}_STRIDE_{a}") for a in "YXC")
    return (h > 1 and w > 1 and sy < sx) or (w > 1 and c > 1 and sx < sc)


class U55CycleModel:
    """The Ethos-U55/U65's estimate over one run of a stream (the interface of
    kiln.simulator.npu.cycles.CycleModel)."""

    def __init__(self, config: NpuConfig):
        self.config = config
        self.memories = memories_for(config)
        key = (config.macs, config.cores)
        self.output_cycles = OUTPUT_CYCLES[key]
        self.lut_cycles = LUT_ACTIVATION_CYCLES[key]
        self.mac_cycles = 0.0
        self.macs = 0
        self.dma_bytes = 0
        self.block_ops = 0
        # The timeline, in cycles from the start of the stream.
        self.issue = 0.0  # when the command processor reaches the next command
        self.kernel_ends: list[float] = []  # when each block or elementwise operation ends
        self.dma_ends: list[float] = []  # when each DMA transfer ends
        self._previous_mac: tuple | None = None  # what a depth slice of the last MAC command shares with it

    @property
    def estimate(self) -> float:
        """The end of the timeline: when the last operation or transfer ends."""
        return max(self.kernel_ends[-1:] + self.dma_ends[-1:], default=0.0)

    def account(self, command: Command, regs: Registers) -> float:
        """Adds `command` (an NPU_OP_*) run with the register state `regs`; returns how far it
        moved the timeline's end (a DMA that runs under an operation adds nothing; the
        operation that waits for it adds the wait)."""
        before = self.estimate
        self._account(command, regs)
        return self.estimate - before

    def costed_in(self) -> None:
        """None: this estimate costs every command on its own."""
        return None

    def _account(self, command: Command, regs: Registers) -> None:
        name = command.name
        if name in MAC_OPERATIONS:
            self._run(self._mac_operation(name, command.param, regs))
        elif name == "NPU_OP_ELEMENTWISE":
            self._previous_mac = None
            self._run(self._elementwise(command.param, regs))
        elif name == "NPU_OP_DMA_START":
            self._dma(regs)
        elif name == "NPU_OP_DMA_WAIT":
            self._wait(self.dma_ends, command.param & 0xF)
        elif name == "NPU_OP_KERNEL_WAIT":
            self._wait(self.kernel_ends, command.param & 0x3)

    # ---- timeline ----------------------------------------------------------------------

    def _run(self, cycles: float) -> None:
        self.block_ops += 1
        self._issue(self.kernel_ends, MAX_OUTSTANDING_KERNELS)
        start = max(self.issue, self.kernel_ends[-1] if self.kernel_ends else 0.0)
        self.kernel_ends.append(start + cycles)

    def _issue(self, ends: list[float], limit: int) -> None:
        """Holds the command processor until fewer than `limit` of `ends` are in the future."""
        if len(ends) >= limit:
            self.issue = max(self.issue, ends[-limit])

    def _wait(self, ends: list[float], outstanding: int) -> None:
        """Holds the next commands until at most `outstanding` of `ends` are in the future."""
        if len(ends) > outstanding:
            self.issue = max(self.issue, ends[-1 - outstanding])

    def _dma(self, regs: Registers) -> None:
        src, dst = regs.param("DMA0_SRC_REGION"), regs.param("DMA0_DST_REGION")
        mode = max((src >> 9) & 3, (dst >> 9) & 3)
        rows = 1 if mode == STRIDE_1D else max(1, regs.param("DMA0_SIZE0"))
        if mode == STRIDE_3D:
            rows *= max(1, regs.param("DMA0_SIZE1"))
        size = regs.address("DMA0_LEN") * rows
        self.dma_bytes += size
        dst_memory = SHRAM if dst & DMA_REGION_INTERNAL else self._memory(dst)
        self._issue(self.dma_ends, MAX_OUTSTANDING_DMA[self.config.product])
        start = max(self.issue, self.dma_ends[-1] if self.dma_ends else 0.0)
        self.dma_ends.append(start + mem_to_mem(dst_memory, self._memory(src), size))

    def _memory(self, region: int) -> MemoryTiming:
        region &= 7
        return self.memories[region] if region < len(self.memories) else self.memories[1]

    # ---- output stage ------------------------------------------------------------------

    def _output_rate(self, name: str, mode: int, regs: Registers) -> float:
        """Output-stage cycles per OFM element."""
        ifm_bits = _bits(regs.param("IFM_PRECISION"), 2)
        ofm_bits = _bits(regs.param("OFM_PRECISION"), 1)
        elementwise = name == "NPU_OP_ELEMENTWISE"
        if elementwise and ifm_bits == 32:
            kind = OUT_EW32_UNARY if mode in UNARY_ELEMENTWISE else OUT_EW32_BINARY
        elif elementwise and mode == ELEMENTWISE_MUL and ofm_bits == 32:
            kind = OUT_MUL32
        elif (elementwise and mode == ELEMENTWISE_MUL) or (
            not elementwise and regs.param("ACC_FORMAT") == ACC_FORMAT_INT40
        ):
            kind = OUT_MUL_ACC40
        elif elementwise and mode in (ELEMENTWISE_ADD, ELEMENTWISE_SUB):
            kind = OUT_ADDSUB
        elif name == "NPU_OP_POOL" and mode == POOL_MAX:
            kind = OUT_MAXPOOL
        else:
            kind = OUT_DEFAULT
        rate = self.output_cycles[kind]
        if regs.param("ACTIVATION") & 0xFFF >= ACTIVATION_TANH:
            rate = max(rate, self.lut_cycles)
        return rate

    # ---- feature maps ------------------------------------------------------------------

    def _ublock(self) -> tuple[int, int, int]:
        """OFM microblock (height, width, depth) of the configuration's MAC array."""
        return {32: (1, 1, 4), 64: (1, 1, 8), 128: (1, 2, 8)}.get(self.config.macs, (2, 2, 8))

    def _side(self, regs: Registers, prefix: str, shape, block, bits: int | None = None) -> Access:
        precision = regs.param(f"{prefix}_PRECISION")
        if bits is None:
            bits = _bits(precision, 1 if prefix == "OFM" else 2)
        return Access(
            self._memory(regs.param(f"{prefix}_REGION")),
            (precision >> 6) & 3 == FORMAT_NHCWB16,
            bits,
            tuple(shape),
            tuple(block),
        )

    def _ifm_block(self, ofm_block, k: Kernel, upscale: int) -> tuple[int, int]:
        """Height and width of the IFM block that feeds an OFM block."""
        uh, uw, _ = self._ublock()
        h = _ceil((ofm_block[0] - 1) * k.stride_y + min((k.height - 1) * k.dilation_y + 1, SUBKERNEL), upscale)
        w = _ceil((ofm_block[1] - 1) * k.stride_x + min((k.width - 1) * k.dilation_x + 1, SUBKERNEL), upscale)
        return _round_up(h, uh), _round_up(w, uw)

    # ---- operations --------------------------------------------------------------------

    def _block(self, regs: Registers) -> tuple[int, int, int]:
        return (
            regs.param("OFM_BLK_HEIGHT_M1") + 1,
            regs.param("OFM_BLK_WIDTH_M1") + 1,
            regs.param("OFM_BLK_DEPTH_M1") + 1,
        )

    def _elementwise(self, mode: int, regs: Registers) -> float:
        ofm_shape = regs.ofm_shape()
        h, w, c = ofm_shape
        ofm = self._side(regs, "OFM", ofm_shape, self._block(regs))
        elements = h * w * (_round_up(c, 16) if ofm.nhcwb16 else c)
        rate = self._output_rate("NPU_OP_ELEMENTWISE", mode, regs)
        ifm_block = (*self._ifm_block(ofm.block, Kernel(1, 1, 1, 1, 1, 1, False), 1), ofm.block[2])
        ifm_bits = _bits(regs.param("IFM_PRECISION"), 2)
        sides = [self._side(regs, "IFM", ofm_shape, ifm_block)]
        if mode not in UNARY_ELEMENTWISE:
            flags = regs.param("IFM2_BROADCAST")
            if flags & (1 << 7):  # a scalar from the register: a constant, counted where constants live
                sides.append(Access(self.memories[0], False, ifm_bits, (1, 1, 1), ifm_block))
            else:
                shape2 = (1 if flags & 1 else h, 1 if flags & 2 else w, 1 if flags & 4 else c)
                sides.append(self._side(regs, "IFM2", shape2, ifm_block, ifm_bits))
        cores = self.config.cores
        block_cycles = max(
            [_block_access_cycles(ofm, False, cores)] + [_block_access_cycles(side, True, cores) for side in sides]
        )
        issue = math.ceil((block_cycles / math.prod(ofm.block) + rate) / ISSUE_PARALLELISM * elements)
        return max(issue, math.ceil(rate * elements))

    def _depth_slice(self, name: str, regs: Registers) -> bool:
        """Whether this CONV or DEPTHWISE command is a further depth slice of the one before
        (the same kernel and OFM area, its OFM starting further along the same row; a
        convolution reads the same IFM, a depthwise one its IFM channels further along the row):
        Vela costs the slices as one operation, which waits once for its first IFM block and
        its last OFM block (measured per layer with `kiln profile`: resnet8's sliced
        convolutions on ethos-u55-128 were 7-11 % over Vela's figures paying it per slice)."""
        shared = (
            name,
            regs.param("KERNEL_HEIGHT_M1"),
            regs.param("KERNEL_WIDTH_M1"),
            regs.param("KERNEL_STRIDE"),
            regs.param("OFM_HEIGHT_M1"),
            regs.param("OFM_WIDTH_M1"),
            regs.address("OFM_STRIDE_Y"),
            regs.address("IFM_STRIDE_Y"),
        )
        bases = (regs.address("IFM_BASE0"), regs.address("OFM_BASE0"))
        previous, self._previous_mac = self._previous_mac, (shared, bases)
        if name not in ("NPU_OP_CONV", "NPU_OP_DEPTHWISE") or previous is None or previous[0] != shared:
            return False
        ifm_step, ofm_step = bases[0] - previous[1][0], bases[1] - previous[1][1]
        within_row = 0 < ofm_step < regs.address("OFM_STRIDE_Y")
        if name == "NPU_OP_CONV":
            return within_row and ifm_step == 0
        return within_row and 0 < ifm_step < regs.address("IFM_STRIDE_Y")

    def _mac_operation(self, name: str, mode: int, regs: Registers) -> float:
        slice_of_previous = self._depth_slice(name, regs)
        ofm_shape = regs.ofm_shape()
        h, w, c = ofm_shape
        k = regs.kernel()
        pad = regs.padding()
        upscale = 1 if regs.upscale() == UPSCALE_NONE else 2
        reduce_sum = name == "NPU_OP_POOL" and mode == POOL_REDUCE_SUM
        pooling = name == "NPU_OP_POOL" and not reduce_sum
        ifm_depth = regs.param("IFM_DEPTH_M1") + 1
        ifm_shape = (
            _ifm_extent(h, k.height, k.stride_y, k.dilation_y, pad.top, pad.bottom, upscale),
            _ifm_extent(w, k.width, k.stride_x, k.dilation_x, pad.left, pad.right, upscale),
            ifm_depth if name == "NPU_OP_CONV" or reduce_sum else c,
        )
        if (
            pooling
            and k.width * k.height == 1
            and (_transposes(regs, "IFM", ifm_shape) or _transposes(regs, "OFM", ofm_shape))
        ):
            return self._transpose(regs, ifm_shape, ofm_shape)

        block = self._block(regs)
        ifm_bits = _bits(regs.param("IFM_PRECISION"), 2)
        if name == "NPU_OP_CONV" or reduce_sum:
            part_kernel = name == "NPU_OP_CONV" and k.part_kernel_first
            if ifm_bits == 16:
                ifm_block_depth = _round_up(min(ifm_depth, 16), 4)
            else:
                ifm_block_depth = _round_up(min(ifm_depth, 16 if part_kernel else IFM_BLOCK_DEPTH), 8)
        else:
            ifm_block_depth = block[2]
        ifm = self._side(regs, "IFM", ifm_shape, (*self._ifm_block(block, k, upscale), ifm_block_depth))
        ofm = self._side(regs, "OFM", ofm_shape, block)

        ublock = self._ublock()
        if ublock[0] == 2 and name == "NPU_OP_CONV" and h == 1 and w % 2 == 0 and k.height == 1:
            ublock = (1, 4, ublock[2])
        ofm_block = _clip(ofm_shape, block)
        blocks = _count(ofm_shape, ublock) / _count(ofm_block, ublock)

        rate = self._output_rate(name, mode, regs)
        out = math.ceil(rate * math.prod(ofm_block))
        if name != "NPU_OP_POOL":
            scale_memory = self._memory(regs.param("SCALE_REGION"))
            out = max(out, SCALE_BYTES_PER_CHANNEL * ofm_block[2] * scale_memory.read_latency / 256)
        mac = self._mac_block(name, reduce_sum, regs, k, ublock, ofm_block, _clip(ifm_shape, ifm.block), ifm_depth)

        cores = self.config.cores
        first_ifm = _block_access_cycles(ifm, True, cores)
        last_ofm = _block_access_cycles(ofm, False, cores)
        imbalance = abs(last_ofm - first_ifm) if blocks > 1 else 0
        issue = (imbalance + mac + out) / ISSUE_PARALLELISM
        mac_b, out_b = max(mac, issue), max(out, issue)
        if mac_b > out_b:
            cycles = int(int(mac_b * blocks) + out_b)
        else:
            cycles = int(out_b * blocks + mac_b)

        self.mac_cycles += mac * blocks
        taps = k.width * k.height
        self.macs += h * w * c * taps * (ifm_depth if name == "NPU_OP_CONV" or reduce_sum else 1)
        return cycles if slice_of_previous else cycles + first_ifm + last_ofm

    def _transpose(self, regs: Registers, ifm_shape, ofm_shape) -> float:
        """A 1x1 pooling that permutes axes: the slower of reading the IFM and writing the OFM.

        Vela lowers a transpose that swaps two axes to a pooling over (first axis, second
        axis, bytes of the rest): the transposed tensor's depth is the command's depth, or
        if that is one byte its width (IFM) and height (OFM). Its IFM is read in bursts of
        an IFM block's depth (up to IFM_BLOCK_DEPTH channels) unless whole pixels are that
        deep; its OFM is written in bursts of 16 bytes per core (at most the block's depth)
        unless its pixels are exactly the block's depth and that is at most 16 bytes (regor's
        EstimateMemoryTransfer with the operation's block, as deep as the IFM's: digits'
        flatten, [16, 32] bytes to [32, 16], writes in half bursts, 160 cycles as Vela says)."""
        ifm = self._memory(regs.param("IFM_REGION"))
        ofm = self._memory(regs.param("OFM_REGION"))
        ifm_bytes = math.prod(ifm_shape) * _bits(regs.param("IFM_PRECISION"), 2) // 8
        ofm_bytes = math.prod(ofm_shape) * _bits(regs.param("OFM_PRECISION"), 1) // 8
        one_byte = ifm_shape[2] == 1
        depth = ifm_shape[1] if one_byte else ifm_shape[2]
        block_depth = _round_up(min(depth, IFM_BLOCK_DEPTH), 8)
        read_burst = ifm.burst if depth == block_depth else min(ifm.burst, block_depth)
        depth = ifm_shape[0] if one_byte else ifm_shape[2]
        if block_depth <= 16 and depth == block_depth:
            write_burst = ofm.burst
        else:
            write_burst = min(ofm.burst, 16 * self.config.cores, block_depth)
        return max(
            int(ifm_bytes * ifm.burst // read_burst / ifm.bandwidth) + ifm.read_latency,
            int(ofm_bytes * ofm.burst // write_burst / ofm.bandwidth) + ofm.write_latency,
        )

    def _mac_block(self, name, reduce_sum, regs, k: Kernel, ublock, ofm_block, ifm_block, ifm_depth) -> int:
        """MAC-array cycles of one OFM block (ofm_block and ifm_block clipped to the maps)."""
        uh, uw, ud = ublock
        n_h, n_w, n_z = (_ceil(b, u) for b, u in zip(ofm_block, ublock))
        n_xy = n_h * n_w
        bits = _bits(regs.param("IFM_PRECISION"), 2)
        acc40 = regs.param("ACC_FORMAT") == ACC_FORMAT_INT40
        weight_fetch = WEIGHT_FETCH_CYCLES * ud
        pass_cycles = MAC_CYCLES_PER_UBLOCK * n_xy
        part_kernel = name == "NPU_OP_CONV" and k.part_kernel_first
        channel_groups = _ceil(ifm_block[2], 8)
        u55_32 = self.config.macs == 32
        total = 0
        for x in range(0, k.width, SUBKERNEL):
            for y in range(0, k.height, SUBKERNEL):
                taps = min(k.width - x, SUBKERNEL) * min(k.height - y, SUBKERNEL)
                if name == "NPU_OP_POOL" and not reduce_sum:
                    steps = 1
                    cycles = max(4, taps) * n_xy * n_z * (1 if u55_32 else bits // 2)
                elif name == "NPU_OP_DEPTHWISE":
                    steps = _ceil(taps, DEPTHWISE_TAPS_PER_STEP)
                    cycles = max(weight_fetch, pass_cycles * bits // 8) * steps * n_z
                elif part_kernel:
                    steps = _ceil(taps, 2 if bits == 16 else 4)
                    cycles = max(weight_fetch, pass_cycles) * steps * n_z * channel_groups
                else:
                    steps = taps
                    cycles = max(weight_fetch, pass_cycles) * steps * n_z
                delay = self._accumulator_delay(acc40, n_h, n_w, n_z, steps)
                total += cycles + delay * (channel_groups if part_kernel else 1)
        if name == "NPU_OP_CONV" or reduce_sum:
            total *= _ceil(ifm_depth, ifm_block[2])
        return total // self.config.cores

    def _accumulator_delay(self, acc40: bool, n_h: int, n_w: int, n_z: int, steps: int) -> int:
        """Pipeline stalls of a block whose kernel steps each cover one microblock."""
        if self.config.macs == 32:
            delay = 7 if acc40 else 3
        else:
            delay = 3 if acc40 and self.config.macs <= 128 else 2
        stalls = 0
        if n_h * n_w == 1:
            if n_z == 1:
                stalls = delay * steps
            elif steps > 1:
                stalls = delay * (steps - 1) * n_z
        if self.config.macs == 32 and acc40 and (n_w == 1 or n_h == 1) and n_z > 1:
            stalls += delay * n_z
        return stalls

    def counters(self) -> dict[str, int]:
        return {
            "cycles": int(math.ceil(self.estimate)),
            "mac_active": int(math.ceil(self.mac_cycles)),
            "macs": self.macs,
            "dma_bytes": self.dma_bytes,
            "block_ops": self.block_ops,
        }
