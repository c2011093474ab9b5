"""Boards a user can buy (issue 16): the digits runner built through `kiln build --board` lands
where the board's description says; a board without the target's NPU is refused; the board whose
map QEMU's mps3-an547 has (mps3-an552) runs it on kiln's virtual platform, the others say why not.

The suite builds two of the five new boards (about 25 s: two digits compiles, two runner builds,
one virtual-platform run): mps3-an552 (an FPGA image extending corstone-300) and alif-e8 (its own
map, a DesignWare UART, an Ethos-U85 at interrupt 366). `bench/boards.py` builds digits for every
board (each about 10 s) and prints what each build used."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

from kiln import boards, flow
from kiln import compile as kiln_compile
from kiln.firmware import flash
from kiln.models import digits
from kiln.spec import CompileSpec

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "scripts" / "build_executor_runner.sh"

# board -> the NPU configuration built for it (compiled for the board's default memory mode).
SUITE_BOARDS = {"mps3-an552": "ethos-u55-128", "alif-e8": "ethos-u85-256"}


@pytest.fixture(scope="module")
def digits_pte(tmp_path_factory):
    """digits compiled with a board's defaults (`kiln compile --board`; None: the target's
    reference board's), once per target, system config and memory mode."""
    folder = tmp_path_factory.mktemp("digits")
    made: dict[tuple[str, str, str], Path] = {}

    def get(target: str, board: str | None = None) -> Path:
        spec = CompileSpec(target, board=board).resolved()
        key = (spec.target, spec.system_config, spec.memory_mode)
        if key not in made:
            made[key] = folder / f"digits-{'-'.join(key)}.pte"
            kiln_compile.write(kiln_compile.compile_model("digits", spec), made[key])
        return made[key]

    return get


