"""Board descriptions: each board described once, as data, in boards/<name>/board.toml.

kiln.boards reads and validates them (a malformed description is rejected with
a message naming the file and the field), maps NPU targets such as
``ethos-u55-128`` to their reference board (or, asked, to another board with that
NPU configuration), and generates what a firmware build needs from a description:
a GNU ld linker script, a C header and a CMake fragment. Nothing else in kiln
repeats a board's addresses.

    model.py      the dataclasses a description becomes (Board, Target, ...) and the rules of its values
    loader.py     one board.toml (and what it extends) read, merged and validated into a Board
    catalogue.py  the boards folder: board names, boards by name, targets by name
    generators.py the linker script, C header and CMake fragment of a board
    command.py    ``python -m kiln.boards generate|check``

A description may start from another (``extends = "corstone-300"``: an FPGA image of
that subsystem, say) and state only what differs; see kiln.boards.loader. A fact that no
public source confirmed is listed in the description's ``[unverified]`` table, with
why, and ``kiln targets`` prints it.

Only the standard library is used, so CMake can run ``python -m kiln.boards``
early in a configure.
"""

from kiln.boards.catalogue import BOARDS_DIR, board_names, boards_with, load, resolve, target, targets
from kiln.boards.command import main
from kiln.boards.generators import c_header, cmake_fragment, generate, linker_script
from kiln.boards.loader import OWN_KEYS, SCHEMA_VERSION, UNVERIFIED_SECTIONS, load_board
from kiln.boards.model import (
    DEFAULT_TOOLCHAIN,
    FLASH_METHODS,
    FVP_PLACEHOLDERS,
    PURPOSES,
    SINGLE_PURPOSES,
    STACK_ALIGNMENT,
    TOOLCHAINS,
    UART_DRIVERS,
    UART_KINDS,
    VELA_MEMORY_MODES,
    Board,
    BoardFamily,
    Cmsis,
    Cpu,
    Flash,
    MemoryRegion,
    Npu,
    Target,
    Uart,
    check_stack_size,
)

__all__ = [
    "BOARDS_DIR",
    "DEFAULT_TOOLCHAIN",
    "FLASH_METHODS",
    "FVP_PLACEHOLDERS",
    "OWN_KEYS",
    "PURPOSES",
    "SCHEMA_VERSION",
    "SINGLE_PURPOSES",
    "STACK_ALIGNMENT",
    "TOOLCHAINS",
    "UART_DRIVERS",
    "UART_KINDS",
    "UNVERIFIED_SECTIONS",
    "VELA_MEMORY_MODES",
    "Board",
    "BoardFamily",
    "Cmsis",
    "Cpu",
    "Flash",
    "MemoryRegion",
    "Npu",
    "Target",
    "Uart",
    "board_names",
    "boards_with",
    "c_header",
    "check_stack_size",
    "cmake_fragment",
    "generate",
    "linker_script",
    "load",
    "load_board",
    "main",
    "resolve",
    "target",
    "targets",
]
