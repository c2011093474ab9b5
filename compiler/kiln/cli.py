"""The `kiln` command: every job kiln does, one subcommand each.

    kiln compile MODEL --target T --output FILE.pte   a model to a .pte, its report beside it as .json
    kiln build --pte FILE --target T [--board B]      kiln's executor runner firmware for a .pte; prints the ELF
    kiln build --app NAME --target T [--board B]      one of the firmware's plain apps (hello, ...); prints the ELF
    kiln run --elf FILE --target T [--board B]        firmware on Arm's FVP if installed, else the virtual platform
                                                      (--profile=PTE: with kiln profile's per-layer table)
    kiln run-host PTE --input FILE --output-dir DIR   a .pte on the host: the reference the firmware must match
    kiln generate PTE --prompt TEXT --tokens N         text from a language model's .pte (prefill, then decode
                                                      steps) on the host: the reference of the firmware's
    kiln profile MODEL --target T [--output DIR]      per-layer NPU cycles and bytes beside Vela's estimate
                                                      (--etdump=FILE: the runner's ETDump of a run)
    kiln targets                                      the targets (NPU configurations, then CPUs alone), the
                                                      boards, their Vela defaults and unverified facts
    kiln deploy [MODEL] --target T                    compile, build and run: the whole job on defaults
    kiln flash --board B --elf FILE [--drive DIR]     firmware onto a board: its USB drive (MPS3/MPS4), Alif's
                                                      Security Toolkit, or a debug probe (--probe, pyOCD)
    kiln export --csolution DIR --pte F --target T    the runner for a .pte as a CMSIS-Toolbox project
    kiln pack --output DIR [--board B]                kiln's runtime as a CMSIS-Pack (Kiln.Runtime.<version>.pack)

ExecuTorch's script names stay as thin wrappers: ./scripts/run.sh is `kiln deploy`,
./scripts/build_executor_runner.sh is `kiln build`, ./scripts/run_fvp.sh is `kiln run`
(./scripts/flash.sh is `kiln flash`).
They pass `--as NAME` first, so usage lines and messages name the script a person ran.
Every command runs through kiln.errors.run_command: an error is one line on standard
error and an exit status, never a traceback. Options take dashes or underscores
(--memory-mode or --memory_mode) alike.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

from kiln.errors import UsageError, run_command
from kiln.simulator.run import DEFAULT_TIMEOUT_S, NPU_TIMEOUT_MS_RANGE

DEFAULT_TARGET = "ethos-u55-128"  # deploy's, as ./scripts/run.sh's
DEPLOY_TIMEOUT_S = 600.0  # digits classifies 8 images in one run
DEPLOY_PROMPT = 'The "if" statement'  # a language model's default prompt: the opening of a page tinylm learnt
DEPLOY_TOKENS = 48
RUN_STATUSES = """exit status:
  the firmware's  it exited ("[kiln] exit N" on the UART, or semihosting)
  134             the CPU faulted (the fault is explained on standard error)
  124             timeout: the firmware did not exit in time and was stopped
  125             the platform stopped without the firmware reporting an exit
  127             no platform for this target (its board has no virtual platform and no FVP is on PATH)
  2               usage error: unknown target, missing file, bad argument"""


# --- The commands ----------------------------------------------------------------------------


def _targets(args) -> int:
    from kiln import boards

    described = [boards.load(name) for name in boards.board_names()]
    print(f"{'target':16} {'board':14} {'system config':30} {'memory mode':22} also on (--board)")
    for name, target in boards.targets().items():
        others = ", ".join(b.name for b in described if b.name != target.board.name and b.target(name))
        config, mode = target.system_config or "- (the CPU alone)", target.memory_mode or "-"
        print(f"{name:16} {target.board.name:14} {config:30} {mode:22} {others or '-'}")
    print(f"\n{'board':18} {'CPU':20} {'runs on (kiln run)':42} NPU configurations")
    for board in described:
        cpu = f"{board.cpu.core} {board.cpu.clock_hz / 1e6:g} MHz"
        runs = [f"QEMU {board.qemu_machine}"] if board.qemu_machine else []
        runs += sorted({f.fvp for f in board.npu.families if f.fvp} if board.npu else ())
        npus = ", ".join(board.configurations()) or f"none (--target {board.cpu.core}: the CPU alone)"
        print(f"{board.name:18} {cpu:20} {', '.join(runs) or 'the board only':42} {npus}")
    unverified = [(b.name, field, why) for b in described for field, why in b.unverified]
    if unverified:
        print("\nunverified facts (board.toml's [unverified]):")
        for name, field, why in unverified:
            print(f"  {name} {field}: {why}")
    return 0


def _compile(args) -> int:
    from kiln.spec import CompileSpec, Exclusions

    spec = CompileSpec(
        target=args.target,
        system_config=args.system_config,
        memory_mode=args.memory_mode,
        board=args.board,
        quantize=not args.no_quantize,
        delegate=not args.no_delegate,
        io=args.io,
        integer_kernels=not args.no_integer_kernels,
        tied_head=args.tied_head,
        activation_bits=args.activation_bits,
        int16=_int16_regions(args),
        exclusions=Exclusions(tuple(args.exclude_op), tuple(args.exclude_module), tuple(args.exclude_node)),
        intermediates=Path(args.intermediates) if args.intermediates else None,
    )
    result = _compile_and_write(
        args.model, spec, Path(args.output), Path(args.calibration) if args.calibration else None
    )
    if args.bundle:
        from kiln.reference import bundled

        example = bundled.example_case(result.pte, [t.detach().numpy() for t in result.inputs])
        _write_bundle(Path(args.output), Path(args.output).with_suffix(".bpte"), args.bundle, 0, example)
    return 0


def _int16_regions(args):
    """--int16 (policies and `auto`), --int16-module, --int16-sqnr and --int16-budget as Int16Regions."""
    from kiln.spec import AUTO_POLICY, AutoRule, Int16Regions

    policies = [p for given in args.int16 for p in given.split(",") if p]
    auto = AUTO_POLICY in policies
    if not auto and (args.int16_sqnr is not None or args.int16_budget is not None):
        raise UsageError("--int16-sqnr and --int16-budget set the rule of --int16 auto; add --int16 auto")
    rule = None
    if auto:
        rule = (
            AutoRule(budget=args.int16_budget)
            if args.int16_sqnr is None
            else AutoRule(args.int16_sqnr, args.int16_budget)
        )
    return Int16Regions(tuple(p for p in policies if p != AUTO_POLICY), tuple(args.int16_module), rule)


def _compile_and_write(model: str, spec, output: Path, calibration: Path | None = None, target=None):
    """Compiles `model` to `spec` (for `target`, resolved already), writes the .pte and its .json
    report and prints the report."""
    from kiln import compile as kc
    from kiln import flow

    try:
        result, report_path = flow.compile_pte(model, spec, output, target, calibration, log=_log)
    except Exception as error:  # the report of the failed compile, then the error as it was
        if hasattr(error, "report"):
            try:
                path = kc.write_report(error.report, output)
                print(f"wrote the report of the failed compile: {path}")
            except OSError:
                pass  # the compile's own error says what went wrong
        raise
    print(kc.format_report(result.report))
    print(f"wrote {output} and {report_path}")
    return result


def _build(args) -> int:
    if args.app is not None:
        return _build_app(args)
    if args.test_apps:
        raise UsageError("--test-apps applies to the firmware's plain apps (--app), not to a runner built for a .pte")
    from kiln import boards
    from kiln.firmware import runner_build

    target = None  # resolved where first needed: a default input's size check, else the build
    defaults = []
    for path in args.default_input:
        if not path.is_file():
            raise UsageError(f"--default-input {path}: no such file")
        target = target or boards.target(args.target, args.board)
        memory = sum(r.size for r in target.board.memory)
        if path.stat().st_size > memory:  # before reading a file of any size
            raise UsageError(
                f"--default-input {path}: {path.stat().st_size:,} bytes, more than the board's "
                f"{memory:,} bytes of memory"
            )
        defaults.append(path.read_bytes())
    if args.bake is not None and not args.bake.is_file():
        raise UsageError(f"--bake {args.bake}: no such file")
    elf = runner_build.build_runner(
        args.pte if len(args.pte) > 1 else args.pte[0],
        target or args.target,
        args.memory_mode,
        args.system_config,
        args.build_type,
        args.output,
        defaults,
        not args.skip_target_check,
        args.bake,
        board=args.board,
        app="generate" if args.generate else runner_build.APP,
    )
    print(elf)
    return 0


def _build_app(args) -> int:
    from kiln import boards
    from kiln.firmware import build as firmware

    runner_only = [
        flag
        for flag, given in (
            ("--memory-mode", args.memory_mode),
            ("--system-config", args.system_config),
            ("--default-input", args.default_input),
            ("--bake", args.bake),
            ("--skip-target-check", args.skip_target_check),
            ("--generate", args.generate),
        )
        if given
    ]
    if runner_only:
        raise UsageError(f"{runner_only[0]} applies to a runner built for a .pte (--pte), not to --app")
    board = boards.target(args.target, args.board).board
    build_dir = firmware.build(board, args.output, test_apps=args.test_apps, build_type=args.build_type)
    print(firmware.elf(build_dir, args.app))
    return 0


def _run(args) -> int:
    from kiln import boards, flow
    from kiln.simulator import qemu_plugin

    counted = None
    if args.count_instructions is not None:
        counted = qemu_plugin.Request(args.count_instructions or None, args.profile_instructions)
    if args.profile_instructions and (counted is None or counted.function is None):
        raise UsageError("--profile-instructions needs --count-instructions=FUNCTION")
    if args.profile_output is not None and args.profile is None:
        raise UsageError("--profile-output needs --profile=PTE")
    if args.profile is not None and counted is not None:
        raise UsageError(
            "--profile counts each program instruction's CPU instructions itself; leave out --count-instructions"
        )
    if args.profile is not None and args.platform == "fvp":
        raise UsageError(
            "--profile needs kiln's virtual platform (its NPU model accounts each NPU command to its "
            "layer); on the FVP the runner prints only each inference's NPU PMU totals (its `NPU PMU:` "
            "line): leave out --profile, or use --platform=virtual"
        )
    # the ELF and the target checked before the command line creates --output-dir
    target = boards.target(args.target, args.board)
    tolerance = flow.tolerance_arguments(args.atol, args.rtol)  # a bundle's (kiln bundle)
    if args.model:  # the runner reads --model and --input in the order given
        sequence = [*_in_order(args.sequence), *tolerance]
        fw = flow.firmware(args.elf, target, (), args.output_dir, args.npu_timeout_ms, sequence)
    else:
        fw = flow.firmware(args.elf, target, args.input, args.output_dir, args.npu_timeout_ms, tolerance)
    if args.profile is not None:
        return _run_profiled(args, fw)
    return flow.run(fw, args.platform, args.timeout, counted, echo=_echo).status


class _InOrder(argparse.Action):
    """An appending option that also records (option, value) in `sequence`, in command-line order."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, [*getattr(namespace, self.dest), values])
        namespace.sequence = [*getattr(namespace, "sequence", []), (self.dest, values)]


