"""Build-time guarantees of the firmware: no heap, the board's stack, and set-up that is idempotent."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "cmake" / "check_no_heap.cmake"


def check_no_heap(elf: Path):
    return subprocess.run(
        ["cmake", "-DNM=arm-none-eabi-nm", f"-DELF={elf}", "-P", str(CHECK)], capture_output=True, text=True
    )


def test_firmware_links_no_heap(firmware_build):
    for elf in [firmware_build / "hello.elf", *sorted((firmware_build / "test-apps").glob("*.elf"))]:
        result = check_no_heap(elf)
        assert result.returncode == 0, (elf, result.stderr)


def test_firmware_links_the_boards_main_stack(firmware_build):
    """Without an override, every app's .stack is board.toml's stack_size."""
    from elftools.elf.elffile import ELFFile

    from kiln import boards

    assert boards.load("corstone-300").stack_size == 0x8000  # boards/corstone-300/board.toml
    for elf in [firmware_build / "hello.elf", *sorted((firmware_build / "test-apps").glob("*.elf"))]:
        with open(elf, "rb") as stream:
            assert ELFFile(stream).get_section_by_name(".stack")["sh_size"] == 0x8000, elf


def test_an_elf_with_malloc_is_refused(tmp_path):
    source = tmp_path / "uses_malloc.c"
    source.write_text("#include <stdlib.h>\nint main(void) { return malloc(16) != 0; }\n")
    elf = tmp_path / "uses_malloc.elf"
    subprocess.run(
        ["arm-none-eabi-gcc", "-mcpu=cortex-m55", "-mfloat-abi=hard", "--specs=nano.specs",
         "--specs=nosys.specs", str(source), "-o", str(elf)],
        check=True, capture_output=True,
    )  # fmt: skip
    result = check_no_heap(elf)
    assert result.returncode != 0
    assert "links the heap allocator (malloc)" in result.stderr


def _failing(output: str) -> list[str]:
    """A command that prints `output` as it is and fails."""
    return ["sh", "-c", 'printf "%s" "$1"; exit 1', "sh", output]


def test_a_failed_build_step_is_one_line_and_its_whole_output_goes_to_the_log(tmp_path):
    """A build error is one line (kiln.errors): the step, the line that names the error (not
    Ninja's command line with its -Werror), and the log file in the build directory that
    keeps the whole output."""
    from kiln.firmware import build as firmware

    log = tmp_path / "fw" / firmware.BUILD_LOG
    compile_error = (
        "[1/3] Building C object CMakeFiles/hello.dir/hello.c.obj\nFAILED: CMakeFiles/hello.dir/hello.c.obj\n"
        "arm-none-eabi-gcc -Wall -Wextra -Werror -c hello.c\n"
        "hello.c: In function 'main':\nhello.c:3:5: error: 'x' undeclared (first use in this function)\n"
        + "".join(f"hello.c:{i}:1: note: more\n" for i in range(4, 40))
        + "ninja: build stopped\n"
    )
    cmake_error = (
        "-- The C compiler identification is GNU 12.2.1\nCMake Error at CMakeLists.txt:9 (message):\n"
        "  kiln: the board's CPU flags\n  are not accepted\n\n\n-- Configuring incomplete, errors occurred!\n"
    )
    cases = [
        (compile_error, "hello.c:3:5: error: 'x' undeclared (first use in this function)"),
        (cmake_error, "the board's CPU flags are not accepted"),
        (
            "ld: main.o: in function `main':\nmain.c:(.text+0x8): undefined reference to `foo'\n"
            "collect2: error: ld returned 1 exit status\n",
            "main.c:(.text+0x8): undefined reference to `foo'",
        ),
        ("something went wrong\nand stopped\n", "and stopped"),  # no line names an error: the last one
    ]
    for output, line in cases:
        with pytest.raises(firmware.BuildError) as error:
            firmware._run(_failing(output), "building the firmware for corstone-300", log)
        assert str(error.value) == f"building the firmware for corstone-300 failed: {line} (the whole output: {log})"
        assert log.read_text() == output


# The commands ./scripts/setup.sh installs or deletes with, found on PATH. Each stub records
# its call and fails, so a set-up that would change anything stops at its first such step.
# `rm` too: the script deletes .venv when its Python is not 3.11.
INSTALLERS = ("apt-get", "apt", "sudo", "pip", "pip3", "rm")


def test_setup_is_idempotent(tmp_path):
    """A second ./scripts/setup.sh (the suite's own set-up has run: this is its .venv)
    installs nothing and says everything is present."""
    stubs, calls = tmp_path / "bin", tmp_path / "calls.log"
    stubs.mkdir()
    for name in INSTALLERS:
        stub = stubs / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> "{calls}"\nexit 1\n')
        stub.chmod(0o755)
    # The script runs the venv's pip by path ("$VENV/bin/pip"), past the PATH stubs; pip
    # reads PIP_CONFIG_FILE before acting and stops with "Configuration file could not be
    # loaded" on a file with no [section]: any pip step fails here and installs nothing.
    pip_config = tmp_path / "pip.conf"
    pip_config.write_text("not an ini file\n")
    env = {**os.environ, "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}", "PIP_CONFIG_FILE": str(pip_config)}
    result = subprocess.run([str(ROOT / "scripts" / "setup.sh")], capture_output=True, text=True, timeout=120, env=env)
    assert not calls.exists(), calls.read_text()
    assert "Configuration file could not be loaded" not in result.stderr, result.stdout + result.stderr
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "setup: Debian packages present",
        "setup: Python environment .venv up to date",
        "setup: MLIA's wheel present",
        "setup: done",
    ]


def test_a_runner_tree_of_another_toolchain_is_configured_afresh(tmp_path):
    """--output reused for another board: a CMake cache of another toolchain file is dropped (CMake
    would keep its compiler), one of the same toolchain file kept for an incremental build."""
    from kiln.firmware.runner_build import _forget_other_toolchain

    gcc, clang = Path("/k/cmake/arm-none-eabi-gcc.cmake"), Path("/k/cmake/clang-arm-none-eabi.cmake")
    for recorded, wanted, kept in ((gcc, clang, False), (clang, clang, True)):
        tree = tmp_path / f"{recorded.stem}-{wanted.stem}"
        (tree / "CMakeFiles").mkdir(parents=True)
        (tree / "CMakeCache.txt").write_text(
            f"CMAKE_BUILD_TYPE:STRING=Release\nCMAKE_TOOLCHAIN_FILE:FILEPATH={recorded}\n"
        )
        _forget_other_toolchain(tree, wanted)
        assert (tree / "CMakeCache.txt").exists() == kept and (tree / "CMakeFiles").exists() == kept
