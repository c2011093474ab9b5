"""Counting the instructions a firmware executes on kiln's virtual platform.

QEMU has no cycle counter for mps3-an547 (no DWT), so kiln counts guest
instructions with its own TCG plugin (insn_count.c, compiled on demand with the
host C compiler into build/qemu_plugin/): the whole run, and per call of one
function of the ELF. A call's window opens at the function's first instruction
and closes at the instruction after each `bl` to it (its return sites), so it
holds every instruction the CPU executes in the call, the interrupt handlers that
run meanwhile included; while the CPU sleeps (WFI/WFE) nothing is counted. On the
virtual platform the NPU runs a stream while QEMU is stopped, so the CPU never
sleeps through one; the attachment does execute one instruction per NPU stream to
pend the completion interrupt (kiln.simulator.attach), inside the window.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from kiln import paths
from kiln.errors import PluginError, ToolMissingError, UsageError
from kiln.simulator import thumb

SOURCE_DIR = Path(__file__).resolve().parent
SOURCES = ("insn_count.c", "qemu_plugin_api.h")
CC_VARIABLE = "CC"  # the host C compiler; default `cc`
CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-fvisibility=hidden"]
FORMAT_LINE = "kiln-insn-count 1"
MAX_STOPS = 8  # return sites per function the plugin takes (insn_count.c: kMaxStops)


def build(cache_dir: Path | None = None) -> Path:
    """The plugin's shared object, compiled unless the cache already holds one for these
    sources, compiler and flags; returns its path."""
    cc = os.environ.get(CC_VARIABLE) or "cc"
    compiler = shutil.which(cc)
    if compiler is None:
        raise ToolMissingError(
            f"no host C compiler ({cc!r}) to build kiln's QEMU instruction-count plugin; "
            f"run ./scripts/setup.sh (it installs gcc) or set {CC_VARIABLE}"
        )
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update((SOURCE_DIR / name).read_bytes())
    digest.update(" ".join([compiler, *CFLAGS]).encode())
    cache_dir = Path(cache_dir or paths.build_root() / "qemu_plugin")
    plugin = cache_dir / f"insn_count-{digest.hexdigest()[:16]}.so"
    if plugin.is_file():
        return plugin
    cache_dir.mkdir(parents=True, exist_ok=True)
    # Compile beside the target and rename into place: concurrent runs never see half a file.
    fd, partial = tempfile.mkstemp(prefix=".insn_count-", suffix=".so", dir=cache_dir)
    os.close(fd)
    try:
        done = subprocess.run(
            [compiler, *CFLAGS, "-o", partial, str(SOURCE_DIR / "insn_count.c")], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise PluginError(
                f"building the QEMU instruction-count plugin with {compiler} failed:\n"
                f"{(done.stderr + done.stdout).strip()}"
            )
        os.replace(partial, plugin)
    finally:
        Path(partial).unlink(missing_ok=True)
    return plugin


# ------------------------------------------------------------------ the ELF's side


@dataclass
class Function:
    name: str  # as written in the ELF's symbol table
    readable: str  # demangled where c++filt is available
    start: int  # address of the first instruction (Thumb bit clear)
    size: int


def functions(elf: Path) -> list[Function]:
    """Every function symbol of the ELF with a size, by address."""
    with open(elf, "rb") as stream:
        found = [
            (s.name, s["st_value"] & ~1, s["st_size"])
            for s in _symbols(ELFFile(stream))
            if s["st_info"]["type"] == "STT_FUNC" and s["st_size"] > 0
        ]
    readable = _demangle([name for name, _, _ in found])
    return sorted(
        (Function(name, readable.get(name, name), start, size) for name, start, size in found), key=lambda f: f.start
    )


def find_function(elf: Path, name: str) -> Function:
    """The function called `name` (its symbol, or its demangled name, with or without
    the parameter list); a usage error naming near misses if there is none or more than one."""
    candidates = functions(elf)
    matches = [f for f in candidates if name in (f.name, f.readable, f.readable.split("(")[0])]
    unique = {f.start: f for f in matches}
    if len(unique) == 1:
        return matches[0]
    if not unique:
        near = sorted({f.readable for f in candidates if name.split("(")[0].split("::")[-1] in f.readable})[:5]
        hint = f"; similar: {', '.join(near)}" if near else ""
        raise UsageError(f"{elf.name} has no function {name!r}{hint}")
    raise UsageError(
        f"{name!r} names {len(unique)} functions in {elf.name}: {', '.join(sorted({f.readable for f in matches}))}"
    )


def return_sites(elf: Path, target: Function) -> list[int]:
    """Addresses of the instructions after every `bl` to `target` in the ELF's code:
    where its calls return. A tail call (`b.w` to it) is an error: its return site is
    the caller's caller's, which the ELF does not say."""
    sites: list[int] = []
    with open(elf, "rb") as stream:
        elf_file = ELFFile(stream)
        data_ranges = _data_ranges(elf_file)
        for section in elf_file.iter_sections():
            if not section["sh_flags"] & 0x4:  # SHF_EXECINSTR
                continue
            code, base = section.data(), section["sh_addr"]
            for address, hw1, hw2 in _instructions(code, base, data_ranges.get(section.name, [])):
                if hw2 is None:
                    kind, destination = "b", _short_branch(address, hw1)
                else:
                    kind, destination = _branch(address, hw1, hw2)
                if destination != target.start:
                    continue
                if kind == "bl":
                    sites.append(address + 4)
                elif kind == "b":
                    raise UsageError(
                        f"{target.readable} is reached by a tail call at {address:#x}; "
                        f"its calls cannot be delimited (indirect calls are not seen either)"
                    )
    if not sites:
        raise UsageError(f"nothing in {elf.name} calls {target.readable} with `bl`; its calls cannot be delimited")
    return sorted(sites)


def _symbols(elf_file: ELFFile):
    for section in elf_file.iter_sections():
        if isinstance(section, SymbolTableSection):
            yield from section.iter_symbols()


def _data_ranges(elf_file: ELFFile) -> dict[str, list[tuple[int, int]]]:
    """Per executable section, the [start, end) address ranges its ARM mapping symbols
    mark as data ($d up to the next $t, or the section's end)."""
    sections = list(elf_file.iter_sections())
    marks: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for symbol in _symbols(elf_file):
        kind = symbol.name[:2]
        if kind in ("$t", "$d", "$a") and (len(symbol.name) == 2 or symbol.name[2] == "."):
            index = symbol["st_shndx"]
            if isinstance(index, int):
                marks[index].append((symbol["st_value"], kind))
    ranges: dict[str, list[tuple[int, int]]] = {}
    for index, points in marks.items():
        section = sections[index]
        end_of_section = section["sh_addr"] + section["sh_size"]
        points.sort()
        spans = []
        for i, (address, kind) in enumerate(points):
            if kind == "$d":
                following = next((a for a, k in points[i + 1 :] if k != "$d"), end_of_section)
                spans.append((address, following))
        ranges[section.name] = spans
    return ranges


def _instructions(code: bytes, base: int, data: list[tuple[int, int]]):
    """(address, first halfword, second halfword or None) of each Thumb instruction,
    skipping the data ranges."""
    data = sorted(data)
    offset, d = 0, 0
    while offset + 2 <= len(code):
        address = base + offset
        while d < len(data) and data[d][1] <= address:
            d += 1
        if d < len(data) and data[d][0] <= address:
            offset = data[d][1] - base
            continue
        hw1 = int.from_bytes(code[offset : offset + 2], "little")
        if thumb.is_32bit(hw1):
            if offset + 4 > len(code):
                return
            yield address, hw1, int.from_bytes(code[offset + 2 : offset + 4], "little")
            offset += 4
        else:
            yield address, hw1, None
            offset += 2


def _short_branch(address: int, hw1: int) -> int | None:
    """The destination of a 16-bit B (T1 conditional, imm8; T2, imm11), else None."""
    if hw1 & 0xF800 == 0xE000:  # T2
        offset, bits = (hw1 & 0x7FF) << 1, 12
    elif hw1 & 0xF000 == 0xD000 and (hw1 >> 9) & 7 != 7:  # T1; cond 111x is UDF/SVC
        offset, bits = (hw1 & 0xFF) << 1, 9
    else:
        return None
    if offset >> (bits - 1):
        offset -= 1 << bits
    return (address + 4 + offset) & 0xFFFF_FFFF


def _branch(address: int, hw1: int, hw2: int) -> tuple[str | None, int | None]:
    """("bl" or "b", destination) for BL (T1), unconditional B.W (T4) and conditional B.W
    (T3), else (None, None). T1/T4 encode S:I1:I2:imm10:imm11:'0' with I1 = NOT(J1 XOR S),
    I2 = NOT(J2 XOR S); T3 S:J2:J1:imm6:imm11:'0'; relative to the instruction's address + 4
    (Armv8-M ARM, C2.4)."""
    if hw1 & 0xF800 != 0xF000:
        return None, None
    if hw2 & 0xD000 == 0xD000:
        kind = "bl"
    elif hw2 & 0xD000 == 0x9000:
        kind = "b"
    elif hw2 & 0xD000 == 0x8000 and (hw1 >> 7) & 7 != 7:  # T3; cond 111x is another encoding
        s, j1, j2 = (hw1 >> 10) & 1, (hw2 >> 13) & 1, (hw2 >> 11) & 1
        offset = (s << 20) | (j2 << 19) | (j1 << 18) | ((hw1 & 0x3F) << 12) | ((hw2 & 0x7FF) << 1)
        if s:
            offset -= 1 << 21
        return "b", (address + 4 + offset) & 0xFFFF_FFFF
    else:
        return None, None
    s, j1, j2 = (hw1 >> 10) & 1, (hw2 >> 13) & 1, (hw2 >> 11) & 1
    i1, i2 = 1 - (j1 ^ s), 1 - (j2 ^ s)
    offset = (s << 24) | (i1 << 23) | (i2 << 22) | ((hw1 & 0x3FF) << 12) | ((hw2 & 0x7FF) << 1)
    if s:
        offset -= 1 << 25
    return kind, (address + 4 + offset) & 0xFFFF_FFFF


def _demangle(names: list[str]) -> dict[str, str]:
    """C++ names demangled by c++filt when one is installed; others map to themselves."""
    mangled = [n for n in names if n.startswith("_Z")]
    tool = shutil.which("arm-none-eabi-c++filt") or shutil.which("c++filt")
    if not mangled or tool is None:
        return {}
    done = subprocess.run([tool], input="\n".join(mangled), capture_output=True, text=True)
    lines = done.stdout.splitlines()
    return dict(zip(mangled, lines)) if done.returncode == 0 and len(lines) == len(mangled) else {}


# ------------------------------------------------------------------ a run's side


@dataclass
class Request:
    """What to count in one run: the whole run, and per call of `function` if given;
    `profile`: also per instruction address inside the calls."""

    function: str | None = None
    profile: bool = False


@dataclass
class Plan:
    """A Request resolved against one ELF: the plugin's arguments and where it reports."""

    request: Request
    plugin: Path
    report: Path
    function: Function | None = None
    stops: list[int] = field(default_factory=list)

    def qemu_args(self) -> list[str]:
        args = [f"{self.plugin}", f"out={self.report}"]
        if self.function is not None:
            args += [f"start={self.function.start:#x}", *(f"stop={s:#x}" for s in self.stops)]
        if self.request.profile:
            args.append("profile=on")
        for arg in args:
            if "," in arg:
                raise UsageError(f"{arg!r} contains a comma, which QEMU's -plugin option cannot carry")
        return ["-plugin", ",".join(args)]


@dataclass
class Counts:
    total: int  # instructions in the whole run
    calls: list[int]  # per completed call of the function, in order
    unfinished: int | None  # instructions of a call still running when the run ended
    by_address: dict[int, int]  # profile: executions per instruction address inside calls
    function: Function | None = None

    def by_function(self, elf: Path) -> list[tuple[str, int]]:
        """The profile summed per function (largest first); addresses outside every
        function symbol are summed under their address."""
        table = functions(elf)
        starts = [f.start for f in table]
        totals: dict[str, int] = defaultdict(int)
        for address, count in self.by_address.items():
            i = bisect.bisect_right(starts, address) - 1
            if i >= 0 and address < table[i].start + table[i].size:
                totals[table[i].readable] += count
            else:
                totals[f"?{address:#x}"] += count
        return sorted(totals.items(), key=lambda item: (-item[1], item[0]))


def plan(request: Request, elf: Path, report: Path, cache_dir: Path | None = None) -> Plan:
    """Builds the plugin if needed and resolves the request's function in `elf`."""
    resolved = Plan(request, build(cache_dir), Path(report))
    if request.function is not None:
        resolved.function = find_function(elf, request.function)
        resolved.stops = return_sites(elf, resolved.function)
        if len(resolved.stops) > MAX_STOPS:
            raise UsageError(
                f"{resolved.function.readable} is called from {len(resolved.stops)} places; "
                f"the plugin delimits calls from at most {MAX_STOPS}"
            )
    return resolved


def read_report(path: Path, function: Function | None = None) -> Counts:
    """Parses the plugin's report (format in insn_count.c)."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as error:
        raise PluginError(
            f"the instruction-count plugin wrote no report ({error.strerror}: {path}); "
            f"did QEMU end before exiting normally?"
        ) from None
    if not lines or lines[0] != FORMAT_LINE:
        raise PluginError(f"{path} is not an instruction-count report")
    total, calls, unfinished, by_address = None, [], None, defaultdict(int)
    try:
        for line in lines[1:]:
            key, *values = line.split()
            if key == "total":
                total = int(values[0])
            elif key == "window":
                calls.append(int(values[0]))
            elif key == "open":
                unfinished = int(values[0])
            elif key == "pc":
                by_address[int(values[0], 16)] += int(values[1])
            else:
                raise ValueError(line)
    except (ValueError, IndexError):
        raise PluginError(f"{path}: malformed line {line!r}") from None
    if total is None:
        raise PluginError(f"{path} has no total")
    return Counts(total, calls, unfinished, dict(by_address), function)
