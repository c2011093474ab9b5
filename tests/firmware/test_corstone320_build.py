"""corstone-320's firmware: Cortex-M85 code from clang 19, linked as board.toml says, no heap."""

import subprocess
import tomllib
from pathlib import Path

from elftools.elf.elffile import ELFFile

ROOT = Path(__file__).resolve().parents[2]
BOARD = tomllib.loads((ROOT / "boards" / "corstone-320" / "board.toml").read_text())


def readelf(*args: str) -> str:
    return subprocess.run(["arm-none-eabi-readelf", *args], capture_output=True, text=True, check=True).stdout


def region(purpose: str) -> dict:
    (found,) = [r for r in BOARD["memory"] if purpose in r["purposes"]]
    return found


def test_hello_is_cortex_m85_code_from_clang(corstone320_build):
    """The build attributes say Cortex-M85 (Armv8.1-M mainline with Helium and the FPU), the
    enums are GCC's short ones (the libraries' ABI), and clang 19 compiled the objects."""
    attributes = readelf("-A", str(corstone320_build / "hello.elf"))
    for line in (
        'Tag_CPU_name: "cortex-m85"',
        "Tag_CPU_arch: v8.1-M.mainline",
        "Tag_MVE_arch: MVE Integer and FP",
        "Tag_FP_arch: FPv5/FP-D16 for ARMv8",
        "Tag_ABI_enum_size: small",
        "Tag_ABI_VFP_args: VFP registers",
    ):
        assert line in attributes, attributes
    comment = readelf("-p", ".comment", str(corstone320_build / "hello.elf"))
    assert "clang version 19" in comment, comment


def test_hello_boots_from_the_code_region_with_its_stack_in_the_stack_region(corstone320_build):
    """The vector table opens the code region (the SSE-320 boot ROM, where its CPU boots): its
    first word is the top of the stack region's stack, its second the reset handler, and the
    NPU's interrupt (16 on the SSE-320) has the NPU handler."""
    code, stack = region("code"), region("stack")
    assert code["base"] == 0x1100_0000  # the SSE-320's boot ROM (ExecuTorch's Corstone-320.ld)
    assert (BOARD["npu"]["base"], BOARD["npu"]["irq"]) == (0x5000_4000, 16)  # issue 15, Zephyr's mps4 dts
    with open(corstone320_build / "hello.elf", "rb") as stream:
        elf = ELFFile(stream)
        text = elf.get_section_by_name(".text")
        assert text["sh_addr"] == code["base"]
        vectors = [int.from_bytes(text.data()[i : i + 4], "little") for i in range(0, 4 * (16 + 17), 4)]
        symbols = elf.get_section_by_name(".symtab")
        (reset,) = symbols.get_symbol_by_name("kiln_reset_handler")
        (npu,) = symbols.get_symbol_by_name("kiln_npu_irq_handler")
        stack_section = elf.get_section_by_name(".stack")
    assert vectors[0] == stack_section["sh_addr"] + stack_section["sh_size"] == stack["base"] + BOARD["stack_size"]
    assert vectors[1] == reset["st_value"] | 1  # Thumb addresses
    assert vectors[16 + 16] == npu["st_value"] | 1  # exception 16 + IRQ 16


def test_hello_links_no_heap(corstone320_build):
    result = subprocess.run(
        [
            "cmake",
            "-DNM=arm-none-eabi-nm",
            f"-DELF={corstone320_build / 'hello.elf'}",
            "-P",
            str(ROOT / "cmake" / "check_no_heap.cmake"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_a_clang_built_elf_with_operator_new_is_refused(tmp_path):
    """The heap check reads clang's objects as it reads GCC's: operator new, compiled by clang
    for the Cortex-M85 and linked by arm-none-eabi-gcc as the board's firmware is, fails it."""
    source = tmp_path / "uses_new.cpp"
    source.write_text("int main() { return *new int(3); }\n")
    obj, elf = tmp_path / "uses_new.o", tmp_path / "uses_new.elf"
    subprocess.run(
        [
            "clang++-19",
            "--target=arm-none-eabi",
            *BOARD["cpu"]["compile_flags"],
            "-fno-exceptions",
            "-c",
            str(source),
            "-o",
            str(obj),
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            "arm-none-eabi-g++",
            *BOARD["cpu"]["link_flags"],
            "--specs=nano.specs",
            "--specs=nosys.specs",
            str(obj),
            "-o",
            str(elf),
        ],
        check=True,
        capture_output=True,
    )
    result = subprocess.run(
        ["cmake", "-DNM=arm-none-eabi-nm", f"-DELF={elf}", "-P", str(ROOT / "cmake" / "check_no_heap.cmake")],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "links the heap allocator (malloc)" in " ".join(result.stderr.split())  # operator new calls it


def test_building_without_clang_names_it(tmp_path):
    """kiln build checks the board's toolchain before CMake runs: with cmake, ninja and
    arm-none-eabi-gcc on PATH but no clang-19, corstone-320 fails in one line naming it."""
    import shutil

    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("cmake", "ninja", "arm-none-eabi-gcc"):
        (tools / tool).symlink_to(shutil.which(tool))
    result = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "kiln"), "build", "--app", "hello", "--target", "ethos-u85-256"],
        capture_output=True,
        text=True,
        env={"PATH": str(tools)},
        cwd=tmp_path,
    )
    assert result.returncode != 0
    assert result.stderr.splitlines() == [
        "kiln: error: clang-19 is not installed (building for corstone-320 needs it); run ./scripts/setup.sh"
    ]