def _in_order(sequence: list[tuple[str, object]]) -> list[str]:
    """The runner's --model=NAME and --input=PATH tokens in the order given (paths checked and
    made absolute by kiln.simulator.run.firmware_arguments)."""
    from kiln.simulator.run import firmware_arguments

    return [f"--model={value}" if option == "model" else firmware_arguments([value])[0] for option, value in sequence]


def _run_profiled(args, fw) -> int:
    """`kiln run --profile=PTE`: the ELF on the virtual platform with the UART on standard output,
    then (when it exited 0) kiln profile's per-layer table of the .pte it was built from, and its
    files in --profile-output; returns the run's status."""
    from kiln import flow
    from kiln.reference import profile

    fvp = fw.target.fvp
    if args.platform == "auto" and fvp and shutil.which(fvp):
        print(
            f"{args.prog}: --profile runs on kiln's virtual platform, not {fvp}: per-layer attribution needs "
            "kiln's NPU model (without --profile the FVP prints each inference's NPU PMU totals)",
            file=sys.stderr,
        )
    p, result = flow.profile_elf(fw, args.profile, args.timeout, echo=_echo)
    if result.status != 0:
        print(f"{args.prog}: no profile: the firmware exited {result.status}", file=sys.stderr)
        return result.status
    print(profile.format_table(p))
    if p.platform_pmu_cycles != p.total_npu_cycles:
        print(
            f"{args.prog}: the firmware's NPU PMU total {p.platform_pmu_cycles} is not the profile's "
            f"{p.total_npu_cycles:,}",
            file=sys.stderr,
        )
    if args.profile_output is not None:
        for path in profile.write(p, args.profile_output):
            print(f"wrote {path}")
    return result.status


