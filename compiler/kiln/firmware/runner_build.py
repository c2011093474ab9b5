"""Builds kiln's executor runner for one .pte (./scripts/build_executor_runner.sh).

    kiln build --pte=FILE --target=ethos-u55-128 [--board=NAME] [--system_config=NAME]
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
prefill and decode) over the same generated sources instead.

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
from dataclasses import dataclass, field, replace
from pathlib import Path

from kiln import boards, paths
from kiln.errors import PteError, RunnerBuildError, UsageError
from kiln.firmware import build as firmware
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
APPS = {APP: "kiln executor runner", "generate": "kiln generate"}
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
class Plan:
    model: str
    target: boards.Target
    memory_mode: str
    system_config: str
    pte_region: str
    baked: bytes = field(repr=False)  # the .pte to bake: the file without run-host's reference data
    pte_file_size: int  # bytes of the .pte on disk
    methods: list[Method]  # in plan order; the executor runner runs the first
    operators: list[tuple[str, str]]  # every method's, each once (the kernel table)
    planned: list[Buffer] = field(default_factory=list)  # memory ids 1..n, shared by the methods
    scratch: Buffer | None = None
    fast_scratch: Buffer | None = None
    input_sizes: list[int] = field(default_factory=list)
    stack_size: int = 0  # main stack in bytes, as the build links it (board.toml's, or the override)

    @property
    def pte_size(self) -> int:
        """Bytes of the .pte as baked."""
        return len(self.baked)

    @property
    def delegates(self) -> int:
        """Every method's delegates: the Ethos-U backend's pool holds one state each."""
        return sum(m.delegates for m in self.methods)

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
) -> tuple[str, str]:
    """The memory mode and system config: given, else the one the .pte's delegates were
    compiled for (`compiled_for`, their ethosu_payload.MEMORY_MODE_SPEC), else the compile report's
    beside the .pte (kiln compile writes <name>.json), else the target's defaults."""
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
    if mode not in target.family.memory_modes:
        hint = f"; compile the model with --memory-mode {target.family.memory_mode}" if mode == compiled_mode else ""
        raise UsageError(
            f"memory mode {mode!r} is not one of {target.name}'s on {target.board.name}: "
            f"{', '.join(target.family.memory_modes)}{hint}"
        )
    return mode, system_config or report.get("system_config") or target.system_config


# The compile report's fields the runner build reads; each, when present, a string.
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
        if name in report and not isinstance(report[name], str):
            raise UsageError(f"{path}: {name} is {str(report[name])[:60]}, not a string; {fix}")
    return report


def plan(
    pte_path: Path,
    target: boards.Target | str,
    memory_mode: str | None = None,
    system_config: str | None = None,
    check_target: bool = True,
    stack_size: int | None = None,
    board: str | None = None,
) -> Plan:
    """`target`: its name, or the Target a caller has already (see boards.resolve).
    `stack_size`: the main stack in bytes, else the board's (board.toml's stack_size);
    the build links exactly this one, so the planned buffers' fit in "data" uses it too.
    `board`: a board with the target's NPU configuration (default: the target's reference board)."""
    target = boards.resolve(target, board)
    stack_size = boards.check_stack_size(target.board, target.board.stack_size if stack_size is None else stack_size)
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
    payloads = _payloads(f, specs, target.name, check_target)
    modes = {m for m in map(ethosu_payload.compiled_memory_mode, specs) if m}
    if len(modes) > 1:
        raise RunnerBuildError(f"{pte_path.name}'s delegates were compiled for different memory modes: {sorted(modes)}")
    mode, config = _memory_mode(pte_path, target, memory_mode, system_config, next(iter(modes), None))
    board = target.board
    model_region, npu_region = board.region_for("model"), board.region_for("npu")
    dedicated = mode.startswith("Dedicated_Sram")
    try:
        baked = without_reference_data(f)
        if bundle is not None:  # the bundle, its program as the firmware's
            baked = data if baked == bundle.program else serialize_bundle(replace(bundle, program=baked))
    except PteError as error:
        raise RunnerBuildError(f"{pte_path} could not be rewritten without its reference data: {error}") from None
    p = Plan(
        model=pte_path.stem,
        target=target,
        memory_mode=mode,
        system_config=config,
        pte_region=(npu_region if mode == "Sram_Only" else model_region).name,
        baked=baked,
        pte_file_size=len(data),
        methods=methods,
        operators=list(
            dict.fromkeys((op.name, op.overload) for plan in f.program.execution_plans for op in plan.operators)
        ),
        input_sizes=[program.values[i].nbytes for i in program.inputs],
        stack_size=stack_size,
    )
    sizes = _planned_sizes(methods)
    data_region = board.region_for("data")
    beside = p.stack_size if board.region_for("stack") == data_region else 0  # the stack shares the region
    fits_in_data = sum(_align(s) for s in sizes) + beside + DATA_RESERVE <= data_region.size
    planned_region = (data_region if fits_in_data else board.region_for("bulk")).name
    p.planned = [
        Buffer(f"kiln_planned_{k + 1}", size, planned_region, _buffer_what(k + 1, methods))
        for k, size in enumerate(sizes)
    ]
    if payloads:
        scratch = max(pl.scratch_size for pl in payloads)
        p.scratch = Buffer(
            "kiln_ethosu_scratch",
            scratch,
            (model_region if dedicated else npu_region).name,
            "Ethos-U scratch (region 1)",
        )
        if dedicated:
            # Vela's own figure from the .pte when kiln wrote it; else the mode's whole cache
            try:
                needed = [n for n in map(ethosu_payload.compiled_fast_scratch, specs) if n is not None]
            except ethosu_payload.PayloadError as error:
                raise RunnerBuildError(f"{pte_path.name}: {error}") from None
            fast = max(needed) if needed else FAST_SCRATCH_SIZES.get(mode, npu_region.size)
            p.fast_scratch = Buffer(
                "kiln_ethosu_fast_scratch", fast, npu_region.name, "Ethos-U fast scratch (region 2)"
            )
    return p


