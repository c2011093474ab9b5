"""One way to run firmware: compile -> build -> run -> compare, and profile.

kiln's commands that run firmware (deploy, run, run --profile, profile) and the end-to-end
tests (tests/fvp) go through these functions; kiln.cli only parses arguments, calls them and
prints. A stage takes the Target its caller resolved once (kiln.boards.target(name, board)) and
hands it down; a target name is taken too, meaning that target on its reference board.

    compile_pte(model, spec, output)          compile (kiln.compile) and write the .pte and its .json report
    build_runner(pte, target)                 kiln's executor runner for the .pte: the ELF (kiln.firmware.runner_build)
    firmware(elf, target, inputs, ...)        an ELF checked to run, with its command line
    run(firmware)                             one run on Arm's FVP or kiln's virtual platform: a RunResult
    infer(elf, target, pte, samples)          the runner run over samples: their outputs and cycles (Inferences)
    compare(pte, samples, outputs)            where outputs differ from `kiln run-host`'s, bit for bit
    bundle_checks(uart)                       a bundle's per-output checks the runner printed (.bpte baked in)
    classify_digits(elf, target, pte, count)  held-out digits through the runner (`kiln deploy digits`)
    generate(elf, target, prompt, tokens)     the generation app (a language model's prefill and decode): its tokens
    profile_model, profile_pte, profile_elf   kiln profile's per-layer Profile (kiln.reference.profile),
                                              the runner counted on the virtual platform where asked

Files. A path a caller passes stays the caller's: compile_pte writes `output` and the report
beside it; build_runner writes its build directory (default: one under build/runner/); run
reads the input files and creates `output_dir`, where the firmware writes; infer writes the
samples to input_<i>.bin and reads the outputs from out/output_<i>.bin in `work`, left there,
or, with work=None, in a temporary folder it removes before returning; generate likewise writes
prompt.bin and reads out/logits.bin.

Timeouts. A run's `timeout` is the firmware's, in seconds from the platform's start; a firmware
still running then is stopped, status TIMEOUT_EXIT_STATUS. The platform runs in a session of its
own: however a run ends (the firmware's exit, the timeout, Ctrl-C as KeyboardInterrupt, which is
raised on, or an error), its process group is killed and the NPU model's attachment closed
before the function returns or raises, so no platform process outlives it.

Statuses (RunResult.status, `kiln run`'s exit status): the firmware's own ("[kiln] exit N"), 134
a CPU fault, 124 timeout, 125 the platform stopped without the firmware's exit. Before a run:
a UsageError (exit status 2) for an unknown target or board, a missing or damaged ELF or a bad
argument; a ToolMissingError (127) when no platform runs the target.

Output. UART lines go to `echo(line)` as they come (default: nowhere); kiln's notes (the
platform chosen, the NPU model's summary, what a status means) to `note(text)` (default:
standard error, as "kiln: TEXT"). infer keeps both in its Inferences instead.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kiln import boards, paths
from kiln.errors import RunnerError, UsageError
from kiln.simulator import protocol, qemu_plugin
from kiln.simulator import run as platforms
from kiln.simulator.run import DEFAULT_TIMEOUT_S, RunResult

# What only compiling, building, profiling or reading a program needs (the compiler and the host
# profile bring torch) is imported where it is used: running firmware loads none of it.
if TYPE_CHECKING:
    from kiln import compile as kc
    from kiln.pte.schema import Tensor
    from kiln.reference import profile as host_profile
    from kiln.spec import CompileSpec

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "INFERENCE_CALL",
    "Classified",
    "Firmware",
    "Generated",
    "Inferences",
    "RunResult",
    "build_runner",
    "bundle_checks",
    "classify_digits",
    "compare",
    "compile_pte",
    "firmware",
    "generate",
    "infer",
    "profile_elf",
    "profile_model",
    "profile_pte",
    "program_io",
    "run",
    "tolerance_arguments",
]

# The runner's one call per inference (firmware/apps/executor_runner/main.cpp):
# kiln::runtime::Method::execute(), by its symbol.
INFERENCE_CALL = "_ZN4kiln7runtime6Method7executeEv"
PROFILE_TIMEOUT_S = 600.0  # a profile's counted run of the runner


# ---- compile ----------------------------------------------------------------------------------


def compile_pte(
    model, spec: CompileSpec, output: Path, target: boards.Target | None = None, calibration=None, log=print
) -> tuple[kc.Result, Path]:
    """`model` (a zoo name, a .py file or a LoadedModel) compiled to `spec` (for `target` when the
    caller resolved it already) and written to `output`, its report beside it as .json; returns
    the compile's result and the report's path (kiln.compile.compile_model and write). The
    report's memory.regions say what the board holds where (kiln.firmware.runner_build.fit);
    a program that does not fit is a RunnerBuildError naming the region, the need and the room,
    after the .pte and its report are written."""
    from kiln import compile as kc
    from kiln.firmware import runner_build

    result = kc.compile_model(model, spec, calibration, log, target=target)
    report = kc.write(result, Path(output))
    try:  # what the board can hold, decided before anything is built or run
        plan = runner_build.plan(Path(output), target or spec.target, board=spec.board, check_target=False)
        result.report["memory"]["regions"] = runner_build.fit(plan)
        runner_build.check_fit(plan)
    finally:
        kc.write_report(result.report, Path(output))
    return result, report


def generates(pte: Path) -> bool:
    """Whether the program is a language model's that kiln's generation app runs: it has a decode
    method (kiln.reference.generate's contract)."""
    from kiln.pte.llm import DECODE
    from kiln.pte.reader import deserialize

    return DECODE in deserialize(Path(pte).read_bytes()).methods()


def build_runner(pte: Path, target: boards.Target | str, **options) -> Path:
    """kiln's executor runner for `pte`, built for `target`: the ELF's path
    (kiln.firmware.runner_build.build_runner, whose keyword options pass through)."""
    from kiln.firmware import runner_build

    return runner_build.build_runner(pte, target, **options)


# ---- run ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Firmware:
    """An ELF checked to run for a target, with the firmware's command line."""

    elf: Path  # absolute
    target: boards.Target
    arguments: tuple[str, ...]  # its semihosting command line (kiln.simulator.run.firmware_arguments)


def firmware(
    elf: Path,
    target: boards.Target | str,
    inputs: Sequence[Path] = (),
    output_dir: Path | None = None,
    npu_timeout_ms: int | None = None,
    arguments: Sequence[str] = (),
) -> Firmware:
    """`elf` for `target`, checked (kiln.simulator.run.check: a UsageError for an unknown target,
    a missing, damaged or foreign ELF) before its command line is made from `inputs`,
    `output_dir` (created) and `npu_timeout_ms` (kiln's executor runner's options, checked),
    then `arguments` as they are (another app's own, or the runner's unchecked)."""
    elf, target = platforms.check(elf, target)
    made = platforms.firmware_arguments(inputs, output_dir, npu_timeout_ms)
    return Firmware(elf, target, (*made, *arguments))


def run(
    fw: Firmware,
    platform: str = "auto",
    timeout: float = DEFAULT_TIMEOUT_S,
    count_instructions: qemu_plugin.Request | None = None,
    echo=None,
    note=None,
    cwd: Path | None = None,
    npu_model: bool = True,
) -> RunResult:
    """`fw` run once, as `kiln run` runs it, on `platform`: "auto" (Arm's FVP when installed, else
    kiln's virtual platform), "fvp" or "virtual". Then what its status means (and, with
    `count_instructions`, the counts) goes to `note`. `cwd`: the platform's working directory
    (the firmware's semihosting files are relative to it; default this process's);
    `npu_model=False`: the virtual platform without the NPU model (for measurements)."""
    result = _run(fw, platform, timeout, count_instructions, echo, note, cwd, npu_model)
    platforms.report(result, fw.elf, timeout, count_instructions, note)
    return result


def _run(fw: Firmware, platform, timeout, count_instructions=None, echo=None, note=None, cwd=None, npu_model=True):
    return platforms.run(
        fw.elf,
        fw.target,
        timeout,
        platform,
        echo,
        cwd,
        npu_model,
        fw.arguments,
        count_instructions,
        note=note,
    )


def tolerance_arguments(atol: str | None, rtol: str | None) -> list[str]:
    """kiln's executor runner's --atol/--rtol (a bundle's tolerance; decimals as given)."""
    return [f"--{name}={value}" for name, value in (("atol", atol), ("rtol", rtol)) if value is not None]


def bundle_checks(uart: Sequence[str]) -> tuple[list[protocol.BundleCheck], bool | None]:
    """The bundle mode's per-output checks from a run's UART lines, and its verdict (None when the
    runner printed none: it stopped before checking every case); kiln.simulator.protocol reads them."""
    transcript = protocol.read(uart)
    return transcript.bundle_checks, transcript.bundle_passed


# ---- the runner over samples ----------------------------------------------------------------


def program_io(pte: Path) -> tuple[list[Tensor], list[Tensor]]:
    """The program's input and output tensors, in order."""
    from kiln.pte.reader import deserialize

    plan = deserialize(Path(pte).read_bytes()).forward()
    return [plan.values[i] for i in plan.inputs], [plan.values[i] for i in plan.outputs]


class _AppRun:
    """What a run of one of kiln's apps (Inferences, Generated) reads from its `run` and `notes`."""

    run: RunResult
    notes: list[str]

    @property
    def status(self) -> int:
        return self.run.status

    @property
    def log(self) -> str:
        """The UART, then kiln's notes: for a person reading why a run failed."""
        return "\n".join(self.run.uart + [f"kiln: {n}" for n in self.notes])


@dataclass
class Inferences(_AppRun):
    """One run of kiln's executor runner over samples (infer)."""

    run: RunResult  # the platform's record: status, UART lines and their transcript, NPU model totals
    samples: int  # how many the runner was given
    outputs: list[list[np.ndarray]]  # [sample][output]; read only when the runner finished every sample
    notes: list[str]  # what `kiln run` would have said on standard error, "kiln: " left off
    seconds: float  # wall time of the run, the platform's start and stop included
    # With count_instructions: per inference, the instructions the CPU executed in
    # Method::execute() (executor, kernels, delegate, driver, the NPU's interrupt handler; not
    # the runner's semihosting input/output or UART lines), less the one instruction per NPU
    # stream the virtual platform itself executes to pend the NPU's interrupt
    # (kiln.simulator.attach); None when not counted to the end.
    cpu_instructions: list[int] | None = None

    @property
    def inferences(self) -> list[protocol.Inference]:
        return self.run.transcript.inferences

    @property
    def npu_cycles(self) -> list[int]:
        return [i.npu_cycles for i in self.inferences]

    @property
    def cpu_cycles(self) -> list[int | None]:
        """Per inference; None where the platform has no cycle counter."""
        return [i.cpu_cycles for i in self.inferences]

    @property
    def complete(self) -> bool:
        """The runner exited 0 after an inference per sample."""
        return self.status == 0 and len(self.inferences) == self.samples


def infer(
    elf: Path,
    target: boards.Target | str,
    pte: Path,
    samples: list[list[np.ndarray]] | None = None,
    work: Path | None = None,
    platform: str = "auto",
    timeout: float = DEFAULT_TIMEOUT_S,
    count_instructions: bool = False,
    profile_instructions: bool = False,
    echo=None,
) -> Inferences:
    """Runs `elf`, kiln's executor runner built for `pte`, once over `samples` ([sample][input]
    arrays of the program's input types and shapes; None: the runner's built-in inputs, one
    inference). `work`: the folder for the input and output files (the Files above).
    `count_instructions`: on the virtual platform, each inference's CPU instructions
    (Inferences.cpu_instructions); `profile_instructions` also: where they went, in the notes."""
    if work is None:
        with tempfile.TemporaryDirectory(prefix="kiln-run-") as tmp:
            return infer(
                elf, target, pte, samples, Path(tmp), platform, timeout, count_instructions, profile_instructions, echo
            )
    inputs, outputs = program_io(pte)
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    files = _write_samples(inputs, samples, work) if samples is not None else []
    fw = firmware(elf, target, files, work / "out")
    counted = None
    if count_instructions or profile_instructions:
        counted = qemu_plugin.Request(INFERENCE_CALL, profile_instructions)
    notes: list[str] = []
    start = time.monotonic()
    result = _run(fw, platform, timeout, counted, echo, notes.append)
    seconds = time.monotonic() - start
    platforms.report(result, fw.elf, timeout, counted, notes.append)
    count = 1 if samples is None else len(samples)
    done = Inferences(result, count, [[] for _ in range(count)], notes, seconds)
    if counted is not None and result.instructions is not None:
        streams = [i.streams for i in done.inferences]
        if len(result.instructions.calls) == len(streams):
            done.cpu_instructions = [n - s for n, s in zip(result.instructions.calls, streams)]
    if done.complete:  # else the runner wrote no (or not every) output
        from kiln.pte import dim_order
        from kiln.pte.schema import NUMPY_DTYPES

        for i, tensor in enumerate(outputs):
            data = np.fromfile(work / "out" / f"output_{i}.bin", dtype=NUMPY_DTYPES[tensor.scalar_type])
            for k, sample in enumerate(data.reshape(count, -1)):
                done.outputs[k].append(dim_order.from_memory(sample, tensor.sizes, tensor.dim_order))
    return done


def _write_samples(inputs: list[Tensor], samples: list[list[np.ndarray]], work: Path) -> list[Path]:
    """One file per program input, every sample's value of it back to back in the tensor's dim
    order (the runner's --input)."""
    from kiln.pte import dim_order
    from kiln.pte.schema import NUMPY_DTYPES

    files = []
    for i, tensor in enumerate(inputs):
        dtype = NUMPY_DTYPES[tensor.scalar_type]
        path = work / f"input_{i}.bin"
        path.write_bytes(
            b"".join(
                dim_order.to_memory(np.asarray(s[i], dtype).reshape(tensor.sizes), tensor.dim_order).tobytes()
                for s in samples
            )
        )
        files.append(path)
    return files


def compare(pte: Path, samples: list[list[np.ndarray]], outputs: list[list[np.ndarray]]) -> list[str]:
    """Where `outputs` ([sample][output], as infer reads them) differ from what `kiln run-host`
    computes for the same samples (kiln.reference.run_host: numpy kernels and
    tosa_reference_model, independent of the firmware): a line per sample and output whose
    type, shape or any bit differs; none when every output equals run-host's bit for bit."""
    from kiln.reference import run_host

    data = Path(pte).read_bytes()
    found = [] if len(outputs) == len(samples) else [f"outputs of {len(outputs)} samples for {len(samples)} samples"]
    for k, (got, sample) in enumerate(zip(outputs, samples)):
        expected = [np.ascontiguousarray(e) for e in run_host.run(data, sample)]
        if len(got) != len(expected):
            found.append(f"sample {k}: {len(got)} outputs, run-host gives {len(expected)}")
            continue
        for i, (g, e) in enumerate(zip(got, expected)):
            if g.dtype != e.dtype or g.shape != e.shape:
                found.append(
                    f"sample {k} output {i}: {g.dtype} {list(g.shape)}, run-host gives {e.dtype} {list(e.shape)}"
                )
            elif g.tobytes() != e.tobytes():
                bits = f"u{g.itemsize}"
                differ = int(np.count_nonzero(g.reshape(-1).view(bits) != e.reshape(-1).view(bits)))
                found.append(f"sample {k} output {i}: {differ} of {g.size} elements differ from run-host's")
    return found


@dataclass
class Classified:
    """Held-out digits images through the runner (classify_digits)."""

    run: Inferences
    labels: list[int]  # the images' true digits
    predicted: list[int]  # the runner's (each output's argmax); empty unless the run is complete


def classify_digits(
    elf: Path,
    target: boards.Target | str,
    pte: Path,
    count: int,
    platform: str = "auto",
    timeout: float = DEFAULT_TIMEOUT_S,
) -> Classified:
    """The first `count` images of the digits model's held-out split (kiln.models.digits)
    classified by `elf`, the runner built for `pte`, in one run (infer). A UsageError for a
    count the split does not hold."""
    from kiln.models import digits

    images, labels = digits.test_split()
    if not 0 < count <= len(labels):
        raise UsageError(f"--count must be 1..{len(labels)}")
    done = infer(elf, target, pte, [[images[k].numpy()] for k in range(count)], None, platform, timeout)
    predicted = [int(np.argmax(outputs[0])) for outputs in done.outputs] if done.complete else []
    return Classified(done, [int(labels[k]) for k in range(count)], predicted)


# ---- the generation app ---------------------------------------------------------------------


@dataclass
class Generated(_AppRun):
    """One run of kiln's generation app (generate): its transcript's tokens, and each step's logits."""

    run: RunResult  # the platform's record: status, UART lines and their transcript
    asked: int  # the tokens asked for (the app generates fewer where the cache ends first)
    logits: list[np.ndarray]  # per token, its step's logits; read only when the run is complete and a .pte given
    notes: list[str]  # what `kiln run` would have said on standard error, "kiln: " left off
    seconds: float  # wall time of the run, the platform's start and stop included
    # With count_instructions: per token, the instructions the CPU executed in its step's
    # Method::execute(), less one per NPU stream (as Inferences.cpu_instructions); None when not
    # counted to the end.
    cpu_instructions: list[int] | None = None

    @property
    def tokens(self) -> list[protocol.Token]:
        generation = self.run.transcript.generation
        return generation.tokens if generation is not None else []

    @property
    def token_ids(self) -> list[int]:
        return [t.token for t in self.tokens]

    @property
    def complete(self) -> bool:
        """The app exited 0 after every token its prompt line announced (those asked for, fewer
        where the cache ends first) and the text line."""
        g = self.run.transcript.generation
        return self.status == 0 and g is not None and len(g.tokens) == g.tokens_asked and g.text is not None


def generate(
    elf: Path,
    target: boards.Target | str,
    prompt: bytes,
    tokens: int,
    pte: Path | None = None,
    work: Path | None = None,
    platform: str = "auto",
    timeout: float = DEFAULT_TIMEOUT_S,
    count_instructions: bool = False,
    echo=None,
) -> Generated:
    """Runs `elf`, kiln's generation app (runner_build's app "generate") built for a language
    model's program (methods prefill and decode, or decode alone: firmware/apps/generate), once:
    `prompt` (bytes, written to work/prompt.bin) then `tokens` tokens, prefill's included, fewer
    where the cache ends first, as `kiln generate` does (kiln.reference.generate, the reference its
    tokens and logits must equal). With `pte` (the program the ELF bakes) it reads every step's
    logits from work/out/logits.bin, each typed as its method's logits output: prefill's for token 0
    (decode's without prefill), decode's after. `work`: as infer's (None: a temporary folder).
    `count_instructions`: on the virtual platform, each step's CPU instructions (token 0's: every
    decode call that read the prompt, without prefill)."""
    if work is None:
        with tempfile.TemporaryDirectory(prefix="kiln-generate-") as tmp:
            return generate(elf, target, prompt, tokens, pte, Path(tmp), platform, timeout, count_instructions, echo)
    if not prompt or tokens < 1:
        raise UsageError(f"a prompt of {len(prompt)} bytes and {tokens} tokens: the app takes at least 1 of each")
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / "prompt.bin").write_bytes(prompt)
    arguments = (f"--prompt={(work / 'prompt.bin').resolve()}", f"--tokens={tokens}")
    if " " in arguments[0]:
        raise UsageError(f"{arguments[0]}: the firmware splits its command line at spaces; use a path without one")
    fw = firmware(elf, target, (), work / "out", arguments=arguments)
    counted = qemu_plugin.Request(INFERENCE_CALL) if count_instructions else None
    notes: list[str] = []
    start = time.monotonic()
    result = _run(fw, platform, timeout, counted, echo, notes.append)
    seconds = time.monotonic() - start
    platforms.report(result, fw.elf, timeout, counted, notes.append)
    done = Generated(result, tokens, [], notes, seconds)
    if counted is not None and result.instructions is not None and len(result.instructions.calls) == len(done.tokens):
        done.cpu_instructions = [n - t.streams for n, t in zip(result.instructions.calls, done.tokens)]
    if done.complete and pte is not None:
        done.logits = _step_logits(Path(pte), work / "out" / "logits.bin", len(done.tokens))
    return done


