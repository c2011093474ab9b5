"""Board descriptions: each board described once, as data, in boards/<name>/board.toml.

This module reads and validates them (a malformed description is rejected with
a message naming the file and the field), maps NPU targets such as
``ethos-u55-128`` to their reference board (or, asked, to another board with that
NPU configuration), and generates what a firmware build needs from a description:
a GNU ld linker script, a C header and a CMake fragment. Nothing else in kiln
repeats a board's addresses.

A description may start from another (``extends = "corstone-300"``: an FPGA image of
that subsystem, say) and state only what differs; see ``_inherit``. A fact that no
public source confirmed is listed in the description's ``[unverified]`` table, with
why, and ``kiln targets`` prints it.

Only the standard library is used, so CMake can run ``python -m kiln.boards``
early in a configure.
"""

from __future__ import annotations

import argparse
import re
import string
import sys
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from kiln import families, paths
from kiln.errors import BoardError, UsageError, run_command

BOARDS_DIR = paths.BOARDS_DIR
SCHEMA_VERSION = 1

# What a memory region may be used for. Exactly one region holds each of
# code, data and stack; the others may appear on any number of regions. The code
# region's base is where the CPU boots: the linker script puts the vector table there
# (the SSE's INITSVTOR reset value), and the virtual platform boots QEMU there.
PURPOSES = ("code", "data", "stack", "npu", "model", "bulk")
SINGLE_PURPOSES = ("code", "data", "stack")

VELA_MEMORY_MODES = (
    "Sram_Only",
    "Shared_Sram",
    "Dedicated_Sram",
    "Dedicated_Sram_256KB",
    "Dedicated_Sram_384KB",
    "Dedicated_Sram_512KB",
)
# The UARTs kiln's platform layer drives: board.toml's uart.kind -> its driver under
# firmware/platform/ (the build compiles exactly that one). Both need clock_hz / baud >= 16.
UART_DRIVERS = {
    "cmsdk-apb-uart": "uart_cmsdk.cpp",  # Arm CMSDK APB UART (Corstone, MPS3/MPS4)
    "dw-apb-uart": "uart_dw_apb.cpp",  # Synopsys DesignWare APB UART, 16550-compatible (Alif Ensemble)
}
UART_KINDS = tuple(UART_DRIVERS)
# The compilers a board's firmware can be built with: each a CMake toolchain file
# cmake/<name>.cmake. arm-none-eabi-gcc is Debian's GCC 12 (up to Cortex-M55);
# clang-arm-none-eabi is Debian's clang 19 compiling (Cortex-M85 too) against the same
# newlib and libstdc++, linked by arm-none-eabi-gcc (see cpu.link_flags).
TOOLCHAINS = ("arm-none-eabi-gcc", "clang-arm-none-eabi")
DEFAULT_TOOLCHAIN = "arm-none-eabi-gcc"
FVP_PLACEHOLDERS = ("macs", "cwd")

# Keys of a description that belong to it alone: a description that extends another
# inherits everything else (see _inherit).
OWN_KEYS = ("name", "summary", "extends", "drop", "reference")
# The sections an [unverified] entry may name ("uart.base", "npu.irq", "memory.mram", ...).
UNVERIFIED_SECTIONS = ("cpu", "memory", "stack_size", "uart", "npu", "fvp", "virtual_platform", "flash", "cmsis")
# How images get onto a board ([flash] method; kiln.firmware.flash writes each):
# "mps-drive", the MPS3/MPS4 USB drive's SOFTWARE/ folder and images.txt; "alif-setools",
# Alif's Security Toolkit writing MRAM from a JSON configuration.
FLASH_METHODS = ("mps-drive", "alif-setools")
STACK_ALIGNMENT = 8  # the AAPCS's: the main stack's size and top are multiples of it
_IDENT = re.compile(r"[a-z][a-z0-9_]*\Z")
_FAMILY = re.compile(r"ethos-u(55|65|85)\Z")
_ADDRESS_LIMIT = 1 << 32


@dataclass(frozen=True)
class Cpu:
    core: str
    compile_flags: tuple[str, ...]
    clock_hz: int
    dcache: bool
    toolchain: str = DEFAULT_TOOLCHAIN  # one of TOOLCHAINS: the compiler of the board's firmware
    # The flags the firmware is linked with: they choose the arm-none-eabi-gcc multilib
    # (newlib, libstdc++, libgcc). Default: compile_flags.
    link_flags: tuple[str, ...] = ()

    @property
    def toolchain_file(self) -> Path:
        return paths.CMAKE_DIR / f"{self.toolchain}.cmake"