def _echo(line: str):
    """A UART line on standard output as it comes."""
    print(line, flush=True)


def _log(line: str):
    """A compile's progress line, on standard error."""
    print(line, file=sys.stderr)


def _run_host(args) -> int:
    from kiln import isolation

    isolation.prepare("kiln.reference.isolated_tosa")  # the delegates' engine, readied while torch is imported
    from kiln.reference import run_host as host

    for path in host.run_files(args.pte, args.input, args.output_dir):
        print(path)
    return 0


def _bundle(args) -> int:
    from kiln import isolation

    isolation.prepare("kiln.reference.isolated_tosa")  # run-host's delegates' engine
    _write_bundle(args.pte, args.output, args.cases, args.seed)
    return 0


def _write_bundle(pte: Path, output: Path, cases: int, seed: int, example=None) -> None:
    """Writes the .bpte of the .pte at `pte` (kiln.reference.bundled.make_bundle) and says so."""
    from kiln.reference import bundled

    try:
        data = Path(pte).read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read {pte}: {error.strerror}") from None
    output.write_bytes(bundled.make_bundle(data, cases, seed, example))
    print(f"wrote {output} ({cases} case(s) per method)")


def _generate(args) -> int:
    from kiln import isolation

    isolation.prepare("kiln.reference.isolated_tosa")
    from kiln.reference import generate

    prompt = args.prompt.encode("utf-8")
    steps = generate.generate(Path(args.pte).read_bytes(), prompt, args.tokens)
    if args.logits_dir:
        args.logits_dir.mkdir(parents=True, exist_ok=True)
        for n, step in enumerate(steps):
            (args.logits_dir / f"logits_{n}.bin").write_bytes(
                step.logits.astype(step.logits.dtype.newbyteorder("<")).tobytes()
            )
    for n, step in enumerate(steps):
        print(f"token {n}: {step.token} {bytes([step.token & 0xFF])!r} at position {step.position}")
    print(args.prompt + generate.text(steps))
    return 0


def _profile(args) -> int:
    from kiln import boards, flow
    from kiln.reference import profile
    from kiln.spec import CompileSpec

    if args.model.endswith(".pte"):
        if args.cpu_instructions:
            raise UsageError(
                "--cpu-instructions needs the model (a .pte does not say which op each kernel call belongs to)"
            )
        if args.etdump:
            raise UsageError("--etdump needs the model (a .pte does not say which module and op each NPU layer is)")
        p = flow.profile_pte(Path(args.model), args.target)
    else:
        spec = CompileSpec(
            target=args.target, system_config=args.system_config, memory_mode=args.memory_mode, board=args.board
        )
        work = Path(args.output) / "runner" if args.output else None  # with --cpu-instructions
        target = boards.target(args.target, args.board)
        p = flow.profile_model(args.model, spec, target, args.cpu_instructions, work, log=_log, etdump=args.etdump)
    print(profile.format_table(p))
    if args.output:
        for path in profile.write(p, Path(args.output)):
            print(f"wrote {path}")
    if args.etdump:
        from kiln.reference import etdump

        opened = etdump.INSPECTOR.replace("FILE", repr(str(args.etdump)))
        print(f"wrote {args.etdump} (ETDump, times in NPU cycles; ExecuTorch's devtools open it: {opened})")
    return 0


def _flash(args) -> int:
    from kiln.firmware import flash

    return flash.flash(args.board, args.elf, args.drive, args.probe, args.pack, args.setools, args.output)


def _export(args) -> int:
    from kiln.firmware import csolution

    for path in csolution.export(args.pte, args.target, args.board, args.csolution):
        print(path)
    return 0


def _pack(args) -> int:
    from kiln.firmware import pack

    print(pack.write(args.output, args.board or pack.DEFAULT_BOARD))
    return 0