def _step_logits(pte: Path, path: Path, tokens: int) -> list[np.ndarray]:
    """Each step's logits from the app's logits.bin: prefill's logits output (decode's without
    prefill), then decode's per step (which output is the logits: kiln.reference.generate's roles)."""
    from kiln.pte.llm import DECODE, PREFILL
    from kiln.pte.reader import deserialize
    from kiln.pte.schema import NUMPY_DTYPES
    from kiln.reference.generate import roles

    f = deserialize(pte.read_bytes())
    first = f.method(PREFILL if PREFILL in f.methods() else DECODE)
    decode = f.method(DECODE)
    data, at, steps = path.read_bytes(), 0, []
    for k in range(tokens):
        plan = first if k == 0 else decode
        t = plan.values[plan.outputs[roles(plan)[1]]]
        steps.append(np.frombuffer(data[at : at + t.nbytes], NUMPY_DTYPES[t.scalar_type]).reshape(t.sizes))
        at += t.nbytes
    if at != len(data):
        raise RunnerError(f"{path} holds {len(data):,} bytes; {tokens} steps' logits are {at:,}")
    return steps


# ---- profile --------------------------------------------------------------------------------


def profile_model(
    model,
    spec: CompileSpec,
    target: boards.Target | None = None,
    cpu_instructions: bool = False,
    work: Path | None = None,
    log=print,
    etdump: Path | None = None,
) -> host_profile.Profile:
    """kiln profile of `model` compiled to `spec`: each layer's NPU cycles and bytes on kiln's NPU
    model beside Vela's own estimate (kiln.reference.profile.profile). `cpu_instructions`: also
    each program instruction's CPU instructions, from kiln's executor runner for the program run
    once on the virtual platform (measure_cpu), its files in `work` (default
    build/profile/<model>). `etdump`: that run by the runner that records an ETDump, written to
    this file (implies cpu_instructions)."""
    from kiln import compile as kc
    from kiln.reference import profile as host_profile

    result = kc.compile_model(model, spec, log=log, target=target)
    target = boards.resolve(target or spec.target, spec.board)
    p = host_profile.profile(result, target)
    if cpu_instructions or etdump is not None:
        measure_cpu(p, result, target, work or paths.build_root() / "profile" / p.model, etdump=etdump)
    return p