# --- Generation ----------------------------------------------------------------------


def _pte_asm(pte_path: Path, region: str) -> str:
    # The readable slack after the .pte: the NPU may read a word past the end of weights.
    return f"""/* Generated by kiln.firmware.runner_build: the .pte baked into the image. */
  .section .{region}.data.kiln_model, "a"
  .balign {PTE_ALIGNMENT}
  .global kiln_model_pte
kiln_model_pte:
  .incbin "{pte_path.resolve()}"
  .global kiln_model_pte_end
kiln_model_pte_end:
  .space 16
"""


def _c_bytes(data: bytes) -> str:
    return ", ".join(str(b) for b in data) or "0"


def _memory_cpp(p: Plan, default_inputs: list[bytes]) -> str:
    lines = [
        "// Generated by kiln.firmware.runner_build from the .pte: do not edit.",
        '#include "model.h"',
        '#include "kiln_board.h"',
        "",
        "namespace kiln::runner {",
        "namespace {",
    ]
    # Whole D-cache lines, start and end: the NPU writes the scratch, and no other object
    # may share a line with it (the firmware's cache maintenance relies on it).
    for b in p.buffers():
        lines.append(
            f"alignas({BUFFER_ALIGNMENT}) KILN_PLACE_BSS({b.region}) uint8_t {b.symbol}"
            f"[{_align(max(b.size, 1))}];  // {b.what}: {b.size} bytes"
        )
    planned = ", ".join(f"{{{b.symbol}, {b.size}}}" for b in p.planned)
    lines.append(f"runtime::Span<uint8_t> planned[{max(len(p.planned), 1)}] = {{{planned}}};")
    methods = []
    for k, m in enumerate(p.methods):  # each Method's own tables, over the one set of planned buffers
        lines += [
            f"// method {k}: {m.name}",
            # runtime::Value has no default constructor (a union with a StringView):
            # raw storage the Method binds every entry of.
            f"alignas(runtime::Value) uint8_t values_{k}[{max(m.values, 1)} * sizeof(runtime::Value)];",
            f"runtime::KernelFn kernels_{k}[{max(m.operators, 1)}];",
            f"runtime::DelegateSlot delegates_{k}[{max(m.delegates, 1)}];",
        ]
        methods.append(
            f"    {{{{planned, {len(p.planned)}}}, {{reinterpret_cast<runtime::Value*>(values_{k}), {m.values}}}, "
            f"{{kernels_{k}, {m.operators}}}, {{delegates_{k}, {m.delegates}}}}},"
        )
    lines += [
        f"const runtime::MethodMemory methods[{len(p.methods)}] = {{",
        *methods,
        "};",
        f"delegates::ethosu::DelegateState pool[{max(p.delegates, 1)}];",
    ]
    for i, raw in enumerate(default_inputs):
        lines.append(f"alignas(16) const uint8_t default_input_{i}[{max(len(raw), 1)}] = {{{_c_bytes(raw)}}};")
    spans = ", ".join(f"{{default_input_{i}, {len(raw)}}}" for i, raw in enumerate(default_inputs))
    lines.append(f"const runtime::Span<const uint8_t> default_inputs[{max(len(default_inputs), 1)}] = {{{spans}}};")

    def span(b: Buffer | None) -> str:
        return f"{{{b.symbol}, {_align(b.size)}}}" if b is not None else "{}"

    lines += [
        "}  // namespace",
        "",
        "const ModelMemory kModel = {",
        f'    "{p.model}", "{p.memory_mode}",',
        f"    {{planned, {len(p.planned)}}},",
        f"    {{methods, {len(p.methods)}}},",
        f"    {{pool, {p.delegates}}},",
        f"    {span(p.scratch)}, {span(p.fast_scratch)},",
        f"    {{default_inputs, {len(default_inputs)}}},",
        "};",
        "",
        "}  // namespace kiln::runner",
        "",
    ]
    return "\n".join(lines)


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