@pytest.fixture(scope="module")
def built(digits_pte, tmp_path_factory):
    """board -> the digits runner's ELF, built by the script a person runs."""
    folder = tmp_path_factory.mktemp("boards")
    elves = {}
    for board, target in SUITE_BOARDS.items():
        pte = digits_pte(target, board)
        report = json.loads(pte.with_suffix(".json").read_text())
        assert report["memory_mode"] == boards.target(target, board).memory_mode  # the board's default
        result = subprocess.run(
            [str(BUILD), f"--pte={pte}", f"--target={target}", f"--board={board}", f"--output={folder / board}"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"on {board} (" in result.stdout  # the memory report names the board
        elves[board] = Path(result.stdout.strip().splitlines()[-1])
    return elves


@pytest.mark.parametrize("board", SUITE_BOARDS)
def test_each_new_board_builds_the_digits_runner_where_its_description_says(built, board):
    """The vector table opens the board's code region, the stack tops its stack region, the NPU's
    interrupt has the NPU handler, and every loaded byte lies in one of the board's regions."""
    described = boards.load(board)
    code, stack = described.region_for("code"), described.region_for("stack")
    with open(built[board], "rb") as stream:
        elf = ELFFile(stream)
        text = elf.get_section_by_name(".text")
        vectors = np.frombuffer(text.data()[: 4 * (16 + described.npu.irq + 1)], "<u4")
        (npu_handler,) = elf.get_section_by_name(".symtab").get_symbol_by_name("kiln_npu_irq_handler")
        loads = [(s["p_paddr"], s["p_memsz"]) for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
    assert text["sh_addr"] == code.base
    assert stack.base < vectors[0] <= stack.end  # the initial stack pointer
    assert vectors[16 + described.npu.irq] == npu_handler["st_value"] | 1
    for address, size in loads:
        assert any(r.base <= address and address + size <= r.end for r in described.memory), hex(address)


@pytest.mark.parametrize("board", SUITE_BOARDS)
def test_kiln_flash_images_equal_what_objcopy_makes(built, board, tmp_path):
    """kiln flash reads the ELF's loadable segments itself: each memory region's image equals
    arm-none-eabi-objcopy -O binary of the sections whose bytes load there (by load address)."""
    described = boards.load(board)
    loaded_at = {}
    with open(built[board], "rb") as stream:
        elf = ELFFile(stream)
        for segment in (s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"):
            for section in elf.iter_sections():
                if section["sh_type"] != "SHT_NOBITS" and section["sh_size"] and segment.section_in_segment(section):
                    loaded_at[section.name] = segment["p_paddr"] + section["sh_addr"] - segment["p_vaddr"]
    images = flash.images(built[board], described)
    assert {i.region for i in images} >= {described.region_for("code").name}
    for image in images:
        region = next(r for r in described.memory if r.name == image.region)
        sections = [name for name, address in loaded_at.items() if region.base <= address < region.end]
        out = tmp_path / image.file_name
        subprocess.run(
            [
                "arm-none-eabi-objcopy",
                "-O",
                "binary",
                *(f"--only-section={n}" for n in sections),
                str(built[board]),
                str(out),
            ],
            check=True,
        )
        assert out.read_bytes() == image.data, image.region


def test_alif_firmware_drives_a_designware_uart_and_the_corstone_one_a_cmsdk_uart(built):
    """uart.kind chooses the platform's driver (the linker map names the object linked)."""

    def linked(board: str) -> str:
        return built[board].with_suffix(".map").read_text()

    assert "uart_dw_apb.cpp" in linked("alif-e8") and "uart_cmsdk.cpp" not in linked("alif-e8")
    assert "uart_cmsdk.cpp" in linked("mps3-an552") and "uart_dw_apb.cpp" not in linked("mps3-an552")


def test_a_board_without_the_targets_npu_is_refused_naming_what_it_has(digits_pte, tmp_path):
    pte = digits_pte("ethos-u55-128")
    result = subprocess.run(
        [str(BUILD), f"--pte={pte}", "--target=ethos-u55-128", "--board=alif-e7-hp", f"--output={tmp_path}"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2  # a usage error: the usage, then the one line
    assert result.stderr.strip().splitlines()[-1] == (
        "build_executor_runner.sh: error: board alif-e7-hp has no ethos-u55-128 NPU: it has ethos-u55-256; build "
        "for one of those, or for ethos-u55-128 on corstone-300, alif-e7-he, mps3-an552"
    )


def test_mps3_an552_runs_digits_on_the_virtual_platform(built, digits_pte, tmp_path):
    """AN552 is the SSE-300 map QEMU's mps3-an547 models: its ELF classifies held-out digits."""
    images, labels = digits.test_split()
    result = flow.infer(
        built["mps3-an552"],
        boards.target("ethos-u55-128", "mps3-an552"),
        digits_pte("ethos-u55-128", "mps3-an552"),
        [[images[k].numpy()] for k in range(2)],
        tmp_path,
        platform="virtual",
        timeout=120,
    )
    assert result.complete, result.log
    assert [int(np.argmax(out[0])) for out in result.outputs] == [int(labels[k]) for k in range(2)]


@pytest.mark.parametrize(("board", "target"), [("alif-e8", "ethos-u85-256"), ("mps4-corstone320", "ethos-u85-1024")])
def test_a_run_on_a_board_no_platform_models_says_so(built, board, target):
    """Refused before any ELF is loaded: the alif-e8 ELF stands in for either board's."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kiln.cli",
            "run",
            f"--elf={built['alif-e8']}",
            f"--target={target}",
            f"--board={board}",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 127
    assert result.stderr.strip() == (
        f"kiln: error: {target} runs on {board}, which kiln's virtual platform does not model (it "
        "models the boards whose map one of QEMU's machines has: corstone-300, corstone-320, mps2-an386, "
        "mps2-an500, mps2-an505, mps3-an552); no FVP "
        "models it either: run the ELF on the board itself"
    )


def test_an_fvp_run_on_a_board_no_fvp_models_says_so(built):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kiln.cli",
            "run",
            f"--elf={built['mps3-an552']}",
            "--target=ethos-u55-128",
            "--board=mps3-an552",
            "--platform=fvp",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "kiln: error: no Arm FVP models mps3-an552 (its board.toml names none); run the ELF on the board itself, "
        "or on kiln's virtual platform if it models the board"
    )
