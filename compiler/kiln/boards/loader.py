"""Reads one board description (boards/<name>/board.toml) into a kiln.boards.model.Board.

The description is validated field by field: anything malformed is a BoardError naming the
file and the field. A description may start from another (``extends = "corstone-300"``: an
FPGA image of that subsystem, say) and state only what differs; see ``_inherit``.
"""

from __future__ import annotations

import io
import re
import string
import tomllib
from dataclasses import replace
from pathlib import Path

from kiln.boards.model import (
    DEFAULT_TOOLCHAIN,
    FLASH_METHODS,
    FVP_PLACEHOLDERS,
    PURPOSES,
    SINGLE_PURPOSES,
    TOOLCHAINS,
    UART_KINDS,
    VELA_MEMORY_MODES,
    Board,
    BoardFamily,
    Cmsis,
    Cpu,
    Flash,
    MemoryRegion,
    Npu,
    Uart,
    check_stack_size,
)
from kiln.errors import BoardError, UsageError

SCHEMA_VERSION = 1
# Keys of a description that belong to it alone: a description that extends another
# inherits everything else (see _inherit).
OWN_KEYS = ("name", "summary", "extends", "drop", "reference")
# The sections an [unverified] entry may name ("uart.base", "npu.irq", "memory.mram", ...).
UNVERIFIED_SECTIONS = ("cpu", "memory", "stack_size", "uart", "npu", "fvp", "virtual_platform", "flash", "cmsis")
_IDENT = re.compile(r"[a-z][a-z0-9_]*\Z")
_FAMILY = re.compile(r"ethos-u(55|65|85)\Z")
_ADDRESS_LIMIT = 1 << 32


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


def _read_toml(path: Path, read: list[tuple[Path, bytes]]) -> dict:
    """The TOML at `path`, its bytes appended to `read`."""
    try:
        raw = path.read_bytes()
        read.append((path, raw))
        # decoded as Path.read_text decodes (universal newlines), then parsed
        return tomllib.loads(io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8").read())
    except FileNotFoundError:
        raise BoardError(f"{path}: no such board description") from None
    except tomllib.TOMLDecodeError as error:
        raise BoardError(f"{path}: not valid TOML: {error}") from None
    except UnicodeDecodeError as error:
        raise BoardError(f"{path}: not UTF-8 text (byte {error.start}); restore the board description") from None


def _inherit(data: dict, path: Path, read: list[tuple[Path, bytes]], seen: tuple[str, ...] = ()) -> dict:
    """`data` (board.toml at `path`) with what it extends filled in; each file read is appended
    to `read` with its bytes.

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
    parent = _inherit(_read_toml(parent_path, read), parent_path, read, (*seen, data.get("name", path.parent.name)))
    merged = _merge(
        {k: v for k, v in parent.items() if k not in OWN_KEYS}, {k: v for k, v in data.items() if k != "drop"}
    )
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


# What load_board read, by path: the bytes of every file (the description and what it
# extends) and the Board made of them. Entries live as long as the process.
_LOADED: dict[Path, tuple[tuple[tuple[Path, bytes], ...], Board]] = {}


def load_board(path: Path) -> Board:
    """Reads and validates one board.toml (and what it extends); raises BoardError naming the field.

    Parsed and validated once per process: a later call re-reads the files and returns the
    same Board while their bytes are the ones it was made of (a file's size and mtime can
    stay the same through an edit, so they are not enough), else reads it again."""
    cached = _LOADED.get(path)
    if cached is not None and all(_bytes(p) == raw for p, raw in cached[0]):
        return cached[1]
    read: list[tuple[Path, bytes]] = []
    board = _validated(path, read)
    _LOADED[path] = (tuple(read), board)
    return board


def _bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _validated(path: Path, read: list[tuple[Path, bytes]]) -> Board:
    """The Board of the board.toml at `path`; each file read is appended to `read` with its bytes."""
    data = _inherit(_read_toml(path, read), path, read)
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
        npu=_read_npu(top.table("npu", optional=True)),
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
            t.fail(
                t.field(key),
                f"names no field of the description (a section of {', '.join(UNVERIFIED_SECTIONS)}"
                f"; a region of {', '.join(sorted(regions))})",
            )
        entries.append((key, t.string(key)))
    t.close()
    return tuple(entries)


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
        t.fail(
            t.field("link_flags"),
            f"must choose the float ABI of compile_flags ({' '.join(float_abi) or 'none'}): "
            "code and libraries pass floats alike",
        )
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


def _read_npu(t: _Table | None) -> Npu | None:
    if t is None:
        return None
    base = t.integer("base", limit=_ADDRESS_LIMIT)
    ns_alias = t.integer("ns_alias", limit=_ADDRESS_LIMIT, optional=True)
    irq = t.integer("irq", limit=480)
    families = []
    for f in t.tables("family"):
        name = f.string("name")
        if not _FAMILY.match(name):
            f.fail(f.field("name"), f"unknown NPU family {name!r} (ethos-u55, ethos-u65 or ethos-u85)")
        macs = f.get("macs")
        if (
            not isinstance(macs, list)
            or not macs
            or not all(isinstance(m, int) and not isinstance(m, bool) and m > 0 and m & (m - 1) == 0 for m in macs)
        ):
            f.fail(f.field("macs"), f"expected a list of MAC counts (powers of two), got {_describe(macs)}")
        memory_modes = f.strings("memory_modes", VELA_MEMORY_MODES)
        memory_mode = f.string("memory_mode")
        if memory_mode not in memory_modes:
            f.fail(f.field("memory_mode"), f"{memory_mode!r} is not one of memory_modes {list(memory_modes)}")
        families.append(
            BoardFamily(
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
                t.fail(
                    f"{t.field('params')}[{i}]",
                    f"unknown placeholder {{{field}}} (known: {', '.join(FVP_PLACEHOLDERS)})",
                )
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
        flash = Flash(
            method,
            images_txt=t.string("images_txt"),
            load_address=regions,
            update=t.string("update"),
            port=t.integer("port", optional=True),
            address_digits=digits,
        )
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
            top.fail(
                f"flash.load_address.{name}", f"names no memory region (the board has {', '.join(sorted(regions))})"
            )


def _check_fvp(board: Board, top: _Table):
    """An FVP runs a board only with both its binary (npu.family.fvp) and its -C parameters ([fvp])."""
    if board.npu is None and board.fvp_params:
        top.fail("fvp", "the FVP's binary is named per NPU family (npu.family.fvp): a board without [npu] has none")
    for i, family in enumerate(board.npu.families if board.npu else ()):
        if (family.fvp is None) != (not board.fvp_params):
            top.fail(
                f"npu.family[{i}].fvp",
                "an FVP needs both the binary (npu.family.fvp) and the board's [fvp] params: give both or neither",
            )


def _check_peripherals(board: Board, top: _Table):
    peripherals = [("uart.base", board.uart.base)]
    if board.npu is not None:
        peripherals.append(("npu.base", board.npu.base))
    if board.npu is not None and board.npu.ns_alias is not None:
        peripherals.append(("npu.ns_alias", board.npu.ns_alias))
    for field, address in peripherals:
        for region in board.memory:
            if region.base <= address < region.end:
                top.fail(field, f"{address:#010x} lies inside memory region {region.name}")