def generate(p: Plan, out: Path, default_inputs: list[bytes], bake: Path | None = None) -> Path:
    """Writes the model's generated sources into out/generated and returns that directory:
    the .pte to bake (BAKED_PTE: p.baked), model_pte.S, model_memory.cpp, kernel_table.cpp.
    `bake`: a file baked in instead (sizes still come from the plan's .pte), for testing
    the firmware's own checks with damaged files."""
    if default_inputs and len(default_inputs) != len(p.input_sizes):
        raise UsageError(
            f"the program takes {len(p.input_sizes)} input(s); {len(default_inputs)} --default-input given"
        )
    for i, (raw, size) in enumerate(zip(default_inputs, p.input_sizes)):
        if len(raw) != size:
            raise UsageError(f"default input {i} has {len(raw)} bytes; the program takes {size}")
    gen = out / "generated"
    gen.mkdir(parents=True, exist_ok=True)
    baked = gen / BAKED_PTE
    _write_if_changed(baked, p.baked)
    _write_if_changed(gen / "model_pte.S", _pte_asm(Path(bake or baked), p.pte_region))
    _write_if_changed(gen / "model_memory.cpp", _memory_cpp(p, default_inputs))
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


def fit(p: Plan) -> list[dict]:
    """What the plan places in each of the board's regions before any code is linked: the .pte,
    the planned buffers, the NPU's scratches, and the stack (with DATA_RESERVE for the firmware's
    own variables where the planned buffers go), against the region's size. One dict per region
    used: name, bytes needed, room (its size), what is placed there, and whether it fits."""
    placed: dict[str, list[tuple[str, int]]] = {}
    if p.pte_size:
        placed.setdefault(p.pte_region, []).append(("the .pte", p.pte_size))
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
        placed.append(f"the .pte {p.pte_size:,} B")
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


def build(p: Plan, gen: Path, out: Path, build_type: str, baked: Path, app: str = APP) -> Path:
    """Configures APP_DIR's project for `p` and builds `app` (one of APPS); returns its ELF."""
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
            f"-DKILN_RUNNER_PTE={baked.resolve()}",
            f"-DKILN_STACK_SIZE={p.stack_size:#x}",
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


# --- The size and memory report --------------------------------------------------------

# The runtime core's parts, by the archive and object an input section comes from: the
# loader (Program::load's verification pass and Program's accessors), the executor (Method),
# the Ethos-U delegate and the driver. The runtime core is their sum. The first part with a
# marker in the origin is its part.
CORE = "runtime core"
CORE_PARTS = (
    ("loader", ("libkiln_runtime.a(fb.cpp", "libkiln_runtime.a(program.cpp")),
    ("executor", ("libkiln_runtime.a(",)),  # method.cpp, support.cpp
    ("delegate", ("libkiln_delegate_ethosu.a(",)),
    ("driver", ("libkiln_ethosu.a(",)),
)
# The other parts of the image, by archive (else: the runner app). The error text (every
# error's name and the printer) is linked beside the core for the UART.
OTHER_PARTS = (
    ("error text", ("libkiln_error_text.a",)),
    ("platform", ("libkiln_platform.a",)),
    ("kernels", ("libkiln_kernels.a", "kernel_table")),
    ("model", ("model_pte", "model_memory")),
    ("C/C++ library", ("libc", "libgcc", "libstdc++", "libm", "libnosys")),
)
# The parts the report shows, in order (the runtime core as one, the sum of its parts).
PARTS = ((CORE, tuple(marker for _, markers in CORE_PARTS for marker in markers)), *OTHER_PARTS)


