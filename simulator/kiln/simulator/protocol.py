"""The firmware's UART protocol, Python's side: every line kiln reads from a run, read into a
Transcript, and what a fault report's registers mean.

The C++ side prints these lines; each format is named here once, beside the file that prints it:

    kiln executor runner: MODEL (MODE) on BOARD   firmware/apps/executor_runner/main.cpp: the banner
                                                  (MODEL: an image's models joined by "+")
    model NAME                                    main.cpp, in an image of several models: the
                                                  inferences after it are model NAME's
    inference K: NPU cycles N (S stream(s)), CPU cycles C
                                                  main.cpp, after each inference (C: "not counted
                                                  (no DWT on this platform)" without a cycle counter;
                                                  runner.cpp's print_run writes all from "NPU cycles")
    NPU PMU: total T active A idle I cycles, axi0_rd R axi0_wr W axi1_rd R axi1_wr W beats
                                                  runner.cpp (print_run), after an inference or a
                                                  token that ran NPU streams; an event without a
                                                  counter reads n/a
    kiln generate: MODEL (MODE) on BOARD          firmware/apps/generate/main.cpp: its banner
    prompt: L byte(s) 'TEXT', N token(s), prefill takes P, the cache T positions
                                                  generate.cpp (set_prompt): the prompt's L bytes,
                                                  the tokens asked for, prefill's token count and
                                                  the KV cache's length
    token K: ID 'C' at POSITION by METHOD, NPU cycles N (S stream(s)), CPU cycles C
                                                  generate.cpp (print_token) and print_run, per
                                                  generated token: its id, its byte (left out for
                                                  an id past 255), the position it takes (the
                                                  prompt's length + K), the method that made it
                                                  (prefill for token 0, decode after)
    generated: 'TEXT'                             generate.cpp (print_text): every generated token
                                                  (an id past 255 as <ID>)
TEXT and 'C' write printable ASCII as it is, any other byte (and ' and \\) as \\xNN (unescape reads them).
      output I: TYPE [D0, D1, ...], N bytes, argmax A
                                                  firmware/apps/executor_runner/runner.cpp
                                                  (summarise_outputs), per output after each inference
    STEP failed: ERROR                            runner.cpp (fail): STEP one of FAILED_STEPS
    NPU STATUS after the failure: 0xSTATUS        runner.cpp (fail_inference)
    runner: MESSAGE                               runner.cpp: a bad command line, an input or output
                                                  file it cannot use, the target to compile for
    bundle METHOD case C output I: max |diff| D at element E (atol A, rtol R): pass|FAIL
                                                  firmware/apps/executor_runner/bundle_check.cpp, per
                                                  output of each case of a baked bundle
    bundle: PASS|FAIL, ...                        bundle_check.cpp: the bundle's verdict
    EthosUBackend: delegate I: ERROR              firmware/delegates/ethosu/backend.cpp: a delegate's
                                                  one line per failure
    [kiln] FAULT exception=N, [kiln] REG=HEX ...  firmware/platform/fault.cpp: a CPU fault's report
    [kiln] exit N                                 firmware/platform/console.cpp (kiln::exit): the
                                                  status every app exits with, its last line
    qemu: fatal: Lockup: ..., R00=... XPSR=...    QEMU itself, not the firmware: the CPU locked up

ProtocolReader reads the lines one at a time as a platform prints them (kiln.simulator.run feeds
it live: the exit line ends an FVP run); read() reads lines already collected. Lines of no format
above (an app's own output) are left to the caller: RunResult.uart keeps every line. The CPU
instruction counts of kiln's QEMU plugin come in the plugin's report file
(kiln.simulator.qemu_plugin), not on the UART.

The fault report's registers are explained from the Armv8-M ARM, B3 "System Control Space":
CFSR, HFSR, SFSR, naming the function the faulting PC lies in when the ELF has symbols.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

# firmware/apps/executor_runner and firmware/apps/generate: the apps' lines
BANNER_LINE = re.compile(r"^kiln (executor runner|generate): (.*) \((\w+)\) on (\S+)$")
CPU_NOT_COUNTED = "not counted (no DWT on this platform)"
MODEL_LINE = re.compile(r"^model (\S+)$")
INFERENCE_LINE = re.compile(
    rf"^inference (\d+): NPU cycles (\d+) \((\d+) stream\(s\)\), CPU cycles (\d+|{re.escape(CPU_NOT_COUNTED)})$"
)
PMU_EVENTS = ("axi0_rd", "axi0_wr", "axi1_rd", "axi1_wr")  # the beat counters, in the line's order
NOT_COUNTED = "n/a"  # an event the NPU family has no PMU counter for
PMU_LINE = re.compile(
    r"^NPU PMU: total (\d+) active (\d+) idle (\d+) cycles, "
    + " ".join(rf"{event} (\d+|{NOT_COUNTED})" for event in PMU_EVENTS)
    + " beats$"
)
ESCAPED_BYTE = r"[ -&(-\[\]-~]|\\x[0-9a-f]{2}"  # printable ASCII but ' and backslash, or a backslash-x escape
ESCAPED = rf"(?:{ESCAPED_BYTE})*"
PROMPT_LINE = re.compile(
    rf"^prompt: (\d+) byte\(s\) '({ESCAPED})', (\d+) token\(s\), prefill takes (\d+), the cache (\d+) positions$"
)
TOKEN_LINE = re.compile(
    rf"^token (\d+): (-?\d+)(?: '({ESCAPED})')? at (\d+) by (\w+), NPU cycles (\d+) \((\d+) stream\(s\)\), "
    rf"CPU cycles (\d+|{re.escape(CPU_NOT_COUNTED)})$"
)
GENERATED_LINE = re.compile(rf"^generated: '((?:{ESCAPED_BYTE}|<-?\d+>)*)'$")
OUTPUT_LINE = re.compile(r"^  output (\d+): (\w+) \[([-\d, ]*)\], (\d+) bytes, argmax (\d+)$")
FAILED_STEPS = ("loading the .pte", "finding the NPU", "binding the program", "inference")
FAILED_LINE = re.compile(rf"^({'|'.join(map(re.escape, FAILED_STEPS))}) failed: (.*)$")
NPU_STATUS_LINE = re.compile(r"^NPU STATUS after the failure: 0x([0-9a-fA-F]{8})$")
RUNNER_LINE = re.compile(r"^runner: (.*)$")
BUNDLE_OUTPUT_LINE = re.compile(
    r"^bundle (\S+) case (\d+) output (\d+): max \|diff\| (\S+) at element (\d+) \(atol (\S+), rtol (\S+)\): "
    r"(pass|FAIL)$"
)
BUNDLE_RESULT_LINE = re.compile(r"^bundle: (PASS|FAIL), ")
# firmware/delegates/ethosu/backend.cpp
DELEGATE_LINE = re.compile(r"^EthosUBackend: delegate (\d+): (.*)$")
# firmware/platform: every app's
EXIT_LINE = re.compile(r"^\[kiln\] exit (-?\d+)\s*$")
FAULT_LINE = re.compile(r"^\[kiln\] FAULT exception=(\d+)\s*$")
REGISTER_LINE = re.compile(r"^\[kiln\] ((?:[A-Z0-9_]+=[0-9a-fA-F]{8}\s*)+)$")
# QEMU's own words when the CPU locks up (a fault while a fault cannot be taken),
# followed by its register dump ("R12=... R13=... R14=... R15=...", "XPSR=...").
QEMU_LOCKUP_LINE = re.compile(r"^qemu: fatal: (Lockup: .*)$")
QEMU_DUMP_LINE = re.compile(r"^(R\d\d=[0-9a-f]{8}\s*)+$|^XPSR=")
LOCKUP_DUMP_LINES = 5  # of QEMU's register dump, kept for the explanation
FAULT_EXIT_STATUS = 134  # firmware/platform/include/kiln/platform.h: kFaultExitStatus

EXCEPTIONS = {
    2: "NMI",
    3: "HardFault",
    4: "MemManage fault",
    5: "BusFault",
    6: "UsageFault",
    7: "SecureFault",
    11: "SVCall",
    12: "DebugMonitor",
    14: "PendSV",
    15: "SysTick",
}

CFSR_BITS = {
    0: "instruction fetch from a location the MPU does not allow (IACCVIOL)",
    1: "data access the MPU does not allow (DACCVIOL)",
    3: "MemManage fault while unstacking on exception return (MUNSTKERR)",
    4: "MemManage fault while stacking on exception entry (MSTKERR)",
    5: "MemManage fault during lazy floating-point state save (MLSPERR)",
    8: "bus error on instruction fetch (IBUSERR)",
    9: "precise data bus error (PRECISERR)",
    10: "imprecise data bus error (IMPRECISERR)",
    11: "bus error while unstacking on exception return (UNSTKERR)",
    12: "bus error while stacking on exception entry (STKERR)",
    13: "bus error during lazy floating-point state save (LSPERR)",
    16: "undefined instruction (UNDEFINSTR)",
    17: "invalid execution state, e.g. a branch to an ARM-state address (INVSTATE)",
    18: "invalid EXC_RETURN on exception return (INVPC)",
    19: "coprocessor (FPU/Helium) used while disabled (NOCP)",
    20: "stack overflow: the stack pointer crossed its limit (STKOF)",
    24: "unaligned access (UNALIGNED)",
    25: "integer division by zero (DIVBYZERO)",
}
MMARVALID, BFARVALID, STKOF = 7, 15, 20
HFSR_BITS = {
    1: "bus error reading the vector table (VECTTBL)",
    30: "a configurable fault escalated to HardFault (FORCED)",
    31: "debug event (DEBUGEVT)",
}
SFSR_BITS = {
    0: "invalid Secure state entry point (INVEP)",
    1: "invalid integrity signature on exception return (INVIS)",
    2: "invalid exception return (INVER)",
    3: "attribution unit violation (AUVIOL)",
    4: "invalid transition from Secure to Non-secure (INVTRAN)",
    5: "lazy state preservation error (LSPERR)",
    7: "lazy state error (LSERR)",
}
SFARVALID = 6


@dataclass
class FaultReport:
    exception: int
    registers: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        if self.exception >= 16:
            return f"unexpected interrupt IRQ {self.exception - 16}"
        return EXCEPTIONS.get(self.exception, f"exception {self.exception}")

    def causes(self) -> list[str]:
        r = self.registers
        cfsr, hfsr, sfsr = r.get("CFSR", 0), r.get("HFSR", 0), r.get("SFSR", 0)
        causes = [text for bit, text in CFSR_BITS.items() if cfsr >> bit & 1]
        causes += [text for bit, text in HFSR_BITS.items() if hfsr >> bit & 1]
        causes += [text for bit, text in SFSR_BITS.items() if sfsr >> bit & 1]
        if cfsr >> MMARVALID & 1:
            causes.append(f"faulting address {r.get('MMFAR', 0):#010x} (MMFAR)")
        if cfsr >> BFARVALID & 1:
            causes.append(f"faulting address {r.get('BFAR', 0):#010x} (BFAR)")
        if sfsr >> SFARVALID & 1:
            causes.append(f"faulting address {r.get('SFAR', 0):#010x} (SFAR)")
        return causes

    @property
    def frame_valid(self) -> bool:
        """After a stack overflow the frame was not stacked, so PC/LR are not real."""
        return not (self.registers.get("CFSR", 0) >> STKOF & 1)

    def explain(self, elf: Path | None = None) -> list[str]:
        r = self.registers
        lines = [f"firmware fault: {self.name}"]
        if self.frame_valid and "PC" in r:
            where = f" in {symbolize(elf, r['PC'])}" if elf else ""
            lines[0] += f" at PC {r['PC']:#010x}{where} (LR {r.get('LR', 0):#010x})"
        lines += [f"  {cause}" for cause in self.causes()] or ["  no fault status bit is set"]
        lines.append(
            "  " + " ".join(f"{k}={r[k]:#010x}" for k in ("CFSR", "HFSR", "MMFAR", "BFAR", "SFSR", "SFAR") if k in r)
        )
        return lines


@dataclass
class Lockup:
    """The CPU locked up (QEMU stopped): the firmware could not report it itself."""

    message: str
    dump: list[str] = field(default_factory=list)

    def explain(self) -> list[str]:
        lines = ["firmware fault: CPU lockup, a fault while handling a fault (the vector table, the",
                 "  stack or the fault handler itself is broken)",
                 f"  QEMU: {self.message}"]  # fmt: skip
        return lines + [f"  {line}" for line in self.dump]


@dataclass(frozen=True)
class Banner:
    """An app's first line: the program it bakes, its memory mode, the board, and which app
    ("executor runner" or "generate")."""

    model: str
    memory_mode: str
    board: str
    app: str = "executor runner"


@dataclass(frozen=True)
class Pmu:
    """One inference's NPU PMU line: cycles, and data beats per AXI port and direction (None
    where the family has no counter for the event: the U55/U65's axi1_wr)."""

    total: int
    active: int
    idle: int
    beats: dict[str, int | None]  # by PMU_EVENTS name


