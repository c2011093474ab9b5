"""Per-command accounting of a command stream run on the NPU model: for every NPU_OP_*
command, the cycles it added to the PMU cycle estimate and the bytes it read and wrote per
region, so a profiler can attribute a run's PMU figures to the operators the commands came
from (kiln.reference.profile).

It runs the stream through run_stream's own loop (kiln.simulator.npu.executor.execute) and
observes each command: the cycles are what the family's cycle model said the command added
(CycleModel.account; on the Ethos-U55/U65 how far it moved the end of the timeline on which
operations and DMA transfers overlap, so a DMA that runs under an operation adds nothing and
the operation that waits for it adds the wait; on the Ethos-U85 what it changes of its
operation's figure, a depth slice possibly negative), and the operation it was costed in
(CycleModel.costed_in). The commands' cycles sum to the model's float estimate, whose
ceiling is the run's PMU cycle count (ExecResult.cycles); cycles_of() rounds them to
integers that sum to it exactly. Bytes are Context.traffic's (kiln.simulator.npu.pmu turns
them into AXI beats)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from kiln.simulator.npu import commands as cmds
from kiln.simulator.npu.compiled import CompiledNpuProgram
from kiln.simulator.npu.config import NpuConfig
from kiln.simulator.npu.cop1 import parse_cop1
from kiln.simulator.npu.executor import execute, one_blas_thread, start
from kiln.simulator.npu.memory import FlatMemory
from kiln.simulator.npu.pmu import region_ports
from kiln.simulator.npu.standalone import REGION_BASES


@dataclass
class CommandCost:
    index: int  # word offset of the command in the stream
    name: str  # NPU_OP_*
    cycles: float  # what it added to the cycle estimate
    traffic: dict[tuple[int, str], int] = field(default_factory=dict)  # (region, "read"|"write") -> bytes
    # The cycle model's operation the command was costed in (CycleModel.costed_in; Ethos-U85:
    # U85CycleModel.operations() index): depth slices, and an elementwise command chained to its
    # producer, share one (Vela costs a chain in its producer's operation). None: a DMA or wait,
    # or a U55/U65 stream.
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
        for g in order[: max(0, spare)]:
            floors[g] += 1
        if spare < 0:  # negative slices outweighed: take from the largest
            for g in sorted(range(len(floats)), key=lambda g: floats[g], reverse=True)[:-spare]:
                floors[g] -= 1
        return floors


def profile_stream(stream, basep, memory, config: NpuConfig) -> StreamProfile:
    """Runs `stream` (uint32 words or bytes, up to NPU_OP_STOP) as run_stream does, with
    region r at bus address basep[r], and accounts each NPU_OP_* command. A fault raises
    the model's own exception (a profile of a stream that does not run is no profile)."""
    run = start(basep, memory, config)
    costs: list[CommandCost] = []
    seen: dict = {}  # the run's traffic after the command before

    def observe(command: cmds.Command, added: float) -> None:
        traffic = run.ctx.traffic
        moved = {key: n - seen.get(key, 0) for key, n in traffic.items() if n - seen.get(key, 0)}
        seen.update(traffic)
        costs.append(CommandCost(command.index, command.name, added, moved, run.cycles.costed_in()))

    with one_blas_thread():
        execute(run, cmds.as_words(stream), observe)
    return StreamProfile(costs, int(run.cycles.counters()["cycles"]), float(run.cycles.estimate), region_ports(config))


def profile_compiled(compiled: CompiledNpuProgram, inputs: list[np.ndarray], config: NpuConfig) -> StreamProfile:
    """profile_stream of `compiled` in host memory, as kiln.simulator.npu.standalone.run_compiled
    lays it out (regions as buffers, the inputs written where the program reads them)."""
    fast = getattr(compiled, "fast_scratch_size", 0) or 0
    regions = {
        0: bytearray(compiled.weight_data),
        1: bytearray(max(compiled.scratch_size, 16)),
        2: bytearray(max(fast, 16)),
    }
    memory = FlatMemory({REGION_BASES[r]: buf for r, buf in regions.items()})
    for tensor, value in zip(compiled.inputs, inputs):
        raw = np.ascontiguousarray(value).tobytes()
        regions[tensor.region][tensor.offset : tensor.offset + len(raw)] = raw
    return profile_stream(parse_cop1(compiled.cmd_data).stream, REGION_BASES, memory, config)
