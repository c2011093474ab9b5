"""Per-command accounting of a command stream run on the NPU model: for every NPU_OP_*
command, the cycles it added to the PMU cycle estimate and the bytes it read and wrote per
region, so a profiler can attribute a run's PMU figures to the operators the commands came
from (kiln.reference.profile).

It runs the stream as kiln.simulator.npu.executor.run_stream does (the same decoder,
registers, operations and cycle models), reading the estimate and Context.traffic after each
command:

* Ethos-U55/U65 (kiln.simulator.npu.u55.cycles.CycleModel): the estimate is the end of a timeline
  on which operations and DMA transfers overlap, so a command's cycles are how far it moved
  the timeline's end (a DMA that runs under an operation adds nothing; the operation that
  waits for it adds the wait).
* Ethos-U85 (kiln.simulator.npu.u85.cycles.U85CycleModel): what account() returns for the
  command (a depth slice adds what it changes of its operation's figure, possibly negative),
  and the model's operation it was costed in (CommandCost.operation).

Either way the commands' cycles sum to the model's float estimate, whose ceiling is the
run's PMU cycle count (ExecResult.cycles); cycles_of() rounds them to integers that sum to it
exactly. Bytes are Context.traffic's (kiln.simulator.npu.pmu turns them into AXI beats)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from kiln.simulator.npu import commands as cmds
from kiln.simulator.npu.compiled import CompiledNpuProgram
from kiln.simulator.npu.config import NpuConfig
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.cop1 import parse_cop1
from kiln.simulator.npu.coverage import U85, Coverage
from kiln.simulator.npu.executor import REGIONS, family_machine
from kiln.simulator.npu.memory import FlatMemory
from kiln.simulator.npu.pmu import region_ports
from kiln.simulator.npu.standalone import REGION_BASES


@dataclass
class CommandCost:
    index: int  # word offset of the command in the stream
    name: str  # NPU_OP_*
    cycles: float  # what it added to the cycle estimate
    traffic: dict[tuple[int, str], int] = field(default_factory=dict)  # (region, "read"|"write") -> bytes
    # Ethos-U85: the cycle model's operation (U85CycleModel.operations() index) the command was
    # costed in: depth slices, and an elementwise command chained to its producer, share one
    # (Vela costs a chain in its producer's operation). None: a DMA or wait, or a U55/U65 stream.
    operation: int | None = None


@dataclass
class StreamProfile:
    commands: list[CommandCost]
    cycles: int  # the run's PMU cycle count (the ceiling of the estimate)
    estimate: float  # the cycle model's unrounded estimate
    ports: tuple[int, ...]  # AXI port of regions 0..7

    def cycles_of(self, groups: list[list[int]]) -> list[int]:
        """Integer cycles of each group of command positions (indices into self.commands):
        their summed float cycles rounded by largest remainder so that all commands' cycles,
        grouped or not, sum to self.cycles. `groups` must partition range(len(commands))."""
        floats = [sum(self.commands[i].cycles for i in group) for group in groups]
        floors = [math.floor(v) for v in floats]
        spare = self.cycles - sum(floors)
        order = sorted(range(len(floats)), key=lambda g: floats[g] - floors[g], reverse=True)
        for g in order[:max(0, spare)]:
            floors[g] += 1
        if spare < 0:  # negative slices outweighed: take from the largest
            for g in sorted(range(len(floats)), key=lambda g: floats[g], reverse=True)[:-spare]:
                floors[g] -= 1
        return floors


def profile_stream(stream, basep, memory, config: NpuConfig) -> StreamProfile:
    """Runs `stream` (uint32 words or bytes, up to NPU_OP_STOP) as run_stream does, with
    region r at bus address basep[r], and accounts each NPU_OP_* command. A fault raises
    the model's own exception (a profile of a stream that does not run is no profile)."""
    bases = tuple(int(b) for b in basep)
    if len(bases) != REGIONS:
        raise ValueError(f"basep holds {len(bases)} region bases; the NPU has {REGIONS}")
    u85 = config.is_u85
    registers, command_set, operation, model = family_machine(config)
    ctx = Context(registers, memory, bases, config, bytearray(config.shram_bytes), Coverage(U85 if u85 else ""))
    costs: list[CommandCost] = []
    block_ops = 0
    for command in cmds.decode(cmds.as_words(stream), command_set):
        if not command.is_operation:
            registers.set(command)
            continue
        if command.name == "NPU_OP_STOP":
            break
        before_traffic = dict(ctx.traffic)
        if u85:
            added = float(model.account(command, registers))
        else:
            before = model.total
            model.account(command, registers)
        operation(ctx, command)
        if not u85:
            added = model.total - before
        moved = {key: n - before_traffic.get(key, 0) for key, n in ctx.traffic.items()
                 if n - before_traffic.get(key, 0)}
        costed = None
        if u85 and model.block_ops != block_ops:
            costed = model.costed_in()
        block_ops = model.block_ops
        costs.append(CommandCost(command.index, command.name, added, moved, costed))
    estimate = model.cycles if u85 else model.total
    return StreamProfile(costs, int(model.counters()["cycles"]), float(estimate), region_ports(config))


def profile_compiled(compiled: CompiledNpuProgram, inputs: list[np.ndarray], config: NpuConfig) -> StreamProfile:
    """profile_stream of `compiled` in host memory, as kiln.simulator.npu.standalone.run_compiled
    lays it out (regions as buffers, the inputs written where the program reads them)."""
    fast = getattr(compiled, "fast_scratch_size", 0) or 0
    regions = {0: bytearray(compiled.weight_data), 1: bytearray(max(compiled.scratch_size, 16)),
               2: bytearray(max(fast, 16))}
    memory = FlatMemory({REGION_BASES[r]: buf for r, buf in regions.items()})
    for tensor, value in zip(compiled.inputs, inputs):
        raw = np.ascontiguousarray(value).tobytes()
        regions[tensor.region][tensor.offset:tensor.offset + len(raw)] = raw
    return profile_stream(parse_cop1(compiled.cmd_data).stream, REGION_BASES, memory, config)