@dataclass(frozen=True)
class OutputSummary:
    """One output's summary line: element type, sizes, bytes and the index of its largest element."""

    index: int
    dtype: str
    sizes: tuple[int, ...]
    nbytes: int
    argmax: int


@dataclass
class Inference:
    index: int
    npu_cycles: int  # the NPU's cycles over its streams
    streams: int
    cpu_cycles: int | None  # None where the platform has no cycle counter
    pmu: Pmu | None = None  # None when no NPU stream ran
    outputs: list[OutputSummary] = field(default_factory=list)
    model: str | None = None  # in an image of several models, whose inference (the last model line)


@dataclass(frozen=True)
class BundleCheck:
    """One output of one case of a baked bundle, as the runner checked it against the bundle."""

    method: str
    case: int
    output: int
    max_diff: float  # nan when an element is NaN where the expected one is not
    at: int  # the element of the largest difference
    within: bool


@dataclass
class Token:
    """One generated token's line (and its PMU line): token `index` of the run, its id, the
    position it takes, the method that made it, and that method's run's cycles."""

    index: int
    token: int
    position: int
    method: str  # "prefill" or "decode"
    npu_cycles: int
    streams: int
    cpu_cycles: int | None  # None where the platform has no cycle counter
    pmu: Pmu | None = None  # None when no NPU stream ran


