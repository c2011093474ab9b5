"""Every memory mode each NPU family offers, end to end on the virtual platform: a program
compiled for the mode, built into kiln's executor runner with ./scripts/build_executor_runner.sh
and run through kiln.flow, equals `kiln run-host` bit for bit, with the .pte and the scratch in
the board regions docs/building.md's placement table gives and each at least as large as Vela
itself says. (Apart from tests/fvp/test_executor_runner.py so that the two files, each a dozen
firmware builds and runs, run side by side on the suite's workers.)"""

import configparser
import contextlib
import io
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile
from ethosu.vela.architecture_features import ArchitectureFeatures
from ethosu.vela.errors import VelaError

from kiln import boards, paths
from kiln.pte.reader import deserialize

from .helpers import assert_matches_host, compiled, random_samples

pytestmark = pytest.mark.fvp

# (model, target, memory mode, where the .pte and the scratch go, fast scratch or not): every
# memory mode each NPU family offers on the boards with a virtual platform, on the family's
# reference board (corstone-300: U55 and U65; corstone-320: U85), with the placement table of
# docs/building.md ("Memory") on its regions (both boards name them alike); the fast scratch goes
# to "sram" (the NPU's). Shared_Sram on ethos-u55-128 runs in test_executor_runner.py's
# test_zoo_model_equals_run_host_bit_for_bit. MobileNetV2's 224x224 feature maps do not fit
# Dedicated_Sram_256KB's cache: Vela keeps some in the DDR scratch (313,600 B, more than the
# 150,528 B input) besides 258,160 B of fast scratch.
MEMORY_MODE_CASES = [
    ("tiny_cnn", "ethos-u55-128", "Sram_Only", "sram", "sram", False),
    ("tiny_cnn", "ethos-u65-256", "Shared_Sram", "ddr", "sram", False),
    ("ds_cnn", "ethos-u65-256", "Sram_Only", "sram", "sram", False),
    ("tiny_cnn", "ethos-u65-256", "Dedicated_Sram_384KB", "ddr", "ddr", True),
    ("ds_cnn", "ethos-u65-512", "Dedicated_Sram", "ddr", "ddr", True),
    ("mobilenet_v2", "ethos-u65-512", "Dedicated_Sram_256KB", "ddr", "ddr", True),
    ("mobilenet_v1_025", "ethos-u65-512", "Dedicated_Sram_512KB", "ddr", "ddr", True),
    ("tiny_cnn", "ethos-u85-256", "Shared_Sram", "ddr", "sram", False),
    ("tiny_cnn", "ethos-u85-256", "Sram_Only", "sram", "sram", False),
    ("tiny_cnn", "ethos-u85-256", "Dedicated_Sram", "ddr", "ddr", True),
    ("tiny_cnn", "ethos-u85-256", "Dedicated_Sram_256KB", "ddr", "ddr", True),
    ("ds_cnn", "ethos-u85-256", "Dedicated_Sram_384KB", "ddr", "ddr", True),
    ("tiny_cnn", "ethos-u85-512", "Dedicated_Sram_512KB", "ddr", "ddr", True),
]
FAST_SCRATCH_REGION = "sram"


