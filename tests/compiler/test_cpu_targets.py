"""Targets that are a CPU alone (--target cortex-m4 and the like): the boards that carry them,
what a compile for one holds, and the runner build's plan for one. The firmware itself runs in
tests/fvp/test_cpu_targets.py."""

import subprocess
from pathlib import Path

import pytest

from kiln import boards, flow
from kiln.boards import catalogue
from kiln.errors import BoardError, RunnerBuildError, UsageError
from kiln.firmware import runner_build
from kiln.spec import CompileSpec

ROOT = Path(__file__).resolve().parents[2]
CORSTONE_300 = ROOT / "boards" / "corstone-300" / "board.toml"
BUILD = ROOT / "scripts" / "build_executor_runner.sh"


def test_the_mps2_boards_are_qemus_machines():
    """QEMU 7.2's hw/arm/mps2.c (its memory map comment, the UARTs at 0x4000_4000, SYSCLK 25 MHz)
    and mps2-tz.c (AN505: SSRAM1 at 0x0 and its secure alias 0x1000_0000, SSRAM2/3 at
    0x2800_0000 and 0x3800_0000, UART0 at 0x4020_0000 and 0x5020_0000, 20 MHz), written out by hand."""
    an386, an500, an505 = boards.load("mps2-an386"), boards.load("mps2-an500"), boards.load("mps2-an505")
    for board, core, psram in ((an386, "cortex-m4", 0x2100_0000), (an500, "cortex-m7", 0x6000_0000)):
        assert (board.cpu.core, board.npu, board.configurations()) == (core, None, [])
        assert (board.region_for("code").base, board.region_for("code").size) == (0x0, 4 << 20)
        assert (board.region_for("data").base, board.region_for("stack").base) == (0x2000_0000, 0x2000_0000)
        assert (board.region_for("model").base, board.region_for("model").size) == (psram, 16 << 20)
        assert (board.uart.kind, board.uart.base, board.uart.clock_hz) == ("cmsdk-apb-uart", 0x4000_4000, 25_000_000)
        assert board.qemu_machine == board.name
    assert (an505.cpu.core, an505.npu, an505.qemu_machine) == ("cortex-m33", None, "mps2-an505")
    assert an505.region_for("code").base == 0x1000_0000 and an505.region_for("data").base == 0x3800_0000
    assert (an505.uart.base, an505.uart.clock_hz, an505.cpu.clock_hz) == (0x5020_0000, 20_000_000, 20_000_000)
    assert all(b.reference and b.cpu.toolchain == "arm-none-eabi-gcc" for b in (an386, an500, an505))


def test_each_cpu_is_a_target_on_its_reference_board_and_on_any_board_with_that_core():
    expected = {
        "cortex-m4": "mps2-an386",
        "cortex-m7": "mps2-an500",
        "cortex-m33": "mps2-an505",
        "cortex-m55": "corstone-300",
        "cortex-m85": "corstone-320",
    }
    for name, board in expected.items():
        t = boards.target(name)
        assert (t.board.name, t.has_npu, t.family, t.macs, t.npu) == (board, False, None, 0, None)
        assert (t.system_config, t.memory_mode, t.memory_modes, t.fvp) == (None, None, (), None)
    assert [b.name for b in boards.boards_with("cortex-m55")][:2] == ["corstone-300", "alif-e7-he"]
    assert boards.target("cortex-m55", "alif-e7-hp").board.name == "alif-e7-hp"
    with pytest.raises(UsageError) as error:
        boards.target("cortex-m55", "mps2-an386")
    assert str(error.value).startswith(
        "board mps2-an386 has no cortex-m55 CPU: its CPU is cortex-m4; build for --target cortex-m4, or for "
        "cortex-m55 on corstone-300"
    )
    with pytest.raises(
        UsageError,
        match=r"^board mps2-an386 has no ethos-u55-128 NPU: it has none; build for --target cortex-m4 \(its CPU "
        r"alone\), or for ethos-u55-128 on corstone-300",
    ):
        boards.target("ethos-u55-128", "mps2-an386")


def test_a_board_without_an_npu_gets_no_npu_macros_and_says_so_to_cmake(tmp_path):
    an386, c300 = boards.load("mps2-an386"), boards.load("corstone-300")
    assert "KILN_NPU" not in boards.c_header(an386)
    assert "#define KILN_NPU_IRQ 56" in boards.c_header(c300)
    assert "set(KILN_BOARD_HAS_NPU OFF)" in boards.cmake_fragment(an386, tmp_path)
    assert "set(KILN_BOARD_HAS_NPU ON)" in boards.cmake_fragment(c300, tmp_path)


CHILD = """schema = 1
name = "child"
summary = "corstone-300 without its NPU"
extends = "corstone-300"
"""


def test_a_board_may_leave_out_its_npu_but_not_keep_an_fvp_without_one(tmp_path, monkeypatch):
    for name, text in {
        "corstone-300": CORSTONE_300.read_text(),
        "child": CHILD + 'drop = ["npu", "fvp"]\n',
        "fvp": CHILD.replace('"child"', '"fvp"') + 'drop = ["npu"]\n',
    }.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "board.toml").write_text(text)
    monkeypatch.setattr(catalogue, "BOARDS_DIR", tmp_path)
    child = boards.load("child")
    assert (child.npu, child.configurations(), child.target_names()) == (None, [], ["cortex-m55"])
    assert child.target("cortex-m55").board is child and child.target("ethos-u55-128") is None
    with pytest.raises(BoardError, match=r"fvp: the FVP's binary is named per NPU family"):
        boards.load("fvp")