def _part(origin: str) -> str:
    """The part an input object belongs to: one of the runtime core's, another, or the app."""
    for part, markers in CORE_PARTS + OTHER_PARTS:
        if any(marker in origin for marker in markers):
            return part
    return "runner app"


_MAP_LINE = re.compile(r"^\s*(\.\S+)?\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\S+\.(?:o|obj|a\(.*\)))\s*$")


def _map_parts(map_text: str, regions: list[boards.MemoryRegion]) -> dict:
    """Bytes per (region, part, kind) from the linker map's input sections; kind is
    "code" (text/rodata), "data" (initialised) or "bss"; the runtime core's by its parts."""
    usage: dict = {}
    section = None
    in_map = False
    for line in map_text.splitlines():
        if line.startswith("Linker script and memory map"):
            in_map = True
            continue
        if not in_map:
            continue
        stripped = line.strip()
        if stripped.startswith(".") and len(stripped.split()) == 1:
            section = stripped  # a long input-section name on its own line
            continue
        m = _MAP_LINE.match(line)
        if not m:
            section = None
            continue
        name, address, size, origin = m.group(1) or section or "", int(m.group(2), 16), int(m.group(3), 16), m.group(4)
        section = None
        if size == 0 or address == 0:
            continue
        region = next((r.name for r in regions if r.base <= address < r.end), None)
        if region is None:
            continue
        if "kiln_model" in name:
            continue  # the .pte: reported on its own line
        kind = "bss" if ".bss" in name or "COMMON" in name else ("data" if ".data" in name else "code")
        key = (region, _part(origin), kind)
        usage[key] = usage.get(key, 0) + size
    return usage


def _region_usage(elf: Path, regions: list[boards.MemoryRegion]) -> dict[str, dict[str, int]]:
    """Loaded (image) and zero-initialised/uninitialised bytes per region, from the ELF's sections."""
    size_tool = shutil.which("arm-none-eabi-size") or "arm-none-eabi-size"
    text = subprocess.run([size_tool, "-A", "-x", str(elf)], capture_output=True, text=True, check=True).stdout
    usage = {r.name: {"image": 0, "uninitialised": 0} for r in regions}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3 or not parts[0].startswith("."):
            continue
        name, size, address = parts[0], int(parts[1], 16), int(parts[2], 16)
        region = next((r.name for r in regions if r.base <= address < r.end), None)
        if region is None or size == 0:
            continue
        kind = "uninitialised" if name.endswith("bss") or name == ".stack" else "image"
        usage[region][kind] += size
    return usage


def _state_arena(p: Plan) -> dict | None:
    """The state arena's buffer (memory id STATE_MEMORY_ID) when a method of the program plans one."""
    if len(p.planned) < STATE_MEMORY_ID:
        return None
    b = p.planned[STATE_MEMORY_ID - 1]
    return {"size": b.size, "region": b.region}


def _methods_report(p: Plan) -> str:
    """The report's lines on a program of several methods: what each plans, and how the runner
    shares the planned buffers among them."""
    names = ", ".join(m.name for m in p.methods)
    lines = [
        f"methods: {names}: the apps run one at a time (each one's outputs read before the next runs), so "
        "planned buffer 1 (activations) is one buffer, the largest method's"
    ]
    arena = _state_arena(p)
    if arena is not None:
        lines.append(
            f"  state arena (planned buffer {STATE_MEMORY_ID}) {arena['size']:,} bytes in {arena['region']}, "
            "shared by every method, zeroed before the first runs"
        )
    for m in p.methods:
        planned = ", ".join(f"{size:,}" for size in m.planned) or "none"
        lines.append(
            f"  {m.name:<16} planned {planned}; {m.values:,} values, {m.operators} operators, {m.delegates} delegates"
        )
    return "\n".join(lines)


