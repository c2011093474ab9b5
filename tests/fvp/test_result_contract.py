"""The runtime's Result contract on the virtual platform (firmware/runtime/include/kiln/runtime/
result.h): value() of a failed Result traps into the platform's fault path instead of returning
the default value it holds. tests/firmware/runtime/test_runtime_host.py checks the rest on the host
build: a Result made from kOk is an internal error (test_result_made_from_ok_is_an_internal_error),
value() of a failed one traps there too (test_value_of_a_failed_result_traps), and none is made from
a bare code (static_asserts in runtime_host.cpp, which that build compiles)."""

import subprocess
from pathlib import Path

import pytest

from kiln.firmware import build as firmware

ROOT = Path(__file__).resolve().parents[2]
RUN_FVP = ROOT / "scripts" / "run_fvp.sh"
pytestmark = pytest.mark.fvp


def test_value_of_a_failed_result_traps(firmware_build):
    elf = firmware.elf(firmware_build, "kiln_test_result_trap")
    result = subprocess.run(
        [str(RUN_FVP), f"--elf={elf}", "--target=ethos-u55-128"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 134, result.stdout + result.stderr  # kiln::kFaultExitStatus
    lines = result.stdout.splitlines()
    assert "about to read the value of a failed Result" in lines
    assert not any(line.startswith("value ") for line in lines)
    # UDF: a UsageFault, undefined instruction (CFSR.UNDEFINSTR, bit 16), in main
    assert "firmware fault: UsageFault" in result.stderr and "(UNDEFINSTR)" in result.stderr
    assert " in main+" in result.stderr