def _deploy(args) -> int:
    from kiln import boards, flow, paths
    from kiln.spec import CompileSpec

    if args.model is not None and args.model_option is not None and args.model != args.model_option:
        raise UsageError(f"two models given: {args.model} and --model {args.model_option}")
    model = args.model_option or args.model or "digits"
    name = Path(model).stem if model.endswith(".py") else model
    pte = Path(args.output) if args.output else paths.build_root() / f"{name}.pte"
    _step(args.prog, f"compiling {model} for {args.target}")
    target = boards.target(args.target, args.board)  # once: the compile, the build and the run take it
    spec = CompileSpec(args.target, args.system_config, args.memory_mode, board=args.board)
    _compile_and_write(model, spec, pte, target=target)
    if flow.generates(pte):
        _step(args.prog, f"building the generation app for {name} on {args.target}")
        elf = flow.build_runner(pte, target, app="generate")
        print(elf)
        _step(args.prog, f"generating {args.tokens} tokens after {args.prompt!r} on {elf}")
        return _generate_on_device(elf, target, pte, args)
    _step(args.prog, f"building the executor runner for {name} on {args.target}")
    elf = flow.build_runner(pte, target)
    print(elf)
    _step(args.prog, f"running {elf}")
    if model == "digits":
        return _classify_digits(args.prog, elf, target, pte, args.count, args.platform, args.timeout)
    return flow.run(flow.firmware(elf, target), args.platform, args.timeout, echo=_echo).status


def _generate_on_device(elf: Path, target, pte: Path, args) -> int:
    """`kiln deploy`'s run of a language model: the generation app on the platform, each token with
    its NPU and CPU cycles, the text, then the same generation on the host (kiln generate): the
    firmware's tokens and logits must equal it bit for bit. Returns 0, the run's status when it
    failed, or 1 when the two differ."""
    from statistics import fmean

    import numpy as np

    from kiln import flow
    from kiln.reference import generate

    prompt = args.prompt.encode("utf-8")
    done = flow.generate(
        elf, target, prompt, args.tokens, pte, platform=args.platform, timeout=args.timeout, count_instructions=True
    )
    if not done.complete:
        print(done.log)
        return done.status or 1
    instructions = done.cpu_instructions or [None] * len(done.tokens)  # the virtual platform counts them
    print(
        f"{'token':>5}  {'id':>5}  {'byte':>6}  {'position':>8}  {'method':>7}  {'NPU cycles':>11}  {'CPU cycles':>10}"
        f"  {'CPU instructions':>16}"
    )
    for t, counted in zip(done.tokens, instructions):
        cpu = f"{t.cpu_cycles:,}" if t.cpu_cycles is not None else "n/a"
        byte = ascii(chr(t.token))[1:-1] if t.token < 256 else ""
        print(
            f"{t.index:>5}  {t.token:>5}  {byte:>6}  {t.position:>8}  {t.method:>7}  {t.npu_cycles:>11,}  {cpu:>10}"
            f"  {f'{counted:,}' if counted is not None else 'n/a':>16}"
        )
    text = bytes(t.token & 0xFF for t in done.tokens)
    print(f"generated: {(prompt + text).decode('utf-8', errors='backslashreplace')}")
    decodes = [t.npu_cycles for t in done.tokens if t.method == "decode"]
    summary = [f"{done.tokens[0].method} {done.tokens[0].npu_cycles:,} NPU cycles"]
    if decodes:
        summary.append(f"decode {fmean(decodes):,.0f} NPU cycles per token")
    print(
        "; ".join(summary) + f"; {done.seconds / len(done.tokens):.2f} s of wall time per token on the platform"
        " (start-up included)"
    )
    host = generate.generate(pte.read_bytes(), prompt, args.tokens)
    same_tokens = [s.token for s in host] == done.token_ids
    same_logits = len(done.logits) == len(host) and all(
        a.dtype == s.logits.dtype and np.array_equal(a, s.logits) for a, s in zip(done.logits, host)
    )
    if same_tokens and same_logits:
        print(f"the firmware's {len(host)} tokens and their logits equal kiln generate's on the host, bit for bit")
        return 0
    print(
        f"the firmware differs from kiln generate on the host: tokens {'equal' if same_tokens else 'differ'}, "
        f"logits {'equal' if same_logits else 'differ'}",
        file=sys.stderr,
    )
    return 1


def _classify_digits(prog: str, elf: Path, target, pte: Path, count: int, platform: str, timeout: float) -> int:
    """`kiln deploy digits`'s run: each held-out image's predicted digit beside its label, with the
    NPU and CPU cycles of its inference; returns 0, or the run's status when it failed, after its
    UART and kiln run's notes (as `kiln run` prints them). A runner that exits 0 before
    classifying every image is a RunnerError."""
    from statistics import fmean

    from kiln import flow
    from kiln.errors import RunnerError

    done = flow.classify_digits(elf, target, pte, count, platform, timeout)
    run = done.run
    if not run.complete:
        for line in run.run.uart:
            print(line)
        for line in run.notes:
            print(f"kiln: {line}", file=sys.stderr)
        if run.status != 0:
            return run.status
        raise RunnerError(f"the runner exited with status 0 after {len(run.inferences)} of {count} inferences")
    print(f"{'image':>5}  {'label':>5}  {'predicted':>9}  {'NPU cycles':>10}  {'CPU cycles':>10}")
    for k, (label, predicted, inference) in enumerate(zip(done.labels, done.predicted, run.inferences)):
        cpu = inference.cpu_cycles
        print(
            f"{k:>5}  {label:>5}  {predicted:>9}  {inference.npu_cycles:>10,}  {cpu if cpu is not None else 'n/a':>10}"
        )
    right = sum(label == predicted for label, predicted in zip(done.labels, done.predicted))
    print(f"{right} of {count} right; per inference: {fmean(run.npu_cycles):,.0f} NPU cycles", end="")
    counted = [c for c in run.cpu_cycles if c is not None]
    if counted:
        print(f", {fmean(counted):,.0f} CPU cycles", end="")
    print(f"; {run.seconds / count:.2f} s of wall time each on the platform (start-up included)")
    return 0


def _step(prog: str, message: str):
    print(f"{prog}: {message}", flush=True)


# --- The command line ------------------------------------------------------------------------


class _Formatter(argparse.HelpFormatter):
    """argparse's help with room for the options' names."""

    def __init__(self, prog: str):
        super().__init__(prog, max_help_position=34, width=min(shutil.get_terminal_size().columns, 110))


