"""run_fvp.sh end to end: firmware built for corstone-300, run on the virtual
platform (QEMU mps3-an547), and on a stand-in FVP to check the FVP command line;
and run.sh's whole output in a log file."""

import dataclasses
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from kiln import boards
from kiln.errors import ToolMissingError, UsageError
from kiln.firmware import build as firmware
from kiln.simulator import run

ROOT = Path(__file__).resolve().parents[2]
RUN_FVP = ROOT / "scripts" / "run_fvp.sh"
pytestmark = pytest.mark.fvp


def run_fvp(*args, env=None, timeout=60):
    return subprocess.run([str(RUN_FVP), *args], capture_output=True, text=True, env=env, timeout=timeout)


def elf(build: Path, app: str) -> str:
    return str(firmware.elf(build, app))


def test_hello_runs_on_the_virtual_platform(firmware_build):
    result = run_fvp(f"--elf={elf(firmware_build, 'hello')}", "--target=ethos-u55-128", "--platform=virtual")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "Hello from kiln on corstone-300 (cortex-m55)"
    assert "startup: .data 42, .bss 0, static constructor 43" in lines
    assert "Helium: sum of squares 1..16 = 1496" in lines  # 16*17*33/6, by hand
    assert "FPU: 1.5 * 1.5 * 100 = 225" in lines
    assert lines[-1] == "[kiln] exit 0"
    assert "virtual platform (QEMU mps3-an547" in result.stderr


def test_firmware_status_passes_through(firmware_build):
    result = run_fvp(f"--elf={elf(firmware_build, 'kiln_test_status')}", "--target=ethos-u55-128")
    assert result.returncode == 3
    assert "exiting with status 3" in result.stdout


def test_fault_is_reported_with_registers(firmware_build):
    result = run_fvp(f"--elf={elf(firmware_build, 'kiln_test_fault')}", "--target=ethos-u55-128")
    assert result.returncode == 134
    # The test app reads 0x0C000000, where nothing answers: a precise BusFault
    # (CFSR.PRECISERR = bit 9, BFARVALID = bit 15) in main.
    assert "firmware fault: BusFault at PC" in result.stderr
    assert " in main+" in result.stderr
    assert "precise data bus error (PRECISERR)" in result.stderr
    assert "faulting address 0x0c000000 (BFAR)" in result.stderr
    assert "CFSR=0x00008200" in result.stderr


def test_stack_overflow_is_reported_not_hung_on(firmware_build):
    result = run_fvp(f"--elf={elf(firmware_build, 'kiln_test_stack_overflow')}", "--target=ethos-u55-128")
    assert result.returncode == 134
    assert "firmware fault: UsageFault" in result.stderr
    assert "stack overflow" in result.stderr and "(STKOF)" in result.stderr


def test_timeout_stops_a_hanging_firmware(firmware_build):
    result = run_fvp(f"--elf={elf(firmware_build, 'kiln_test_hang')}", "--target=ethos-u55-128", "--timeout=2")
    assert result.returncode == 124
    assert "hanging on purpose" in result.stdout
    assert "timeout: the firmware did not exit within 2 s" in result.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["--target=ethos-u55-128"], "the following arguments are required: --elf"),
        (["--elf=/no/such.elf", "--target=ethos-u55-128"], "no such ELF file: /no/such.elf"),
        (["--elf=ELF", "--target=ethos-u55-100"], "unknown target 'ethos-u55-100'"),
        (["--elf=ELF", "--target=ethos-u55-128", "--timeout=soon"], "'soon' is not a number of seconds"),
        (["--elf=ELF", "--target=ethos-u55-128", "--timeout=0"], "must be more than 0 seconds"),
        (["--elf=ELF", "--target=ethos-u55-128", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    ],
)
def test_bad_arguments_are_usage_errors(firmware_build, args, message):
    args = [a.replace("ELF", elf(firmware_build, "hello")) for a in args]
    result = run_fvp(*args)
    assert result.returncode == 2
    assert "usage: run_fvp.sh" in result.stderr and message in result.stderr
    assert "Traceback" not in result.stderr


def test_board_without_a_virtual_platform_asks_for_its_fvp(tmp_path):
    """Both boards have a virtual platform; one without (no [virtual_platform] in its
    board.toml) needs its FVP, which kiln run reports with status 127."""
    target = boards.target("ethos-u85-256")
    unmodelled = dataclasses.replace(target, board=dataclasses.replace(target.board, qemu_machine=None))
    with pytest.raises(ToolMissingError, match="install Arm's FVP_Corstone_SSE-320 and put it on PATH"):
        run.virtual_platform(unmodelled, tmp_path / "firmware.elf")


def test_run_refuses_a_file_that_is_no_elf_before_starting_a_platform(tmp_path):
    """kiln.simulator.run.run itself checks the ELF (kiln run, kiln deploy and the runner's
    runs all go through it): by its first 4 bytes, without reading the rest."""
    not_elf = tmp_path / "firmware.elf"
    not_elf.write_bytes(b"\x7fEL\x00" + b"F" * 100)  # one byte short of the magic
    for elf, message in (
        (not_elf, f"{not_elf} is not an ELF file"),
        (tmp_path, f"{tmp_path} is a directory"),
        (tmp_path / "none.elf", "no such ELF file"),
    ):
        with pytest.raises(UsageError, match=message):
            run.run(elf, "ethos-u55-128", platform="virtual")
    with pytest.raises(UsageError, match="unknown target 'ethos-u99-1'"):
        run.run(not_elf, "ethos-u99-1")


