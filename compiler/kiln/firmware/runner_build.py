"""Builds kiln's executor runner for one .pte, or one image of several (./scripts/build_executor_runner.sh).

    kiln build --pte=FILE [--pte=FILE...] --target=ethos-u55-128 [--board=NAME] [--system_config=NAME]
        [--memory_mode=NAME] [--build_type=Release|Debug] [--output=DIR] [--default-input=FILE]...
        [--generate]

The board is the target's reference board unless --board names another with that NPU
configuration (kiln.boards.target refuses one without it).

Reads the .pte (kiln.pte.reader, kiln.lower.ethosu_payload), plans the runner's memory from it
(`plan`: every planned buffer, the Ethos-U scratch and fast scratch, the value,
kernel and delegate tables, sized exactly from the program), generates the model's
sources (`generate`: the .pte as an .incbin placed per memory mode, the buffers as
sections in the board's regions, the selective kernel table), configures and builds
firmware/apps/executor_runner with CMake and the board's toolchain, writes a size and
memory report (`memory_report.txt`/`.json`) and prints the ELF's path as its last line.
With --generate it builds the generation app (firmware/apps/generate: a language model's
prefill and decode) over the same generated sources instead, and its own sizes for the program
(generate_plan.h: kiln.firmware.generate_plan).

An image of several models (--pte repeated; docs/building.md) keeps each model's .pte and planned
buffers apart and shares what the models, run one at a time, can share: the Ethos-U scratch and
fast scratch (the largest any delegate needs), the kernel table and the delegate pool. Its plan is
checked against the board's regions (check_fit) before anything is generated.

A program of several methods (execution plans) gets a value, kernel and delegate table per
method and one set of planned buffers for all of them, each memory id the largest method's:
the apps run one method at a time, and memory id 2 is the state arena every method shares
(kiln.pte.schema.STATE_MEMORY_ID). The kernel table holds every method's operators, the
delegate pool every method's delegates, the scratch the largest payload's.

A bundle (ExecuTorch's BundledProgram, .bpte: kiln.pte.bundle) is planned from the program
inside and baked whole; the runner then runs and checks its cases (firmware/apps/
executor_runner/bundle_check.cpp).

The .pte baked in is the program without run-host's reference TOSA graphs (named data
kiln.pte.schema.TOSA_KEY, "kiln/tosa/<i>"; kiln.pte.writer.without_reference_data): no
firmware reads them, and they can be half the file. The .pte on disk keeps them for
`kiln run-host`; the memory report shows the saving.

Placement per memory mode (the board's memory purposes):
    Shared_Sram      .pte (and so the weights) in "model", scratch in "npu"
    Sram_Only        .pte and scratch in "npu"
    Dedicated_Sram*  .pte and scratch in "model", fast scratch in "npu"
Planned buffers (CPU tensors) go to "data" when they fit beside the stack and
DATA_RESERVE bytes for the firmware's own variables, else to "bulk".
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from kiln import boards, paths
from kiln.errors import PteError, RunnerBuildError, UsageError
from kiln.firmware import build as firmware
from kiln.firmware import generate_plan, memory_report
from kiln.lower import ethosu_payload
from kiln.pte.bundle import deserialize_bundle, is_bundle, serialize_bundle
from kiln.pte.reader import PteFile, deserialize
from kiln.pte.schema import STATE_MEMORY_ID
from kiln.pte.writer import without_reference_data

APP_DIR = paths.FIRMWARE_DIR / "apps" / "executor_runner"
KERNEL_TABLE_GENERATOR = paths.FIRMWARE_DIR / "runtime" / "gen_kernel_table.py"
APP = "executor_runner"
# The apps over the generated model sources, each a target of APP_DIR's CMake project, and the
# first words of its banner and report.
ETDUMP_APP = "executor_runner_etdump"  # the runner recording an ETDump (kiln.reference.etdump's sources)
GENERATE_APP = "generate"  # the generation app (firmware/apps/generate), with its generate_plan.h
APPS = {APP: "kiln executor runner", ETDUMP_APP: "kiln executor runner (ETDump)", GENERATE_APP: "kiln generate"}
BAKED_PTE = "model.pte"  # in the generated sources: the .pte model_pte.S bakes in
DATA_RESERVE = 64 * 1024  # the runner's and runtime's own .data/.bss beside planned buffers
BUFFER_ALIGNMENT = 32  # whole D-cache lines: the NPU writes the scratch
PTE_ALIGNMENT = 128  # ExecuTorch's segment alignment: segments keep theirs in memory
# Vela's arena cache (the fast scratch) per Dedicated_Sram memory mode (vela.ini);
# plain "Dedicated_Sram" gives the NPU the whole "npu" region.
# An operator's name or overload as a .pte gives it ("aten::add", "Tensor_out"): the names
# the kernel table generator takes on its command line.
OPERATOR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*")
FAST_SCRATCH_SIZES = {
    "Dedicated_Sram_256KB": 256 * 1024,
    "Dedicated_Sram_384KB": 384 * 1024,
    "Dedicated_Sram_512KB": 512 * 1024,
}


@dataclass(frozen=True)
class Buffer:
    """One statically allocated buffer of the runner."""

    symbol: str
    size: int
    region: str  # board memory region name
    what: str  # for the report


@dataclass(frozen=True)
class Method:
    """One method (execution plan) of the program: the storage its Method needs."""

    name: str
    values: int
    operators: int
    delegates: int
    planned: tuple[int, ...]  # its planned buffers' sizes, memory ids 1..n


@dataclass
class Model:
    """One program (.pte) of the image: the bytes baked in and the storage its methods need."""

    name: str  # the .pte's file name without .pte: the name an app chooses the model by
    baked: bytes = field(repr=False)  # the .pte to bake: the file without run-host's reference data
    file_size: int  # bytes of the .pte on disk
    methods: list[Method]  # in plan order; the executor runner runs the first
    input_sizes: list[int]  # bytes of each input of the first method
    symbol: str  # the assembler label of its baked .pte (and, + "_end", of its end)
    planned: list[Buffer] = field(default_factory=list)  # memory ids 1..n, shared by its methods

    @property
    def size(self) -> int:
        """Bytes of the .pte as baked."""
        return len(self.baked)

    @property
    def delegates(self) -> int:
        """Every method's delegates: the Ethos-U backend's pool holds one state each."""
        return sum(m.delegates for m in self.methods)


@dataclass
class Plan:
    """The image: one or more programs (models), each with its own planned buffers, and what they
    share: the kernel table, the Ethos-U backend's delegate pool and the NPU's scratch buffers (the
    apps run one model at a time, and a delegate's scratch holds nothing from one execute() to the
    next: its inputs are copied in and its outputs out)."""

    target: boards.Target
    memory_mode: str | None  # None: a target without an NPU (no scratch, no delegate pool)
    system_config: str | None
    pte_region: str
    models: list[Model]  # in the order given; the first is the one kModel and kiln_model_pte name
    operators: list[tuple[str, str]]  # every model's methods', each once (the kernel table)
    scratch: Buffer | None = None
    fast_scratch: Buffer | None = None
    stack_size: int = 0  # main stack in bytes, as the build links it (board.toml's, or the override)

    @property
    def model(self) -> str:
        """The image's name in messages: its models' names joined by "+"."""
        return "+".join(m.name for m in self.models)

    @property
    def pte_size(self) -> int:
        """Bytes of every .pte as baked."""
        return sum(m.size for m in self.models)

    @property
    def delegates(self) -> int:
        """Every model's delegates: the Ethos-U backend's pool holds one state each."""
        return sum(m.delegates for m in self.models)

    @property
    def planned(self) -> list[Buffer]:
        """Every model's planned buffers."""
        return [b for m in self.models for b in m.planned]

    def buffers(self) -> list[Buffer]:
        return self.planned + [b for b in (self.scratch, self.fast_scratch) if b is not None]


