"""`kiln compile`: a model in, a .pte and its report out.

The passes, in order (each timed for the report):
  load -> export -> normalize -> quantize -> fold (kiln's graph) -> partition -> lower (TOSA)
  -> vela -> program (memory plan) -> write (.pte) -> report
From fold on, kiln.checks verifies each stage's result before the next stage uses it (a
broken invariant is an InternalError naming the stage); the checks are timed with their stage.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

from kiln import boards, checks, graph, vocabulary
from kiln.errors import InternalError, ModelError, UsageError, VelaError, VelaRefusal
from kiln.frontend import autoprecision, normalize, state
from kiln.frontend import export as frontend
from kiln.frontend.quantizer import EthosUQuantizer, calibrate, quantize
from kiln.lower import tosa as tosa_lowering
from kiln.lower import vela
from kiln.partition import partitioner as partition
from kiln.partition import support
from kiln.program import builder as program
from kiln.pte import from_program
from kiln.spec import CompileSpec, QuantizationScheme


@dataclass
class Result:
    pte: bytes
    report: dict
    graph: graph.Graph
    partitioning: partition.Partitioning
    program: program.Program
    tosa: list[bytes]  # per delegate, in the program's delegate order
    vela: list[vela.VelaResult]  # per delegate, in the program's delegate order
    flipped: list[frozenset[str]]  # per delegate, the lowering choices taken against the target's default
    quantized_module: torch.nn.Module | None  # the PT2E reference (None without quantization)
    int16_reasons: dict[str, str]  # node name -> the policy or pattern that made it 16-bit (CompileSpec.int16)
    inputs: tuple[torch.Tensor, ...]  # the model's example inputs
    stages: dict[str, float] = field(default_factory=dict)
    searches: list[VelaSearch] = field(default_factory=list)  # the partitions Vela failed on
    # the argument name of each program input, the path of each output in what forward returns
    io_paths: tuple[list[str], list[str]] = ((), ())
    keywords: tuple[str, ...] = ()  # the inputs passed by keyword (kiln.frontend.export.LoadedModel)
    int16_auto: autoprecision.Choice | None = None  # what --int16 auto measured and chose


class _Stages:
    """Times named stages: `with stage("export"): ...`; seconds per stage, in order."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.current: str | None = None  # the stage last entered

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.current = name
        start = time.perf_counter()
        yield
        # a stage that runs again (after a Vela refusal) adds to its time
        self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - start, 3)