def test_a_spec_for_a_cpu_delegates_nothing_and_takes_no_vela_settings():
    spec = CompileSpec("cortex-m4").resolved()
    assert (spec.delegate, spec.system_config, spec.memory_mode) == (False, None, None)
    with pytest.raises(UsageError, match=r"^--memory-mode sets Vela for an NPU; cortex-m4 on mps2-an386 has none$"):
        CompileSpec("cortex-m4", memory_mode="Shared_Sram").resolved()
    with pytest.raises(UsageError, match=r"^--system-config sets Vela for an NPU; cortex-m55 on corstone-300 has"):
        CompileSpec("cortex-m55", system_config="Ethos_U55_High_End_Embedded").resolved()
    with pytest.raises(UsageError, match="--io int8 needs quantization"):
        CompileSpec("cortex-m7", io="int8", quantize=False).resolved()


@pytest.fixture(scope="module")
def cpu_digits(tmp_path_factory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("cpu") / "digits.pte"
    result, _ = flow.compile_pte("digits", CompileSpec("cortex-m4"), path, log=lambda line: None)
    return path, result.report


def test_a_compile_for_a_cpu_is_the_no_delegate_program_with_every_op_on_the_cpu(cpu_digits, tmp_path):
    """The CPU's program is kiln's CPU path as it was: the very bytes of a --no-delegate compile
    for an NPU target."""
    path, report = cpu_digits
    assert report["delegates"] == [] and report["ops"] and all(o["where"] == "cpu" for o in report["ops"])
    assert {o["reason"] for o in report["ops"]} == {"the target is a CPU alone (no NPU): every op runs on the CPU"}
    assert (report["system_config"], report["memory_mode"], report["warnings"]) == (None, None, [])
    npu_target = tmp_path / "no_delegate.pte"
    flow.compile_pte("digits", CompileSpec("ethos-u55-128", delegate=False), npu_target, log=lambda line: None)
    assert npu_target.read_bytes() == path.read_bytes()


def test_the_runner_for_a_cpu_places_no_npu_memory_and_names_no_ethos_u(cpu_digits, tmp_path):
    path, _ = cpu_digits
    p = runner_build.plan(path, "cortex-m4")
    assert (p.memory_mode, p.system_config, p.scratch, p.fast_scratch, p.delegates) == (None, None, None, None, 0)
    assert p.pte_region == "psram" and runner_build.default_output(p).name == "digits-cortex-m4"
    gen = runner_build.generate(p, tmp_path, [])
    memory = (gen / "model_memory.cpp").read_text()
    assert "ethosu" not in memory.lower() and "kNpuMemory" not in memory
    with pytest.raises(UsageError, match=r"^--memory-mode sets Vela for an NPU; cortex-m4 on mps2-an386 has none$"):
        runner_build.plan(path, "cortex-m4", memory_mode="Shared_Sram")


@pytest.fixture(scope="module")
def npu_digits(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("npu") / "digits.pte"
    flow.compile_pte("digits", CompileSpec("ethos-u55-128"), path, log=lambda line: None)
    return path


@pytest.mark.parametrize("check_target", [True, False])
def test_a_program_with_an_npu_delegate_is_refused_for_a_cpu_by_name(npu_digits, check_target):
    with pytest.raises(RunnerBuildError) as error:
        runner_build.plan(npu_digits, "cortex-m4", check_target=check_target)
    assert str(error.value) == (
        "digits.pte delegates 1 partition(s) to an NPU (ethos-u55-128); cortex-m4 on mps2-an386 has no NPU: "
        "compile the model with --target cortex-m4"
    )


def test_the_build_script_refuses_it_even_with_skip_target_check(npu_digits, tmp_path):
    run = subprocess.run(
        [str(BUILD), f"--pte={npu_digits}", "--target=cortex-m7", "--skip-target-check", f"--output={tmp_path}"],
        capture_output=True,
        text=True,
    )
    assert run.returncode != 0 and run.stdout == ""
    assert (
        run.stderr.strip()
        .splitlines()[-1]
        .endswith("cortex-m7 on mps2-an500 has no NPU: compile the model with --target cortex-m7")
    )


def test_kiln_targets_lists_the_cpus_and_the_boards_without_an_npu():
    result = subprocess.run([str(ROOT / ".venv/bin/kiln"), "targets"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    names = [line.split()[0] for line in lines[1 : lines.index("")]]
    assert names[-5:] == ["cortex-m55", "cortex-m85", "cortex-m4", "cortex-m7", "cortex-m33"]
    assert next(line for line in lines if line.startswith("cortex-m4 ")).split()[:2] == ["cortex-m4", "mps2-an386"]
    assert next(line for line in lines if line.startswith("mps2-an505 ")).split() == [
        "mps2-an505", "cortex-m33", "20", "MHz", "QEMU", "mps2-an505", "none", "(--target", "cortex-m33:", "the",
        "CPU", "alone)",
    ]  # fmt: skip