def report(p: Plan, elf: Path, out: Path) -> str:
    regions = list(p.target.board.memory)
    usage = _region_usage(elf, regions)
    parts = _map_parts(elf.with_suffix(".map").read_text(), regions)
    lines = [
        f"{APPS.get(elf.stem, APPS[APP])}: {p.model} for {p.target.name} on {p.target.board.name} "
        f"({p.system_config}, {p.memory_mode})",
        f"  ELF {elf}",
        "",
        "memory per region (bytes):",
    ]
    for r in regions:
        u = usage[r.name]
        used = u["image"] + u["uninitialised"]
        if used == 0:
            continue
        lines.append(
            f"  {r.name:<6} {used:>11,} of {r.size:>11,} ({100 * used / r.size:5.1f} %)  "
            f"image {u['image']:,}, uninitialised {u['uninitialised']:,}"
        )
    lines += ["", "buffers planned from the .pte:"]
    lines.append(f"  {'the .pte (weights, command streams)':<40} {p.pte_size:>11,}  {p.pte_region}")
    if p.pte_file_size != p.pte_size:
        lines.append(
            f"    as baked: the {p.pte_file_size:,}-byte file less {p.pte_file_size - p.pte_size:,} bytes of "
            "run-host's reference TOSA graphs"
        )
    for b in p.buffers():
        lines.append(f"  {b.what:<40} {b.size:>11,}  {b.region}")
    stack_region = p.target.board.region_for("stack").name
    lines.append(f"  {'main stack (board.toml, or the override)':<40} {p.stack_size:>11,}  {stack_region}")
    if len(p.methods) > 1:
        lines += ["", _methods_report(p)]
    lines += ["", "image by part, bytes (code = text + rodata; data = initialised; the .pte apart):"]
    core_names = [name for name, _ in CORE_PARTS]
    totals: dict[str, dict[str, int]] = {}  # per part, the runtime core as one
    core: dict[str, dict[str, int]] = {}  # per part of the runtime core
    for (_region, part, kind), size in parts.items():
        for table, name in ((core, part), (totals, CORE)) if part in core_names else ((totals, part),):
            table.setdefault(name, {"code": 0, "data": 0, "bss": 0})[kind] += size

    def line(name: str, t: dict[str, int], indent: str = "  ") -> str:
        return f"{indent}{name:<{18 - len(indent)}} code {t['code']:>10,}  data {t['data']:>8,}  bss {t['bss']:>10,}"

    for part in [name for name, _ in PARTS] + ["runner app"]:
        if part in totals:
            lines.append(line(part, totals[part]))
        if part == CORE:
            lines += [line(name, core[name], "    ") for name in core_names if name in core]
    lines.append(f"  {'the .pte':<16} {p.pte_size:>15,}  in {p.pte_region}")
    text = "\n".join(lines) + "\n"
    (out / "memory_report.txt").write_text(text)
    (out / "memory_report.json").write_text(
        json.dumps(
            {
                "model": p.model,
                "target": p.target.name,
                "memory_mode": p.memory_mode,
                "elf": str(elf),
                "regions": {r.name: {"size": r.size, **usage[r.name]} for r in regions},
                "buffers": [{"what": b.what, "size": b.size, "region": b.region} for b in p.buffers()],
                "pte": {
                    "size": p.pte_size,
                    "region": p.pte_region,
                    "file_size": p.pte_file_size,
                    "reference_data_left_out": p.pte_file_size - p.pte_size,
                },
                "stack": {"size": p.stack_size, "region": stack_region},
                "methods": [
                    {
                        "name": m.name,
                        "planned": list(m.planned),
                        "values": m.values,
                        "operators": m.operators,
                        "delegates": m.delegates,
                    }
                    for m in p.methods
                ],
                "state_arena": _state_arena(p),
                "parts": totals,
                "core_parts": {name: core[name] for name in core_names if name in core},
            },
            indent=2,
        )
        + "\n"
    )
    return text


# --- Building a runner ----------------------------------------------------------------------


def default_output(pte_path: Path, target: boards.Target, memory_mode: str) -> Path:
    """build/runner/<model>-<target>-<mode>, with -<board> when the board is not the target's reference."""
    on = "" if target.board.reference else f"-{target.board.name}"
    return paths.build_root() / "runner" / f"{pte_path.stem}-{target.name}-{memory_mode}{on}"


def build_runner(
    pte_path: Path,
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
) -> Path:
    """Plans, generates, builds and reports; returns the ELF. `target`: its name or its Target;
    `stack_size`: the main stack in bytes (default: the board's); `board`: default the target's
    reference board; `app`: which of APPS (the generation app, "generate", runs a language
    model's prefill and decode methods: firmware/apps/generate)."""
    if build_type not in ("Release", "Debug"):
        raise UsageError(f"build type {build_type!r} is not Release or Debug")
    if app not in APPS:
        raise UsageError(f"app {app!r} is not one of {', '.join(APPS)}")
    p = plan(Path(pte_path), target, memory_mode, system_config, check_target, stack_size, board)
    out = Path(output or default_output(Path(pte_path), p.target, p.memory_mode)).resolve()
    out.mkdir(parents=True, exist_ok=True)
    gen = generate(p, out, list(default_inputs), bake)
    elf = build(p, gen, out, build_type, Path(bake) if bake else gen / BAKED_PTE, app)
    echo(report(p, elf, out), end="")
    return elf
