"""`kiln profile --cpu-instructions` (kiln.flow.profile_model, measure_cpu): the runner built for
digits runs once on the virtual platform; every program instruction's CPU instructions go to
the CPU op (or delegate) it belongs to, and the firmware's own NPU PMU total there equals the
host profile's."""

import pytest

from kiln import flow
from kiln.reference import profile
from kiln.spec import CompileSpec

pytestmark = pytest.mark.fvp


def test_cpu_ops_get_the_virtual_platforms_instruction_counts(tmp_path):
    p = flow.profile_model(
        "digits", CompileSpec("ethos-u55-128"), cpu_instructions=True, work=tmp_path, log=lambda line: None
    )
    assert (tmp_path / "runner" / "memory_report.json").is_file() and (tmp_path / "digits.pte").is_file()
    cpu = [layer for layer in p.layers if layer.where == "cpu"]
    assert cpu and all(layer.cpu_instructions and layer.cpu_instructions > 0 for layer in cpu)
    assert all(layer.cpu_instructions is None for layer in p.layers if layer.where == "npu")
    assert all(d.cpu_instructions and d.cpu_instructions > 0 for d in p.delegates)
    assert p.cpu_instructions_total == (
        sum(layer.cpu_instructions for layer in cpu) + sum(d.cpu_instructions for d in p.delegates)
    )
    assert p.platform_pmu_cycles == p.total_npu_cycles == sum(layer.npu_cycles or 0 for layer in p.layers)
    assert p.to_json()["cpu_instructions_measured"] is True
    assert {"regions", "buffers", "pte", "stack"} <= set(p.image)  # the build's memory map, for memory.png
    written = profile.write(p, tmp_path / "out")
    assert (tmp_path / "out" / "memory.png").read_bytes()[:4] == b"\x89PNG" and len(written) == 4
