"""Run a firmware ELF on Arm's FVP when one is installed, else on kiln's virtual platform.

    kiln run --elf=FILE --target=ethos-u55-128 [--timeout=S] [--input=FILE]... [--output-dir=DIR]
        [--npu-timeout-ms=N] [--count-instructions[=FUNCTION] [--profile-instructions]]
        [--profile=PTE [--profile-output=DIR]]
    (./scripts/run_fvp.sh is this command; kiln.cli parses it)

The firmware's UART goes to standard output as it comes. On the virtual
platform the target's Ethos-U configuration is modelled (kiln.simulator.attach
attaches kiln.simulator.npu's register file to QEMU at the board's NPU
address) and a summary of what the NPU model did goes to standard error,
after "kiln: NPU model:". The exit status is the firmware's own (its
"[kiln] exit N" line, or QEMU's semihosting exit status); a fault is explained
from the firmware's report and exits 134; a run that outlives its timeout is
stopped and exits 124; a platform that stops without the firmware's exit (or
whose NPU model refused an access) exits 125; bad arguments exit 2; a missing
platform exits 127.

--count-instructions counts the guest instructions on the virtual platform
(kiln.simulator.qemu_plugin) and says on standard error how many the whole run
executed and, given a FUNCTION, each call of it ("kiln: instructions per call of
F: n1 n2 ..."); --profile-instructions adds where the calls' instructions went,
per function.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kiln import boards
from kiln.errors import ToolMissingError, UsageError
from kiln.simulator import qemu_plugin
from kiln.simulator.protocol import FAULT_EXIT_STATUS, FaultReport, Lockup, ProtocolReader, Transcript

if TYPE_CHECKING:
    from kiln.simulator.attach import HostTimes

TIMEOUT_EXIT_STATUS = 124  # as coreutils' timeout
PLATFORM_ERROR_EXIT_STATUS = 125  # the platform died without the firmware saying why
DEFAULT_TIMEOUT_S = 120.0  # kiln run's default too (kiln.cli imports it: this module imports no NPU model)
ELF_MAGIC = b"\x7fELF"
QEMU = "qemu-system-arm"
# Set to 1, the virtual platform's NPU never finishes a stream (no interrupt, STATUS
# stays running): for testing a firmware's NPU timeout path.
HANG_VARIABLE = "KILN_VP_NPU_HANG"
# What QEMU says once when the NPU attachment's debugger first stops a VM that has no
# active timer (with -icount sleep=off): expected, so not passed on as firmware output.
ATTACHMENT_NOISE = {f"{QEMU}: warning: icount sleep disabled and no active timers"}


@dataclass
class Platform:
    """A way to run an ELF: the command line and a name a person reads."""

    name: str
    command: list[str]
    is_fvp: bool
    attachment: object | None = None  # a kiln.simulator.attach.NpuAttachment serving the NPU


@dataclass(frozen=True)
class NpuTotals:
    """What the NPU model did in a run, summed over every stream it ran."""

    streams: int
    cycles: int  # its PMU cycle estimate
    faults: int  # streams that ended in a fault
    beats: tuple[int, int, int, int]  # AXI data beats: AXI0 read, AXI0 write, AXI1 read, AXI1 write
    first_fault: str | None  # the first faulting stream's reason


@dataclass
class RunResult:
    status: int  # kiln run's exit status (the module's docstring)
    uart: list[str]  # every line, without line endings
    transcript: Transcript  # the lines read (kiln.simulator.protocol)
    timed_out: bool
    npu_error: str | None = None  # why the NPU attachment stopped the platform
    npu: NpuTotals | None = None  # the NPU model's totals (virtual platform, with an NPU access)
    npu_summary: str | None = None  # npu, and the attachment's own figures, for a person
    host: HostTimes | None = None  # virtual platform with the NPU model: where the wall time went (attach)
    instructions: qemu_plugin.Counts | None = None  # with count_instructions, if QEMU exited normally

    @property
    def fault(self) -> FaultReport | None:
        return self.transcript.fault

    @property
    def lockup(self) -> Lockup | None:
        return self.transcript.lockup


def fvp_platform(target: boards.Target, elf: Path, cwd: Path, firmware_args: Sequence[str] = ()) -> Platform | None:
    """Arm's FVP for the target, if its board has one (npu.family.fvp) and its binary is on PATH."""
    binary = shutil.which(target.fvp) if target.fvp else None
    if binary is None:
        return None
    command = [binary]
    for param in target.board.fvp_params:
        command += ["-C", param.format(macs=target.macs, cwd=cwd)]
        if firmware_args and param.endswith("semihosting-cwd={cwd}"):
            # The same CPU's semihosting command line, beside its working directory.
            key = param[: -len("semihosting-cwd={cwd}")] + "semihosting-cmd_line"
            command += ["-C", f"{key}={' '.join([elf.name, *firmware_args])}"]
    command += ["-a", str(elf)]
    return Platform(f"Arm FVP {target.fvp} ({target.name})", command, is_fvp=True)