# --- Planning -------------------------------------------------------------------------


def _align(n: int, alignment: int = BUFFER_ALIGNMENT) -> int:
    return -(-n // alignment) * alignment


def _payloads(f: PteFile, specs: list[dict[str, str]], target: str, check_target: bool):
    """Every method's delegates' decoded payloads; `specs` are their compile specs, in order."""
    payloads = []
    named = f.named()
    delegates = [(plan, i, d) for plan in f.program.execution_plans for i, d in enumerate(plan.delegates)]
    for (plan, i, delegate), spec in zip(delegates, specs):
        which = f"delegate {i}" if len(f.program.execution_plans) == 1 else f"method {plan.name}'s delegate {i}"
        if delegate.id != ethosu_payload.DELEGATE_ID:
            raise RunnerBuildError(
                f"{which} is for backend {delegate.id!r}; kiln's runner has only {ethosu_payload.DELEGATE_ID}"
            )
        try:
            payloads.append(ethosu_payload.decode(f.delegate_payload(delegate), named))
        except ethosu_payload.PayloadError as error:
            raise RunnerBuildError(f"{which}'s payload: {error}") from None
        compiled_for = spec.get(ethosu_payload.TARGET_SPEC, target)
        if check_target and compiled_for != target:
            raise RunnerBuildError(
                f"{which} was compiled for {compiled_for}, not {target}; "
                f"compile the model for {target} (or build for {compiled_for})"
            )
    return payloads


def _refuse_delegates_without_npu(pte_path: Path, specs: list[dict[str, str]], target: boards.Target) -> None:
    """A RunnerBuildError when the program calls delegates and `target` has no NPU: its firmware
    is built without the Ethos-U driver and backend, so nothing could run them (--force or not)."""
    if target.has_npu or not specs:
        return
    compiled_for = sorted({spec.get(ethosu_payload.TARGET_SPEC, "an Ethos-U NPU") for spec in specs})
    raise RunnerBuildError(
        f"{pte_path.name} delegates {len(specs)} partition(s) to an NPU ({', '.join(compiled_for)}); "
        f"{target.name} on {target.board.name} has no NPU: compile the model with --target {target.name}"
    )


def _methods(f: PteFile, pte_path: Path, target: boards.Target) -> list[Method]:
    """The program's methods, their operator names and planned buffer sizes checked."""
    largest = max(r.size for r in target.board.memory)
    methods = []
    for plan in f.program.execution_plans:
        for i, op in enumerate(plan.operators):
            if not OPERATOR_NAME.fullmatch(op.name) or not OPERATOR_NAME.fullmatch(op.overload or "out"):
                raise RunnerBuildError(
                    f"{pte_path}: operator {i} is named {op.name!r}, overload {op.overload!r}: "
                    "not an operator name (the .pte is damaged)"
                )
        sizes = tuple(plan.non_const_buffer_sizes[1:])
        for i, size in enumerate(sizes):
            if not 0 <= size <= largest:
                raise RunnerBuildError(
                    f"{pte_path}: planned buffer {i + 1} has {size:,} bytes; no memory region of "
                    f"{target.board.name} holds that (the .pte is damaged)"
                )
        methods.append(Method(plan.name, len(plan.values), len(plan.operators), len(plan.delegates), sizes))
    return methods


def _planned_sizes(methods: list[Method]) -> list[int]:
    """Memory ids 1..n, each as large as the largest method's: one set of buffers serves every
    method. The apps run one method at a time (each reads its outputs before the next runs), so
    memory id 1, the activations, can be one buffer; memory id STATE_MEMORY_ID, the state arena,
    is one buffer by the program's contract (every plan declares it alike: kiln.pte.validate)."""
    ids = max(len(m.planned) for m in methods)
    return [max(m.planned[k] for m in methods if len(m.planned) > k) for k in range(ids)]


def _buffer_what(memory_id: int, methods: list[Method]) -> str:
    """What the report calls a planned buffer (the methods' lines say how they share it)."""
    if len(methods) > 1 and memory_id in (1, STATE_MEMORY_ID):
        return f"planned buffer {memory_id} ({'activations' if memory_id == 1 else 'state arena'})"
    return f"planned buffer {memory_id}"


def _memory_mode(
    pte_path: Path,
    target: boards.Target,
    memory_mode: str | None,
    system_config: str | None,
    compiled_for: str | None = None,
) -> tuple[str | None, str | None]:
    """The memory mode and system config: given, else the one the .pte's delegates were
    compiled for (`compiled_for`, their ethosu_payload.MEMORY_MODE_SPEC), else the compile report's
    beside the .pte (kiln compile writes <name>.json), else the target's defaults. (None, None)
    for a target without an NPU: nothing to place for one."""
    if not target.has_npu:
        target.refuse_vela_settings(system_config, memory_mode)
        return None, None
    report_path = pte_path.with_suffix(".json")
    report = _compile_report(report_path) if report_path.exists() else {}
    compiled_mode = compiled_for or (report.get("memory_mode") if report.get("target") == target.name else None)
    mode = memory_mode or compiled_mode or target.memory_mode
    if compiled_mode and mode != compiled_mode:
        raise UsageError(
            f"{pte_path.name} was compiled for memory mode {compiled_mode} ({report_path.name}); "
            f"building for {mode} would place its buffers where the command stream does not "
            f"expect them"
        )
    if mode not in target.memory_modes:
        hint = f"; compile the model with --memory-mode {target.memory_mode}" if mode == compiled_mode else ""
        raise UsageError(
            f"memory mode {mode!r} is not one of {target.name}'s on {target.board.name}: "
            f"{', '.join(target.memory_modes)}{hint}"
        )
    return mode, system_config or report.get("system_config") or target.system_config


# The memory mode the runner prints for an image without an NPU ("kiln executor runner: NAME (MODE) on BOARD").
NO_NPU_MODE = "no NPU"

# The compile report's fields the runner build reads; each, when present, a string (the Vela
# settings null for a target without an NPU).
REPORT_FIELDS = ("target", "memory_mode", "system_config")


def _compile_report(path: Path) -> dict:
    """The compile report `kiln compile` wrote beside a .pte, or a UsageError naming what is wrong with it."""
    fix = "delete it or compile the model again"
    try:
        report = json.loads(path.read_bytes())
    except IsADirectoryError:
        raise UsageError(
            f"{path} is a directory, where kiln build looks for the .pte's compile report; move it away"
        ) from None
    except (ValueError, RecursionError) as error:  # JSON or UTF-8 errors are ValueErrors
        raise UsageError(f"{path} is not a compile report (not JSON: {str(error)[:100]}); {fix}") from None
    if not isinstance(report, dict):
        raise UsageError(f"{path} is not a compile report (a JSON {type(report).__name__}, not an object); {fix}")
    for name in REPORT_FIELDS:
        if name in report and not isinstance(report[name], str) and not (name != "target" and report[name] is None):
            raise UsageError(f"{path}: {name} is {str(report[name])[:60]}, not a string; {fix}")
    return report


@dataclass(frozen=True)
class _Program:
    """What plan() reads from one .pte before it places anything."""

    model: Model
    memory_mode: str | None  # None: a target without an NPU
    system_config: str | None
    operators: list[tuple[str, str]]
    payloads: list
    specs: list[dict[str, str]]


def _symbol_prefix(k: int) -> str:
    """The first model's symbols are kiln_model_pte, kiln_planned_1...; model k's kiln_m<k>_..."""
    return "kiln_" if k == 0 else f"kiln_m{k}_"


def _program(
    k: int, pte_path: Path, target: boards.Target, memory_mode: str | None, system_config: str | None, check: bool
) -> _Program:
    """Model `k` of the image read from `pte_path`, its memory mode and system config resolved."""
    try:
        data = pte_path.read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read {pte_path}: {error.strerror}") from None
    try:
        bundle = deserialize_bundle(data) if is_bundle(data) else None
        f = deserialize(data if bundle is None else bundle.program)
        program = f.forward()
    except PteError as error:
        raise RunnerBuildError(
            f"{pte_path} is not a valid {'bundle' if is_bundle(data) else '.pte'}: {error}"
        ) from None
    methods = _methods(f, pte_path, target)
    specs = [ethosu_payload.compile_specs(d) for plan in f.program.execution_plans for d in plan.delegates]
    _refuse_delegates_without_npu(pte_path, specs, target)
    payloads = _payloads(f, specs, target.name, check)
    modes = {m for m in map(ethosu_payload.compiled_memory_mode, specs) if m}
    if len(modes) > 1:
        raise RunnerBuildError(f"{pte_path.name}'s delegates were compiled for different memory modes: {sorted(modes)}")
    mode, config = _memory_mode(pte_path, target, memory_mode, system_config, next(iter(modes), None))
    try:
        baked = without_reference_data(f)
        if bundle is not None:  # the bundle, its program as the firmware's
            baked = data if baked == bundle.program else serialize_bundle(replace(bundle, program=baked))
    except PteError as error:
        raise RunnerBuildError(f"{pte_path} could not be rewritten without its reference data: {error}") from None
    model = Model(
        name=pte_path.stem,
        baked=baked,
        file_size=len(data),
        methods=methods,
        input_sizes=[program.values[i].nbytes for i in program.inputs],
        symbol=f"{_symbol_prefix(k)}model_pte",
    )
    operators = [(op.name, op.overload) for plan in f.program.execution_plans for op in plan.operators]
    return _Program(model, mode, config, operators, payloads, specs)


def _one_memory_mode(programs: list[_Program]) -> None:
    """The models of one image share the NPU's scratch, placed per memory mode: one mode for all."""
    modes = {pr.memory_mode for pr in programs}
    if len(modes) > 1:
        each = ", ".join(f"{pr.model.name} {pr.memory_mode}" for pr in programs)
        raise UsageError(
            f"the models of one image share the NPU's memory, so they need one memory mode; these have {each}: "
            "compile them with the same --memory-mode"
        )


def _distinct_names(paths: list[Path]) -> None:
    """Each model's name (its file's stem) chooses it on the runner's command line, which splits at spaces."""
    seen: dict[str, Path] = {}
    for path in paths:
        if len(paths) > 1 and (" " in path.stem or not path.stem.isprintable()):
            raise UsageError(
                f"{path}: the runner chooses a model by its file's name, which may hold no space or control character"
            )
        if path.stem in seen and path.resolve() == seen[path.stem].resolve():
            raise UsageError(f"{path} is given twice")
        if path.stem in seen:
            raise UsageError(
                f"{seen[path.stem]} and {path} are both named {path.stem!r}, the name the firmware chooses a "
                "model by: rename one"
            )
        seen[path.stem] = path


def plan(
    pte_path: Path | Sequence[Path],
    target: boards.Target | str,
    memory_mode: str | None = None,
    system_config: str | None = None,
    check_target: bool = True,
    stack_size: int | None = None,
    board: str | None = None,
) -> Plan:
    """The image for one .pte or several (`pte_path`: a path or a sequence of them, each model named
    by its file name). `target`: its name, or the Target a caller has already (see boards.resolve).
    `stack_size`: the main stack in bytes, else the board's (board.toml's stack_size);
    the build links exactly this one, so the planned buffers' fit in "data" uses it too.
    `board`: a board with the target's NPU configuration (default: the target's reference board)."""
    target = boards.resolve(target, board)
    stack_size = boards.check_stack_size(target.board, target.board.stack_size if stack_size is None else stack_size)
    pte_paths = [Path(pte_path)] if isinstance(pte_path, (str, Path)) else [Path(x) for x in pte_path]
    if not pte_paths:
        raise UsageError("no .pte to build the runner for")
    _distinct_names(pte_paths)
    programs = [_program(k, x, target, memory_mode, system_config, check_target) for k, x in enumerate(pte_paths)]
    _one_memory_mode(programs)
    if len(programs) > 1 and any(is_bundle(pr.model.baked) for pr in programs):
        raise UsageError("a bundle (.bpte) is built into a runner of its own: give it alone to --pte")
    mode, config = programs[0].memory_mode, programs[0].system_config
    board = target.board
    model_region = board.region_for("model")
    npu_region = board.region_for("npu") if target.has_npu else None
    p = Plan(
        target=target,
        memory_mode=mode,
        system_config=config,
        pte_region=(npu_region if mode == "Sram_Only" else model_region).name,
        models=[pr.model for pr in programs],
        operators=list(dict.fromkeys(op for pr in programs for op in pr.operators)),
        stack_size=stack_size,
    )
    _place_planned(p)
    payloads = [pl for pr in programs for pl in pr.payloads]
    if payloads:
        p.scratch = Buffer(
            "kiln_ethosu_scratch",
            max(pl.scratch_size for pl in payloads),
            (model_region if mode.startswith("Dedicated_Sram") else npu_region).name,
            "Ethos-U scratch (region 1)" + (", shared by the models" if len(programs) > 1 else ""),
        )
        if mode.startswith("Dedicated_Sram"):
            p.fast_scratch = _fast_scratch(programs, mode, npu_region)
    return p


def _place_planned(p: Plan) -> None:
    """Every model's planned buffers, in "data" when all of them fit there beside the stack and
    DATA_RESERVE, else in "bulk"."""
    board = p.target.board
    sizes = [_planned_sizes(m.methods) for m in p.models]
    data_region = board.region_for("data")
    beside = p.stack_size if board.region_for("stack") == data_region else 0  # the stack shares the region
    fits_in_data = sum(_align(s) for each in sizes for s in each) + beside + DATA_RESERVE <= data_region.size
    region = (data_region if fits_in_data else board.region_for("bulk")).name
    several = len(p.models) > 1
    for k, (m, each) in enumerate(zip(p.models, sizes)):
        m.planned = [
            Buffer(
                f"{_symbol_prefix(k)}planned_{i + 1}",
                size,
                region,
                (f"{m.name}: " if several else "") + _buffer_what(i + 1, m.methods),
            )
            for i, size in enumerate(each)
        ]


def _fast_scratch(programs: list[_Program], mode: str, npu_region) -> Buffer:
    """Vela's own figure from the .pte when kiln wrote it (the largest model's); else the mode's whole cache."""
    needed = []
    for pr in programs:
        try:
            needed += [n for n in map(ethosu_payload.compiled_fast_scratch, pr.specs) if n is not None]
        except ethosu_payload.PayloadError as error:
            raise RunnerBuildError(f"{pr.model.name}.pte: {error}") from None
    fast = max(needed) if needed else FAST_SCRATCH_SIZES.get(mode, npu_region.size)
    shared = ", shared by the models" if len(programs) > 1 else ""
    return Buffer("kiln_ethosu_fast_scratch", fast, npu_region.name, f"Ethos-U fast scratch (region 2){shared}")


# --- Generation ----------------------------------------------------------------------


def _pte_asm(ptes: list[tuple[str, Path]], region: str) -> str:
    """Each (label, file): the .pte bytes between label and label_end. The readable slack after
    each: the NPU may read a word past the end of weights."""
    lines = ["/* Generated by kiln.firmware.runner_build: the .pte files baked into the image. */"]
    for label, path in ptes:
        lines += [
            f'  .section .{region}.data.{label}, "a"',
            f"  .balign {PTE_ALIGNMENT}",
            f"  .global {label}",
            f"{label}:",
            f'  .incbin "{path.resolve()}"',
            f"  .global {label}_end",
            f"{label}_end:",
            "  .space 16",
        ]
    return "\n".join(lines) + "\n"


def _c_bytes(data: bytes) -> str:
    return ", ".join(str(b) for b in data) or "0"


def _model_cpp(k: int, m: Model, default_inputs: list[bytes]) -> tuple[list[str], str]:
    """Model k's storage (lines inside the anonymous namespace) and its ModelMemory's fields after
    its name and memory mode, up to the shared pool and scratches."""
    lines = [f"// model {k}: {m.name}"]
    # Whole D-cache lines, start and end: the NPU writes the scratch, and no other object
    # may share a line with it (the firmware's cache maintenance relies on it).
    for b in m.planned:
        lines.append(
            f"alignas({BUFFER_ALIGNMENT}) KILN_PLACE_BSS({b.region}) uint8_t {b.symbol}"
            f"[{_align(max(b.size, 1))}];  // {b.what}: {b.size} bytes"
        )
    planned = ", ".join(f"{{{b.symbol}, {b.size}}}" for b in m.planned)
    lines.append(f"runtime::Span<uint8_t> planned_{k}[{max(len(m.planned), 1)}] = {{{planned}}};")
    methods = []
    for j, method in enumerate(m.methods):  # each Method's own tables, over the model's planned buffers
        name = f"{k}_{j}"
        lines += [
            f"// method {j}: {method.name}",
            # runtime::Value has no default constructor (a union with a StringView):
            # raw storage the Method binds every entry of.
            f"alignas(runtime::Value) uint8_t values_{name}[{max(method.values, 1)} * sizeof(runtime::Value)];",
            f"runtime::KernelFn kernels_{name}[{max(method.operators, 1)}];",
            f"runtime::DelegateSlot delegates_{name}[{max(method.delegates, 1)}];",
        ]
        methods.append(
            f"    {{{{planned_{k}, {len(m.planned)}}}, "
            f"{{reinterpret_cast<runtime::Value*>(values_{name}), {method.values}}}, "
            f"{{kernels_{name}, {method.operators}}}, {{delegates_{name}, {method.delegates}}}}},"
        )
    lines += [f"const runtime::MethodMemory methods_{k}[{len(m.methods)}] = {{", *methods, "};"]
    lines.append(f"runtime::Method method_{k};  // the executor runner binds its first method here")
    for i, raw in enumerate(default_inputs):
        lines.append(f"alignas(16) const uint8_t default_input_{k}_{i}[{max(len(raw), 1)}] = {{{_c_bytes(raw)}}};")
    spans = ", ".join(f"{{default_input_{k}_{i}, {len(raw)}}}" for i, raw in enumerate(default_inputs))
    lines.append(f"const runtime::Span<const uint8_t> default_inputs_{k}[{max(len(default_inputs), 1)}] = {{{spans}}};")
    fields = (
        f"{{planned_{k}, {len(m.planned)}}}, {{methods_{k}, {len(m.methods)}}}, "
        f"{{default_inputs_{k}, {len(default_inputs)}}}, {m.symbol}, {m.symbol}_end, &method_{k}"
    )
    return lines, fields


def _memory_cpp(p: Plan, default_inputs: list[list[bytes]]) -> str:
    """model_memory.cpp: every model's storage and ModelMemory (model.h), the first also as kModel."""
    lines = [
        "// Generated by kiln.firmware.runner_build from the .pte files: do not edit.",
        '#include "model.h"',
        *(['#include "npu_ethosu.h"'] if p.target.has_npu else []),
        '#include "kiln_board.h"',
        "",
        *[f'extern "C" const uint8_t {m.symbol}[], {m.symbol}_end[];' for m in p.models[1:]],
        "namespace kiln::runner {",
        "namespace {",
    ]

    entries = []
    for k, m in enumerate(p.models):
        storage, fields = _model_cpp(k, m, default_inputs[k] if k < len(default_inputs) else [])
        lines += storage
        mode = p.memory_mode or NO_NPU_MODE
        entries.append(f"    {{{json.dumps(m.name)}, {json.dumps(mode)}, {fields}, {p.delegates}}},")
    lines += [
        f"const ModelMemory models[{len(p.models)}] = {{",
        *entries,
        "};",
        *_npu_memory_cpp(p),
        "}  // namespace",
        "",
        f"const runtime::Span<const ModelMemory> kModels = {{models, {len(p.models)}}};",
        "const ModelMemory& kModel = models[0];",
    ]
    if p.target.has_npu:
        scratch, fast = _span(p.scratch), _span(p.fast_scratch)
        lines.append(f"const NpuMemory kNpuMemory = {{{{pool, {p.delegates}}}, {scratch}, {fast}}};")
    lines += ["", "}  // namespace kiln::runner", ""]
    return "\n".join(lines)


def _span(b: Buffer | None) -> str:
    return f"{{{b.symbol}, {_align(b.size)}}}" if b is not None else "{}"


def _npu_memory_cpp(p: Plan) -> list[str]:
    """The NPU's scratches and the delegate pool (npu_ethosu.h's NpuMemory): one each, shared by
    the models; none for a target without an NPU."""
    if not p.target.has_npu:
        return []
    lines = [
        f"alignas({BUFFER_ALIGNMENT}) KILN_PLACE_BSS({b.region}) uint8_t {b.symbol}"
        f"[{_align(max(b.size, 1))}];  // {b.what}: {b.size} bytes"
        for b in (p.scratch, p.fast_scratch)
        if b is not None
    ]
    return [*lines, f"delegates::ethosu::DelegateState pool[{max(p.delegates, 1)}];"]


def _kernel_table(p: Plan, out: Path) -> None:
    """The selective kernel table: only the program's operators; one kiln lacks fails here."""
    if not KERNEL_TABLE_GENERATOR.is_file():
        raise RunnerBuildError(f"{KERNEL_TABLE_GENERATOR} is missing (the runtime's selective-build generator)")
    operators = [f"{name}.{overload}" if overload else name for name, overload in p.operators]
    result = subprocess.run(
        [sys.executable, str(KERNEL_TABLE_GENERATOR), "--output", str(out / "kernel_table.cpp"), *operators],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip().splitlines()
        last = message[-1].removeprefix("error: ") if message else "the kernel table generator failed"
        raise RunnerBuildError(f"{p.model}: {last}")


def baked_files(p: Plan, gen: Path) -> list[Path]:
    """Where generate() writes each model's .pte to bake: BAKED_PTE for the first, model_<k>.pte after."""
    return [gen / (BAKED_PTE if k == 0 else f"model_{k}.pte") for k in range(len(p.models))]


def generate(p: Plan, out: Path, default_inputs: list[bytes], bake: Path | None = None) -> Path:
    """Writes the image's generated sources into out/generated and returns that directory: each
    model's .pte to bake (baked_files), model_pte.S, model_memory.cpp, kernel_table.cpp.
    `default_inputs`: the first model's, built in (an image of one model only). `bake`: a file
    baked in instead of the first model's (sizes still come from the plan's .pte), for testing
    the firmware's own checks with damaged files."""
    first = p.models[0]
    if default_inputs and len(p.models) > 1:
        raise UsageError(
            "--default-input applies to an image of one model; this one has " + ", ".join(m.name for m in p.models)
        )
    if default_inputs and len(default_inputs) != len(first.input_sizes):
        raise UsageError(
            f"the program takes {len(first.input_sizes)} input(s); {len(default_inputs)} --default-input given"
        )
    for i, (raw, size) in enumerate(zip(default_inputs, first.input_sizes)):
        if len(raw) != size:
            raise UsageError(f"default input {i} has {len(raw)} bytes; the program takes {size}")
    gen = out / "generated"
    gen.mkdir(parents=True, exist_ok=True)
    files = baked_files(p, gen)
    for m, path in zip(p.models, files):
        _write_if_changed(path, m.baked)
    if bake is not None:
        files[0] = Path(bake)
    _write_if_changed(gen / "model_pte.S", _pte_asm([(m.symbol, f) for m, f in zip(p.models, files)], p.pte_region))
    _write_if_changed(gen / "model_memory.cpp", _memory_cpp(p, [list(default_inputs)]))
    _kernel_table(p, gen)
    return gen


def _write_if_changed(path: Path, content: str | bytes) -> None:
    """Writes `content` unless the file holds it already: CMake rebuilds only what changed."""
    data = content.encode() if isinstance(content, str) else content
    if not path.is_file() or path.read_bytes() != data:
        path.write_bytes(data)


# --- Building ------------------------------------------------------------------------


def _run(command: list[str], what: str, p: Plan, log: Path) -> str:
    """Runs one build step; when it fails, a RunnerBuildError of one line: the regions that
    overflowed, else kiln's own message (a "kiln: ..." line, e.g. from the board generator),
    else the first error line and `log`, where the whole output is written."""
    result = subprocess.run(command, capture_output=True, text=True)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        overflow = re.findall(r"region `(\w+)' overflowed by (\d+) bytes", output)
        if overflow:
            raise RunnerBuildError("; ".join(_overflow_message(p, region, int(n)) for region, n in overflow))
        kiln_message = re.search(r"kiln: .*", output)
        if kiln_message:
            raise RunnerBuildError(f"{what} failed: {kiln_message.group(0).strip()}")
        raise RunnerBuildError(firmware.failed_step(what, output, log))
    return output


def _ptes(p: Plan) -> list[tuple[str, int]]:
    """(what, bytes) of each baked .pte: "the .pte" in an image of one model, else "<model>.pte"."""
    if len(p.models) == 1:
        return [("the .pte", p.pte_size)] if p.pte_size else []
    return [(f"{m.name}.pte", m.size) for m in p.models]


def fit(p: Plan) -> list[dict]:
    """What the plan places in each of the board's regions before any code is linked: the .pte,
    the planned buffers, the NPU's scratches, and the stack (with DATA_RESERVE for the firmware's
    own variables where the planned buffers go), against the region's size. One dict per region
    used: name, bytes needed, room (its size), what is placed there, and whether it fits."""
    placed: dict[str, list[tuple[str, int]]] = {}
    for what, size in _ptes(p):
        placed.setdefault(p.pte_region, []).append((what, size))
    for b in p.buffers():
        placed.setdefault(b.region, []).append((b.what, _align(b.size)))
    board = p.target.board
    placed.setdefault(board.region_for("stack").name, []).append(("the main stack", p.stack_size))
    data = board.region_for("data").name
    if any(b.region == data for b in p.planned):
        placed.setdefault(data, []).append(("the firmware's own variables (reserve)", DATA_RESERVE))
    regions = []
    for region in board.memory:
        if region.name not in placed:
            continue
        need = sum(size for _, size in placed[region.name])
        regions.append(
            {
                "region": region.name,
                "need": need,
                "room": region.size,
                "fits": need <= region.size,
                "placed": {what: size for what, size in placed[region.name]},
            }
        )
    return regions


def check_fit(p: Plan) -> list[dict]:
    """fit(p), or a RunnerBuildError naming each region that cannot hold what goes there, the need
    and the room."""
    regions = fit(p)
    over = [r for r in regions if not r["fits"]]
    if over:
        raise RunnerBuildError(
            f"{p.model} does not fit {p.target.board.name} in memory mode {p.memory_mode}: "
            + "; ".join(
                f"region {r['region']} needs {r['need']:,} bytes ("
                + ", ".join(f"{what} {size:,}" for what, size in r["placed"].items())
                + f"), it has {r['room']:,}"
                for r in over
            )
        )
    return regions


def _overflow_message(p: Plan, region: str, excess: int) -> str:
    r = next(m for m in p.target.board.memory if m.name == region)
    placed = [f"{b.what} {b.size:,} B" for b in p.buffers() if b.region == region]
    if p.pte_region == region:
        placed += [f"{what} {size:,} B" for what, size in _ptes(p)]
    return (
        f"the link does not fit: region {region} ({r.size:,} bytes on {p.target.board.name}) overflows by "
        f"{excess:,} bytes; placed there for memory mode {p.memory_mode}: {', '.join(placed) or 'code/data'}"
    )


def _forget_other_toolchain(build_dir: Path, toolchain_file: Path):
    """A CMake tree configured with another toolchain (an --output folder reused for another
    board) keeps its compiler whatever -DCMAKE_TOOLCHAIN_FILE says: drop its cache so the
    configure starts afresh. A tree of the same toolchain stays incremental."""
    cache = build_dir / "CMakeCache.txt"
    if not cache.is_file():
        return
    recorded = re.search(r"^CMAKE_TOOLCHAIN_FILE:[A-Z]+=(.*)$", cache.read_text(errors="replace"), re.MULTILINE)
    if recorded is None or Path(recorded.group(1).strip()) != Path(toolchain_file):
        cache.unlink()
        shutil.rmtree(build_dir / "CMakeFiles", ignore_errors=True)


def build(
    p: Plan, gen: Path, out: Path, build_type: str, baked: list[Path], app: str = APP, cmake_options: Sequence[str] = ()
) -> Path:
    """Configures APP_DIR's project for `p` and builds `app` (one of APPS); returns its ELF.
    `baked`: the .pte files model_pte.S bakes in (the build depends on them); `cmake_options`: more
    -D options of the firmware's (e.g. -DKILN_KERNELS_PLAIN=ON)."""
    firmware.check_tools(p.target.board)
    build_dir = out / "cmake"
    _forget_other_toolchain(build_dir, p.target.board.cpu.toolchain_file)
    _run(
        [
            "cmake",
            "-S",
            str(APP_DIR),
            "-B",
            str(build_dir),
            "-G",
            "Ninja",
            f"-DCMAKE_TOOLCHAIN_FILE={p.target.board.cpu.toolchain_file}",
            f"-DKILN_PYTHON={sys.executable}",
            f"-DKILN_BOARD={p.target.board.name}",
            f"-DCMAKE_BUILD_TYPE={build_type}",
            f"-DKILN_RUNNER_GENERATED={gen}",
            f"-DKILN_RUNNER_PTE={';'.join(str(b.resolve()) for b in baked)}",
            f"-DKILN_STACK_SIZE={p.stack_size:#x}",
            f"-DKILN_NPU={'ON' if p.target.has_npu else 'OFF'}",
            f"-DKILN_RUNNER_BUNDLE={'ON' if is_bundle(p.models[0].baked) else 'OFF'}",
            *cmake_options,
        ],
        "configuring the runner",
        p,
        out / firmware.BUILD_LOG,
    )
    _run(["cmake", "--build", str(build_dir), "--target", app], "building the runner", p, out / firmware.BUILD_LOG)
    elf = build_dir / f"{app}.elf"
    if not elf.is_file():
        raise RunnerBuildError(f"the build finished without {elf}")
    return elf


# --- Building a runner ----------------------------------------------------------------------


def default_output(p: Plan) -> Path:
    """build/runner/<model>-<target>-<mode>, with -<board> when the board is not the target's
    reference; <model> is the models' names joined by "+" for an image of several."""
    on = "" if p.target.board.reference else f"-{p.target.board.name}"
    mode = f"-{p.memory_mode}" if p.memory_mode else ""
    return paths.build_root() / "runner" / f"{p.model}-{p.target.name}{mode}{on}"


def build_runner(
    pte_path: Path | Sequence[Path],
    target: boards.Target | str,
    memory_mode: str | None = None,
    system_config: str | None = None,
    build_type: str = "Release",
    output: Path | None = None,
    default_inputs: list[bytes] = (),
    check_target: bool = True,
    bake: Path | None = None,
    echo=print,
    stack_size: int | None = None,
    board: str | None = None,
    app: str = APP,
    sources: dict[str, str] | None = None,
    cmake_options: Sequence[str] = (),
) -> Path:
    """Plans, generates, builds and reports; returns the ELF. `pte_path`: one .pte, or several for
    an image of several models (plan()); such an image is checked against the board's regions
    before anything is built (check_fit: each model's compile checked only itself).
    `target`: its name or its Target; `stack_size`: the main stack in bytes (default: the board's);
    `board`: default the target's reference board; `app`: which of APPS (the generation app,
    "generate", runs a language model's prefill and decode methods: firmware/apps/generate);
    `sources`: more generated sources (file name -> text) written beside the model's, e.g. the
    ETDump app's etdump_layers.cpp. `cmake_options`: more -D options of the firmware's, as they are
    (a folder configured with one keeps it until configured otherwise)."""
    if build_type not in ("Release", "Debug"):
        raise UsageError(f"build type {build_type!r} is not Release or Debug")
    if app not in APPS:
        raise UsageError(f"app {app!r} is not one of {', '.join(APPS)}")
    if app == ETDUMP_APP and "etdump_layers.cpp" not in (sources or {}):
        raise UsageError(f"{ETDUMP_APP} is built with the program's NPU layers: kiln profile MODEL --etdump FILE")
    p = plan(pte_path, target, memory_mode, system_config, check_target, stack_size, board)
    if len(p.models) > 1:
        if app != APP:
            raise UsageError(f"the {app} app runs one model; build it for one .pte")
        check_fit(p)
    out = Path(output or default_output(p)).resolve()
    out.mkdir(parents=True, exist_ok=True)
    gen = generate(p, out, list(default_inputs), bake)
    if app == GENERATE_APP:  # the app's own sizes, from the program (kiln.firmware.generate_plan)
        sources = {**(sources or {}), generate_plan.FILE: generate_plan.header(p.models[0].baked)}
    for name, text in (sources or {}).items():
        _write_if_changed(gen / name, text)
    baked = baked_files(p, gen)
    if bake:
        baked[0] = Path(bake)
    elf = build(p, gen, out, build_type, baked, app, cmake_options)
    echo(memory_report.report(p, elf, out, APPS[app]), end="")
    return elf
