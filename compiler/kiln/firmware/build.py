"""Building kiln's firmware for a board with CMake, Ninja and the board's toolchain
(board.toml's cpu.toolchain: arm-none-eabi-gcc, or clang 19 linked by arm-none-eabi-gcc).

One function serves `kiln build --app` and the tests, so
the firmware is configured the same way everywhere. A step that fails is one line
(kiln.errors: CMake's own error, else the first line naming an error) and its whole
output in BUILD_LOG in the build directory (`failed_step`, which kiln build's runner uses too).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from kiln import boards, paths
from kiln.errors import BuildError, ToolMissingError

REQUIRED_TOOLS = ("cmake", "ninja", "arm-none-eabi-gcc")
# What each toolchain needs beyond REQUIRED_TOOLS (cmake/<toolchain>.cmake finds them).
TOOLCHAIN_TOOLS = {"arm-none-eabi-gcc": (), "clang-arm-none-eabi": ("clang-19", "clang++-19")}
BUILD_LOG = "build.log"  # in the build directory: the whole output of the step that failed
# A line that says what failed: a compiler's or CMake's error, or the linker's.
_ERROR_LINE = re.compile(r"\berror:|CMake Error|undefined reference|multiple definition", re.IGNORECASE)


def default_build_dir(board: str) -> Path:
    return paths.build_root() / "firmware" / board


def build(
    board: str | boards.Board,
    build_dir: Path | None = None,
    *,
    test_apps: bool = False,
    build_type: str = "Release",
) -> Path:
    """Configures (once) and builds the firmware for `board` (its name, or the Board a caller
    has already); returns the build directory."""
    # an unknown board is a usage error here, before CMake says it less clearly
    described = board if isinstance(board, boards.Board) else boards.load(board)
    board = described.name
    check_tools(described)
    build_dir = Path(build_dir or default_build_dir(board)).resolve()
    _run(
        [
            "cmake", "-S", str(paths.FIRMWARE_DIR), "-B", str(build_dir), "-G", "Ninja",
            f"-DCMAKE_TOOLCHAIN_FILE={described.cpu.toolchain_file}",
            f"-DKILN_PYTHON={sys.executable}",  # this Python imports this kiln, wherever it is installed
            f"-DKILN_BOARD={board}",
            f"-DKILN_TEST_APPS={'ON' if test_apps else 'OFF'}",
            f"-DCMAKE_BUILD_TYPE={build_type}",
        ],
        f"configuring the firmware for {board}", build_dir / BUILD_LOG,
    )  # fmt: skip
    _run(["cmake", "--build", str(build_dir)], f"building the firmware for {board}", build_dir / BUILD_LOG)
    return build_dir


def check_tools(board: boards.Board):
    """A ToolMissingError naming the first tool that building for `board` needs and PATH lacks."""
    for tool in REQUIRED_TOOLS + TOOLCHAIN_TOOLS[board.cpu.toolchain]:
        if shutil.which(tool) is None:
            raise ToolMissingError(
                f"{tool} is not installed (building for {board.name} needs it); run ./scripts/setup.sh"
            )


def elf(build_dir: Path, app: str) -> Path:
    """The ELF of `app` in a build directory (apps at the top, test apps under test-apps/)."""
    for candidate in (build_dir / f"{app}.elf", build_dir / "test-apps" / f"{app}.elf"):
        if candidate.is_file():
            return candidate
    raise BuildError(f"no ELF for app {app!r} in {build_dir}")


def _run(command: list[str], what: str, log: Path):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(failed_step(what, result.stderr + result.stdout, log))


def failed_step(what: str, output: str, log: Path) -> str:
    """One line for a build step that failed: `what`; CMake's first error, else the first line
    of its `output` that names an error, else its last line; and `log`, where the whole
    output is written here."""
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(output)
    lines = [line.rstrip() for line in output.splitlines() if line.strip()]
    line = _cmake_error(lines) or next(
        (line.strip() for line in lines if _ERROR_LINE.search(line)), lines[-1].strip() if lines else "no output"
    )
    return f"{what} failed: {line} (the whole output: {log})"


def _cmake_error(output: list[str]) -> str | None:
    """The text of CMake's first "CMake Error" block, unwrapped into one line."""
    start = next((i for i, line in enumerate(output) if line.startswith("CMake Error")), None)
    if start is None:
        return None
    words = []
    for line in output[start + 1 :]:
        if not line.startswith("  ") or line.startswith("Call Stack"):
            break
        words.append(line.strip())
    return " ".join(words).removeprefix("kiln: ") or None