class _StatusFormatter(_Formatter, argparse.RawDescriptionHelpFormatter):
    """As _Formatter, and the epilog (a table of exit statuses) as written."""


def _positive(parse, kind: str, too_small: str):
    """An argparse type: `parse(text)` (float or int) when it is more than 0; else an error
    saying the text is not `kind`, or `too_small`."""

    def check(text: str):
        try:
            value = parse(text)
        except ValueError:
            value = None
        if value is None or value != value:  # NaN is no number of anything either
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}")
        if value <= 0:
            raise argparse.ArgumentTypeError(too_small)
        return value

    return check


_positive_seconds = _positive(float, "a number of seconds", "the timeout must be more than 0 seconds")
_positive_count = _positive(int, "a whole number", "the count must be 1 or more")


def _tolerance(text: str) -> str:
    """A runner tolerance as the firmware parses it: digits with an optional fraction."""
    if not re.fullmatch(r"\d+(\.\d*)?|\.\d+", text):
        raise argparse.ArgumentTypeError(f"a tolerance is a decimal such as 0.01, not {text!r}")
    return text


def _npu_timeout_ms(text: str) -> int:
    """An argparse type: the executor runner's --npu-timeout-ms, decimal digits within
    kiln.simulator.run.NPU_TIMEOUT_MS_RANGE (what the runner itself accepts)."""
    low, high = NPU_TIMEOUT_MS_RANGE
    value = int(text) if text.isascii() and text.isdigit() else None
    if value is None or not low <= value <= high:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of milliseconds from {low} to {high}")
    return value


def _target_option(parser, default: str | None = None):
    if default is None:
        parser.add_argument("--target", required=True, help="the NPU target, e.g. ethos-u55-128 (`kiln targets`)")
    else:
        parser.add_argument("--target", default=default, help=f"the NPU target (default {default}; `kiln targets`)")


def _board_option(parser):
    parser.add_argument(
        "--board",
        metavar="NAME",
        help="a board with the target's NPU configuration (default: the target's reference board; "
        "`kiln targets` lists them)",
    )


def _vela_options(parser, default: str):
    parser.add_argument("--system-config", metavar="NAME", help=f"Vela system config (default: {default})")
    parser.add_argument(
        "--memory-mode",
        metavar="NAME",
        help=f"Shared_Sram, Sram_Only or Dedicated_Sram[_256KB|_384KB|_512KB] (default: {default})",
    )


def _platform_options(parser, timeout: float):
    parser.add_argument(
        "--platform",
        choices=("auto", "fvp", "virtual"),
        default="auto",
        help="auto (default): Arm's FVP when installed, else kiln's virtual platform",
    )
    parser.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=timeout,
        metavar="S",
        help=f"stop the firmware after S seconds (default {timeout:g}; status 124)",
    )


def _sweep(args) -> int:
    import dataclasses

    from kiln import sweep
    from kiln.sweep.cache import Cache

    grid, settings = sweep.load(
        args.config,
        models=args.models,
        targets=[t for ts in args.target for t in ts.split(",")],
        boards=args.board,
        memory_modes=args.memory_mode,
        activation_bits=args.activation_bits,
    )
    if args.run:
        grid = dataclasses.replace(grid, run=True)
    budget = args.budget_ms if args.budget_ms is not None else settings.get("budget_ms")
    result = sweep.run(
        grid,
        Path(args.output),
        cache=Cache(args.cache),
        ray=args.ray,
        workers=args.workers,
        budget_ms=budget,
        progress=None if args.quiet else sys.stderr,
    )
    print(result.summary)
    cached = len(result.ordered) + len(result.profiled) - len(result.computed)
    print(f"computed {len(result.computed)} point(s), read {cached} from the cache in {Cache(args.cache).directory}")
    print(f"table: {result.files['csv']}, {result.files['json']}; report: {result.files['html']}")
    return 1 if result.budget is not None and result.budget[0] is None else 0


def _sweep_parser(command) -> None:
    sw = command(
        "sweep",
        "compile models over targets, boards, memory modes and activation bits; table, Pareto fronts, budget",
        _sweep,
        epilog="Writes DIR/results.csv (streamed as points finish), results.json, report.html and "
        "mlia/<point>.json (ML Inference Advisor 0.12's JSON). Points are cached by content hash: a stopped "
        "or repeated sweep computes only what it lacks. Cycles are Vela's estimates. Exit status 1: no "
        "configuration meets --budget-ms. docs/sweeps.md.",
    )
    sw.add_argument("models", nargs="*", metavar="MODEL", help="zoo models or .py files, or 'zoo' (every zoo model)")
    sw.add_argument("--config", type=Path, metavar="FILE", help="a TOML file of the sweep's lists (flags replace them)")
    sw.add_argument(
        "--target", action="append", default=[], metavar="T", help="an NPU target (repeat or comma-separate), or 'all'"
    )
    sw.add_argument(
        "--board", action="append", default=[], metavar="NAME", help="a board (default: each target's reference)"
    )
    sw.add_argument(
        "--memory-mode", action="append", default=[], metavar="MODE",
        help="a Vela memory mode, or 'all' (each the target's family has on the board); default: the board's",
    )  # fmt: skip
    sw.add_argument("--activation-bits", action="append", type=int, choices=(8, 16), default=[], help="8 or 16")
    sw.add_argument("--output", required=True, metavar="DIR", help="the folder of the table and the report")
    sw.add_argument("--cache", type=Path, metavar="DIR", help="the points' cache (default: kiln's cache folder)")
    sw.add_argument("--workers", type=int, metavar="N", help="local worker processes (default: one per CPU)")
    sw.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="compute on Ray: auto (this machine's cluster), local (a new one here), host:port or ray://host:port",
    )
    sw.add_argument(
        "--budget-ms", type=float, metavar="MS", help="the smallest configuration meeting MS for all models"
    )
    sw.add_argument(
        "--run", action="store_true",
        help="also build each point's firmware and run it on kiln's virtual platform (PMU cycles, outputs against "
        "run-host; about a minute a point)",
    )  # fmt: skip
    sw.add_argument("--quiet", action="store_true", help="no progress bar")