@dataclass
class Generation:
    """What the generation app said: its prompt line, a Token per generated token, the text."""

    prompt: bytes
    tokens_asked: int
    prefill_length: int  # P: the tokens prefill takes
    cache_length: int  # T: the positions the KV cache holds
    tokens: list[Token] = field(default_factory=list)
    text: bytes | None = None  # the generated line's bytes (an id past 255 as b"<ID>")


@dataclass
class Transcript:
    """What a run's UART said, read (ProtocolReader)."""

    banner: Banner | None = None
    inferences: list[Inference] = field(default_factory=list)
    generation: Generation | None = None  # the generation app's lines
    failures: list[tuple[str, str]] = field(default_factory=list)  # (step of FAILED_STEPS, error)
    delegate_errors: list[tuple[int, str]] = field(default_factory=list)  # (delegate index, error)
    runner_messages: list[str] = field(default_factory=list)  # "runner: ..." lines, the prefix off
    bundle_checks: list[BundleCheck] = field(default_factory=list)  # a baked bundle's, per case and output
    bundle_passed: bool | None = None  # its verdict; None when the runner printed none
    npu_status_after_failure: int | None = None
    exit_status: int | None = None  # "[kiln] exit N"
    fault: FaultReport | None = None
    lockup: Lockup | None = None


