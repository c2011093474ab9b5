"""The Ethos-U delegate's bounds check end to end on the virtual platform: kiln's executor
runner baked with a .pte whose command stream was mutated (tests/npu_hostile.py) refuses
it at init (binding), naming the access, before the NPU ever runs; and the check's cost
per command word, counted with the virtual platform's instruction counter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kiln import flow
from kiln.lower import ethosu_payload as ep
from kiln.pte.reader import deserialize
from kiln.simulator import qemu_plugin
from kiln.spec import CompileSpec
from tests.firmware.runtime import npu_hostile as nh

pytestmark = pytest.mark.fvp
EXIT_BIND = 5  # firmware/apps/executor_runner/runner.h
CHECK = "kiln::ethosu::check_stream_bounds"


@pytest.fixture(scope="module")
def ds_cnn(work) -> Path:
    path = work / "bounds-ds_cnn.pte"
    if not path.exists():
        flow.compile_pte("ds_cnn", CompileSpec(target="ethos-u55-128"), path, log=lambda line: None)
    return path


def with_cmd(data: bytes, cmd: bytes, new: bytes) -> bytes:
    assert len(new) == len(cmd) and data.count(cmd) == 1
    return data.replace(cmd, new)


@pytest.mark.parametrize("name", ["ofm_base_at_buffer_end", "dma_destination_past_buffer", "ofm_into_weights"])
def test_a_hostile_stream_is_refused_at_init_on_the_virtual_platform(work, builder, tmp_path, ds_cnn, name):
    hostile = next(h for h in nh.HOSTILE if h.name == name)
    data = ds_cnn.read_bytes()
    f = deserialize(data)
    payload = ep.decode(f.delegate_payload(f.program.execution_plans[0].delegates[0]))
    cmd = nh.mutate(payload.cmd_data, hostile, nh.sizes(len(payload.weight_data), payload.scratch_size, 0))
    bad = work / f"bounds-{name}.bin"
    bad.write_bytes(with_cmd(data, payload.cmd_data, cmd))
    elf = builder(ds_cnn, "ethos-u55-128", f"--bake={bad}")
    result = flow.infer(elf, "ethos-u55-128", ds_cnn, None, tmp_path, platform="virtual", timeout=120)
    assert result.status == EXIT_BIND, result.log
    error = f"{nh.TEXT[hostile.code]}: {hostile.access} of the operation at word "
    lines = result.run.uart
    assert sum(line.startswith("EthosUBackend: delegate 0: " + error) for line in lines) == 1, result.log
    assert sum(line.startswith("binding the program failed: " + error) for line in lines) == 1, result.log
    assert result.run.npu is None or result.run.npu.streams == 0  # the NPU never ran


def test_the_check_costs_a_few_instructions_per_command_word(work, builder, tmp_path, ds_cnn):
    elf = builder(ds_cnn)
    fw = flow.firmware(elf, "ethos-u55-128")
    done = flow.run(fw, "virtual", 300, qemu_plugin.Request(CHECK), note=lambda text: None, cwd=tmp_path)
    assert done.status == 0, "\n".join(done.uart)
    (calls,) = done.instructions.calls  # one delegate: one check, at init
    f = deserialize(ds_cnn.read_bytes())
    cmd = ep.decode(f.delegate_payload(f.program.execution_plans[0].delegates[0])).cmd_data
    start, end = nh.stream_span(cmd)
    words = end - start
    listed = list(nh.commands(np.frombuffer(cmd, "<u4"), start, end))
    operations = sum(1 for _, op, p in listed if not p and op in nh.OPERATIONS)
    print(
        f"check_stream_bounds: {calls} instructions for {len(listed)} commands ({words} words, "
        f"{operations} operations): {calls / len(listed):.1f} per command"
    )
    # bounds.cpp states the cost measured here: 22,948 instructions for ds_cnn's 452 words
    assert calls < 100 * len(listed)