def vela_accepts(accelerator: str, system_config: str, memory_mode: str) -> bool:
    """Vela's own verdict on a memory mode for a system config: the architecture its command
    line builds from vela.ini refuses, e.g., an arena on an AXI port that is flash."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # Vela prints its warnings
            ArchitectureFeatures(
                vela_config_files=[str(paths.vela_ini())],
                accelerator_config=accelerator,
                system_config=system_config,
                memory_mode=memory_mode,
                max_blockdep=3,
                verbose_config=False,
                arena_cache_size=None,
            )
    except VelaError:
        return False
    return True


def test_each_board_offers_the_memory_modes_vela_accepts_and_each_has_a_run_below():
    """Each reference board offers, per NPU family, exactly the memory modes of Vela's vela.ini
    that Vela accepts with the family's system config (Ethos-U55's has flash on AXI1, so no
    Dedicated_Sram); another board offers some of them (Alif's only Shared_Sram: no Alif boot
    loads a .pte into SRAM); every mode a family offers on a board with a virtual platform
    is a case of test_every_memory_mode_vela_accepts_runs_on_a_virtual_platform_board."""
    ini = configparser.ConfigParser()
    ini.read(paths.vela_ini())
    vela_modes = [s.removeprefix("Memory_Mode.") for s in ini.sections() if s.startswith("Memory_Mode.")]
    runnable = set()
    for board in map(boards.load, boards.board_names()):
        for family in board.npu.families if board.npu else ():  # a board without an NPU offers no mode
            accelerator = f"{family.name}-{family.macs[0]}"
            accepted = {m for m in vela_modes if vela_accepts(accelerator, family.system_config, m)}
            offered = set(family.memory_modes)
            assert offered == accepted if board.reference else offered <= accepted, (board.name, family.name)
            if board.qemu_machine:
                runnable |= {(family.name, mode) for mode in offered}
    covered = {(target.rsplit("-", 1)[0], mode) for _, target, mode, *_ in MEMORY_MODE_CASES}
    covered.add(("ethos-u55", "Shared_Sram"))  # test_executor_runner.py's zoo test
    assert covered == runnable
    assert {family for family, _ in runnable} == {"ethos-u55", "ethos-u65", "ethos-u85"}


def vela_scratch(tosa: bytes, accelerator: str, system_config: str, memory_mode: str, work: Path) -> tuple[int, int]:
    """Vela's own scratch and fast scratch bytes for one TOSA graph: its command line, and
    the sizes in the raw output it writes."""
    work.mkdir(parents=True)
    source = work / "graph.tosa"
    source.write_bytes(tosa)
    vela = Path(sys.executable).with_name("vela")
    result = subprocess.run(
        [
            str(vela),
            "--accelerator-config",
            accelerator,
            "--system-config",
            system_config,
            "--memory-mode",
            memory_mode,
            "--output-format",
            "raw",
            "--output-dir",
            str(work),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    with np.load(work / "graph_vela.npz") as npz:
        return int(npz["scratch_size"]), int(npz["scratch_fast_size"])


def elf_object(elf: Path, name: str) -> tuple[int, int] | None:
    """(address, size) of the object `name` in the ELF's symbol table, C++-mangled in a
    namespace ("...<length><name>E") or not; None when there is none."""
    with open(elf, "rb") as f:
        for symbol in ELFFile(f).get_section_by_name(".symtab").iter_symbols():
            if symbol.name == name or symbol.name.endswith(f"{len(name)}{name}E"):
                return symbol["st_value"], symbol["st_size"]
    return None


@pytest.mark.parametrize("model,target,memory_mode,pte_region,scratch_region,fast", MEMORY_MODE_CASES)
def test_every_memory_mode_vela_accepts_runs_on_a_virtual_platform_board(
    work, builder, tmp_path, model, target, memory_mode, pte_region, scratch_region, fast
):
    """A program compiled for the memory mode runs on the target's reference board on the
    virtual platform, its outputs equal to run-host's bit for bit. The memory mode comes from
    the .pte's delegates (the compile report is moved away). In the ELF, the .pte and the
    scratch lie in the board regions of docs/building.md's placement table and the fast scratch in
    the NPU's SRAM, each at least as large as Vela itself says the delegates' graphs need (and at
    most one 32-byte cache line more)."""
    pte_path = tmp_path / f"{model}-{memory_mode}.pte"  # a copy without its report: the .pte alone decides
    shutil.copyfile(compiled(work, model, target=target, memory_mode=memory_mode), pte_path)
    elf = builder(pte_path, target)

    board = boards.target(target).board
    regions = {r.name: range(r.base, r.end) for r in board.memory}
    family = next(f for f in board.npu.families if target.startswith(f.name + "-"))
    named = deserialize(pte_path.read_bytes()).named()
    tosa = [named[key] for key in sorted(named) if key.startswith("kiln/tosa/")]
    assert tosa
    needed = [
        vela_scratch(graph, target, family.system_config, memory_mode, tmp_path / f"vela{i}")
        for i, graph in enumerate(tosa)
    ]
    scratch_needed, fast_needed = max(n[0] for n in needed), max(n[1] for n in needed)

    def placed(name: str, region: str, at_least: int):
        found = elf_object(elf, name)
        assert found is not None, name
        address, size = found
        assert address in regions[region] and address + size - 1 in regions[region], (name, hex(address), region)
        assert at_least <= size < at_least + 32, (name, size, at_least)

    pte_at = elf_object(elf, "kiln_model_pte")  # an assembler label: no size of its own
    assert pte_at is not None
    assert pte_at[0] in regions[pte_region] and pte_at[0] + pte_path.stat().st_size - 1 in regions[pte_region]
    placed("kiln_ethosu_scratch", scratch_region, scratch_needed)
    if fast:
        assert fast_needed > 0
        placed("kiln_ethosu_fast_scratch", FAST_SCRATCH_REGION, fast_needed)
    else:
        assert elf_object(elf, "kiln_ethosu_fast_scratch") is None
    result = assert_matches_host(pte_path, elf, target, random_samples(pte_path, 1, seed=5), tmp_path)
    assert f"kiln executor runner: {pte_path.stem} ({memory_mode}) on {board.name}" in result.run.uart
