"""Reading the firmware's fault report and saying what it means.

The firmware (firmware/platform/fault.cpp) prints the Armv8-M fault status
registers and the stacked frame in a fixed format; this module parses those
lines and explains the bits (Armv8-M ARM, B3 "System Control Space": CFSR,
HFSR, SFSR), naming the function the faulting PC lies in when the ELF has
symbols.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

# Lines of the firmware's protocol on the UART.
EXIT_LINE = re.compile(r"^\[kiln\] exit (-?\d+)\s*$")
FAULT_LINE = re.compile(r"^\[kiln\] FAULT exception=(\d+)\s*$")
REGISTER_LINE = re.compile(r"^\[kiln\] ((?:[A-Z0-9_]+=[0-9a-fA-F]{8}\s*)+)$")
# QEMU's own words when the CPU locks up (a fault while a fault cannot be taken),
# followed by its register dump ("R12=... R13=... R14=... R15=...", "XPSR=...").
QEMU_LOCKUP_LINE = re.compile(r"^qemu: fatal: (Lockup: .*)$")
QEMU_DUMP_LINE = re.compile(r"^(R\d\d=[0-9a-f]{8}\s*)+$|^XPSR=")
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


class ProtocolReader:
    """Feeds on UART lines; collects the exit status and any fault report."""

    def __init__(self):
        self.exit_status: int | None = None
        self.fault: FaultReport | None = None
        self.lockup: Lockup | None = None

    def feed(self, line: str):
        if m := QEMU_LOCKUP_LINE.match(line):
            self.lockup = Lockup(m.group(1))
        elif self.lockup is not None and QEMU_DUMP_LINE.match(line) and len(self.lockup.dump) < 5:
            self.lockup.dump.append(line.strip())
        elif m := EXIT_LINE.match(line):
            self.exit_status = int(m.group(1))
        elif m := FAULT_LINE.match(line):
            self.fault = FaultReport(int(m.group(1)))
        elif self.fault is not None and (m := REGISTER_LINE.match(line)):
            for pair in m.group(1).split():
                key, value = pair.split("=")
                self.fault.registers[key] = int(value, 16)


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
