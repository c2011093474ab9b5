"""run_stream: executes an Ethos-U55/U65/U85 register command stream on a Memory (the
configuration's family, kiln.simulator.npu.family, gives the opcodes, register layouts,
operations and cycle estimate).

One loop (execute) runs every stream: run_stream turns its faults into an NpuFault, the
profiler (kiln.simulator.npu.profile) watches each command through its observer, and
estimate runs it without the operations.

Streams run again (the same words on the same configuration: a firmware's every inference)
take a shorter way. A command stream sets the same registers before each of its operations
every time it runs, and the cycle estimate is a function of those registers alone, so
run_stream remembers, per stream that ran to its end without a fault (RECORDED_STREAMS of
them, by their words and configuration), each operation with a frozen copy of the registers
it ran with, and the cycle model after the whole stream. A later run of those words runs the
operations alone (they read the memory as it is now), each with its frozen registers, whose
typed views are computed once (Registers.frozen). Should an operation fault there, the
estimate is worked out again up to that operation, as the first way would have left it.

Each operation is also prepared once (kiln.simulator.npu.prepared: what its registers, the
configuration and the region bases and sizes alone decide, worked out before it runs): a
recorded stream keeps its operations prepared for the region bases and sizes of the last
PREPARED_PLACES places it ran at, and a run elsewhere prepares them again."""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import ThreadpoolController

from kiln.errors import NotModelled, RegisterError, WeightStreamError
from kiln.simulator.npu import commands as cmds
from kiln.simulator.npu.config import NpuConfig
from kiln.simulator.npu.context import Context
from kiln.simulator.npu.coverage import Coverage, Uncounted, record_run, recording
from kiln.simulator.npu.cycles import CycleModel
from kiln.simulator.npu.family import Family, family_of
from kiln.simulator.npu.memory import MemoryFault
from kiln.simulator.npu.pmu import beat_counters
from kiln.simulator.npu.prepared import Run as PreparedRun
from kiln.simulator.npu.registers import Registers

REGIONS = 8
RECORDED_STREAMS = 64  # streams remembered (the least recently run forgotten first)
PREPARED_PLACES = 4  # per recorded stream, the (region bases, region sizes) its prepared operations are kept for


@dataclass(frozen=True)
class NpuFault:
    kind: str  # "cmd_parse_error" or "bus_error"
    command_index: int  # word offset of the faulting command in the stream
    message: str


@dataclass
class ExecResult:
    cycles: int  # estimated PMU cycle count (see kiln.simulator.npu.cycles)
    ops: int  # NPU_OP_* commands executed (including DMA and waits)
    fault: NpuFault | None
    counters: dict[str, int] = field(default_factory=dict)
    coverage: Coverage | None = None


@dataclass
class Run:
    """One run of a stream: the family's machine and what the loop has done so far."""

    family: Family
    ctx: Context  # registers, memory, regions, SHRAM, coverage, traffic
    cycles: CycleModel
    prepare: Callable[[Context, cmds.Command], PreparedRun]  # the family's, or one that runs nothing (estimate)
    ops: int = 0  # NPU_OP_* commands run, STOP included
    index: int = 0  # word offset of the last NPU_OP_* command started (a fault's)


# observe(command, cycles): called after each NPU_OP_* command but STOP has run, with the
# cycles it added to the estimate.
Observer = Callable[[cmds.Command, float], None]


def start(basep, memory, config: NpuConfig, limits=None, coverage: bool = True) -> Run:
    """A run of `config`'s family with region r at bus address basep[r] of `memory`
    (`limits`, `coverage`: see run_stream); ValueError if basep or limits do not hold 8
    regions."""
    bases = tuple(int(b) for b in basep)
    if len(bases) != REGIONS:
        raise ValueError(f"basep holds {len(bases)} region bases; the NPU has {REGIONS}")
    family = family_of(config)
    cycles = family.cycle_model(config)
    sizes = None if limits is None else tuple(int(n) for n in limits)
    if sizes is not None and len(sizes) != REGIONS:
        raise ValueError(f"limits holds {len(sizes)} region sizes; the NPU has {REGIONS}")
    ctx = Context(
        family.registers(),
        memory,
        bases,
        config,
        bytearray(config.shram_bytes),
        Coverage(family.coverage) if coverage else Uncounted(family.coverage),
        limits=sizes,
    )
    return Run(family, ctx, cycles, family.prepare)


@functools.cache
def _blas() -> ThreadpoolController:
    return ThreadpoolController()


def one_blas_thread():
    """A context in which numpy's BLAS runs on one thread: the operations' matrix products
    are small, and BLAS threads would spend their time waiting on each other and on the
    other processes of the machine (QEMU's, a test's)."""
    return _blas().limit(limits=1, user_api="blas")


def execute(run: Run, words, observe: Observer | None = None, recording: list | None = None) -> None:
    """Runs the commands of `words` (uint32) until NPU_OP_STOP or their end; raises the first
    fault (CommandError, RegisterError, WeightStreamError, NotModelled, MemoryFault), the
    outputs of the commands before it written. `recording` (a list) gets each NPU_OP_*
    command run, STOP included, with a frozen copy of the registers it ran with and the
    operation prepared (None for STOP)."""
    registers, ctx, cycles, prepare = run.ctx.registers, run.ctx, run.cycles, run.prepare
    for command in cmds.decode(words, run.family.commands):
        if not command.is_operation:
            registers.set(command)
            continue
        run.index = command.index
        run.ops += 1
        if command.name == "NPU_OP_STOP":
            if recording is not None:
                recording.append((command, registers.frozen(), None))
            ctx.coverage.hit("opcode", command.name)
            break
        frozen = registers.frozen() if recording is not None else None
        added = cycles.account(command, registers)
        ctx.coverage.hit("opcode", command.name)
        operation = prepare(ctx, command)
        if recording is not None:
            recording.append((command, frozen, operation))
        operation(ctx)
        if observe is not None:
            observe(command, added)


