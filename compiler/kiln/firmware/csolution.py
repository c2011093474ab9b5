"""`kiln export --csolution DIR`: kiln's executor runner for a .pte as a CMSIS-Toolbox project.

DIR gets everything the runner's CMake build compiles, for a user with CMSIS-Toolbox:

    kiln.csolution.yml     solution: the compiler (GCC), the board's CMSIS pack, one target-type
                           per board (its [cmsis] device), Debug and Release build-types, the project
    kiln.cproject.yml      project: include paths, kiln's compile and link flags, one group per part
                           (platform, runtime, kernels, driver, delegate, runner, model), the linker script
    kiln/                  kiln's firmware sources (copied: the project builds without kiln installed)
    board/                 the board's generated linker script and kiln_board.h (kiln.boards.generate)
    generated/             the model: model.pte, model_pte.S, model_memory.cpp, kernel_table.cpp
                           (kiln.firmware.runner_build.generate; model_pte.S .incbin's model.pte by
                           its absolute path, so export again after moving DIR)

Build: cbuild kiln.csolution.yml --context kiln.Release+<board>. The fields are those of
CMSIS-Toolbox's YML input format (Open-CMSIS-Pack/devtools tools/projmgr/schemas: csolution,
cproject and common.schema.json); tests/firmware/test_csolution.py checks the files against them.
The YAML is written here (no YAML library at run time): block mappings and sequences, strings
plain where YAML reads them back as the same string, else JSON-quoted (YAML's double quotes).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from kiln import boards, paths
from kiln.errors import UsageError
from kiln.firmware import runner_build

SOLUTION = "kiln"
CREATED_FOR = "CMSIS-Toolbox@2.14.1"  # the version ExecuTorch's Arm csolution files are written for
COMPILER = "GCC"  # kiln's firmware is GCC's (arm-none-eabi-gcc); clang-only boards are refused
# kiln's firmware flags (firmware/CMakeLists.txt, cmake/kiln_board.cmake), less the CPU's: the
# device's processor gives CMSIS-Toolbox those.
MISC = {
    "C-CPP": ["-ffunction-sections", "-fdata-sections", "-Wall", "-Wextra"],
    "CPP": ["-fno-exceptions", "-fno-rtti", "-fno-threadsafe-statics", "-fno-use-cxa-atexit"],
    "Link": ["-nostartfiles", "--specs=nano.specs", "-Wl,--gc-sections"],
}
EXACT_FLOAT = [{"C-CPP": ["-ffp-contract=off"]}]  # the runtime and kernels: float32 equal to numpy's
# firmware/ folders copied under kiln/, and the include folders among them.
SOURCE_DIRS = (
    "platform",
    "runtime/include",
    "runtime/src",
    "runtime/kernels",
    "drivers/ethosu",
    "delegates/ethosu",
    "apps/executor_runner",
)
INCLUDE_DIRS = (
    "platform/include",
    "runtime/include",
    "drivers/ethosu/include",
    "delegates/ethosu/include",
    "apps/executor_runner",
)
SOURCE_SUFFIXES = (".cpp", ".c", ".S", ".h")
# Plain words YAML 1.1 readers (PyYAML) take for booleans or null: always quoted.
_YAML11_WORDS = ("true", "false", "null", "yes", "no", "on", "off", "y", "n", "~")
_PLAIN = re.compile(r"[A-Za-z0-9_./+][A-Za-z0-9_./+=@:-]*\Z")


# --- YAML --------------------------------------------------------------------------------------


def _scalar(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    plain = _PLAIN.match(text) and not text.endswith(":") and text.lower() not in _YAML11_WORDS
    return text if plain and not re.fullmatch(r"[0-9.+-]+", text) else json.dumps(text)


def to_yaml(value, indent: int = 0) -> str:
    """`value` (dicts, lists, strings, numbers, None) as block YAML."""
    pad = " " * indent
    lines = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{key}:\n{to_yaml(item, indent + 2)}")
            else:
                lines.append(f"{pad}{key}: {_scalar(item)}".rstrip())
    else:
        for item in value:
            if isinstance(item, dict):
                first, *rest = to_yaml(item, indent + 2).split("\n")
                lines.append(f"{pad}- {first.lstrip()}" + "".join(f"\n{line}" for line in rest))
            else:
                lines.append(f"{pad}- {_scalar(item)}")
    return "\n".join(lines)


# --- The project -------------------------------------------------------------------------------


# The executor runner's sources its CMakeLists.txt links only into variants (a bundle baked in; the
# runner recording an ETDump), in place of no_bundle.cpp and no_profiling.cpp: the export is the
# plain runner for a .pte.
RUNNER_VARIANTS = frozenset({"bundle.cpp", "bundle_check.cpp", "etdump_profiling.cpp", "etdump_writer.cpp"})


def _files(root: Path, folder: str, suffixes=(".cpp", ".c", ".S")) -> list[dict]:
    return [{"file": p.relative_to(root).as_posix()} for p in sorted((root / folder).glob("*")) if p.suffix in suffixes]


def solution(board: boards.Board) -> dict:
    """The csolution: one target-type for the board, Debug and Release, the one project."""
    return {
        "solution": {
            "description": f"kiln's executor runner for {board.name} ({board.summary})",
            "created-for": CREATED_FOR,
            "cdefault": None,
            "compiler": COMPILER,
            "language-C": "gnu11",
            "language-CPP": "c++17",
            "packs": [{"pack": board.cmsis.pack}],
            "target-types": [{"type": board.name, "device": board.cmsis.device}],
            "build-types": [
                {"type": "Debug", "optimize": "debug", "debug": "on"},
                {"type": "Release", "optimize": "size", "debug": "off"},
            ],
            "projects": [{"project": f"./{SOLUTION}.cproject.yml"}],
        }
    }


def project(root: Path, board: boards.Board, model: str) -> dict:
    """The cproject: kiln's sources under root/kiln, the model under root/generated, the
    board's linker script under root/board."""
    uart = boards.UART_DRIVERS[board.uart.kind]
    platform = [
        f
        for f in _files(root, "kiln/platform")
        if not f["file"].startswith("kiln/platform/uart_") or f["file"].endswith(uart)
    ]
    groups = [
        {"group": "platform", "add-path": ["kiln/platform"], "files": platform},
        {"group": "runtime", "misc": EXACT_FLOAT, "files": _files(root, "kiln/runtime/src")},
        {"group": "kernels", "misc": EXACT_FLOAT, "files": _files(root, "kiln/runtime/kernels")},
        {"group": "ethos-u driver", "files": _files(root, "kiln/drivers/ethosu")},
        {"group": "ethos-u delegate", "files": _files(root, "kiln/delegates/ethosu")},
        {
            "group": "executor runner",
            "files": [
                f for f in _files(root, "kiln/apps/executor_runner") if Path(f["file"]).name not in RUNNER_VARIANTS
            ],
        },
        {"group": f"model {model}", "files": _files(root, "generated")},
    ]
    return {
        "project": {
            "description": f"kiln's executor runner with {model} baked in, for {board.name}",
            "add-path": [f"kiln/{d}" for d in INCLUDE_DIRS] + ["board"],
            "misc": [MISC],
            "groups": groups,
            "linker": [{"script": "board/board.ld"}],
        }
    }


