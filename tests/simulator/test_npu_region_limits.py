"""The NPU model's own refusal of accesses outside the buffers the firmware registered
(run_stream's limits; on the virtual platform the driver's published region sizes), with
the driver's bounds check bypassed: the streams of tests/firmware/runtime/npu_hostile.py run straight on
the model. Memory is mapped well past every buffer, so only the region limits can refuse;
the reference for "inside" is Vela's own stream, which must run unchanged under them."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.compile import compile_model
from kiln.simulator.npu.config import config_for
from kiln.simulator.npu.cop1 import parse_cop1
from kiln.simulator.npu.executor import run_stream
from kiln.simulator.npu.memory import FlatMemory
from kiln.spec import CompileSpec
from tests.firmware.runtime import npu_hostile as nh

BASES = (0x1000_0000, 0x2000_0000, 0x3000_0000, 0, 0, 0, 0, 0)
SLACK = 4 << 20  # bytes mapped past each buffer


@pytest.fixture(scope="module")
def ds_cnn():
    (vela,) = compile_model("ds_cnn", CompileSpec(target="ethos-u55-128")).vela
    return vela


def run(vela, cmd: bytes, limits):
    weights = bytearray(vela.weight_data) + bytearray(SLACK)
    scratch = bytearray(vela.scratch_size + SLACK)
    (inp,) = vela.inputs
    n = int(np.prod(inp.shape)) * inp.elem_size
    scratch[inp.offset : inp.offset + n] = np.random.default_rng(3).integers(0, 256, n, dtype=np.uint8).tobytes()
    memory = FlatMemory({BASES[0]: weights, BASES[1]: scratch})
    result = run_stream(parse_cop1(cmd).stream, BASES, memory, config_for("ethos-u55-128"), limits=limits)
    return result, bytes(scratch)


def limits_of(vela):
    return (len(vela.weight_data), vela.scratch_size, 0, 0, 0, 0, 0, 0)


def test_vela_stream_runs_unchanged_inside_its_limits(ds_cnn):
    free, free_scratch = run(ds_cnn, ds_cnn.cmd_data, None)
    limited, limited_scratch = run(ds_cnn, ds_cnn.cmd_data, limits_of(ds_cnn))
    assert free.fault is None and limited.fault is None
    assert limited_scratch == free_scratch and limited.cycles == free.cycles


@pytest.mark.parametrize("hostile", [h for h in nh.HOSTILE if h.code != nh.READ_ONLY], ids=lambda h: h.name)
def test_the_model_refuses_a_hostile_access_naming_it(ds_cnn, hostile):
    sizes = nh.sizes(len(ds_cnn.weight_data), ds_cnn.scratch_size, 0)
    cmd = nh.mutate(ds_cnn.cmd_data, hostile, sizes)
    assert cmd is not None
    result, _ = run(ds_cnn, cmd, limits_of(ds_cnn))
    assert result.fault is not None and result.fault.kind == "bus_error", result.fault
    assert result.fault.message.startswith(hostile.access + " of "), result.fault.message
    assert "bytes the firmware registered for region" in result.fault.message
