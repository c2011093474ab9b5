"""What a board description says, as frozen dataclasses: a board's CPU, memory regions, UART,
NPU if it has one (its families, each with its MAC configurations and Vela defaults), FVP, flash
method and CMSIS device; a Target, one NPU configuration on one board or the board's CPU alone
(the target named by its core, "cortex-m4"); and the rules a description's values obey (the
purposes a region may have, the UARTs and toolchains kiln drives, the stack's alignment).
kiln.boards.loader builds them from board.toml.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kiln import families, paths
from kiln.errors import UsageError

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
# How images get onto a board ([flash] method; kiln.firmware.flash writes each):
# "mps-drive", the MPS3/MPS4 USB drive's SOFTWARE/ folder and images.txt; "alif-setools",
# Alif's Security Toolkit writing MRAM from a JSON configuration.
FLASH_METHODS = ("mps-drive", "alif-setools")
STACK_ALIGNMENT = 8  # the AAPCS's: the main stack's size and top are multiples of it


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
class BoardFamily:
    """One NPU family as one board has it ([[npu.family]]): the MAC configurations it is built
    with, Vela's defaults and the memory modes on this board, and the FVP that models it.
    What the family itself can do, on any board, is the compiler's business, not the board's."""

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
    families: tuple[BoardFamily, ...]
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
    npu: Npu | None  # None: the board has no NPU (its only target is its CPU)
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
        return [f"{f.name}-{m}" for f in self.npu.families for m in f.macs] if self.npu else []

    def target(self, name: str) -> Target | None:
        """NPU configuration `name` ("ethos-u55-128") on this board, or its CPU alone when `name`
        is its core ("cortex-m55"); None when it has neither."""
        if name == self.cpu.core:
            return Target(name, self, None, 0)
        for family in self.npu.families if self.npu else ():
            for macs in family.macs:
                if f"{family.name}-{macs}" == name:
                    return Target(name, self, family, macs)
        return None

    def target_names(self) -> list[str]:
        """Every target this board has: its NPU configurations, then its CPU alone."""
        return [*self.configurations(), self.cpu.core]


@dataclass(frozen=True)
class Target:
    """One NPU configuration on one board, e.g. ethos-u55-128 on corstone-300 (its reference
    board) or on mps3-an552; or a board's CPU alone, e.g. cortex-m4 on mps2-an386 (family None,
    macs 0): every op runs on the CPU, and the firmware is built without the Ethos-U driver."""

    name: str
    board: Board
    family: BoardFamily | None  # None: the CPU alone
    macs: int  # 0 for the CPU alone

    @property
    def has_npu(self) -> bool:
        return self.family is not None

    @property
    def system_config(self) -> str | None:
        """Vela's default system config (None: no NPU, no Vela)."""
        return self.family.system_config if self.family else None

    @property
    def memory_mode(self) -> str | None:
        """Vela's default memory mode (None: no NPU, no Vela)."""
        return self.family.memory_mode if self.family else None

    @property
    def memory_modes(self) -> tuple[str, ...]:
        """The memory modes this target has on its board (none without an NPU)."""
        return self.family.memory_modes if self.family else ()

    @property
    def fvp(self) -> str | None:
        """The Arm FVP binary that models this target (None: no FVP, or no NPU)."""
        return self.family.fvp if self.family else None

    def refuse_vela_settings(self, system_config: str | None, memory_mode: str | None) -> None:
        """A UsageError when this target has no NPU and either Vela setting is given (None: not given)."""
        for flag, value in (("--system-config", system_config), ("--memory-mode", memory_mode)):
            if value is not None and not self.has_npu:
                raise UsageError(f"{flag} sets Vela for an NPU; {self.name} on {self.board.name} has none")

    @property
    def npu(self) -> families.NpuFamily | None:
        """What the compiler knows of this target's NPU family (kiln.families): the stages below
        the command line ask it, never the target's name. None: the CPU alone."""
        return families.FAMILIES[self.family.name] if self.family else None


def check_stack_size(board: Board, size: int) -> int:
    """`size` if it can be `board`'s main stack: a positive multiple of STACK_ALIGNMENT bytes
    that fits in the board's "stack" region; else a UsageError saying which. One check for
    board.toml's stack_size (load_board reports it as a BoardError naming the field) and for
    a build's override (kiln build's plan, KILN_STACK_SIZE through linker_script)."""
    if size <= 0 or size % STACK_ALIGNMENT:
        raise UsageError(
            f"stack size {size:#x} is not a positive multiple of {STACK_ALIGNMENT} bytes (the stack's alignment)"
        )
    region = board.region_for("stack")
    if size > region.size:
        raise UsageError(
            f"stack size {size:#x} does not fit in {board.name}'s stack region {region.name} ({region.size:#x} bytes)"
        )
    return size