def virtual_platform(
    target: boards.Target,
    elf: Path,
    npu_model: bool = True,
    firmware_args: Sequence[str] = (),
    counting: qemu_plugin.Plan | None = None,
) -> Platform:
    """kiln's virtual platform: QEMU runs the very ELF that would be flashed, with the
    target's NPU modelled unless `npu_model` is False (then the NPU window reads as zero);
    with `counting`, kiln's instruction-count plugin attached as planned."""
    machine = target.board.qemu_machine
    if machine is None:
        instead = (
            f"install Arm's {target.fvp} and put it on PATH"
            if target.fvp
            else "no FVP models it either: run the ELF on the board itself"
        )
        raise ToolMissingError(
            f"{target.name} runs on {target.board.name}, which kiln's virtual platform does not "
            f"model (it models the boards whose map one of QEMU's machines has: "
            f"{', '.join(b for b in boards.board_names() if boards.load(b).qemu_machine)}); {instead}"
        )
    qemu = shutil.which(QEMU)
    if qemu is None:
        raise ToolMissingError(f"{QEMU} is not installed; run ./scripts/setup.sh")
    # The NPU model and its attachment: imported only when a platform is made.
    from kiln.simulator import attach
    from kiln.simulator.npu.config import CONFIGS

    attachment = None
    machine_args = ["-M", machine]
    if npu_model and target.name in CONFIGS:
        attachment = attach.NpuAttachment(target, hang=os.environ.get(HANG_VARIABLE) == "1", elf=elf)
        machine_args = attachment.qemu_args()
    elif attach.boots_elsewhere(target.board):
        # No NPU model for this target (yet): its NPU window is a bus error, but the CPU
        # still boots where the board's does.
        attachment = attach.BootAttachment(target.board)
        machine_args = attachment.qemu_args()
    command = [
        qemu,
        *machine_args,
        "-display", "none",
        "-monitor", "none",
        "-serial", "stdio",
        "-semihosting-config", _semihosting_config(elf, firmware_args),
        # One instruction per virtual nanosecond: runs are repeatable.
        "-icount", "shift=0,sleep=off",
        "-kernel", str(elf),
        *(counting.qemu_args() if counting else []),
    ]  # fmt: skip
    modelled = isinstance(attachment, attach.NpuAttachment)
    npu = f"{target.name} NPU model" if modelled else f"{target.name}, no NPU model"
    name = f"kiln's virtual platform (QEMU {machine}, {npu})"
    return Platform(name, command, is_fvp=False, attachment=attachment)


def _semihosting_config(elf: Path, firmware_args: Sequence[str]) -> str:
    """QEMU's semihosting option; with `firmware_args`, the firmware's command line
    (SYS_GET_CMDLINE) is the ELF's name and them (commas doubled, as QEMU's options need)."""
    config = "enable=on,target=native"
    for arg in [elf.name, *firmware_args] if firmware_args else []:
        config += ",arg=" + arg.replace(",", ",,")
    return config


# The executor runner's command-line buffer (kCommandLineCapacity in
# firmware/apps/executor_runner/runner.h; tests/fvp/test_run_fvp.py holds the two equal).
FIRMWARE_COMMAND_LINE_BYTES = 1024


# The executor runner's --npu-timeout-ms range (the driver's RunOptions::timeout_ms: a uint32_t; 0
# would not wait at all).
NPU_TIMEOUT_MS_RANGE = (1, 2**32 - 1)