def fake_fvp(tmp_path: Path, name: str, prints: str) -> dict:
    """A stand-in FVP on PATH: records its arguments, prints `prints`, exits 0."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / name
    script.write_text(f'#!/bin/sh\nfor a in "$@"; do echo "$a"; done > "{tmp_path}/argv"\nprintf "{prints}"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


# Per board: the FVP binary, a target on it, the session fixture that builds its firmware and
# -C parameters the FVP must get.
FVP_COMMAND_LINES = {
    # What ExecuTorch's run_fvp.sh passes for Corstone-300 (shared/notes/platforms.md).
    "corstone-300": ("FVP_Corstone_SSE-300_Ethos-U55", "ethos-u55-64", "firmware_build", {
        "ethosu.num_macs=64",
        "mps3_board.visualisation.disable-visualisation=1",
        "mps3_board.telnetterminal0.start_telnet=0",
        "mps3_board.uart0.out_file=-",
        "mps3_board.uart0.shutdown_on_eot=1",
        "cpu0.semihosting-enable=1",
    }),
    # What ExecuTorch and Arm's Corstone-320 examples pass (shared/notes/ethos-u85.md).
    "corstone-320": ("FVP_Corstone_SSE-320", "ethos-u85-512", "corstone320_build", {
        "mps4_board.subsystem.ethosu.num_macs=512",
        "mps4_board.visualisation.disable-visualisation=1",
        "vis_hdlcd.disable_visualisation=1",
        "mps4_board.telnetterminal0.start_telnet=0",
        "mps4_board.uart0.out_file=-",
        "mps4_board.uart0.shutdown_on_eot=1",
        "mps4_board.subsystem.cpu0.semihosting-enable=1",
        f"mps4_board.subsystem.cpu0.semihosting-cwd={Path.cwd()}",
    }),
}  # fmt: skip


@pytest.mark.parametrize("board", FVP_COMMAND_LINES)
def test_installed_fvp_is_used_with_the_boards_parameters(tmp_path, request, board):
    binary, target, build, expected = FVP_COMMAND_LINES[board]
    env = fake_fvp(tmp_path, binary, "Hello from a model\\r\\n[kiln] exit 5\\r\\n")
    hello = elf(request.getfixturevalue(build), "hello")
    result = run_fvp(f"--elf={hello}", f"--target={target}", env=env)
    assert result.returncode == 5  # the status comes from the firmware's exit line
    assert "Hello from a model" in result.stdout
    assert f"Arm FVP {binary} ({target})" in result.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    assert expected <= {argv[i + 1] for i, a in enumerate(argv) if a == "-C"}
    assert argv[argv.index("-a") + 1] == hello


def test_fvp_that_ends_without_an_exit_line_is_a_platform_error(tmp_path, firmware_build):
    env = fake_fvp(tmp_path, "FVP_Corstone_SSE-320", "license checkout failed\\n")
    result = run_fvp(f"--elf={elf(firmware_build, 'hello')}", "--target=ethos-u85-128", env=env)
    assert result.returncode == 125
    assert "stopped without the firmware reporting an exit status" in result.stderr
    assert "license checkout failed" in result.stderr


def test_cpu_lockup_is_reported_as_a_fault(tmp_path):
    lockup = tmp_path / "lockup.elf"
    subprocess.run(
        ["arm-none-eabi-gcc", "-mcpu=cortex-m55", "-nostdlib", "-Wl,--section-start=.vectors=0x10000000",
         "-Wl,-Ttext=0x10000100", "-Wl,-e,0x10000100", str(ROOT / "tests/fvp/apps/lockup.s"), "-o", str(lockup)],
        check=True, capture_output=True,
    )  # fmt: skip
    result = run_fvp(f"--elf={lockup}", "--target=ethos-u55-128", "--timeout=20")
    assert result.returncode == 134
    assert "firmware fault: CPU lockup" in result.stderr
    assert "Lockup: can't escalate 3 to HardFault" in result.stderr
    assert "R15=00000000" in result.stderr  # the PC it could not branch to


def test_a_command_line_the_runner_cannot_hold_is_refused_before_running(tmp_path):
    """The runner reads its command line into kCommandLineCapacity bytes; a longer one came back
    from semihosting as none at all, and the runner ran its built-in inputs instead."""
    source = (Path(__file__).resolve().parents[2] / "firmware" / "apps" / "executor_runner" / "runner.h").read_text()
    (capacity,) = re.findall(r"constexpr size_t kCommandLineCapacity = (\d+);", source)
    assert int(capacity) == run.FIRMWARE_COMMAND_LINE_BYTES
    inputs = []
    for i in range(40):
        inputs.append(tmp_path / f"a_rather_long_input_file_name_{i:02}.bin")
        inputs[-1].write_bytes(b"\0")
    assert len(run.firmware_arguments(inputs[:4], tmp_path / "out")) == 5
    with pytest.raises(UsageError, match=r"command line would take about \d+ bytes .* reads at most 1024"):
        run.firmware_arguments(inputs, tmp_path / "out")
