"""The runtime's Result contract on the virtual platform (firmware/runtime/include/kiln/runtime/
result.h): value() of a failed Result traps into the platform's fault path instead of returning
the default value it holds. tests/firmware/runtime/test_runtime_host.py checks the rest on the host
build: a Result made from kOk is an internal error (test_result_made_from_ok_is_an_internal_error),
value() of a failed one traps there too (test_value_of_a_failed_result_traps), and none is made from
a bare code (static_asserts in runtime_host.cpp, which that build compiles)."""

import pytest

from kiln import flow
from kiln.firmware import build as firmware

pytestmark = pytest.mark.fvp


def test_value_of_a_failed_result_traps(firmware_build):
    notes: list[str] = []
    result = flow.run(
        flow.firmware(firmware.elf(firmware_build, "kiln_test_result_trap"), "ethos-u55-128"), note=notes.append
    )
    assert result.status == 134, result.uart + notes  # kiln::kFaultExitStatus
    lines = result.uart
    assert "about to read the value of a failed Result" in lines
    assert not any(line.startswith("value ") for line in lines)
    # UDF: a UsageFault, undefined instruction (CFSR.UNDEFINSTR, bit 16), in main
    explained = "\n".join(notes)
    assert "firmware fault: UsageFault" in explained and "(UNDEFINSTR)" in explained
    assert " in main+" in explained