def _parser(script: str | None) -> argparse.ArgumentParser:
    """kiln's parser; with `script`, every usage line and message names it instead of `kiln`."""
    from kiln.spec import TIED_HEADS

    parser = argparse.ArgumentParser(
        prog=script or "kiln", formatter_class=_Formatter, allow_abbrev=False,
        description="Bake PyTorch models into Cortex-M + Ethos-U firmware: compile a model to an ExecuTorch "
                    ".pte, build firmware for it, run it on Arm's FVP or kiln's virtual platform.",
        epilog="`kiln COMMAND --help` lists a command's options; options take dashes or underscores alike "
               "(--memory-mode, --memory_mode). An error is one line on standard error and a non-zero exit status.",
    )  # fmt: skip
    parser.add_argument(
        "--as",
        dest="script",
        metavar="NAME",
        help="name usage lines and messages after NAME (the ./scripts wrappers; first option only)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(
        name: str, summary: str, func, description: str | None = None, epilog: str | None = None, formatter=_Formatter
    ):
        p = sub.add_parser(
            name,
            help=summary,
            description=description or summary,
            epilog=epilog,
            prog=script or f"kiln {name}",
            formatter_class=formatter,
            allow_abbrev=False,
        )
        p.set_defaults(func=func, prog=script or "kiln", usage=p.format_usage)
        return p

    co = command("compile", "compile a model (a zoo name or a .py file) to a .pte and a .json report", _compile)
    co.add_argument(
        "model",
        metavar="MODEL",
        help="a zoo model (e.g. digits, resnet8) or a .py file defining ModelUnderTest and ModelInputs",
    )
    _target_option(co)
    _board_option(co)
    co.add_argument(
        "--output", required=True, metavar="FILE", help="the .pte to write; the report goes beside it as .json"
    )
    _vela_options(co, "the board's")
    co.add_argument("--calibration", metavar="DATA", help="an .npz (or a folder of them) of representative inputs")
    co.add_argument("--no-quantize", action="store_true", help="keep the model in float (it then runs on the CPU)")
    co.add_argument("--no-delegate", action="store_true", help="run everything on the CPU")
    co.add_argument("--io", choices=("float", "int8"), default="float", help="the program's input and output type")
    co.add_argument(
        "--no-integer-kernels",
        action="store_true",
        help="run the quantized ops kept on the CPU in float between a dequantize and a quantize (the portable "
        "kernels) instead of the integer cortex_m kernels",
    )
    co.add_argument(
        "--tied-head",
        choices=TIED_HEADS,
        default=TIED_HEADS[0],
        help="a head tied to its embedding: table (default), the table stored once and read by the head as a "
        "MATMUL on the Ethos-U85 (the smaller program); weights, the head's own per-channel copy as Vela's encoded "
        "weights (fewer of Vela's total cycles)",
    )
    co.add_argument(
        "--activation-bits",
        type=int,
        choices=(8, 16),
        default=8,
        help="8 (default) or 16-bit activations, with int8 weights",
    )
    co.add_argument(
        "--int16",
        action="append",
        default=[],
        metavar="POLICY",
        help="16-bit activations for a kind of op in an 8-bit model: attention, norms (or both, comma-separated); "
        "auto: the ops whose 8 bits cost the output the most SQNR against the float model on the calibration data",
    )
    co.add_argument(
        "--int16-sqnr",
        type=float,
        metavar="DB",
        help="--int16 auto promotes values until the output's SQNR against float reaches DB (default 30)",
    )
    co.add_argument(
        "--int16-budget",
        type=int,
        metavar="N",
        help="--int16 auto puts at most N ops at 16 bits (default: no cap)",
    )
    co.add_argument(
        "--int16-module",
        action="append",
        default=[],
        metavar="PATTERN",
        help="16-bit activations inside a module and its submodules (a path or a glob: 'blocks.*.attn')",
    )
    co.add_argument("--exclude-op", action="append", default=[], metavar="OP", help="keep an op type off the NPU")
    co.add_argument(
        "--exclude-module",
        action="append",
        default=[],
        metavar="PATH",
        help="keep a module and its submodules off the NPU",
    )
    co.add_argument("--exclude-node", action="append", default=[], metavar="NAME", help="keep a node off the NPU")
    co.add_argument("--intermediates", metavar="DIR", help="keep the TOSA and Vela files in DIR")
    co.add_argument(
        "--bundle",
        type=_positive_count,
        metavar="N",
        help="also write F.bpte: the program with N test cases (the example input, then seeded ones; see kiln bundle)",
    )

    _sweep_parser(command)

    bu = command(
        "build",
        "build kiln's executor runner for a .pte (or a plain firmware app); prints the ELF",
        _build,
        epilog="The ELF's path is the last line of standard output; a runner build writes "
        "memory_report.txt and .json into its build directory.",
    )
    what = bu.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--pte",
        type=Path,
        action="append",
        metavar="FILE",
        help="the program to bake into the runner; several --pte make one image of several models, "
        "which the runner runs in the order of its --model=NAME options (NAME: the file's name without .pte)",
    )
    what.add_argument("--app", metavar="NAME", help="instead, build the firmware's plain apps; print NAME's ELF")
    _target_option(bu)
    _board_option(bu)
    _vela_options(bu, "what the .pte was compiled for, else the target's")
    bu.add_argument("--build-type", choices=("Release", "Debug"), default="Release", help="CMake build type")
    bu.add_argument("--output", type=Path, metavar="DIR", help="the build directory (default: one under build/)")
    bu.add_argument(
        "--default-input",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="raw bytes baked in as an input, used when none is given at run time (once per input)",
    )
    bu.add_argument(
        "--skip-target-check",
        action="store_true",
        help="build even if a delegate was compiled for another target (the firmware refuses it)",
    )
    bu.add_argument(
        "--bake",
        type=Path,
        metavar="FILE",
        help="bake FILE instead of the .pte, sized from the .pte (tests the firmware's checks)",
    )
    bu.add_argument("--test-apps", action="store_true", help="with --app: build tests/fvp/apps too")
    bu.add_argument(
        "--generate",
        action="store_true",
        help="with --pte: build the generation app (a language model's prefill and decode) instead of the runner",
    )

    ru = command(
        "run",
        "run a firmware ELF on Arm's FVP if installed, else on kiln's virtual platform",
        _run,
        description="Run a firmware ELF on Arm's FVP if installed, else on kiln's virtual platform\n"
        "(QEMU and kiln's model of the target's Ethos-U). The UART goes to standard output,\n"
        "kiln's notes to standard error.",
        epilog=RUN_STATUSES,
        formatter=_StatusFormatter,
    )
    ru.add_argument("--elf", required=True, type=Path, metavar="FILE", help="the firmware ELF")
    _target_option(ru)
    _board_option(ru)
    _platform_options(ru, DEFAULT_TIMEOUT_S)
    ru.add_argument(
        "--input",
        action=_InOrder,
        type=Path,
        default=[],
        metavar="FILE",
        help="a file kiln's executor runner reads as an input (once per input; after its --model in an image "
        "of several)",
    )
    ru.add_argument(
        "--model",
        action=_InOrder,
        default=[],
        metavar="NAME",
        help="an image of several models (kiln build --pte A.pte --pte B.pte): run model NAME, with the "
        "--input options after it; repeat for a sequence (default: each model once on its built-in inputs)",
    )
    ru.add_argument(
        "--output-dir",
        type=Path,
        metavar="DIR",
        help="where the runner writes output_<i>.bin (NAME_output_<i>.bin in an image of several models)",
    )
    ru.add_argument(
        "--npu-timeout-ms",
        type=_npu_timeout_ms,
        metavar="N",
        help="how long kiln's executor runner waits for each NPU stream (1 to 4294967295 ms; "
        "default the driver's 10000)",
    )
    ru.add_argument(
        "--count-instructions",
        nargs="?",
        const="",
        metavar="FUNCTION",
        help="virtual platform: count the run's instructions, and each call of FUNCTION",
    )
    ru.add_argument(
        "--profile-instructions",
        action="store_true",
        help="with --count-instructions=FUNCTION: where its calls' instructions went",
    )
    ru.add_argument(
        "--profile",
        type=Path,
        metavar="PTE",
        help="the .pte the ELF was built from (its .json report beside it): run on the virtual "
        "platform and print kiln profile's per-layer table",
    )
    ru.add_argument(
        "--profile-output",
        type=Path,
        metavar="DIR",
        help="with --profile: write profile.json, timeline.png, memory.png, profile.html",
    )

    ru.add_argument(
        "--atol",
        type=_tolerance,
        metavar="X",
        help="a bundle (.bpte) baked in: each output element may differ by atol + rtol * |expected| (default 0)",
    )
    ru.add_argument("--rtol", type=_tolerance, metavar="X", help="with --atol: the relative part (default 0)")

    rh = command("run-host", "run a .pte on the host (the reference the firmware must match)", _run_host)
    rh.add_argument("pte", metavar="PTE", help="the program")
    rh.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="FILE",
        help="one input's raw little-endian bytes (once per input, in order)",
    )
    rh.add_argument("--output-dir", required=True, metavar="DIR", help="where output_<i>.bin go (created)")

    bd = command(
        "bundle",
        "write a .bpte: a .pte with test cases whose expected outputs are kiln run-host's",
        _bundle,
        description="Write an ExecuTorch BundledProgram (.bpte): the program, without run-host's reference\n"
        "data, and per method N test cases of seeded inputs with run-host's outputs. kiln build\n"
        "--pte F.bpte bakes it; the runner then runs every case and checks every output (exact\n"
        "unless kiln run's --atol/--rtol), exiting 7 on a mismatch.",
        formatter=_StatusFormatter,
    )
    bd.add_argument("pte", type=Path, metavar="PTE", help="the program")
    bd.add_argument("--output", required=True, type=Path, metavar="FILE", help="the .bpte to write")
    bd.add_argument("--cases", type=_positive_count, default=4, metavar="N", help="cases per method (default 4)")
    bd.add_argument("--seed", type=int, default=0, metavar="S", help="the seed of the inputs (default 0)")

    ge = command(
        "generate",
        "generate text from a language model's .pte on the host (prefill, then greedy decode steps)",
        _generate,
    )
    ge.add_argument("pte", metavar="PTE", help="a program with methods prefill and decode (e.g. kiln compile tinylm)")
    ge.add_argument("--prompt", required=True, metavar="TEXT", help="the text to continue (its UTF-8 bytes are tokens)")
    ge.add_argument("--tokens", type=int, default=32, metavar="N", help="how many tokens to generate (default 32)")
    ge.add_argument("--logits-dir", type=Path, metavar="DIR", help="write each step's logits there, logits_<n>.bin")

    pf = command(
        "profile",
        "per-layer NPU cycles and bytes of a model on kiln's NPU model, beside Vela's per-layer estimate",
        _profile,
    )
    pf.add_argument("model", metavar="MODEL", help="a zoo model, a .py file, or a .pte with its .json report beside")
    _target_option(pf)
    _board_option(pf)
    _vela_options(pf, "the board's")
    pf.add_argument("--output", metavar="DIR", help="write profile.json, timeline.png, memory.png, profile.html")
    pf.add_argument(
        "--cpu-instructions",
        action="store_true",
        help="build the runner and count each CPU op's instructions on the virtual platform",
    )
    pf.add_argument(
        "--etdump",
        type=Path,
        metavar="FILE",
        help="as --cpu-instructions, with the runner that records an ETDump (ExecuTorch's profiling format) of "
        "the run, written to FILE: one event per NPU layer and per delegate call, in NPU cycles",
    )

    command("targets", "list the NPU targets, the boards (and their unverified facts) and Vela defaults", _targets)

    fl = command(
        "flash",
        "put a firmware ELF on a board (./scripts/flash.sh)",
        _flash,
        description="Put a firmware ELF on a board, as its vendor documents: MPS3/MPS4 through the\n"
        "board's USB drive (SOFTWARE/ and images.txt), Alif through its Security Toolkit\n"
        "(run when on PATH, else the commands are printed), any board with a CMSIS device\n"
        "through a debug probe and pyOCD (--probe).",
        formatter=_StatusFormatter,
    )
    fl.add_argument("--board", required=True, metavar="NAME", help="the board (`kiln targets` lists them)")
    fl.add_argument("--elf", required=True, type=Path, metavar="FILE", help="the firmware (kiln build prints it)")
    fl.add_argument(
        "--drive", type=Path, metavar="DIR", help="MPS3/MPS4: the folder the board's USB drive is mounted at"
    )
    fl.add_argument("--probe", action="store_true", help="flash through a debug probe with pyOCD")
    fl.add_argument(
        "--pack",
        type=Path,
        metavar="FILE",
        help="with --probe: the device's CMSIS pack (.pack), if `pyocd pack install` did not install it",
    )
    fl.add_argument(
        "--setools",
        type=Path,
        metavar="DIR",
        help="Alif: the Security Toolkit's folder (default: where app-write-mram is on PATH)",
    )
    fl.add_argument(
        "--output",
        type=Path,
        metavar="DIR",
        help="Alif without the Security Toolkit: where the image and its JSON go (default: beside the ELF)",
    )

    ex = command("export", "write kiln's runner for a .pte as a CMSIS-Toolbox project (csolution)", _export)
    ex.add_argument(
        "--csolution",
        required=True,
        type=Path,
        metavar="DIR",
        help="the folder for kiln.csolution.yml, kiln.cproject.yml and their sources",
    )
    ex.add_argument("--pte", required=True, type=Path, metavar="FILE", help="the program to bake in")
    _target_option(ex)
    _board_option(ex)

    pk = command("pack", "write kiln's runtime as a CMSIS-Pack for CMSIS-Toolbox projects", _pack)
    pk.add_argument("--output", required=True, type=Path, metavar="DIR", help="the folder for the .pack")
    pk.add_argument(
        "--board",
        metavar="NAME",
        help="whose facts the pack's config/kiln_board.h holds, for the project to edit (default corstone-300)",
    )

    de = command(
        "deploy",
        "compile a model, build the runner for it and run it (./scripts/run.sh)",
        _deploy,
        description="Compile MODEL for the target (the report on standard output; the .pte and .json in\n"
        "build/), build kiln's executor runner for it (`kiln build`) and run it (`kiln run`).\n"
        "For digits: the predicted digit beside the true label of held-out images, with the\n"
        "NPU and CPU cycles of each inference. For a language model (methods prefill and\n"
        "decode: tinylm): the generation app continues --prompt for --tokens tokens, each\n"
        "with its NPU and CPU cycles, and its tokens and logits are checked against kiln\n"
        "generate's on the host. Other models run once on the runner's built-in inputs.",
        epilog="exit status: `kiln run`'s; digits also 1 when the runner exited 0 before classifying every image;\n"
        "a language model also 1 when the firmware's tokens or logits differ from the host's.",
        formatter=_StatusFormatter,
    )
    de.add_argument("model", nargs="?", metavar="MODEL", help="a zoo model or a .py file (default digits)")
    de.add_argument("--model", dest="model_option", metavar="MODEL", help="the same as MODEL (run.sh's spelling)")
    _target_option(de, DEFAULT_TARGET)
    _board_option(de)
    _vela_options(de, "the board's")
    de.add_argument("--output", metavar="FILE", help="the .pte to write (default build/MODEL.pte)")
    de.add_argument(
        "--count",
        type=_positive_count,
        default=8,
        metavar="N",
        help="digits: how many held-out images to classify (default 8)",
    )
    de.add_argument(
        "--prompt",
        default=DEPLOY_PROMPT,
        metavar="TEXT",
        help=f"a language model (tinylm): the text to continue (default {DEPLOY_PROMPT!r})",
    )
    de.add_argument(
        "--tokens",
        type=_positive_count,
        default=DEPLOY_TOKENS,
        metavar="N",
        help=f"a language model: how many tokens to generate (default {DEPLOY_TOKENS})",
    )
    _platform_options(de, DEPLOY_TIMEOUT_S)
    return parser


def _dashed(argv: list[str]) -> list[str]:
    """--memory_mode=X as --memory-mode=X (ExecuTorch's scripts spell options with
    underscores); values and everything after "--" are left alone."""
    out = []
    for i, arg in enumerate(argv):
        if arg == "--":
            return out + argv[i:]
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            arg = name.replace("_", "-") + eq + value
        out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    script = None
    if argv and argv[0].startswith("--as="):
        script, argv = argv[0].removeprefix("--as="), argv[1:]
    elif len(argv) > 1 and argv[0] == "--as":
        script, argv = argv[1], argv[2:]
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # stays in order with standard error in a shared log
    args = _parser(script).parse_args(_dashed(argv))
    return run_command(args.prog, lambda: args.func(args), usage=lambda: sys.stderr.write(args.usage()))


if __name__ == "__main__":
    sys.exit(main())