def measure_cpu(
    p: host_profile.Profile,
    result: kc.Result,
    target: boards.Target,
    work: Path,
    timeout: float = PROFILE_TIMEOUT_S,
    echo=lambda *args, **kwargs: None,
    etdump: Path | None = None,
) -> None:
    """Builds kiln's executor runner for `result` in `work` (its .pte and report there too, the
    build in work/runner; `echo` sees the build's report), runs one inference (the runner's
    built-in inputs) on the virtual platform counting each program instruction's CPU
    instructions, and fills them into `p` (kiln.reference.profile.count_cpu). With `etdump`, the
    runner built is the one that records an ETDump of the run (kiln.reference.etdump), written
    to that file. A RunnerError when the runner does not exit 0."""
    from kiln import compile as kc
    from kiln.firmware import runner_build
    from kiln.reference import etdump as device_etdump
    from kiln.reference import profile as host_profile

    owners = host_profile.instruction_owners(result)
    work.mkdir(parents=True, exist_ok=True)
    pte = work / f"{p.model}.pte"
    kc.write(result, pte)
    recording = {}
    if etdump is not None:
        recording = {
            "app": runner_build.ETDUMP_APP,
            "sources": {"etdump_layers.cpp": device_etdump.layers_source(p, owners)},
        }
    elf = build_runner(pte, target, output=work / "runner", echo=echo, **recording)
    counted = _run(firmware(elf, target), "virtual", timeout, qemu_plugin.Request(host_profile.RUN_INSTRUCTION))
    if counted.status != 0:
        raise RunnerError(
            f"the executor runner for {p.model} exited {counted.status} on the virtual platform; "
            f"its last lines: {' | '.join(counted.uart[-3:])}"
        )
    _count_cpu(p, counted, owners, work / "runner" / "memory_report.json")
    if etdump is not None:
        Path(etdump).write_bytes(device_etdump.collect(counted.uart))