@dataclass(frozen=True)
class MemoryRegion:
    name: str
    base: int  # bytes, CPU address
    size: int  # bytes
    purposes: tuple[str, ...]

    @property
    def end(self) -> int:
        return self.base + self.size


@dataclass(frozen=True)
class Uart:
    kind: str
    base: int
    clock_hz: int
    baud: int


@dataclass(frozen=True)
class NpuFamily:
    name: str  # "ethos-u55"
    macs: tuple[int, ...]
    system_config: str  # Vela's default --system-config for this family
    memory_mode: str  # Vela's default --memory-mode
    memory_modes: tuple[str, ...]  # the modes this board supports for the family
    fvp: str | None  # Arm FVP binary name; None: no FVP models this board


@dataclass(frozen=True)
class Npu:
    base: int  # the register window's address as the firmware uses it (secure)
    irq: int
    families: tuple[NpuFamily, ...]
    ns_alias: int | None = None  # the same window's non-secure alias, if the board has one

    @property
    def windows(self) -> tuple[int, ...]:
        """Every address the register window answers at."""
        return (self.base,) if self.ns_alias is None else (self.base, self.ns_alias)


@dataclass(frozen=True)
class Flash:
    """[flash]: how a firmware image gets onto the board (kiln flash)."""

    method: str  # one of FLASH_METHODS
    # mps-drive: the images.txt the board's MCC reads, relative to the drive's root; each
    # region an image loads into -> the address images.txt names for it (the MCC's view);
    # how IMAGEnUPDATE reads; IMAGEnPORT (None: no such line); hex digits of an address
    # (8: 0x0C000000; 10: grouped in fours from the right, 0x00_1100_0000, as MPS4's file).
    images_txt: str | None = None
    load_address: tuple[tuple[str, int], ...] = ()
    update: str | None = None
    port: int | None = None
    address_digits: int = 8
    cpu_id: str | None = None  # alif-setools: the core the Security Toolkit boots the image on


@dataclass(frozen=True)
class Cmsis:
    """[cmsis]: the board's device in CMSIS packs: what a csolution targets and the
    device pyOCD flashes (its target name is the device's part number in lower case)."""

    device: str  # Vendor::Device[:Processor], as csolution's target-types' device
    pack: str  # Vendor::Pack[@version], the pack that describes the device

    @property
    def pyocd_target(self) -> str:
        return self.device.split("::")[-1].split(":")[0].lower()


@dataclass(frozen=True)
class Board:
    name: str
    summary: str
    path: Path
    cpu: Cpu
    memory: tuple[MemoryRegion, ...]
    stack_size: int  # bytes of the main stack, reserved in the "stack" region (a build may override it)
    uart: Uart
    npu: Npu
    fvp_params: tuple[str, ...]  # -C parameters with {macs} and {cwd} placeholders; () without an FVP
    qemu_machine: str | None  # None: no virtual platform for this board yet
    # The board its NPU configurations are the targets of: `--target T` alone means T on it.
    reference: bool = False
    # Facts no public source confirmed: (field, why), e.g. ("uart.base", "...").
    unverified: tuple[tuple[str, str], ...] = ()
    extends: str | None = None  # the description this one starts from
    flash: Flash | None = None  # None: kiln flash has no way to this board
    cmsis: Cmsis | None = None  # None: no CMSIS device known for it

    def region_for(self, purpose: str) -> MemoryRegion:
        return next(r for r in self.memory if purpose in r.purposes)

    def configurations(self) -> list[str]:
        """The target names of every NPU configuration this board has ("ethos-u55-128", ...)."""
        return [f"{f.name}-{m}" for f in self.npu.families for m in f.macs]


@dataclass(frozen=True)
class Target:
    """One NPU configuration on one board, e.g. ethos-u55-128 on corstone-300 (its reference
    board) or on mps3-an552."""

    name: str
    board: Board
    family: NpuFamily
    macs: int

    @property
    def system_config(self) -> str:
        return self.family.system_config

    @property
    def memory_mode(self) -> str:
        return self.family.memory_mode

    @property
    def npu(self) -> families.NpuFamily:
        """What the compiler knows of this target's NPU family (kiln.families): the stages below
        the command line ask it, never the target's name."""
        return families.FAMILIES[self.family.name]