def firmware_arguments(
    inputs: Sequence[Path] = (), output_dir: Path | None = None, npu_timeout_ms: int | None = None
) -> list[str]:
    """The firmware's semihosting command line for --input/--output-dir/--npu-timeout-ms: absolute
    paths (the firmware splits its command line at spaces, so none may contain one), then the
    NPU timeout (a UsageError outside NPU_TIMEOUT_MS_RANGE). Creates the output directory, which
    the firmware cannot."""
    if npu_timeout_ms is not None and not NPU_TIMEOUT_MS_RANGE[0] <= npu_timeout_ms <= NPU_TIMEOUT_MS_RANGE[1]:
        raise UsageError(
            f"--npu-timeout-ms takes a whole number of milliseconds from {NPU_TIMEOUT_MS_RANGE[0]} "
            f"to {NPU_TIMEOUT_MS_RANGE[1]}, not {npu_timeout_ms}"
        )
    args = []
    for path in inputs:
        path = Path(path).resolve()
        if not path.is_file():
            raise UsageError(f"no such input file: {path}")
        args.append(f"--input={path}")
    if output_dir is not None:
        output_dir = Path(output_dir).resolve()
        output_dir.mkdir(parents=True, exist_ok=True)
        args.append(f"--output-dir={output_dir}")
    if npu_timeout_ms is not None:
        args.append(f"--npu-timeout-ms={npu_timeout_ms}")
    for arg in args:
        if " " in arg:
            raise UsageError(f"{arg.split('=', 1)[1]!r} contains a space; the firmware's command line cannot carry it")
    length = len(" ".join(["firmware.elf", *args])) + 1  # the ELF's name (any short one) and a NUL
    if args and length > FIRMWARE_COMMAND_LINE_BYTES:
        raise UsageError(
            f"the firmware's command line would take about {length} bytes (--input and --output-dir "
            f"as absolute paths); the executor runner reads at most {FIRMWARE_COMMAND_LINE_BYTES}: "
            "use shorter paths or fewer input files"
        )
    return args


def check(elf: Path, target: boards.Target | str, board: str | None = None) -> tuple[Path, boards.Target]:
    """The ELF (resolved) and the target to run it on (a Target the caller resolved, or a name:
    on `board`, default the target's reference board), or a UsageError: an unknown target or
    board, or a board without the target's NPU, first (the message lists the known ones), then
    an ELF that is missing, a directory, or no ELF file (its first 4 bytes)."""
    chosen = boards.resolve(target, board)
    elf = Path(elf).resolve()
    if elf.is_dir():
        raise UsageError(f"{elf} is a directory, not an ELF file")
    if not elf.is_file():
        raise UsageError(f"no such ELF file: {elf}")
    with open(elf, "rb") as stream:
        if stream.read(len(ELF_MAGIC)) != ELF_MAGIC:
            raise UsageError(f"{elf} is not an ELF file (build one with `kiln build`)")
    _check_elf_structure(elf)
    return elf, chosen