def load_calibration(path: Path | None, example: tuple[torch.Tensor, ...]) -> list[tuple[torch.Tensor, ...]]:
    """Calibration samples from an .npz (or a folder of them). Each file holds the model's
    inputs in order (arr_0, arr_1, ... or any names, in file order); an array may carry an
    extra leading dimension holding several samples."""
    if path is None:
        return [example]
    path = Path(path)
    files = sorted(path.glob("*.npz")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise UsageError(f"--calibration {path}: no .npz files found")
    samples = []
    for f in files:
        try:
            with np.load(f, allow_pickle=False) as npz:
                arrays = [npz[k] for k in npz.files]
            arrays = [a.astype(a.dtype.newbyteorder("=")) for a in arrays]  # torch takes native byte order only
        except Exception as error:
            raise UsageError(f"--calibration {f}: not a readable .npz ({error})") from None
        if len(arrays) != len(example):
            raise UsageError(f"--calibration {f}: holds {len(arrays)} arrays, the model takes {len(example)} inputs")
        for i, a in enumerate(arrays):
            if a.dtype.kind not in "biuf":
                raise UsageError(f"--calibration {f}: array {i} holds {a.dtype}, not numbers (bool, int or float)")
            if a.dtype.kind == "f" and not np.isfinite(a).all():
                raise UsageError(f"--calibration {f}: array {i} holds NaN or infinity")
        batched = [a.shape == tuple(e.shape) for a, e in zip(arrays, example)]
        if all(batched):
            samples.append(tuple(torch.from_numpy(a).to(e.dtype) for a, e in zip(arrays, example)))
            continue
        for i, (a, e) in enumerate(zip(arrays, example)):
            if a.shape[1:] != tuple(e.shape):
                raise UsageError(
                    f"--calibration {f}: input {i} has shape {list(a.shape)}, the model takes {list(e.shape)} "
                    f"(or [N, {', '.join(map(str, e.shape))}] for N samples)"
                )
        for n in range(min(a.shape[0] for a in arrays)):
            samples.append(tuple(torch.from_numpy(a[n]).to(e.dtype) for a, e in zip(arrays, example)))
    if not samples:
        raise UsageError(f"--calibration {path}: holds no samples (every array has 0 of them)")
    return samples


@dataclass
class Progress:
    """What a compile has found so far; the report of a compile that fails is made of it."""

    model: str
    spec: CompileSpec
    stage: _Stages = field(default_factory=_Stages)
    partitioning: partition.Partitioning | None = None  # the latest
    searches: list[VelaSearch] = field(default_factory=list)  # each partition Vela failed on


def compile_model(
    model: str | frontend.LoadedModel,
    spec: CompileSpec,
    calibration: Path | None = None,
    log=print,
    target: boards.Target | None = None,
) -> Result:
    """`model` (a zoo name, a .py file, or a model already loaded) compiled to `spec`; `target`:
    spec's target on spec's board when the caller has resolved it already (boards.target). What it
    raises once the model and its calibration are loaded carries `report`: the report of the failed
    compile (failure_report), which `kiln compile` writes where the report would have gone."""
    progress = Progress(model if isinstance(model, str) else model.name, spec)
    try:
        return _compile(model, spec, calibration, log, progress, target)
    except Exception as error:
        if progress.stage.current not in (None, "load"):
            try:
                error.report = failure_report(progress, error)
            except AttributeError:  # an exception type without a __dict__ goes without its report
                pass
        raise


def _compile(
    model: str | frontend.LoadedModel,
    spec: CompileSpec,
    calibration: Path | None,
    log,
    progress: Progress,
    target: boards.Target | None,
) -> Result:
    target = boards.resolve(target or spec.target, spec.board)
    if target.name != spec.target:
        raise InternalError(f"compiling for {spec.target} with the resolved target {target.name}")
    spec = progress.spec = spec.resolved(target)
    stage = progress.stage
    with stage("load"):
        loaded = model if isinstance(model, frontend.LoadedModel) else frontend.load_model(model)
        progress.model = loaded.name
        methods = state.methods_of(loaded.module)
        if methods is None:
            samples = load_calibration(calibration, loaded.inputs)
        elif calibration is not None:
            raise UsageError(
                f"{loaded.name} has methods ({', '.join(methods)}); kiln calibrates them by replaying its "
                f"{state.CALIBRATION_ATTRIBUTE}, not from --calibration"
            )
    if methods is not None:
        return _compile_methods(loaded, methods, spec, log, progress, target)
    with stage("export"):
        exported = frontend.export(loaded)
        module = exported.module(check_guards=False)
        io_paths = frontend.io_paths(module)
    return _compile_module(loaded, module, io_paths, samples, spec, log, progress, target)


def _compile_module(
    loaded: frontend.LoadedModel,
    module: torch.fx.GraphModule,
    io_paths: tuple[list[str], list[str]],
    samples: list[tuple[torch.Tensor, ...]],
    spec: CompileSpec,
    log,
    progress: Progress,
    target: boards.Target,
    lifted: list[state.StateBuffer] = (),
    ranges: dict[str, tuple[float, float]] | None = None,
) -> Result:
    """The stages from normalize on, for one exported graph (a model, or one method of it whose
    state `lifted` holds, each state's range in `ranges`)."""
    stage = progress.stage
    with stage("normalize"):
        normalize.normalize(module)
    quantized, choice = None, None
    if spec.quantize:
        fixed = {state.input_name(b.name): ranges[b.name] for b in lifted}
        written = [b for b in lifted if b.written]
        first = len(io_paths[1])  # the state's outputs follow the method's own
        ranged = {"fixed": fixed, "fixed_outputs": {first + k: ranges[b.name] for k, b in enumerate(written)}}
        if spec.int16.auto is not None:
            with stage("precision"):
                choice, measure = choose_int16(loaded.name, module, samples, spec, target, lifted, ranged, first)
        with stage("quantize"):
            quantizer = EthosUQuantizer(
                QuantizationScheme(spec.activation_bits),
                int16=spec.int16,
                int16_ops=choice.reasons() if choice else None,
                tie=spec.tie_tables,
                **ranged,
            )
            with _quantizing(loaded.name):
                quantized = quantize(module, samples, quantizer)
            module = quantized
        if choice is not None:
            with stage("precision"):
                choice.pt2e_db = measure.sqnr(quantized)
    with stage("fold"):
        g = graph.from_pt2e(module, io_quantized=spec.io == "int8", state=lifted)
        checks.after("fold", g)
    refused: dict[str, str] = {}  # op name -> why Vela could not place it (Vela is a rule too)
    searches = progress.searches
    while True:
        with stage("partition"):
            parts = partition.partition(
                g, target.npu, spec.exclusions, delegate=spec.delegate and spec.quantize, refused=refused
            )
            progress.partitioning = parts
            checks.after("partition", parts)
        lowered: list[tuple[bytes, frozenset[str]]] = []  # per partition: its first graph, the choices met
        with stage("lower"):
            for p in parts.partitions:
                lowered.append(tosa_lowering.lower_noting_choices(p, target.npu))
            checks.after("lower", parts, [graph for graph, _ in lowered])
        results: list[vela.VelaResult] = []
        tosa: list[bytes] = []
        flipped: list[frozenset[str]] = []  # per partition, the choices its chosen graph took the other way
        with stage("vela"):
            try:
                for p, (first, choices) in zip(parts.partitions, lowered):
                    if len(parts.partitions) > 1:
                        log(f"vela: partition {p.index + 1}/{len(parts.partitions)} ({len(p.ops)} ops)")
                    keep = spec.intermediates / f"partition_{p.index}" if spec.intermediates else None
                    chosen, flatbuffer, compiled = fastest(
                        p, first, choices, f"{loaded.name}_{p.index}", target, spec, keep
                    )
                    flipped.append(chosen)
                    tosa.append(flatbuffer)
                    results.append(compiled)
            except VelaRefusal as refusal:
                failing = parts.partitions[len(results)]
                log(f"vela: {refusal.reason} on {describe(failing)}; looking for the ops it cannot take")
                search = vela_refusals(failing, g, target, spec, refusal)
                searches.append(search)
                log(
                    f"vela: could not place {', '.join(search.refused)}; they run on the CPU, compiling the rest "
                    f"again (found in {search.vela_runs} Vela runs)"
                )
                refused.update(search.refused)
                continue
            checks.after("vela", parts, results)
        break
    with stage("program"):
        prog = program.build(g, parts, spec.integer_kernels)
        checks.after("program", prog)
        # From here on, per-delegate lists follow the delegate indices of the program.
        tosa = [tosa[p.index] for p in prog.delegates]
        results = [results[p.index] for p in prog.delegates]
        flipped = [flipped[p.index] for p in prog.delegates]
    with stage("write"):
        data = from_program.write(prog, results, tosa, target.name, spec.memory_mode)
    reasons = quantizer.int16_reasons if quantized is not None else {}
    result = Result(
        data,
        {},
        g,
        parts,
        prog,
        tosa,
        results,
        flipped,
        quantized,
        reasons,
        loaded.inputs,
        stage.seconds,
        searches,
        io_paths,
        loaded.keywords,
    )
    result.int16_auto = choice
    result.report = make_report(loaded.name, spec, result)
    if spec.intermediates:
        spec.intermediates.mkdir(parents=True, exist_ok=True)
        for i, flatbuffer in enumerate(tosa):
            (spec.intermediates / f"delegate_{i}.tosa").write_bytes(flatbuffer)
    return result


@contextmanager
def _quantizing(name: str) -> Iterator[None]:
    """A failure of PT2E's quantization in the block as a ModelError naming the model."""
    try:
        yield
    except Exception as error:
        raise ModelError(f"quantizing {name} failed: {type(error).__name__}: {error}") from None


def _npu_ops(quantized: torch.fx.GraphModule, spec: CompileSpec, target: boards.Target, lifted) -> set[str]:
    """The ops of a quantized module the partitioner places on the target's NPU (Vela not asked)."""
    g = graph.from_pt2e(quantized, io_quantized=spec.io == "int8", state=lifted)
    parts = partition.partition(g, target.npu, spec.exclusions, delegate=spec.delegate)
    return {p.op.name for p in parts.placements if p.partition is not None}


def choose_int16(
    name: str,
    module: torch.fx.GraphModule,
    samples: list[tuple],
    spec: CompileSpec,
    target: boards.Target,
    lifted: list[state.StateBuffer],
    ranged: dict,
    outputs: int,
) -> tuple[autoprecision.Choice, autoprecision.Measure]:
    """--int16 auto (kiln.frontend.autoprecision) on the normalised float `module` (left as it
    is): its 8-bit PT2E reference (with spec.int16's policies and patterns at 16 bits) measured
    against it on `samples`, the first `outputs` outputs (a method's own); what runs on the NPU
    at 8 and at 16 bits (for autoprecision.refusal) by kiln.partition's rules."""
    fixed_regions = dataclasses.replace(spec.int16, auto=None)
    with _quantizing(name):
        quantizer = EthosUQuantizer(int16=fixed_regions, tie=spec.tie_tables, **ranged)
        prepared = calibrate(copy.deepcopy(module), samples, quantizer)
        npu8 = _npu_ops(convert_pt2e(copy.deepcopy(prepared)), spec, target, lifted)
        eight = convert_pt2e(prepared, fold_quantize=False)  # its constants' rounding switched too

    @functools.cache
    def npu16() -> set[str]:  # asked for only where some value needs 16 bits
        with _quantizing(name):
            wide = EthosUQuantizer(QuantizationScheme(16), tie=spec.tie_tables, **ranged)
            sixteen = quantize(copy.deepcopy(module), samples, wide)
        return _npu_ops(sixteen, spec, target, lifted)

    state_inputs = {state.input_name(b.name): b.name for b in lifted}
    candidates = autoprecision.instrument(eight)
    refuse = autoprecision.refusal(candidates, npu8, npu16, state_inputs, target.name)
    measure = autoprecision.Measure(module, samples, outputs)
    rule = spec.int16.auto
    switched = functools.partial(measure.switched, eight)
    return autoprecision.choose(candidates, switched, rule.target_db, rule.budget, refuse), measure


@dataclass
class ProgramResult:
    """A compile of a model with several methods (kiln.frontend.state): one .pte of them all, its
    report, and each method's compile (its own graph, partitions, program and Vela results)."""

    pte: bytes
    report: dict
    methods: dict[str, Result]


@contextmanager
def _own_stages(progress: Progress) -> Iterator[None]:
    """progress.stage as a fresh _Stages inside the block, whose seconds are then added to the
    outer one's (which keeps the stage last entered, for the report of a compile that fails)."""
    outer, progress.stage = progress.stage, _Stages()
    try:
        yield
    finally:
        inner, progress.stage = progress.stage, outer
        for name, seconds in inner.seconds.items():
            outer.seconds[name] = round(outer.seconds.get(name, 0.0) + seconds, 3)
        outer.current = inner.current or outer.current


def _compile_methods(
    loaded: frontend.LoadedModel,
    methods: dict[str, tuple[torch.Tensor, ...]],
    spec: CompileSpec,
    log,
    progress: Progress,
    target: boards.Target,
) -> ProgramResult:
    """Each method exported, its state lifted (kiln.frontend.state), calibrated on the model's
    replayed calls and compiled as a model of its own; then one .pte of them all, sharing the state."""
    stage = progress.stage
    model = loaded.module
    with stage("export"):
        modules, paths, written = {}, {}, {}
        for name, inputs in methods.items():
            method = frontend.LoadedModel(f"{loaded.name}.{name}", state.method_module(model, name), inputs)
            with state.preserved(model):  # the export's run of the method writes the buffers
                modules[name] = frontend.export(method).module(check_guards=False)
            paths[name] = frontend.io_paths(modules[name])
            written[name] = state.written_buffers(modules[name])
        names = sorted(set().union(*written.values()))
        buffers = {name: model.get_buffer(name) for name in names}
        lifted = {name: state.lift_state(m, buffers, written[name]) for name, m in modules.items()}
    with stage("calibrate"):
        calls = getattr(model, state.CALIBRATION_ATTRIBUTE, None) or list(methods.items())
        samples = state.replay(model, calls, names)
        ranges = state.state_ranges(samples, {name: len(inputs) for name, inputs in methods.items()}, names)
    results = {}
    for name, inputs in methods.items():
        log(f"method {name}")
        method = frontend.LoadedModel(f"{loaded.name}.{name}", model, inputs)
        calibration = samples.get(name) or [(*inputs, *(torch.zeros(b.shape) for b in lifted[name]))]
        with _own_stages(progress):  # the method's report times the method alone
            results[name] = _compile_module(
                method, modules[name], paths[name], calibration, spec, log, progress, target, lifted[name], ranges
            )
    with stage("write"):
        constants = state.constants_of(model)
        clash = sorted(set(constants) & set(methods))
        if clash:
            raise ModelError(f"{', '.join(clash)}: both a method and a constant of {loaded.name}")
        data = from_program.write_methods(
            {name: (r.program, r.vela, r.tosa) for name, r in results.items()},
            target.name,
            spec.memory_mode,
            constants,
        )
    first = next(iter(results.values()))
    buffers = [
        {
            "name": s.name,
            "dtype": s.input.dtype,
            "shape": list(s.input.shape),
            "bytes": s.input.nbytes(),
            "bits": np.dtype(s.input.dtype).itemsize * 8,
            **({"scale": s.input.qparams.scale, "zero_point": s.input.qparams.zero_point} if s.input.qparams else {}),
        }
        for s in sorted(first.graph.state, key=lambda s: s.name)
    ]
    report = {
        "model": loaded.name,
        "target": spec.target,
        "system_config": spec.system_config,
        "memory_mode": spec.memory_mode,
        "methods": {name: r.report for name, r in results.items()},
        "state": {"buffers": buffers, "bytes": first.program.state_size},
        "constants": constants,
        "memory": {"pte_bytes": len(data)},
        "stages_s": stage.seconds,
    }
    return ProgramResult(data, report, results)


def run_time(result: vela.VelaResult) -> tuple[int, int]:
    """What fastest() minimises: Vela's total cycles (the NPU's own and its waits on memory: on
    Ethos-U85 with the board's 384 KiB SRAM cache one layout can cost 20 times the other's
    total at about the same NPU cycles), then its NPU cycles."""
    return result.total_cycles, result.npu_cycles


def fastest(
    part: partition.Partition,
    first: bytes,
    choices: frozenset[str],
    name: str,
    target: boards.Target,
    spec: CompileSpec,
    keep: Path | None,
) -> tuple[frozenset[str], bytes, vela.VelaResult]:
    """(flipped choices, TOSA graph, Vela's result) of the partition's fastest equivalent graph
    found by flipping its lowering choices one at a time, in name order, each kept where Vela
    estimates it runs faster (run_time) than the best so far: one Vela run per choice beyond
    the first graph's. Vela refusing the first graph raises VelaRefusal; failing on another
    in any way (a refusal, a timeout) drops that one. `keep` receives Vela's files for the
    graph returned."""
    best_flipped, best_tosa = frozenset(), first
    best = vela.compile_tosa(first, name, target.name, spec.system_config, spec.memory_mode, keep)
    for choice in sorted(choices):
        flipped = best_flipped ^ {choice}
        flatbuffer = tosa_lowering.lower(part, target.npu, flipped)
        try:
            other = vela.compile_tosa(flatbuffer, name, target.name, spec.system_config, spec.memory_mode)
        except VelaError:
            continue
        if run_time(other) < run_time(best):
            best_flipped, best_tosa, best = flipped, flatbuffer, other
    if keep is not None and best_flipped:
        best = vela.compile_tosa(best_tosa, name, target.name, spec.system_config, spec.memory_mode, keep)
    return best_flipped, best_tosa, best


# The most Vela runs the search for what Vela cannot take spends on one failing partition. Each op it
# finds costs about log2(ops) + 2 runs (ten for a 459-op partition); past the cap, the ops the
# search has not cleared run on the CPU.
SEARCH_VELA_RUNS = 64


@dataclass
class VelaSearch:
    """The search for what Vela cannot take in one partition it failed on: the ops found (op name
    -> why each runs on the CPU), and the Vela runs it took."""

    partition: list[str]  # the partition's op names, in graph order
    failure: str  # Vela's reason for failing on the whole partition
    refused: dict[str, str] = field(default_factory=dict)
    vela_runs: int = 0

    def as_report(self) -> dict:
        return {
            "partition_ops": self.partition,
            "failure": self.failure,
            "vela_runs": self.vela_runs,
            "cpu_ops": self.refused,
        }


def describe(part: partition.Partition) -> str:
    """A partition as the log names it: its size, and its first and last ops."""
    names = [op.name for op in part.ops]
    listed = ", ".join(names) if len(names) <= 4 else f"{names[0]}, {names[1]}, ..., {names[-1]}"
    return f"partition {part.index} ({len(names)} ops: {listed})"


def vela_refusals(
    part: partition.Partition, g: graph.Graph, target: boards.Target, spec: CompileSpec, refusal: VelaRefusal
) -> VelaSearch:
    """Which ops of `part` Vela cannot take, and why, found by bisection over the partition's ops
    in graph order: the shortest prefix Vela fails on ends with an op that Vela cannot take after
    the ops before it (which compile), found in O(log n) Vela runs. That op runs on the CPU
    (with Vela's reason for it alone, if it fails alone), and the search goes on over the ops left
    until they compile, or until SEARCH_VELA_RUNS runs are spent: then the ops left run on the
    CPU too. Every op returned is one the partition held, so a compile takes at most as many
    rounds as it has NPU ops."""
    search = VelaSearch([op.name for op in part.ops], refusal.reason)

    def failure(ops: list) -> VelaRefusal | None:
        search.vela_runs += 1
        inputs, outputs = partition.boundary(ops, g)
        sub = partition.Partition(part.index, ops, inputs, outputs)
        name = f"partition_{part.index}_search"
        try:
            vela.compile_tosa(
                tosa_lowering.lower(sub, target.npu), name, target.name, spec.system_config, spec.memory_mode
            )
        except VelaRefusal as error:
            return error
        return None

    left, failed = list(part.ops), refusal
    while failed is not None:
        if search.vela_runs + len(left).bit_length() + 2 > SEARCH_VELA_RUNS:
            for op in left:
                search.refused[op.name] = (
                    f"Vela could not compile the NPU partition that held it ({failed.reason}); kiln stopped "
                    f"looking for the ops Vela cannot take after {search.vela_runs} Vela runs"
                )
            break
        compiles, fails = 0, len(left)  # the lengths of a prefix that compiles and of one that fails
        while fails - compiles > 1:
            middle = (compiles + fails) // 2
            error = failure(left[:middle])
            if error is None:
                compiles = middle
            else:
                fails, failed = middle, error
        op = left.pop(fails - 1)
        alone = failed if fails == 1 else failure([op])
        if alone is not None:
            search.refused[op.name] = f"Vela could not place it on the NPU: {alone.reason}"
        else:
            before = f"{left[0].name}" if fails == 2 else f"{left[0].name} ... {left[fails - 2].name}"
            search.refused[op.name] = (
                f"Vela could not compile it after the {fails - 1} op(s) before it in its NPU partition "
                f"({before}), though it compiles alone: {failed.reason}"
            )
        failed = failure(left) if left else None
    return search


def placement_report(parts: partition.Partitioning) -> list[dict]:
    """The report's "ops": each op of the graph, where it runs and why not on the NPU."""
    ops = []
    for p in parts.placements:
        if p.op.target in vocabulary.QUANTIZE or p.op.target in vocabulary.DEQUANTIZE:
            where = "cpu"
        else:
            where = "npu" if p.partition is not None else "cpu"
        ops.append(
            {
                "node": p.op.name,
                "op": p.op.op_type,
                "module": p.op.module,
                "where": where,
                "partition": p.partition,
                "reason": p.reason,
                "macs": support.macs(p.op),
            }
        )
    return ops


def failure_report(progress: Progress, error: BaseException) -> dict:
    """The report of a compile that failed: the stage it failed in and the error, and what the
    stages before had found (where each op runs and why, once partitioned; the partitions Vela
    failed on)."""
    spec = progress.spec
    report = {
        "model": progress.model,
        "target": spec.target,
        "system_config": spec.system_config,
        "memory_mode": spec.memory_mode,
        "failed": {"stage": progress.stage.current, "error": type(error).__name__, "message": str(error)},
    }
    if progress.partitioning is not None:
        report["ops"] = placement_report(progress.partitioning)
    report["vela_failures"] = [search.as_report() for search in progress.searches]
    report["stages_s"] = progress.stage.seconds
    return report


def make_report(name: str, spec: CompileSpec, result: Result) -> dict:
    ops = placement_report(result.partitioning)
    for o in ops:  # a quantized op on the CPU: its kernel, integer or float (and why not integer)
        o.update(result.program.cpu_kernels.get(o["node"], {}) if o["where"] == "cpu" else {})
    total_macs = sum(o["macs"] for o in ops)
    npu_macs = sum(o["macs"] for o in ops if o["where"] == "npu")
    delegates = [
        {
            "delegate": i,
            "partition": part.index,
            "ops": len(part.ops),
            "npu_cycles": r.npu_cycles,
            "total_cycles": r.total_cycles,
            "inference_ms": round(r.inference_s * 1e3, 4),
            "weight_bytes": len(r.weight_data),
            "command_stream_bytes": len(r.cmd_data),
            "scratch_bytes": r.scratch_size,
            "fast_scratch_bytes": r.fast_scratch_size,
            "sram_bytes": r.sram_bytes,
            "flipped_choices": sorted(flipped),
        }  # the lowering choices Vela's estimate took the other way
        for i, (part, r, flipped) in enumerate(zip(result.program.delegates, result.vela, result.flipped))
    ]
    prog = result.program
    io = []
    for kind, indices, paths in zip(("input", "output"), (prog.inputs, prog.outputs), result.io_paths):
        for n, i in enumerate(indices):
            v = prog.values[i].value
            entry = {"kind": kind, "name": f"{kind} {n}", "dtype": v.dtype, "shape": list(v.shape)}
            if n < len(paths):
                entry["path"] = paths[n]
            if v.qparams is not None:
                entry.update(scale=float(v.qparams.scale), zero_point=int(v.qparams.zero_point))
            io.append(entry)
    return {
        "model": name,
        "target": spec.target,
        "int16": int16_values(spec, result),
        **({"int16_auto": result.int16_auto.as_report(ops)} if result.int16_auto is not None else {}),
        "system_config": spec.system_config,
        "memory_mode": spec.memory_mode,
        "io": io,
        "keywords": list(result.keywords),
        "ops": ops,
        "macs": {
            "total": total_macs,
            "npu": npu_macs,
            "npu_share": round(npu_macs / total_macs, 6) if total_macs else None,
        },
        "delegates": delegates,
        # Vela's estimates: the NPU's own cycles, and its total cycles (with the memory accesses it
        # waits for), which at the NPU clock of the system config give the inference time (Vela's own).
        "npu_cycles": sum(d["npu_cycles"] for d in delegates),
        "npu_total_cycles": sum(d["total_cycles"] for d in delegates),
        "npu_clock_hz": result.vela[0].clock_hz if result.vela else None,
        "npu_inference_ms": round(sum(r.inference_s for r in result.vela) * 1e3, 4),
        "memory": {
            "pte_bytes": len(result.pte),
            "planned_bytes": prog.planned_size,
            "scratch_bytes": max((d["scratch_bytes"] for d in delegates), default=0),
            "fast_scratch_bytes": max((d["fast_scratch_bytes"] for d in delegates), default=0),
            "npu_weight_bytes": sum(d["weight_bytes"] for d in delegates),
            # The TOSA graphs run-host uses, inside the .pte as named data; firmware need not keep them.
            "reference_tosa_bytes": sum(len(t) for t in result.tosa),
        },
        # the partitions Vela failed on: the search for the ops it cannot take, and what it found
        "vela_failures": [search.as_report() for search in result.searches],
        "warnings": warnings(spec, ops, delegates),
        "stages_s": result.stages,
    }


def warnings(spec: CompileSpec, ops: list[dict], delegates: list[dict]) -> list[str]:
    """What the report warns of: a compile for the NPU that placed nothing on it."""
    if delegates or not (spec.delegate and spec.quantize):
        return []
    return [f"nothing runs on the {spec.target} NPU: all {len(ops)} ops run on the CPU (each op's reason is listed)"]


def int16_values(spec: CompileSpec, result: Result) -> list[dict]:
    """The 16-bit values the ops write, each with why it is 16-bit: --activation-bits 16, the
    policy or module pattern of --int16 that chose its op, or a requantization between widths."""
    entries = []
    for op in result.graph.ops:
        out = op.output
        if out.dtype != "int16" or out.qparams is None:
            continue
        if spec.activation_bits == 16:
            why = "--activation-bits 16"
        elif op.origin == graph.REQUANTIZE_ORIGIN:
            why = f"requantizes {op.inputs[0].name} ({op.inputs[0].dtype}) for the 16-bit ops reading it"
        elif op.target in vocabulary.QUANTIZE:
            why = f"quantizes {op.inputs[0].name} (float) for the 16-bit ops reading it"
        else:
            why = result.int16_reasons.get(op.name, "")
        entries.append({"node": op.name, "op": op.op_type, "value": out.name, "shape": list(out.shape), "why": why})
    return entries


def format_report(report: dict) -> str:
    """The short report `kiln compile` prints (of a model's one graph, or of each method and the
    state they share)."""
    if "methods" not in report:
        return _format_graph(report)
    lines = [f"{report['model']} for {report['target']}: {len(report['methods'])} methods sharing its state"]
    for name, method in report["methods"].items():
        lines.append(f"method {name}:")
        lines += ["  " + line for line in _format_graph(method).splitlines()[1:]]
    st = report["state"]
    lines.append(f"state: {st['bytes']:,} B in {len(st['buffers'])} buffer(s), planned once for every method")
    for b in st["buffers"]:
        q = f", scale {b['scale']:.6g}, zero point {b['zero_point']}" if "scale" in b else ""
        wider = f", {b['bytes'] * 2:,} B at 16 bits" if b["bits"] == 8 else ""  # what 16 bits would cost
        lines.append(f"  {b['name']}: {b['dtype']}{b['shape']} ({b['bytes']:,} B at {b['bits']} bits{wider}{q})")
    lines.append(f".pte {report['memory']['pte_bytes']:,} B")
    lines += _format_fit(report)
    return "\n".join(lines)


def _format_fit(report: dict) -> list[str]:
    """The report's memory.regions (kiln.flow.compile_pte adds them) as one line."""
    regions = report["memory"].get("regions")
    if not regions:
        return []
    return [
        "  fits the board: "
        + ", ".join(
            f"{r['region']} {r['need']:,} of {r['room']:,} B" + ("" if r["fits"] else " (DOES NOT FIT)")
            for r in regions
        )
    ]


def _format_graph(report: dict) -> str:
    lines = [f"{report['model']} for {report['target']} ({_vela_settings(report)})"]
    lines += [f"  warning: {warning}" for warning in report.get("warnings", [])]
    npu = [o for o in report["ops"] if o["where"] == "npu"]
    cpu = [o for o in report["ops"] if o["where"] == "cpu"]
    lines.append(f"  NPU: {len(npu)} ops in {len(report['delegates'])} delegate(s); CPU: {len(cpu)} ops")
    for o in cpu:
        lines.append(f"    cpu  {o['node']} ({o['op']}): {o['reason']}{_cpu_kernel(o)}")
    macs = report["macs"]
    if macs["total"]:
        lines.append(f"  MACs on the NPU: {macs['npu']:,} of {macs['total']:,} ({100 * macs['npu_share']:.1f} %)")
    if report["delegates"]:
        lines.append(
            f"  Vela estimate: {report['npu_cycles']:,} NPU cycles, {report['npu_total_cycles']:,} total "
            f"cycles with memory access = {report['npu_inference_ms']:.3f} ms "
            f"at {report['npu_clock_hz'] / 1e6:g} MHz"
        )
    else:
        lines.append("  Vela estimate: none (nothing runs on the NPU)")
    m = report["memory"]
    lines.append(
        f"  .pte {m['pte_bytes']:,} B (NPU weights {m['npu_weight_bytes']:,} B, reference TOSA graphs "
        f"{m['reference_tosa_bytes']:,} B)"
    )
    lines.append(
        f"  RAM: scratch {m['scratch_bytes']:,} B, fast scratch {m['fast_scratch_bytes']:,} B, "
        f"planned buffers {m['planned_bytes']:,} B"
    )
    lines += _format_fit(report)
    if report["int16"]:
        whys = Counter(_why_kind(e["why"]) for e in report["int16"])
        lines.append(
            f"  16-bit values: {len(report['int16'])} ("
            + ", ".join(f"{why}: {n}" for why, n in whys.items())
            + "; the report's int16 lists them)"
        )
    if "int16_auto" in report:
        lines += autoprecision.format_report(report["int16_auto"])
    for entry in report["io"]:
        q = f", scale {entry['scale']:.6g}, zero point {entry['zero_point']}" if "scale" in entry else ""
        lines.append(f"  {entry['name']}{_named(entry, report['keywords'])}: {entry['dtype']}{entry['shape']}{q}")
    lines.append("  time: " + ", ".join(f"{k} {v:.2f} s" for k, v in report["stages_s"].items()))
    return "\n".join(lines)


def _vela_settings(report: dict) -> str:
    """ "system config, memory mode" of a report, or what stands for them on a target without an NPU."""
    if report["memory_mode"] is None:
        return "the CPU alone, no NPU"
    return f"{report['system_config']}, {report['memory_mode']}"


def _cpu_kernel(op: dict) -> str:
    """A quantized CPU op's kernel as the printed report names it ("" for other ops)."""
    if "arithmetic" not in op:
        return ""
    why = f", {op['why']}" if "why" in op else ""
    return f"; {op['arithmetic']} kernel {op['kernel']}{why}"


def _why_kind(why: str) -> str:
    """A 16-bit value's reason as the printed report counts it: its kind, the figures left out."""
    if why.startswith("requantizes"):
        return "requantizations"
    return "auto" if why.startswith("auto:") else why


def _named(entry: dict, keywords: list[str]) -> str:
    """ " (attention_mask)" for an input passed by keyword, " (['logits'])" for an output inside a
    dict, dataclass or nested tuple; "" where the number says it all (a positional input, a lone
    tensor or an item of a flat tuple)."""
    path, n = entry.get("path", ""), int(entry["name"].split()[-1])
    if entry["kind"] == "input":
        return f" ({path})" if path in keywords else ""
    return f" ({path})" if path not in ("", f"[{n}]") else ""


def write(result: Result, output: Path) -> Path:
    """Writes the .pte and its report (same name, .json) and returns the report's path."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(result.pte)
    return write_report(result.report, output)


def write_report(report: dict, output: Path) -> Path:
    """Writes `report` where the report of the .pte `output` goes (same name, .json) and returns
    its path; a failed compile's report (failure_report) goes there too."""
    report_path = Path(output).with_suffix(".json")
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    return report_path
