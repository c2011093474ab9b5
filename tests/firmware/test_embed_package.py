"""kiln's CMake package for the application's own board (KILN_BOARD empty, docs/embedding.md):
built with the application's toolchain file and CPU flags (here a Cortex-M4 with single-precision
FPU, which no kiln board has) and the board facts it asks for, installed, and linked into firmware
that has its own console sink and nothing of kiln's startup (tests/firmware/embed_consumer)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.firmware.test_firmware_build import check_no_heap

ROOT = Path(__file__).resolve().parents[2]
TOOLCHAIN = ROOT / "cmake" / "arm-none-eabi-gcc.cmake"
CONSUMER = Path(__file__).parent / "embed_consumer"
CPU_FLAGS = "-mcpu=cortex-m4 -mfpu=fpv4-sp-d16 -mfloat-abi=hard -mthumb"
FACTS = {"KILN_NPU_IRQ": "23", "KILN_CPU_CLOCK_HZ": "100000000", "KILN_CPU_HAS_DCACHE": "0"}


def configure(build: Path, facts: dict[str, str]) -> subprocess.CompletedProcess:
    flags = [f"-DCMAKE_{lang}_FLAGS={CPU_FLAGS}" for lang in ("C", "CXX", "ASM")]
    return subprocess.run(
        ["cmake", "-S", str(ROOT / "firmware"), "-B", str(build), "-G", "Ninja", "-DKILN_BOARD=",
         f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}", f"-DKILN_PYTHON={sys.executable}", *flags,
         *(f"-D{k}={v}" for k, v in facts.items())],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def run(command: list[str]) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> tuple[Path, Path]:
    """(build tree, install prefix) of the package for the Cortex-M4 board."""
    base = tmp_path_factory.mktemp("own-board")
    configured = configure(base / "build", FACTS)
    assert configured.returncode == 0, configured.stdout + configured.stderr
    run(["cmake", "--build", str(base / "build")])
    run(["cmake", "--install", str(base / "build"), "--prefix", str(base / "install")])
    return base / "build", base / "install"


def test_the_package_links_into_firmware_with_its_own_startup_and_console(package, work_pte, tmp_path):
    build, prefix = package
    header = (build / "kiln-board" / "kiln_board.h").read_text()
    for name, value in FACTS.items():
        assert f"#define {name} {value}" in header.replace("u\n", "\n")
    targets = (prefix / "lib" / "cmake" / "kiln" / "kilnTargets.cmake").read_text()
    assert "kiln::kiln" in targets and "kiln::ethosu" in targets and "kiln::board" not in targets
    assert_own_board_firmware(link_consumer(tmp_path / "consumer", work_pte, f"-Dkiln_DIR={prefix}/lib/cmake/kiln"))


def test_add_subdirectory_gives_the_same_targets(work_pte, tmp_path):
    """kiln's firmware/ built inside the application's build (its CPU flags, the board facts)."""
    flags = [f"-DCMAKE_{lang}_FLAGS={CPU_FLAGS}" for lang in ("C", "CXX", "ASM")]
    facts = [f"-D{k}={v}" for k, v in FACTS.items()]
    elf = link_consumer(tmp_path / "consumer", work_pte, f"-DKILN_FIRMWARE_DIR={ROOT / 'firmware'}", *flags, *facts)
    assert_own_board_firmware(elf)


def link_consumer(out: Path, pte: Path, *options: str) -> Path:
    """tests/firmware/embed_consumer for `pte`, configured with `options`, built; its ELF."""
    run(["cmake", "-S", str(CONSUMER), "-B", str(out), "-G", "Ninja", f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}",
         f"-DCONSUMER_PTE={pte}", f"-DKILN_PYTHON={sys.executable}", *options])  # fmt: skip
    run(["cmake", "--build", str(out)])
    return out / "consumer.elf"


def assert_own_board_firmware(elf: Path):
    """The consumer's ELF: no heap; the application's console sink; kiln's API linked; no startup
    or vector table of kiln's; no static constructors; built for the Cortex-M4 with its FPU."""
    heap = check_no_heap(elf)
    assert heap.returncode == 0, heap.stderr
    symbols = {line.split()[-1]: line.split()[-2] for line in run(["arm-none-eabi-nm", str(elf)]).splitlines()}
    assert symbols.get("kiln_console_put") == "T"  # the application's sink takes kiln's output
    assert "_ZN4kiln5carveERKNS_11MethodNeedsENS_7runtime4SpanIhEES5_RNS_13MethodBuffersE" in symbols
    assert "kiln_reset_handler" not in symbols and "kiln_vectors" not in symbols  # no startup of kiln's
    assert not [s for s in symbols if s.startswith("_GLOBAL__sub_I")]  # static Npu, MethodBuffers: no constructors
    attributes = run(["arm-none-eabi-readelf", "-A", str(elf)])
    assert 'Tag_CPU_name: "7E-M"' in attributes and "Tag_FP_arch: VFPv4-D16" in attributes


@pytest.mark.parametrize("missing", sorted(FACTS))
def test_a_missing_board_fact_fails_the_configure_naming_it(tmp_path, missing):
    facts = {k: v for k, v in FACTS.items() if k != missing}
    result = configure(tmp_path / "build", facts)
    assert result.returncode != 0
    assert f"needs -D{missing}=<a whole number>, not ''" in " ".join(result.stderr.split())  # CMake wraps it


@pytest.fixture(scope="module")
def work_pte(tmp_path_factory) -> Path:
    """digits for ethos-u55-128, as kiln compile writes it."""
    from kiln import flow
    from kiln.spec import CompileSpec

    path = tmp_path_factory.mktemp("pte") / "digits.pte"
    flow.compile_pte("digits", CompileSpec(target="ethos-u55-128"), path, log=lambda line: None)
    return path