def _pmu(m: re.Match) -> Pmu:
    counts = [None if value == NOT_COUNTED else int(value) for value in m.groups()[3:]]
    return Pmu(int(m.group(1)), int(m.group(2)), int(m.group(3)), dict(zip(PMU_EVENTS, counts)))


def unescape(text: str) -> bytes:
    """The bytes the apps' quoted text stands for: \\xNN escapes a byte, any other character is itself."""
    return re.sub(rb"\\x([0-9a-f]{2})", lambda m: bytes([int(m.group(1), 16)]), text.encode("ascii"))


def _cpu(value: str) -> int | None:
    return None if value == CPU_NOT_COUNTED else int(value)


def _token(m: re.Match) -> Token:
    index, token, _, position, method, npu, streams, cpu = m.groups()
    return Token(int(index), int(token), int(position), method, int(npu), int(streams), _cpu(cpu))


def _output(m: re.Match) -> OutputSummary:
    sizes = tuple(int(d) for d in m.group(3).split(",") if d.strip())
    return OutputSummary(int(m.group(1)), m.group(2), sizes, int(m.group(4)), int(m.group(5)))


class ProtocolReader:
    """Feeds on UART lines, one at a time, into `transcript`; exit_status, fault and lockup are
    the transcript's, for the platform's supervisor."""

    def __init__(self):
        self.transcript = Transcript()
        self._last_run: Inference | Token | None = None  # what a PMU line belongs to
        self._model: str | None = None  # the last model line's

    @property
    def exit_status(self) -> int | None:
        return self.transcript.exit_status

    @property
    def fault(self) -> FaultReport | None:
        return self.transcript.fault

    @property
    def lockup(self) -> Lockup | None:
        return self.transcript.lockup

    def feed(self, line: str):
        t = self.transcript
        if m := INFERENCE_LINE.match(line):
            index, npu, streams, cpu = m.groups()
            t.inferences.append(Inference(int(index), int(npu), int(streams), _cpu(cpu), model=self._model))
            self._last_run = t.inferences[-1]
        elif m := MODEL_LINE.match(line):
            self._model = m.group(1)
        elif (m := TOKEN_LINE.match(line)) and t.generation is not None:
            t.generation.tokens.append(_token(m))
            self._last_run = t.generation.tokens[-1]
        elif (m := PMU_LINE.match(line)) and self._last_run is not None:
            self._last_run.pmu = _pmu(m)
        elif (m := OUTPUT_LINE.match(line)) and t.inferences:
            t.inferences[-1].outputs.append(_output(m))
        elif m := BANNER_LINE.match(line):
            t.banner = Banner(*m.group(2, 3, 4), m.group(1))
        elif m := PROMPT_LINE.match(line):
            t.generation = Generation(unescape(m.group(2)), *map(int, m.group(3, 4, 5)))
        elif (m := GENERATED_LINE.match(line)) and t.generation is not None:
            t.generation.text = unescape(m.group(1))
        elif m := FAILED_LINE.match(line):
            t.failures.append((m.group(1), m.group(2)))
        elif m := DELEGATE_LINE.match(line):
            t.delegate_errors.append((int(m.group(1)), m.group(2)))
        elif m := BUNDLE_OUTPUT_LINE.match(line):
            method, case, output, diff, at = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4), int(m.group(5))
            t.bundle_checks.append(BundleCheck(method, case, output, float(diff), at, m.group(8) == "pass"))
        elif m := BUNDLE_RESULT_LINE.match(line):
            t.bundle_passed = m.group(1) == "PASS"
        elif m := RUNNER_LINE.match(line):
            t.runner_messages.append(m.group(1))
        elif m := NPU_STATUS_LINE.match(line):
            t.npu_status_after_failure = int(m.group(1), 16)
        elif m := QEMU_LOCKUP_LINE.match(line):
            t.lockup = Lockup(m.group(1))
        elif t.lockup is not None and QEMU_DUMP_LINE.match(line) and len(t.lockup.dump) < LOCKUP_DUMP_LINES:
            t.lockup.dump.append(line.strip())
        elif m := EXIT_LINE.match(line):
            t.exit_status = int(m.group(1))
        elif m := FAULT_LINE.match(line):
            t.fault = FaultReport(int(m.group(1)))
        elif t.fault is not None and (m := REGISTER_LINE.match(line)):
            for pair in m.group(1).split():
                key, value = pair.split("=")
                t.fault.registers[key] = int(value, 16)


def read(lines: Iterable[str]) -> Transcript:
    """The transcript of UART lines already collected (without line endings)."""
    reader = ProtocolReader()
    for line in lines:
        reader.feed(line)
    return reader.transcript


def symbolize(elf: Path, address: int) -> str:
    """`function+0xoffset` for a code address, or `?` without a matching symbol."""
    address &= ~1  # Thumb bit
    try:
        with open(elf, "rb") as stream:
            for section in ELFFile(stream).iter_sections():
                if not isinstance(section, SymbolTableSection):
                    continue
                for symbol in section.iter_symbols():
                    start = symbol["st_value"] & ~1
                    if symbol["st_info"]["type"] == "STT_FUNC" and start <= address < start + symbol["st_size"]:
                        return f"{_demangle(symbol.name)}+{address - start:#x}"
    except (OSError, ValueError):
        pass
    return "?"


def _demangle(name: str) -> str:
    """Plain C++ names (_Z<len><name>...) shown as the bare function name."""
    m = re.match(r"_Z(\d+)(\w+)", name)
    if m and len(m.group(2)) >= int(m.group(1)):
        return m.group(2)[: int(m.group(1))]
    return name
