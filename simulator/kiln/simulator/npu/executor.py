"""run_stream: executes an Ethos-U55/U65/U85 register command stream on a Memory (the
configuration's family picks the opcodes, register layouts and operations)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kiln.errors import NotModelled
from kiln.simulator.npu import commands as cmds
from kiln.simulator.npu.config import NpuConfig
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.coverage import U85, Coverage, record_run
from kiln.simulator.npu.u55.blockops import convolution, depthwise, pooling
from kiln.simulator.npu.u55.commands import U55_COMMANDS
from kiln.simulator.npu.u55.cycles import CycleModel
from kiln.simulator.npu.u55.dma import dma_start
from kiln.simulator.npu.u55.elementwise import elementwise
from kiln.simulator.npu.memory import MemoryFault
from kiln.simulator.npu.pmu import beat_counters
from kiln.simulator.npu.registers import RegisterError
from kiln.simulator.npu.u55.registers import U55Registers
from kiln.simulator.npu.u55.weights import WeightStreamError
from kiln.simulator.npu.u85 import blockops as u85_blockops
from kiln.simulator.npu.u85 import dma as u85_dma
from kiln.simulator.npu.u85 import elementwise as u85_elementwise
from kiln.simulator.npu.u85 import resize as u85_resize
from kiln.simulator.npu.u85.commands import U85_COMMANDS
from kiln.simulator.npu.u85.cycles import U85CycleModel
from kiln.simulator.npu.u85.registers import U85Registers

REGIONS = 8


@dataclass(frozen=True)
class NpuFault:
    kind: str  # "cmd_parse_error" or "bus_error"
    command_index: int  # word offset of the faulting command in the stream
    message: str


@dataclass
class ExecResult:
    cycles: int  # estimated PMU cycle count (see kiln.simulator.npu.u55.cycles)
    ops: int  # NPU_OP_* commands executed (including DMA and waits)
    fault: NpuFault | None
    counters: dict[str, int] = field(default_factory=dict)
    coverage: Coverage | None = None


def family_machine(config: NpuConfig):
    """(a fresh register file, the opcode table, the command executor, a fresh cycle model) of
    config's NPU family: what a run of one stream needs."""
    if config.is_u85:
        return U85Registers(), U85_COMMANDS, _operation_u85, U85CycleModel(config)
    return U55Registers(), U55_COMMANDS, _operation, CycleModel(config)


def _operation(ctx: Context, command: cmds.Command) -> None:
    name = command.name
    ctx.coverage.hit("opcode", name)
    if name == "NPU_OP_CONV":
        convolution(ctx)
    elif name == "NPU_OP_DEPTHWISE":
        depthwise(ctx)
    elif name == "NPU_OP_POOL":
        pooling(ctx, command.param)
    elif name == "NPU_OP_ELEMENTWISE":
        elementwise(ctx, command.param)
    elif name == "NPU_OP_DMA_START":
        dma_start(ctx)
    # STOP is handled by the caller; IRQ, DMA_WAIT, KERNEL_WAIT and PMU_MASK only order or
    # signal work, and this model completes every operation before the next command.


def _operation_u85(ctx: Context, command: cmds.Command) -> None:
    name = command.name
    ctx.coverage.hit("opcode", name)
    if name == "NPU_OP_CONV":
        u85_blockops.convolution(ctx, command.param)
    elif name == "NPU_OP_DEPTHWISE":
        u85_blockops.depthwise(ctx)
    elif name == "NPU_OP_POOL":
        u85_blockops.pooling(ctx, command.param & 7)
    elif name == "NPU_OP_ELEMENTWISE":
        u85_elementwise.elementwise(ctx, command.param & 0x3F)
    elif name == "NPU_OP_DMA_START":
        u85_dma.dma_start(ctx)
    elif name == "NPU_OP_RESIZE":
        u85_resize.resize(ctx, command.param & 3)
    elif name == "NPU_OP_BRANCH":
        raise NotModelled(f"{name} is not modelled")
    # IRQ, DMA_WAIT, KERNEL_WAIT and PMU_MASK: as on the U55/U65.


def run_stream(stream, basep, memory, config: NpuConfig, *, pmu=None, limits=None) -> ExecResult:
    """Runs `stream` (uint32 words or bytes) with region r at bus address basep[r].

    `limits`: bytes of each region's buffer (8 sizes, 0 for a region with none) as the
    firmware registered them; an access outside its region's buffer is then a bus error
    (the fault's message is RegionFault's, naming the access). None: not checked.

    Stops at NPU_OP_STOP, at the end of the stream, or at the first command that faults
    (then outputs written before it stay written). `pmu` may name the event counters the
    caller wants (an iterable of counter names); every counter the model keeps is
    returned in ExecResult.counters regardless: the cycle estimate's, and the AXI data
    beats of the bytes the operations moved (kiln.simulator.npu.pmu), a faulting stream's
    up to its fault."""
    bases = tuple(int(b) for b in basep)
    if len(bases) != REGIONS:
        raise ValueError(f"basep holds {len(bases)} region bases; the NPU has {REGIONS}")
    u85 = config.is_u85
    registers, command_set, operation, cycles = family_machine(config)
    sizes = None if limits is None else tuple(int(n) for n in limits)
    if sizes is not None and len(sizes) != REGIONS:
        raise ValueError(f"limits holds {len(sizes)} region sizes; the NPU has {REGIONS}")
    ctx = Context(registers, memory, bases, config, bytearray(config.shram_bytes), Coverage(U85 if u85 else ""),
                  limits=sizes)
    ops = 0
    fault = None
    index = 0
    try:
        words = cmds.as_words(stream)
        for command in cmds.decode(words, command_set):
            index = command.index
            if not command.is_operation:
                registers.set(command)
                continue
            ops += 1
            if command.name == "NPU_OP_STOP":
                ctx.coverage.hit("opcode", command.name)
                break
            cycles.account(command, registers)
            operation(ctx, command)
    except cmds.CommandError as error:
        fault = NpuFault("cmd_parse_error", error.index, str(error))
    except (RegisterError, WeightStreamError, NotModelled) as error:
        fault = NpuFault("cmd_parse_error", index, str(error))
    except MemoryFault as error:
        fault = NpuFault("bus_error", index, str(error))
    record_run(ctx.coverage)
    counters = cycles.counters()
    counters.update(beat_counters(ctx.traffic, config))
    return ExecResult(cycles=counters["cycles"], ops=ops, fault=fault, counters=counters, coverage=ctx.coverage)