@dataclass(frozen=True)
class _Recording:
    """A stream that ran to its end: its NPU_OP_* commands, each with the registers it ran
    with (frozen), its cycle model after the whole run (read, never fed again), and its
    operations prepared (None: not yet) by the (region bases, region sizes) they were prepared
    for, the most recently used last."""

    operations: tuple[tuple[cmds.Command, Registers], ...]
    cycles: CycleModel
    prepared: OrderedDict = field(default_factory=OrderedDict)

    def prepared_at(self, place: tuple) -> list[PreparedRun | None]:
        """The operations prepared for `place` (region bases, region sizes); kept for the last
        PREPARED_PLACES places."""
        operations = self.prepared.get(place)
        if operations is None:
            operations = self.prepared[place] = [None] * len(self.operations)
            while len(self.prepared) > PREPARED_PLACES:
                self.prepared.popitem(last=False)
        self.prepared.move_to_end(place)
        return operations


_recordings: OrderedDict[tuple[bytes, NpuConfig], _Recording] = OrderedDict()


def _place(ctx: Context) -> tuple:
    """What a prepared operation depends on besides its registers and configuration."""
    return ctx.basep, ctx.limits


def _rerun(run: Run, recording: _Recording) -> None:
    """execute() of a recorded stream: its operations on the memory as it is now."""
    ctx = run.ctx
    prepared = recording.prepared_at(_place(ctx))
    try:
        for i, (command, registers) in enumerate(recording.operations):
            run.index = command.index
            run.ops += 1
            ctx.registers = registers
            ctx.coverage.hit("opcode", command.name)
            if command.name == "NPU_OP_STOP":
                break
            operation = prepared[i]
            if operation is None:
                operation = prepared[i] = run.prepare(ctx, command)
            operation(ctx)
    except BaseException:
        run.cycles = _estimate_through(run, recording)
        raise
    run.cycles = recording.cycles


def _estimate_through(run: Run, recording: _Recording) -> CycleModel:
    """The cycle model as execute() leaves it when the operation at run.index faults: every
    command up to that one accounted."""
    cycles = run.family.cycle_model(run.ctx.config)
    for command, registers in recording.operations:
        if command.name == "NPU_OP_STOP":
            break
        cycles.account(command, registers)
        if command.index == run.index:
            break
    return cycles


def _run_remembered(run: Run, words: np.ndarray) -> None:
    """execute(run, words), or _rerun() when the same words ran to their end on this
    configuration before; remembers a stream that runs to its end."""
    key = (words.tobytes(), run.ctx.config)
    recording = _recordings.get(key)
    if recording is not None:
        _recordings.move_to_end(key)
        _rerun(run, recording)
        return
    operations: list = []
    execute(run, words, recording=operations)
    recorded = _Recording(tuple((command, registers) for command, registers, _ in operations), run.cycles)
    recorded.prepared_at(_place(run.ctx))[:] = [operation for _, _, operation in operations]
    _recordings[key] = recorded
    while len(_recordings) > RECORDED_STREAMS:
        _recordings.popitem(last=False)


def run_stream(stream, basep, memory, config: NpuConfig, *, pmu=None, limits=None, coverage=True) -> ExecResult:
    """Runs `stream` (uint32 words or bytes) with region r at bus address basep[r].

    `limits`: bytes of each region's buffer (8 sizes, 0 for a region with none) as the
    firmware registered them; an access outside its region's buffer is then a bus error
    (the fault's message is RegionFault's, naming the access). None: not checked.

    Stops at NPU_OP_STOP, at the end of the stream, or at the first command that faults
    (then outputs written before it stay written). `pmu` may name the event counters the
    caller wants (an iterable of counter names); every counter the model keeps is
    returned in ExecResult.counters regardless: the cycle estimate's, and the AXI data
    beats of the bytes the operations moved (kiln.simulator.npu.pmu), a faulting stream's
    up to its fault.

    `coverage`: whether ExecResult.coverage counts the features the run used; False leaves
    them uncounted (ExecResult.coverage None) unless KILN_NPU_COVERAGE records them."""
    counted = coverage or recording()
    run = start(basep, memory, config, limits, counted)
    fault = None
    try:
        with one_blas_thread():
            _run_remembered(run, cmds.as_words(stream))
    except cmds.CommandError as error:
        fault = NpuFault("cmd_parse_error", error.index, str(error))
    except (RegisterError, WeightStreamError, NotModelled) as error:
        fault = NpuFault("cmd_parse_error", run.index, str(error))
    except MemoryFault as error:
        fault = NpuFault("bus_error", run.index, str(error))
    if counted:
        record_run(run.ctx.coverage)
    counters = run.cycles.counters()
    counters.update(beat_counters(run.ctx.traffic, config))
    kept = run.ctx.coverage if coverage else None
    return ExecResult(cycles=counters["cycles"], ops=run.ops, fault=fault, counters=counters, coverage=kept)


def estimate(stream, config: NpuConfig) -> CycleModel:
    """The cycle estimate of `stream` (uint32 words or bytes) read without running its
    operations (the registers alone set it), up to NPU_OP_STOP."""
    run = start((0,) * REGIONS, None, config)
    run.prepare = _skip
    execute(run, cmds.as_words(stream))
    return run.cycles


def _skip(ctx: Context, command: cmds.Command) -> PreparedRun:
    """An operation that runs nothing: estimate's."""
    return _nothing


def _nothing(ctx: Context) -> None:
    """Runs nothing."""