def _check_elf_structure(elf: Path):
    """A UsageError unless `elf` is a 32-bit Arm ELF whose headers, segments, sections and
    symbols pyelftools reads: what QEMU loads and the fault and symbol readers take from it."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        with open(elf, "rb") as stream:
            f = ELFFile(stream)
            machine, bits = f["e_machine"], f.elfclass
            size = elf.stat().st_size
            for n, segment in enumerate(f.iter_segments()):
                if segment["p_offset"] + segment["p_filesz"] > size:
                    raise ValueError(f"segment {n} ends past the end of the file ({size} bytes)")
            for section in f.iter_sections():
                if isinstance(section, SymbolTableSection):
                    for symbol in section.iter_symbols():
                        symbol.name, symbol["st_value"], symbol["st_size"]
    except Exception as error:  # noqa: BLE001 - pyelftools' errors on a damaged file are of many kinds
        raise UsageError(
            f"{elf} is a damaged ELF file ({type(error).__name__}: {str(error)[:120]}); build it "
            "again with `kiln build`"
        ) from None
    if machine != "EM_ARM" or bits != 32:
        raise UsageError(
            f"{elf} is a {bits}-bit ELF file for {machine}, not firmware for an Arm Cortex-M "
            "(build one with `kiln build`)"
        )


def choose_platform(
    target: boards.Target,
    elf: Path,
    cwd: Path,
    which: str,
    npu_model: bool = True,
    firmware_args: Sequence[str] = (),
    counting: qemu_plugin.Plan | None = None,
) -> Platform:
    if counting is not None:
        if which == "fvp":
            raise UsageError("instructions are counted on kiln's virtual platform only (--platform=virtual)")
        return virtual_platform(target, elf, npu_model, firmware_args, counting)
    if which in ("auto", "fvp"):
        fvp = fvp_platform(target, elf, cwd, firmware_args)
        if fvp is not None:
            return fvp
        if which == "fvp" and target.fvp is None:
            raise UsageError(
                f"no Arm FVP models {target.board.name} (its board.toml names none); run the ELF on "
                "the board itself, or on kiln's virtual platform if it models the board"
            )
        if which == "fvp":
            raise ToolMissingError(f"{target.fvp} is not on PATH (Arm's FVP is a separate download)")
    return virtual_platform(target, elf, npu_model, firmware_args)


def run(
    elf: Path,
    target: boards.Target | str,
    timeout: float = DEFAULT_TIMEOUT_S,
    platform: str = "auto",
    echo=None,
    cwd: Path | None = None,
    npu_model: bool = True,
    firmware_args: Sequence[str] = (),
    count_instructions: qemu_plugin.Request | None = None,
    board: str | None = None,
    note=None,
) -> RunResult:
    """Runs `elf` for `target` (a Target, or its name on `board`, default the target's reference
    board) and returns what happened (`check` first: a UsageError for an unknown target or a
    file that is no ELF); `echo(line)` sees UART lines live, `note(text)` the platform chosen
    (default: standard error, "kiln: ..."). The firmware gets `timeout` seconds from the
    platform's start; then, on Ctrl-C (KeyboardInterrupt) or an error, the platform (a
    session of its own) is killed with every process it started and the NPU attachment closed
    before this returns or raises. `npu_model=False` runs the virtual platform without the NPU
    attachment (for measurements). `firmware_args`: the firmware's semihosting command line
    (see firmware_arguments). `count_instructions`: count instructions (always on the virtual
    platform) into RunResult.instructions."""
    elf, chosen_target = check(elf, target, board)
    cwd = Path(cwd or Path.cwd()).resolve()
    with tempfile.TemporaryDirectory(prefix="kiln-count-") as scratch:
        counting = None
        if count_instructions is not None:
            counting = qemu_plugin.plan(count_instructions, elf, Path(scratch) / "counts.txt")
        chosen = choose_platform(chosen_target, elf, cwd, platform, npu_model, firmware_args, counting)
        (note or _note)(f"running {elf.name} on {chosen.name}")
        try:
            result = _supervise(chosen, cwd, timeout, echo or (lambda line: None))
        finally:
            if chosen.attachment is not None:
                chosen.attachment.close()
        if counting is not None and counting.report.is_file():
            result.instructions = qemu_plugin.read_report(counting.report, counting.function)
        return result


def _supervise(platform: Platform, cwd: Path, timeout: float, echo) -> RunResult:
    process = subprocess.Popen(
        platform.command,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # so a timeout can stop the whole process group
    )
    lines: queue.Queue[str | None] = queue.Queue()
    npu_errors: list[str] = []
    serving = _serve_npu(platform.attachment, process, npu_errors) if platform.attachment else None

    def pump():
        for raw in process.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\r\n").replace("\r", "")
            if platform.attachment is None or line not in ATTACHMENT_NOISE:
                lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    protocol = ProtocolReader()
    uart: list[str] = []
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            try:
                line = lines.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if line is None:
                break
            uart.append(line)
            protocol.feed(line)
            echo(line)
            if protocol.exit_status is not None and platform.is_fvp:
                break  # an FVP may keep running after semihosting exit without a debugger
    finally:
        # Also on Ctrl-C: the platform runs in its own session and would outlive us.
        _stop(process, at_once=timed_out or bool(npu_errors) or sys.exc_info()[0] is not None)
        if serving is not None:
            serving.join(timeout=5)
    status = _status(process, protocol, timed_out)
    result = RunResult(status, uart, protocol.transcript, timed_out)
    if platform.attachment is not None:
        result.npu_error = npu_errors[0] if npu_errors else None
        result.npu = _npu_totals(platform.attachment)
        result.npu_summary = _npu_summary(platform.attachment, result.npu)
        result.host = platform.attachment.host_times()
    return result


def _serve_npu(attachment, process: subprocess.Popen, errors: list[str]) -> threading.Thread:
    """Serves the NPU model to QEMU in a thread; on failure records why and stops QEMU."""
    from kiln.simulator.attach import AttachmentError
    from kiln.simulator.gdb import GdbError
    from kiln.simulator.npu.device import NpuModelError

    def serve():
        try:
            attachment.serve(attachment.connect(lambda: process.poll() is None))
        except (AttachmentError, GdbError, NpuModelError, OSError) as error:
            if process.poll() is None:  # after QEMU ended, a broken connection is no news
                errors.append(str(error))
        except Exception as error:  # a bug in the attachment: say so instead of hanging the run
            errors.append(f"internal error in the NPU attachment: {type(error).__name__}: {error}")
        if errors and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


# The NPU model's AXI data-beat counters (kiln.simulator.npu.pmu), as the summary lists them.
_BEATS = (
    "axi0_rd_data_beat_received",
    "axi0_wr_data_beat_written",
    "axi1_rd_data_beat_received",
    "axi1_wr_data_beat_written",
)


def _npu_totals(attachment) -> NpuTotals | None:
    device = attachment.device
    if device is None or not attachment.accesses:
        return None
    first = next((run.fault for run in device.runs if run.fault is not None), None)
    return NpuTotals(
        streams=len(device.runs),
        cycles=sum(run.cycles for run in device.runs),
        faults=sum(1 for run in device.runs if run.fault is not None),
        beats=tuple(sum((run.counters or {}).get(name, 0) for run in device.runs) for name in _BEATS),
        first_fault=None if first is None else getattr(first, "message", first),
    )


def _npu_summary(attachment, totals: NpuTotals | None) -> str | None:
    if totals is None:
        return None
    per_access_ms = 1e3 * (attachment.access_time_s - attachment.npu_time_s) / attachment.accesses
    memory = attachment.memory
    beats = totals.beats
    return (
        f"NPU model: {totals.streams} stream(s), {totals.cycles} cycles, {totals.faults} fault(s), "
        f"AXI0 {beats[0]} read {beats[1]} write, AXI1 {beats[2]} read {beats[3]} write beats; "
        f"{attachment.accesses} register accesses ({per_access_ms:.2f} ms each), "
        f"{attachment.npu_time_s:.2f} s running streams, {memory.bytes_read // 1024} KiB read and "
        f"{memory.bytes_written // 1024} KiB written through gdb"
        + (f"; first fault: {totals.first_fault}" if totals.first_fault is not None else "")
    )


def _stop(process: subprocess.Popen, at_once: bool):
    """Waits briefly for a platform that is ending by itself, else kills its process group."""
    try:
        process.wait(timeout=0 if at_once else 2)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _status(process: subprocess.Popen, protocol: ProtocolReader, timed_out: bool) -> int:
    if protocol.fault is not None or protocol.lockup is not None:
        return FAULT_EXIT_STATUS
    if protocol.exit_status is not None:
        return protocol.exit_status & 0xFF
    if timed_out:
        return TIMEOUT_EXIT_STATUS
    if process.returncode < 0 or process.returncode == 0:
        # Killed by a signal, or ended cleanly without the firmware reporting an exit.
        return PLATFORM_ERROR_EXIT_STATUS
    return process.returncode


def _note(message: str):
    print(f"kiln: {message}", file=sys.stderr, flush=True)


def report(result: RunResult, elf: Path, timeout: float, counted: qemu_plugin.Request | None = None, note=None):
    """Says what the status means when it is not a plain exit, and the instruction counts when
    `counted` asked for them: each line to `note(text)` (default: standard error, "kiln: ...")."""
    note = note or _note
    if result.npu_summary:
        note(result.npu_summary)
    if counted is not None:
        for line in instruction_lines(result.instructions, elf):
            note(line)
    if result.npu_error is not None:
        note(f"the NPU model stopped the platform: {result.npu_error} (status {result.status})")
    elif result.fault is not None:
        for line in result.fault.explain(elf):
            note(line)
    elif result.lockup is not None:
        for line in result.lockup.explain():
            note(line)
    elif result.timed_out:
        note(f"timeout: the firmware did not exit within {timeout:g} s; stopped it (status {TIMEOUT_EXIT_STATUS})")
    elif result.status == PLATFORM_ERROR_EXIT_STATUS:
        tail = [line for line in result.uart if line.strip()][-3:]
        note("the platform stopped without the firmware reporting an exit status" + (": " if tail else ""))
        for line in tail:
            note(f"  {line}")


def instruction_lines(counts: qemu_plugin.Counts | None, elf: Path, top: int = 12) -> list[str]:
    """The instruction counts for a person: the whole run's, each call's of the function counted
    and, profiled, the `top` functions its calls' instructions went to."""
    if counts is None:
        return ["instructions: not counted to the end (QEMU did not exit normally)"]
    lines = [f"instructions executed in the whole run: {counts.total}"]
    if counts.function is None:
        return lines
    name = counts.function.readable
    lines.append(f"instructions per call of {name}: {' '.join(str(n) for n in counts.calls) or '(no call completed)'}")
    if counts.unfinished is not None:
        lines.append(f"  and a call still running at exit: {counts.unfinished} so far")
    if counts.by_address:
        rows = counts.by_function(elf)
        inside = sum(n for _, n in rows)
        lines.append(f"instructions inside the calls of {name}, by function ({len(counts.calls)} call(s)):")
        lines += [f"  {n:>10}  {100 * n / inside:5.1f} %  {function}" for function, n in rows[:top]]
        if len(rows) > top:
            lines.append(f"  {sum(n for _, n in rows[top:]):>10}  in {len(rows) - top} other function(s)")
    return lines