def _count_cpu(p: host_profile.Profile, counted: RunResult, owners, memory_report: Path | None = None) -> None:
    from kiln.reference import profile as host_profile

    calls = counted.instructions.calls if counted.instructions is not None else []
    pmu = next((i.pmu.total for i in counted.transcript.inferences if i.pmu is not None), None)
    image = json.loads(memory_report.read_text()) if memory_report and memory_report.is_file() else None
    host_profile.count_cpu(p, owners, calls, pmu, image)


def profile_pte(pte: Path, target: str) -> host_profile.Profile:
    """kiln profile of a .pte with its compile report beside it (kiln.reference.profile.profile_pte);
    a UsageError when it was compiled for another target than `target` (a name)."""
    from kiln.reference import profile as host_profile

    p = host_profile.profile_pte(Path(pte))
    if p.target != target:
        raise UsageError(f"{pte} was compiled for {p.target}, not {target}")
    return p


def profile_elf(
    fw: Firmware, pte: Path, timeout: float = PROFILE_TIMEOUT_S, echo=None, note=None
) -> tuple[host_profile.Profile, RunResult]:
    """`kiln run --profile=PTE`: the profile of the program `fw`'s ELF bakes (a runner kiln build
    made from `pte`, checked: kiln.reference.profile.check_baked), as profile_pte makes it, with
    that very ELF run on the virtual platform counting each program instruction's CPU
    instructions (then what its status means goes to `note`). Returns the profile and the run;
    the profile's CPU figures are filled only when the run exited 0. A UsageError for a .pte
    of another target or program."""
    from kiln.reference import profile as host_profile

    pte = Path(pte)
    if not pte.is_file():
        raise UsageError(f"{pte}: no such file")
    host_profile.check_baked(fw.elf, pte)  # before Vela runs for the profile
    p = profile_pte(pte, fw.target.name)
    counted = _run(fw, "virtual", timeout, qemu_plugin.Request(host_profile.RUN_INSTRUCTION), echo, note)
    platforms.report(counted, fw.elf, timeout, note=note)
    if counted.status == 0:
        _count_cpu(p, counted, host_profile.pte_instruction_owners(pte, p))
    return p, counted