def _copy_sources(root: Path):
    for folder in SOURCE_DIRS:
        source = paths.FIRMWARE_DIR / folder
        for path in source.rglob("*"):
            if path.is_file() and path.suffix in SOURCE_SUFFIXES:
                dest = root / "kiln" / folder / path.relative_to(source)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, dest)


def export(pte: Path, target: str, board: str | None, out: Path) -> tuple[Path, Path]:
    """Writes the CMSIS project for `pte` on `target` (on `board`, default the target's
    reference board) into `out`; returns the csolution and cproject files. A UsageError for a
    board without a CMSIS device ([cmsis] in board.toml) or built with another compiler than GCC."""
    t = boards.target(target, board)
    b = t.board
    if b.cmsis is None:
        have = [n for n in boards.board_names() if boards.load(n).cmsis is not None]
        raise UsageError(
            f"board {b.name} names no CMSIS device ([cmsis] in its board.toml), so no csolution can "
            f"target it; boards that do: {', '.join(have)}"
        )
    if b.cpu.toolchain != boards.DEFAULT_TOOLCHAIN:
        raise UsageError(
            f"board {b.name}'s firmware is built with {b.cpu.toolchain}; kiln's csolution export "
            f"writes {COMPILER} projects only"
        )
    if out.exists() and not out.is_dir():
        raise UsageError(f"--csolution {out}: a file, not a folder")
    plan = runner_build.plan(pte, t)
    runner_build.generate(plan, out, [])
    boards.generate(b, out / "board", plan.stack_size)
    _copy_sources(out)
    written = []
    for name, content in (
        (f"{SOLUTION}.csolution.yml", solution(b)),
        (f"{SOLUTION}.cproject.yml", project(out, b, plan.model)),
    ):
        path = out / name
        path.write_text(f"# Written by kiln export --csolution: {b.name}, {target}, {pte.name}\n{to_yaml(content)}\n")
        written.append(path)
    return written[0], written[1]
