"""A command stream run again takes kiln.simulator.npu.executor's shorter way (its recorded
operations with frozen registers, the cycle model of its first run) and must compute what the
first way computes: outputs bit for bit equal to tosa_reference_model on new inputs, and the
same cycles, counters and faults as a first run (the recordings cleared) of the same stream on
the same memory."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.simulator.npu import executor
from kiln.simulator.npu.config import config_for
from kiln.simulator.npu.cop1 import parse_cop1
from kiln.simulator.npu.executor import run_stream
from kiln.simulator.npu.memory import FlatMemory
from tests.simulator import helpers

CASES = [("ethos-u55-128", "ds_cnn"), ("ethos-u85-256", "kwt")]
BASES = (0x1000_0000, 0x2000_0000, 0x3000_0000, 0, 0, 0, 0, 0)


@pytest.mark.parametrize("target, model", CASES)
def test_a_stream_run_again_is_bit_exact_on_new_inputs(target, model):
    result, shapes = helpers.compiled_zoo(model, target)
    executor._recordings.clear()
    for tosa, vela, part_shapes in zip(result.tosa, result.vela, shapes):
        runs = []
        for seed in range(3):
            diffs, run = helpers.compare(tosa, vela, helpers.int8_inputs(part_shapes, seed), target)
            assert diffs == [0] * len(diffs), (seed, diffs)
            runs.append(run)
        assert len({(r.cycles, tuple(sorted(r.counters.items())), r.ops) for r in runs}) == 1
    streams = {(parse_cop1(v.cmd_data).stream.tobytes(), config_for(target)) for v in result.vela}
    assert streams <= set(executor._recordings), "the runs after the first did not take the recorded way"


def _run_ds_cnn(limits):
    """ds_cnn's delegate on ethos-u55-128 in memory mapped past its buffers, `limits` its
    region limits: (ExecResult, the scratch after the run)."""
    result, _ = helpers.compiled_zoo("ds_cnn", "ethos-u55-128")
    (vela,) = result.vela
    weights = bytearray(vela.weight_data) + bytearray(1 << 20)
    scratch = bytearray(vela.scratch_size + (1 << 20))
    (tensor,) = vela.inputs
    n = int(np.prod(tensor.shape)) * tensor.elem_size
    scratch[tensor.offset : tensor.offset + n] = np.random.default_rng(5).integers(0, 256, n, np.uint8).tobytes()
    memory = FlatMemory({BASES[0]: weights, BASES[1]: scratch})
    run = run_stream(parse_cop1(vela.cmd_data).stream, BASES, memory, config_for("ethos-u55-128"), limits=limits)
    return run, bytes(scratch)


def test_a_stream_that_faults_when_run_again_reports_what_a_first_run_does():
    """Limits that cut the scratch short fault an operation in the middle of the stream: run
    again after a whole run, it leaves the outputs, cycles, counters and fault a first run
    under the same limits leaves."""
    result, _ = helpers.compiled_zoo("ds_cnn", "ethos-u55-128")
    (vela,) = result.vela
    limits = (len(vela.weight_data), vela.scratch_size // 2, 0, 0, 0, 0, 0, 0)
    executor._recordings.clear()
    first, first_scratch = _run_ds_cnn(limits)
    assert first.fault is not None and first.fault.kind == "bus_error" and 0 < first.fault.command_index
    whole, _ = _run_ds_cnn(None)
    assert whole.fault is None
    again, again_scratch = _run_ds_cnn(limits)
    assert again.fault == first.fault
    assert (again.cycles, again.counters, again.ops) == (first.cycles, first.counters, first.ops)
    assert again_scratch == first_scratch
    assert first.cycles < whole.cycles