class _Table:
    """Reads one TOML table field by field; anything unread is an unknown field."""

    def __init__(self, data: object, where: str, source: Path):
        self.source = source
        self.where = where
        if not isinstance(data, dict):
            self.fail(where, f"expected a table, got {_describe(data)}")
        self.data = data
        self.seen: set[str] = set()

    def fail(self, field: str, message: str):
        raise BoardError(f"{self.source}: {field}: {message}")

    def field(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, optional: bool = False):
        self.seen.add(key)
        if key not in self.data:
            if optional:
                return None
            self.fail(self.field(key), "missing")
        return self.data[key]

    def string(self, key: str, optional: bool = False) -> str | None:
        value = self.get(key, optional)
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value:
            self.fail(self.field(key), f"expected a non-empty string, got {_describe(value)}")
        return value

    def integer(self, key: str, minimum: int = 0, limit: int | None = None, optional: bool = False) -> int | None:
        value = self.get(key, optional)
        if value is None and optional:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            self.fail(self.field(key), f"expected an integer, got {_describe(value)}")
        if value < minimum or (limit is not None and value >= limit):
            bound = f"in [{minimum:#x}, {limit:#x})" if limit else f">= {minimum}"
            self.fail(self.field(key), f"{value:#x} is out of range (must be {bound})")
        return value

    def boolean(self, key: str) -> bool:
        value = self.get(key)
        if not isinstance(value, bool):
            self.fail(self.field(key), f"expected true or false, got {_describe(value)}")
        return value

    def strings(self, key: str, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
        value = self.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.fail(self.field(key), f"expected a list of strings, got {_describe(value)}")
        for item in value:
            if allowed is not None and item not in allowed:
                self.fail(self.field(key), f"unknown value {item!r} (known: {', '.join(allowed)})")
        if len(set(value)) != len(value):
            self.fail(self.field(key), "lists a value twice")
        return tuple(value)

    def table(self, key: str, optional: bool = False) -> _Table | None:
        value = self.get(key, optional)
        if value is None and optional:
            return None
        return _Table(value, self.field(key), self.source)

    def tables(self, key: str) -> list[_Table]:
        value = self.get(key)
        if not isinstance(value, list) or not value:
            self.fail(self.field(key), f"expected one or more [[{self.field(key)}]] tables")
        return [_Table(v, f"{self.field(key)}[{i}]", self.source) for i, v in enumerate(value)]

    def close(self):
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            self.fail(self.field(unknown[0]), "unknown field")


def _describe(value: object) -> str:
    if isinstance(value, dict):
        return "a table"
    return f"{type(value).__name__} {value!r}"


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BoardError(f"{path}: no such board description") from None
    except tomllib.TOMLDecodeError as error:
        raise BoardError(f"{path}: not valid TOML: {error}") from None
    except UnicodeDecodeError as error:
        raise BoardError(f"{path}: not UTF-8 text (byte {error.start}); restore the board description") from None


def _inherit(data: dict, path: Path, seen: tuple[str, ...] = ()) -> dict:
    """`data` (board.toml at `path`) with what it extends filled in.

    ``extends = "NAME"`` starts from boards/NAME/board.toml (itself resolved first), less
    that description's OWN_KEYS. Tables merge key by key; arrays of tables whose entries
    have a ``name`` ([[memory]], [[npu.family]]) merge entry by entry (an entry naming an
    inherited one changes its fields, a new name is added); any other value replaces.
    ``drop = ["fvp", "memory.sram1", "npu.family.ethos-u65"]`` then removes inherited
    tables, fields or named entries (a dotted path; a named entry by its name)."""
    parent_name = data.get("extends")
    if parent_name is None:
        if "drop" in data:
            raise BoardError(f"{path}: drop: only a description that extends another drops anything")
        return data
    if not isinstance(parent_name, str) or not parent_name:
        raise BoardError(f"{path}: extends: expected the name of a board, got {_describe(parent_name)}")
    if parent_name in seen:
        raise BoardError(f"{path}: extends: {' -> '.join((*seen, parent_name))} extends itself")
    parent_path = path.parent.parent / parent_name / "board.toml"
    if not parent_path.is_file():
        raise BoardError(f"{path}: extends: no board {parent_name!r} ({parent_path} is missing)")
    parent = _inherit(_read_toml(parent_path), parent_path, (*seen, data.get("name", path.parent.name)))
    merged = _merge({k: v for k, v in parent.items() if k not in OWN_KEYS},
                    {k: v for k, v in data.items() if k != "drop"})
    drop = data.get("drop", [])
    if not isinstance(drop, list) or not all(isinstance(d, str) and d for d in drop):
        raise BoardError(f"{path}: drop: expected a list of dotted field paths, got {_describe(drop)}")
    for dotted in drop:
        if not _drop(merged, dotted.split(".")):
            raise BoardError(f"{path}: drop: {dotted!r} names nothing {parent_name} describes")
    return merged


def _named(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(e, dict) and "name" in e for e in value)


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            out[key] = _merge(old, value)
        elif _named(old) and _named(value):
            entries = {e["name"]: e for e in old}
            for entry in value:
                entries[entry["name"]] = _merge(entries.get(entry["name"], {}), entry)
            out[key] = list(entries.values())
        else:
            out[key] = value
    return out


def _drop(node: object, parts: list[str]) -> bool:
    """Removes the field, table or named entry at `parts` under `node`; False if there is none.
    A key with dots of its own ([unverified]'s "uart.base") is matched whole."""
    if isinstance(node, dict) and ".".join(parts) in node:
        del node[".".join(parts)]
        return True
    head, rest = parts[0], parts[1:]
    if _named(node):
        index = next((i for i, e in enumerate(node) if e["name"] == head), None)
        if index is None:
            return False
        if not rest:
            del node[index]
            return True
        return _drop(node[index], rest)
    if not isinstance(node, dict) or head not in node:
        return False
    if not rest:
        del node[head]
        return True
    return _drop(node[head], rest)


def load_board(path: Path) -> Board:
    """Reads and validates one board.toml (and what it extends); raises BoardError naming the field."""
    data = _inherit(_read_toml(path), path)
    top = _Table(data, "", path)
    schema = top.integer("schema")
    if schema != SCHEMA_VERSION:
        top.fail("schema", f"version {schema} is not supported (kiln reads version {SCHEMA_VERSION})")
    name = top.string("name")
    if name != path.parent.name:
        top.fail("name", f"{name!r} differs from its folder name {path.parent.name!r}")
    board = Board(
        name=name,
        summary=top.string("summary"),
        path=path,
        cpu=_read_cpu(top.table("cpu")),
        memory=_read_memory(top),
        stack_size=top.integer("stack_size", limit=_ADDRESS_LIMIT),
        uart=_read_uart(top.table("uart")),
        npu=_read_npu(top.table("npu")),
        fvp_params=_read_fvp(top.table("fvp", optional=True)),
        qemu_machine=_read_virtual_platform(top.table("virtual_platform", optional=True)),
        reference=_read_reference(top),
        extends=top.string("extends", optional=True),
        flash=_read_flash(top.table("flash", optional=True)),
        cmsis=_read_cmsis(top.table("cmsis", optional=True)),
    )
    board = replace(board, unverified=_read_unverified(top.table("unverified", optional=True), board))
    top.close()
    _check_fvp(board, top)
    _check_flash(board, top)
    _check_peripherals(board, top)
    try:
        check_stack_size(board, board.stack_size)
    except UsageError as error:
        top.fail("stack_size", str(error))
    return board


def _read_reference(top: _Table) -> bool:
    if top.get("reference", optional=True) is None:
        return False
    return top.boolean("reference")


def _read_unverified(t: _Table | None, board: Board) -> tuple[tuple[str, str], ...]:
    """[unverified]: "section.field" = "why it is unverified" (a region by its name: "memory.mram")."""
    if t is None:
        return ()
    regions = {r.name for r in board.memory}
    entries = []
    for key in list(t.data):
        section, _, rest = key.partition(".")
        if section not in UNVERIFIED_SECTIONS or (section == "memory" and rest.split(".")[0] not in regions):
            t.fail(t.field(key), f"names no field of the description (a section of {', '.join(UNVERIFIED_SECTIONS)}"
                                 f"; a region of {', '.join(sorted(regions))})")
        entries.append((key, t.string(key)))
    t.close()
    return tuple(entries)


def check_stack_size(board: Board, size: int) -> int:
    """`size` if it can be `board`'s main stack: a positive multiple of STACK_ALIGNMENT bytes
    that fits in the board's "stack" region; else a UsageError saying which. One check for
    board.toml's stack_size (load_board reports it as a BoardError naming the field) and for
    a build's override (kiln build's plan, KILN_STACK_SIZE through linker_script)."""
    if size <= 0 or size % STACK_ALIGNMENT:
        raise UsageError(f"stack size {size:#x} is not a positive multiple of {STACK_ALIGNMENT} bytes "
                         "(the stack's alignment)")
    region = board.region_for("stack")
    if size > region.size:
        raise UsageError(f"stack size {size:#x} does not fit in {board.name}'s stack region {region.name} "
                         f"({region.size:#x} bytes)")
    return size


def _read_cpu(t: _Table) -> Cpu:
    compile_flags = t.strings("compile_flags")
    toolchain = t.string("toolchain", optional=True) or DEFAULT_TOOLCHAIN
    if toolchain not in TOOLCHAINS:
        t.fail(t.field("toolchain"), f"unknown toolchain {toolchain!r} (known: {', '.join(TOOLCHAINS)})")
    link_flags = t.strings("link_flags") if "link_flags" in t.data else compile_flags
    cpu = Cpu(
        core=t.string("core"),
        compile_flags=compile_flags,
        clock_hz=t.integer("clock_hz", minimum=1),
        dcache=t.boolean("dcache"),
        toolchain=toolchain,
        link_flags=link_flags,
    )
    if f"-mcpu={cpu.core}" not in cpu.compile_flags:
        t.fail(t.field("compile_flags"), f"must contain -mcpu={cpu.core} to match cpu.core")
    float_abi = [f for f in compile_flags if f.startswith("-mfloat-abi=")]
    if float_abi != [f for f in link_flags if f.startswith("-mfloat-abi=")]:
        t.fail(t.field("link_flags"), f"must choose the float ABI of compile_flags ({' '.join(float_abi) or 'none'}): "
                                      "code and libraries pass floats alike")
    t.close()
    return cpu


def _read_memory(top: _Table) -> tuple[MemoryRegion, ...]:
    regions = []
    for t in top.tables("memory"):
        name = t.string("name")
        if not _IDENT.match(name):
            t.fail(t.field("name"), f"{name!r} is not a lower-case identifier ([a-z][a-z0-9_]*)")
        base = t.integer("base", limit=_ADDRESS_LIMIT)
        size = t.integer("size", minimum=1, limit=_ADDRESS_LIMIT)
        if base + size > _ADDRESS_LIMIT:
            t.fail(t.field("size"), f"region {name} runs past the 4 GiB address space")
        if base % 32 or size % 32:
            t.fail(t.field("base"), f"region {name} must start and end on a 32-byte boundary")
        regions.append(MemoryRegion(name, base, size, t.strings("purposes", PURPOSES)))
        t.close()
    for i, a in enumerate(regions):
        for b in regions[:i]:
            if a.name == b.name:
                top.fail(f"memory[{i}].name", f"region name {a.name!r} is used twice")
            if a.base < b.end and b.base < a.end:
                top.fail(f"memory[{i}]", f"region {a.name} overlaps region {b.name}")
    for purpose in SINGLE_PURPOSES:
        holders = [r.name for r in regions if purpose in r.purposes]
        if len(holders) != 1:
            top.fail("memory", f"exactly one region must have purpose {purpose!r}, found {holders or 'none'}")
    return tuple(regions)


def _read_uart(t: _Table) -> Uart:
    kind = t.string("kind")
    if kind not in UART_KINDS:
        t.fail(t.field("kind"), f"unknown UART {kind!r} (known: {', '.join(UART_KINDS)})")
    uart = Uart(
        kind=kind,
        base=t.integer("base", limit=_ADDRESS_LIMIT),
        clock_hz=t.integer("clock_hz", minimum=1),
        baud=t.integer("baud", minimum=1),
    )
    if uart.clock_hz // uart.baud < 16:
        t.fail(t.field("baud"), f"the {kind} needs clock_hz / baud >= 16 (it samples each bit 16 times)")
    t.close()
    return uart


def _read_npu(t: _Table) -> Npu:
    base = t.integer("base", limit=_ADDRESS_LIMIT)
    ns_alias = t.integer("ns_alias", limit=_ADDRESS_LIMIT, optional=True)
    irq = t.integer("irq", limit=480)
    families = []
    for f in t.tables("family"):
        name = f.string("name")
        if not _FAMILY.match(name):
            f.fail(f.field("name"), f"unknown NPU family {name!r} (ethos-u55, ethos-u65 or ethos-u85)")
        macs = f.get("macs")
        if not isinstance(macs, list) or not macs or not all(
            isinstance(m, int) and not isinstance(m, bool) and m > 0 and m & (m - 1) == 0 for m in macs
        ):
            f.fail(f.field("macs"), f"expected a list of MAC counts (powers of two), got {_describe(macs)}")
        memory_modes = f.strings("memory_modes", VELA_MEMORY_MODES)
        memory_mode = f.string("memory_mode")
        if memory_mode not in memory_modes:
            f.fail(f.field("memory_mode"), f"{memory_mode!r} is not one of memory_modes {list(memory_modes)}")
        families.append(
            NpuFamily(
                name=name,
                macs=tuple(macs),
                system_config=f.string("system_config"),
                memory_mode=memory_mode,
                memory_modes=memory_modes,
                fvp=f.string("fvp", optional=True),
            )
        )
        f.close()
    t.close()
    return Npu(base, irq, tuple(families), ns_alias)


def _read_fvp(t: _Table | None) -> tuple[str, ...]:
    if t is None:
        return ()
    params = t.strings("params")
    for i, param in enumerate(params):
        if "=" not in param:
            t.fail(f"{t.field('params')}[{i}]", f"{param!r} is not NAME=VALUE")
        for _, field, _, _ in string.Formatter().parse(param):
            if field is not None and field not in FVP_PLACEHOLDERS:
                t.fail(f"{t.field('params')}[{i}]", f"unknown placeholder {{{field}}} (known: {', '.join(FVP_PLACEHOLDERS)})")
    t.close()
    return params


def _read_virtual_platform(t: _Table | None) -> str | None:
    if t is None:
        return None
    machine = t.string("qemu_machine")
    t.close()
    return machine


def _read_flash(t: _Table | None) -> Flash | None:
    if t is None:
        return None
    method = t.string("method")
    if method not in FLASH_METHODS:
        t.fail(t.field("method"), f"unknown method {method!r} (known: {', '.join(FLASH_METHODS)})")
    if method == "alif-setools":
        flash = Flash(method, cpu_id=t.string("cpu_id"))
    else:
        loads = t.table("load_address")
        regions = tuple((name, loads.integer(name, limit=1 << 40)) for name in list(loads.data))
        loads.close()
        digits = t.integer("address_digits", minimum=8, limit=11)
        flash = Flash(method, images_txt=t.string("images_txt"), load_address=regions, update=t.string("update"),
                      port=t.integer("port", optional=True), address_digits=digits)
    t.close()
    return flash


def _read_cmsis(t: _Table | None) -> Cmsis | None:
    if t is None:
        return None
    cmsis = Cmsis(device=t.string("device"), pack=t.string("pack"))
    for key, value in (("device", cmsis.device), ("pack", cmsis.pack)):
        if "::" not in value:
            t.fail(t.field(key), f"{value!r} is not Vendor::Name")
    t.close()
    return cmsis


def _check_flash(board: Board, top: _Table):
    """An mps-drive image loads into a region of the board's memory."""
    regions = {r.name for r in board.memory}
    for name, _ in board.flash.load_address if board.flash else ():
        if name not in regions:
            top.fail(f"flash.load_address.{name}", f"names no memory region (the board has {', '.join(sorted(regions))})")


def _check_fvp(board: Board, top: _Table):
    """An FVP runs a board only with both its binary (npu.family.fvp) and its -C parameters ([fvp])."""
    for i, family in enumerate(board.npu.families):
        if (family.fvp is None) != (not board.fvp_params):
            top.fail(f"npu.family[{i}].fvp", "an FVP needs both the binary (npu.family.fvp) and the board's "
                                             "[fvp] params: give both or neither")


def _check_peripherals(board: Board, top: _Table):
    peripherals = [("uart.base", board.uart.base), ("npu.base", board.npu.base)]
    if board.npu.ns_alias is not None:
        peripherals.append(("npu.ns_alias", board.npu.ns_alias))
    for field, address in peripherals:
        for region in board.memory:
            if region.base <= address < region.end:
                top.fail(field, f"{address:#010x} lies inside memory region {region.name}")


def board_names() -> list[str]:
    return sorted(p.parent.name for p in BOARDS_DIR.glob("*/board.toml"))


def load(name: str) -> Board:
    if name not in board_names():
        raise UsageError(f"unknown board {name!r} (known: {', '.join(board_names())})")
    return load_board(BOARDS_DIR / name / "board.toml")


def _on(board: Board, name: str) -> Target | None:
    """Target `name` on `board`, or None when the board lacks that NPU configuration."""
    for family in board.npu.families:
        for macs in family.macs:
            if f"{family.name}-{macs}" == name:
                return Target(name, board, family, macs)
    return None


def targets() -> dict[str, Target]:
    """Every NPU target kiln knows, each on its reference board: the one description with
    `reference = true` that has the configuration (every configuration of any board needs one)."""
    found: dict[str, Target] = {}
    described: dict[str, Board] = {}
    for name in board_names():
        board = load(name)
        for target_name in board.configurations():
            described.setdefault(target_name, board)
            if not board.reference:
                continue
            if target_name in found:
                raise BoardError(f"{board.path}: reference: target {target_name} already has reference board "
                                 f"{found[target_name].board.name}; one board is a target's reference")
            found[target_name] = _on(board, target_name)
    for target_name, board in described.items():
        if target_name not in found:
            raise BoardError(f"{board.path}: npu.family: target {target_name} has no reference board; describe "
                             "it on a board with `reference = true`")
    return found


def boards_with(target_name: str) -> list[Board]:
    """Every board that has NPU configuration `target_name`, the reference board first."""
    reference = target(target_name).board
    return [reference] + [b for b in map(load, board_names()) if b.name != reference.name
                          and _on(b, target_name) is not None]


def target(name: str, board: str | None = None) -> Target:
    """Target `name` on `board` (default: its reference board). A UsageError for an unknown
    target or board, or a board without that NPU configuration (naming what it has)."""
    known = targets()
    if name not in known:
        raise UsageError(f"unknown target {name!r} (known: {', '.join(known)})")
    if board is None or board == known[name].board.name:
        return known[name]
    described = load(board)
    on_board = _on(described, name)
    if on_board is None:
        others = ", ".join(b.name for b in boards_with(name))
        raise UsageError(f"board {board} has no {name} NPU: it has {', '.join(described.configurations())}; "
                         f"build for one of those, or for {name} on {others}")
    return on_board


# ---------------------------------------------------------------- generators


def linker_script(board: Board, stack_size: int | None = None) -> str:
    """A GNU ld script for ``board`` with a main stack of ``stack_size`` bytes (default:
    the board's stack_size).

    Layout contract (the startup code relies on these symbols):
    - .vectors first in the code region; .text/.rodata and the .data load image
      there too. __data_load/__data_start/__data_end: word-aligned, copied by startup.
    - __bss_start/__bss_end: word-aligned, zeroed by startup.
    - __init_array_start/__init_array_end: C++ static constructors, run by startup.
    - __stack_limit/__stack_top: 8-byte aligned; the stack grows down from __stack_top.
    - Every region R gets `.R.data` (loaded as it is, no copy) and `.R.bss` (NOLOAD,
      not zeroed) for objects placed there with KILN_PLACE_DATA/KILN_PLACE_BSS.
    The linker fails with "region `R' overflowed" when anything does not fit.
    """
    stack_size = check_stack_size(board, board.stack_size if stack_size is None else stack_size)
    code = board.region_for("code").name
    data = board.region_for("data").name
    stack = board.region_for("stack").name
    lines = [
        f"/* Generated by kiln.boards from {board.path.name} of {board.name}: do not edit. */",
        "ENTRY(kiln_reset_handler)",
        "",
        "MEMORY",
        "{",
    ]
    for r in board.memory:
        lines.append(f"  {r.name} (rwx) : ORIGIN = {r.base:#010x}, LENGTH = {r.size:#010x}")
    lines += [
        "}",
        "",
        "SECTIONS",
        "{",
        "  .text : ALIGN(128)",
        "  {",
        "    KEEP(*(.vectors))",
        "    *(.text .text.*)",
        "    *(.rodata .rodata.*)",
        "    KEEP(*(.init)) KEEP(*(.fini))",
        "    . = ALIGN(4);",
        "    __init_array_start = .;",
        "    KEEP(*(.preinit_array))",
        "    KEEP(*(SORT(.init_array.*))) KEEP(*(.init_array))",
        "    __init_array_end = .;",
        f"  }} > {code}",
        "  .ARM.exidx : { *(.ARM.exidx* .gnu.linkonce.armexidx.*) } > " + code,
        "  .data : ALIGN(4)",
        "  {",
        "    __data_start = .;",
        "    *(.data .data.*)",
        "    . = ALIGN(4);",
        "    __data_end = .;",
        f"  }} > {data} AT > {code}",
        "  __data_load = LOADADDR(.data);",
        "  .bss (NOLOAD) : ALIGN(4)",
        "  {",
        "    __bss_start = .;",
        "    *(.bss .bss.* COMMON)",
        "    . = ALIGN(4);",
        "    __bss_end = .;",
        f"  }} > {data}",
    ]
    for r in board.memory:
        lines += [
            f"  .{r.name}.data : ALIGN(16) {{ KEEP(*(.{r.name}.data .{r.name}.data.*)) }} > {r.name}",
            f"  .{r.name}.bss (NOLOAD) : ALIGN(16) {{ *(.{r.name}.bss .{r.name}.bss.*) }} > {r.name}",
        ]
    lines += [
        "  .stack (NOLOAD) : ALIGN(8)",
        "  {",
        "    __stack_limit = .;",
        f"    . += {stack_size:#x};",
        "    __stack_top = .;",
        f"  }} > {stack}",
        "}",
        "",
    ]
    return "\n".join(lines)


def c_header(board: Board) -> str:
    """A C/C++ header with the board's facts as macros (addresses and sizes in bytes)."""
    guard = "KILN_BOARD_H"
    out = [
        f"/* Generated by kiln.boards from {board.path.name} of {board.name}: do not edit. */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        f'#define KILN_BOARD_NAME "{board.name}"',
        f'#define KILN_CPU_CORE "{board.cpu.core}"',
        f"#define KILN_CPU_CLOCK_HZ {board.cpu.clock_hz}u",
        f"#define KILN_CPU_HAS_DCACHE {int(board.cpu.dcache)}",
        f"#define KILN_UART_BASE {board.uart.base:#010x}u",
        f"#define KILN_UART_CLOCK_HZ {board.uart.clock_hz}u",
        f"#define KILN_UART_BAUD {board.uart.baud}u",
        f"#define KILN_NPU_BASE {board.npu.base:#010x}u",
        f"#define KILN_NPU_IRQ {board.npu.irq}",
        *([f"#define KILN_NPU_NS_ALIAS {board.npu.ns_alias:#010x}u"] if board.npu.ns_alias is not None else []),
        "",
    ]
    for r in board.memory:
        up = r.name.upper()
        out += [
            f"#define KILN_REGION_{up}_BASE {r.base:#010x}u",
            f"#define KILN_REGION_{up}_SIZE {r.size:#010x}u",
        ]
    out += [
        "",
        "/* Place an object in a named region: initialised data is loaded with the image,",
        "   BSS is not zeroed by startup. */",
        '#define KILN_PLACE_DATA(region) __attribute__((section("." #region ".data"), used))',
        '#define KILN_PLACE_BSS(region) __attribute__((section("." #region ".bss")))',
        "",
        f"#endif /* {guard} */",
        "",
    ]
    return "\n".join(out)


def cmake_fragment(board: Board, out_dir: Path) -> str:
    return "\n".join(
        [
            f"# Generated by kiln.boards from {board.path}: do not edit.",
            f'set(KILN_BOARD_NAME "{board.name}")',
            f'set(KILN_BOARD_CPU "{board.cpu.core}")',
            f'set(KILN_BOARD_COMPILE_FLAGS "{";".join(board.cpu.compile_flags)}")',
            f'set(KILN_BOARD_LINK_FLAGS "{";".join(board.cpu.link_flags)}")',
            f'set(KILN_BOARD_UART_DRIVER "{UART_DRIVERS[board.uart.kind]}")',
            f'set(KILN_BOARD_TOOLCHAIN "{board.cpu.toolchain}")',
            f'set(KILN_BOARD_TOOLCHAIN_FILE "{board.cpu.toolchain_file}")',
            f'set(KILN_BOARD_LINKER_SCRIPT "{out_dir / "board.ld"}")',
            f'set(KILN_BOARD_INCLUDE_DIR "{out_dir}")',
            f'set(KILN_BOARD_DESCRIPTION "{board.path}")',
            "",
        ]
    )


def generate(board: Board, out_dir: Path, stack_size: int | None = None):
    """Writes board.ld, kiln_board.h and board.cmake into out_dir, only when changed.
    `stack_size`: the main stack in bytes (default: the board's stack_size)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (
        ("board.ld", linker_script(board, stack_size)),
        ("kiln_board.h", c_header(board)),
        ("board.cmake", cmake_fragment(board, out_dir)),
    ):
        path = out_dir / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.boards", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="write board.ld, kiln_board.h and board.cmake")
    gen.add_argument("--board", required=True)
    gen.add_argument("--out", required=True, type=Path)
    gen.add_argument("--stack-size", type=lambda s: int(s, 0), help="main stack in bytes (default: the board's)")
    check = sub.add_parser("check", help="validate board descriptions")
    check.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args(argv)

    def command() -> int:
        if args.command == "generate":
            generate(load(args.board), args.out, args.stack_size)
            return 0
        for path in args.files or [BOARDS_DIR / n / "board.toml" for n in board_names()]:
            board = load_board(path)
            print(f"{path}: ok ({board.name}, {len(board.memory)} regions)")
        targets()
        return 0

    return run_command("kiln", command)


if __name__ == "__main__":
    sys.exit(main())
